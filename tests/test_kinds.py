"""Completeness: instruction kinds that MetaSchedule's default rules do not emit, recorded by
TVM's traced Schedule API itself, round-trip exactly through the language."""

from __future__ import annotations

import pytest
import tvm_ffi
from tvm.s_tir.schedule import Schedule

import dragon_dsl
from codegen import workload
from dragon_dsl.tvm_bridge import trace_json

MATMUL = "matmul(m=64,n=64,k=64)"
ODD_MATMUL = "matmul(m=60,n=60,k=60)"
REDUCE = "reduce(m=32,n=128,op=sum)"
CHAIN = "elementwise(m=32,n=64,ops=\"add,relu,exp\")"


CASES = {
    "Unroll": (MATMUL, lambda s: s.unroll(s.get_loops(s.get_sblock("C"))[0])),
    "AddUnitLoop": (MATMUL, lambda s: s.add_unit_loop(s.get_sblock("C"))),
    "RFactor": (REDUCE, lambda s: s.rfactor(
        s.split(s.get_loops(s.get_sblock(_reduce_block(s)))[1], [None, 8])[1], 0)),
    "DecomposeReduction": (MATMUL, lambda s: s.decompose_reduction(
        s.get_sblock("C"), s.get_loops(s.get_sblock("C"))[2])),
    "ReorderBlockIterVar": (MATMUL, lambda s: s.reorder_block_iter_var(s.get_sblock("C"),
                                                                       [1, 0, 2])),
    "PadEinsum": (ODD_MATMUL, lambda s: s.pad_einsum(s.get_sblock("C"), [64, 64, 64])),
    "LoopPartition": (MATMUL, lambda s: s.loop_partition(s.get_loops(s.get_sblock("C"))[0],
                                                         [None, 16])),
    "GetOutputBlocks": (MATMUL, lambda s: s.get_output_blocks(s.get_sblock("root"))),
    "CacheIndex": ("conv2d(h=14,w=14,ci=16,co=16,stride=2)",
                   lambda s: s.cache_index(s.get_sblock("conv2d_nhwc"), "global")),
    "UnsafeHideBufferAccess": (MATMUL, lambda s: s.unsafe_hide_buffer_access(
        s.get_sblock("C"), "read", [1])),
    "AnnotateBufferAccess": (CHAIN, lambda s: s.annotate_buffer_access(
        _first_block(s), 0, "read", lambda i, j: ((i, i + 1), (j, j + 1)))),
    "ReindexCacheRead": (MATMUL, lambda s: s.reindex_cache_read(
        s.get_sblock("C"), 0, "shared", lambda i, j, k: (i, k))),
    "ReindexCacheWrite": (MATMUL, lambda s: s.reindex_cache_write(
        s.get_sblock("C"), 0, "shared", lambda i, j, k: (i, j))),
    "SetScope": (CHAIN, lambda s: s.set_scope(_first_block(s), 0, "shared")),
    "UnsafeSetDType": (CHAIN, lambda s: s.unsafe_set_dtype(_first_block(s), 0, "float16")),
    "Merge": (CHAIN, lambda s: _merge(s)),
    "SampleComputeLocation": (CHAIN, lambda s: s.sample_compute_location(_first_block(s))),
    "Vectorize+Parallel": (CHAIN, lambda s: (s.parallel(s.get_loops(_first_block(s))[0]),
                                             s.vectorize(s.get_loops(_first_block(s))[1]))),
}


def _reduce_block(s):
    return [s.get(b).name_hint for b in s.get_child_blocks(s.get_sblock("root"))][0]


def _first_block(s):
    return s.get_child_blocks(s.get_sblock("root"))[0]


def _merge(s):
    blocks = s.get_child_blocks(s.get_sblock("root"))
    return s.merge(s.get_loops(blocks[0])[0], s.get_loops(blocks[1])[0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_api_traces_round_trip(name):
    spec, build = CASES[name]
    wl = workload(spec)
    sch = Schedule(wl.mod)
    build(sch)
    trace = sch.trace
    text = dragon_dsl.from_trace(trace)
    decoded = dragon_dsl.to_trace(text)
    assert trace_json(decoded) == trace_json(trace), text
    a, b = Schedule(wl.mod), Schedule(wl.mod)
    trace.apply_to_schedule(a, remove_postproc=False)
    decoded.apply_to_schedule(b, remove_postproc=False)
    assert tvm_ffi.structural_equal(a.mod, b.mod)


def test_general_form_covers_an_unknown_shape():
    """A kind with a dedicated statement but unusual attribute types falls back to @Kind."""
    wl = workload(MATMUL)
    sch = Schedule(wl.mod)
    sch.annotate(sch.get_sblock("C"), "k", 7)  # a Python int annotation value -> IntImm?
    text = dragon_dsl.from_trace(sch.trace)
    assert trace_json(dragon_dsl.to_trace(text)) == trace_json(sch.trace)


def test_unsupported_expression_names_the_instruction():
    import tvm
    from tvm.s_tir.schedule import Instruction, InstructionKind, LoopRV, SBlockRV, Trace

    block, loop = SBlockRV(), LoopRV()
    var = tvm.tirx.Var("x", "int32")
    weird = tvm.tirx.IndexMap([var], [tvm.tirx.Select(var > 0, var, var)], None)
    insts = [
        Instruction(InstructionKind.get("GetSBlock"), [], ["C", "main"], [block]),
        Instruction(InstructionKind.get("TransformBlockLayout"), [block], [weird], []),
    ]
    with pytest.raises(dragon_dsl.UnsupportedError) as info:
        dragon_dsl.from_trace(Trace(insts, {}))
    assert info.value.kind == "TransformBlockLayout"
    assert "TransformBlockLayout" in str(info.value)
    del loop
