"""The codec is lossless on real MetaSchedule traces: same typed JSON, and structurally equal
modules after applying both traces, for both postproc modes."""

from __future__ import annotations

import json

import pytest
import tvm_ffi
from hypothesis import given, settings
from tvm.s_tir.schedule import Schedule

import dragon_dsl
from codegen.targets import postproc_set
from dragon_dsl.tvm_bridge import trace_json

from .traces import TARGETS, WORKLOADS, fixed_traces, sampled_traces, space_or_none


def _applied(trace, mod):
    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def assert_lossless(wl, target, rules, trace):
    expected = trace_json(trace)
    for mode, names_from in (("explicit", None), ("auto", None), ("auto", wl)):
        text = dragon_dsl.from_trace(trace, postproc=mode, postproc_set=postproc_set(rules),
                                     workload=names_from)
        assert dragon_dsl.format(text) == text, "the encoder's output is canonical"
        decoded = dragon_dsl.to_trace(text, workload=wl, target=target)
        assert trace_json(decoded) == expected, f"{mode}: trace JSON differs\n{text}"
        assert tvm_ffi.structural_equal(_applied(trace, wl.mod), _applied(decoded, wl.mod))


@given(sampled_traces())
def test_round_trip_is_exact(case):
    assert_lossless(*case)


@pytest.mark.parametrize("target,rules", TARGETS)
def test_round_trip_each_target(target, rules):
    spec = "matmul(m=128,n=128,k=128,dtype=float16)"
    wl_traces = fixed_traces(spec, target, rules, 2, seed=3)
    assert wl_traces, f"MetaSchedule gave no trace for {spec} on {rules}"
    from codegen import workload

    for trace in wl_traces:
        assert_lossless(workload(spec), target, rules, trace)


def test_llvm_layout_rewrite_keeps_int64_index_maps():
    """TVM's Python form fails to replay these (int32 vs int64); ours must not."""
    from codegen import workload

    wl = workload("conv2d(h=14,w=14,ci=16,co=16,layout_free=1)")
    trace = fixed_traces(wl.spec, "llvm", "llvm", 1, seed=5)[0]
    text = dragon_dsl.from_trace(trace)
    assert "transform_layout" in text and "; " in text  # a rewrite with its stored inverse
    assert_lossless(wl, "llvm", "llvm", trace)


@settings(max_examples=15)
@given(sampled_traces())
def test_trace_json_file_round_trip(case):
    """Encoding from the typed JSON file form gives the same script as from the trace."""
    _, _, rules, trace = case
    data = json.loads(json.dumps(trace_json(trace)))
    assert dragon_dsl.from_trace(data) == dragon_dsl.from_trace(trace)


def test_every_workload_family_is_searchable():
    """The strategy's workload set really yields traces (guards against a silent assume())."""
    missing = [s for s in WORKLOADS if space_or_none(s, "llvm", "llvm") is None]
    assert not missing
