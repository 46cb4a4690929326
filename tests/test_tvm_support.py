"""Postprocessing without importing TVM's tensor intrinsics where a schedule names none: the
same postprocessors, the same modules, and seconds a process saved."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import tvm_ffi

from codegen.targets import postproc_set
from dragon_dsl.tvm_support import postprocessors, schedule_of, uses_tensor_intrinsics

from .traces import is_tensorized, matrix_trace, target_of


def _postprocessed(trace, wl, rules: str, intrinsics: bool):
    sch = schedule_of(wl)
    trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    for postproc in postprocessors(wl.mod, target_of(rules), postproc_set(rules),
                                   intrinsics=intrinsics):
        assert postproc.apply(sch)
    return sch.mod


@pytest.mark.parametrize("family", ["matmul", "dense", "conv2d", "pool2d", "softmax",
                                    "layer_norm"])
def test_llvm_postprocessors_without_the_intrinsics_do_what_a_tune_context_does(family):
    wl, trace = matrix_trace(family, "llvm")
    assert not uses_tensor_intrinsics(trace)
    assert tvm_ffi.structural_equal(_postprocessed(trace, wl, "llvm", intrinsics=False),
                                    _postprocessed(trace, wl, "llvm", intrinsics=True))


@pytest.mark.parametrize("family", ["matmul", "conv2d"])
def test_a_tensor_core_trace_names_its_intrinsics(family):
    _, trace = matrix_trace(family, "cuda-tensorcore")
    assert is_tensorized(trace) and uses_tensor_intrinsics(trace)


def test_postproc_auto_on_llvm_leaves_the_tensor_intrinsics_unimported():
    """In a new process, a MetaSchedule script ending in ``postproc auto llvm`` applies to the
    module its trace gives without importing ``tvm.s_tir.tensor_intrin``: a schedule holder or
    a builder does not pay that import (seconds) for scripts that name no intrinsic."""
    import dragon_dsl
    from codegen import sample_traces, workload
    from codegen.apply import apply_trace

    spec = "dense(m=32,n=48,k=64,bias=1,act=gelu)"
    wl = workload(spec)
    [trace] = sample_traces(wl.mod, "llvm", "llvm", 1, seed=0)
    text = dragon_dsl.from_trace(trace, postproc="auto", postproc_set="llvm")
    assert text.rstrip().endswith("postproc auto llvm"), text
    code = textwrap.dedent(f"""
        import sys
        import tvm_ffi
        from codegen import workload
        from codegen.apply import apply
        mod = apply({text!r}, workload({spec!r}), "llvm")
        print(tvm_ffi.structural_hash(mod), "tvm.s_tir.tensor_intrin" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(tvm_ffi.structural_hash(apply_trace(trace, wl))), "False"]
