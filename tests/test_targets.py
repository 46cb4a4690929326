"""Short target names: ``llvm-host`` is ``llvm`` for this machine's CPU, and kernels built for it
run and verify."""

from __future__ import annotations

import pytest

from codegen.targets import TargetError, as_target, target_dict


def test_llvm_host_is_llvm_with_the_cpu_llvm_detects():
    from tvm.target import codegen

    host, plain = target_dict(as_target("llvm-host")), target_dict(as_target("llvm"))
    assert host["mcpu"] == codegen.llvm_get_system_cpu() and "mcpu" not in plain
    assert {k: host[k] for k in ("kind", "keys", "num-cores")} == \
        {k: plain[k] for k in ("kind", "keys", "num-cores")}


def test_an_unknown_short_name_is_a_target_error():
    with pytest.raises(TargetError, match="llvm-hots"):
        as_target("llvm-hots")


def test_a_kernel_built_for_the_host_runs_and_verifies():
    from codegen.measure import MeasureConfig
    from codegen.measure.evaluator import Evaluator
    from codegen.workloads import workload

    with Evaluator("llvm-host", cache=False, builders=1,
                   config=MeasureConfig(repeat=3, min_repeat_ms=1.0)) as ev:
        [outcome] = ev.evaluate(workload("matmul(m=32,n=32,k=32)"), ['block "C" -> b0'])
    assert outcome.ok, outcome.message
