"""``dragon_dsl.live_apply`` applies one instruction at a time to a live schedule, exactly as
``Trace.apply_to_schedule`` does the whole trace: the same module (structurally equal) and the
same trace (instructions, attrs and decisions), on MetaSchedule traces with and without their
postprocessing, and on traces of the kinds MetaSchedule does not emit."""

from __future__ import annotations

import pytest
import tvm
import tvm_ffi
from tvm.s_tir.schedule import Schedule
from tvm.script import tirx as T

import dragon_dsl
from codegen import workload
from dragon_dsl.ast import Ref
from dragon_dsl.codec import decode_program
from dragon_dsl.live_apply import (
    KINDS,
    UNSUPPORTED,
    ApplyError,
    _rules,
    apply_inst,
    apply_record,
    apply_trace_incrementally,
)
from dragon_dsl.replay import plain_json
from dragon_dsl.tvm_bridge import ALL_KINDS, Inst, insts_from_trace, trace_json

from .test_kinds import CASES as API_CASES
from .traces import PAIRS, draw_trace, fixed_traces, space_or_none, target_of

# A modest set that still reaches every kind MetaSchedule emits: tiling and layout rewriting on
# llvm, cross-thread reductions, inlining and caches on cuda, and both tensor-core rule sets
# (Tensorize, Blockize, ReIndex, PadEinsum, ReadAt/WriteAt, SamplePartitionedTile).
FAST_PAIRS = [
    ("matmul(m=64,n=64,k=64)", "llvm"),
    ("conv2d(h=14,w=14,ci=16,co=16,layout=NHWC)", "llvm"),
    ("softmax(m=32,n=64)", "llvm"),
    ("softmax(m=32,n=64)", "cuda"),
    ('elementwise(m=32,n=64,ops="add,relu,exp")', "cuda"),
    ("conv1d(l=32,ci=8,co=8,layout=NWC)", "cuda"),
    ("matmul(m=128,n=128,k=128,dtype=float16)", "cuda-tensorcore"),
    ("conv2d(h=14,w=14,ci=32,co=32,dtype=float16)", "cuda-tensorcore"),
    ("matmul(m=128,n=128,k=128,dtype=float16)", "mma"),
]
TRACES_PER_PAIR = 2


def _traces(spec: str, rules: str):
    traces = fixed_traces(spec, target_of(rules), rules, TRACES_PER_PAIR)
    assert traces, f"MetaSchedule gave no trace for {spec} under {rules}"
    return traces


def assert_applies_like_replay(mod, trace, remove_postproc: bool, json: bool = True):
    """Incremental application gives the module and the trace that a full replay gives."""
    expected = Schedule(mod)
    trace.apply_to_schedule(expected, remove_postproc=remove_postproc)
    got = Schedule(mod)
    outputs = apply_trace_incrementally(got, trace, remove_postproc=remove_postproc)
    assert len(outputs) == len(got.trace.insts)
    assert tvm_ffi.structural_equal(got.mod, expected.mod)
    assert insts_from_trace(got.trace) == insts_from_trace(expected.trace)
    if json:  # TVM cannot write a trace whose inputs hold expressions
        assert plain_json(got.trace.as_json()) == plain_json(expected.trace.as_json())
        assert trace_json(got.trace) == trace_json(expected.trace)
    return got


# ---- the table ------------------------------------------------------------------------------

def test_every_kind_is_applied_or_says_why_not():
    assert set(KINDS) | set(UNSUPPORTED) == set(ALL_KINDS)
    assert not set(KINDS) & set(UNSUPPORTED)
    assert all(reason.strip() for reason in UNSUPPORTED.values())
    assert set(_rules()) == set(KINDS)


# ---- MetaSchedule traces --------------------------------------------------------------------

@pytest.mark.parametrize("spec,rules", FAST_PAIRS)
def test_meta_schedule_traces_apply_incrementally(spec, rules):
    mod = workload(spec).mod
    for trace in _traces(spec, rules):
        full = assert_applies_like_replay(mod, trace, remove_postproc=False)
        assert not tvm_ffi.structural_equal(full.mod, mod), "the comparison is not vacuous"
        assert trace_json(full.trace) == trace_json(trace), "the trace replays exactly"
        assert_applies_like_replay(mod, trace, remove_postproc=True)


@pytest.mark.slow
@pytest.mark.parametrize("spec,target,rules", PAIRS)
def test_every_pair_applies_incrementally(spec, target, rules):
    space = space_or_none(spec, target, rules)
    assert space is not None
    mod = workload(spec).mod
    for seed in (0, 1):
        trace = draw_trace(space, seed)
        assert trace is not None
        assert_applies_like_replay(mod, trace, remove_postproc=False)
        assert_applies_like_replay(mod, trace, remove_postproc=True)


@pytest.mark.parametrize("spec,rules", FAST_PAIRS[:3] + FAST_PAIRS[-2:])
def test_decoded_scripts_apply_statement_by_statement(spec, rules):
    """What the sampler does: the script's Inst records, applied one by one with apply_record,
    names bound as they come."""
    mod = workload(spec).mod
    trace = _traces(spec, rules)[0]
    decoded = decode_program(dragon_dsl.parse(dragon_dsl.from_trace(trace)))
    assert not decoded.errors
    sch, env = Schedule(mod), {}
    for inst in decoded.insts:
        outputs = apply_record(sch, inst, env)
        assert [env[name] for name in inst.outputs] == outputs
    expected = Schedule(mod)
    trace.apply_to_schedule(expected, remove_postproc=False)
    assert tvm_ffi.structural_equal(sch.mod, expected.mod)
    assert trace_json(sch.trace) == trace_json(trace)


# ---- the kinds MetaSchedule does not emit, recorded by TVM's traced Schedule API -------------

@T.prim_func(s_tir=True)
def _in_place(data: T.Buffer((64,), "int32")):
    for _ in T.serial(1):
        with T.sblock("ext_call"):
            T.reads(data[:64])
            T.writes(data[:64])
            T.evaluate(T.call_extern("call_impl", data.data, dtype=""))


def _rolling_buffer(s):
    pool = s.get_loops(s.get_sblock("pool_max"))
    outer, _ = s.split(pool[2], [2, 4])
    s.compute_at(s.get_sblock("pad_temp"), outer)
    s.rolling_buffer(s.get_sblock("pad_temp"), 0)


def _expression_factor(s):
    loops = s.get_loops(s.get_sblock("C"))
    v = s.sample_categorical([4, 8], [0.5, 0.5], decision=1)
    s.split(loops[0], [None, v * 2])  # an input expression over a random variable


def _index_map_over_a_variable(s):
    v = s.sample_categorical([16], [1.0], decision=0)
    s.transform_layout(s.get_sblock("C"), ("write", 0), tvm.tirx.IndexMap.from_func(
        lambda i, j: (i // v, j, i % v), index_dtype="int32"))


def _fresh_samples(s):
    loops = s.get_loops(s.get_sblock("C"))
    s.split(loops[0], s.sample_perfect_tile(loops[0], 3))
    s.sample_categorical([1, 2, 3], [0.2, 0.3, 0.5])
    s.sample_partitioned_tile(loops[1], 3, partition_pos=1, innerpart_factor=4)


EXTRA_CASES = {
    "CacheInplace": (_in_place, lambda s: s.cache_inplace(s.get_sblock("ext_call"), 0, "local")),
    "DecomposePadding": ("conv2d(h=14,w=14,ci=16,co=16)", lambda s: s.decompose_padding(
        s.get_sblock("pad_temp"), s.get_loops(s.get_sblock("pad_temp"))[0])),
    "FuseReductionEpilogue": ("dense(m=32,n=48,k=64,bias=1)", lambda s: s.fuse_reduction_epilogue(
        s.get_sblock("T_dense"), s.get_sblock("T_bias_add"))),
    "RollingBuffer": ("pool2d(kind=max)", _rolling_buffer),
    "Blockize(loop)": ("matmul(m=64,n=64,k=64)", lambda s: s.blockize(
        s.get_loops(s.get_sblock("C"))[1])),
    "Blockize(blocks)": ('elementwise(m=32,n=64,ops="add,relu,exp")', lambda s: s.blockize(
        s.get_child_blocks(s.get_sblock("root"))[:2])),
    "StorageAlign+Unannotate": ("matmul(m=64,n=64,k=64)", lambda s: (
        s.storage_align(s.cache_read(s.get_sblock("C"), 0, "shared"), 0, 0, 32, 8),
        s.annotate(s.get_sblock("C"), "k", [1, 2]), s.unannotate(s.get_sblock("C"), "k"))),
    "Split(expression)": ("matmul(m=64,n=64,k=64)", _expression_factor),
    "TransformLayout(variable)": ("matmul(m=64,n=64,k=64)", _index_map_over_a_variable),
    "Sample(no decision)": ("matmul(m=64,n=64,k=64)", _fresh_samples),
}
NOT_JSON = {"Split(expression)"}  # TVM's own as_json cannot write an expression input


def _api_case(name):
    spec, build = EXTRA_CASES[name] if name in EXTRA_CASES else API_CASES[name]
    mod = workload(spec).mod if isinstance(spec, str) else tvm.IRModule({"main": spec})
    sch = Schedule(mod)
    build(sch)
    return mod, sch.trace


@pytest.mark.parametrize("name", sorted(API_CASES) + sorted(EXTRA_CASES))
def test_schedule_api_traces_apply_incrementally(name):
    mod, trace = _api_case(name)
    assert_applies_like_replay(mod, trace, remove_postproc=False, json=name not in NOT_JSON)


def test_the_tests_reach_every_kind():
    """The fast tests apply every kind in the table at least once."""
    seen = set()
    for spec, rules in FAST_PAIRS:
        for trace in _traces(spec, rules):
            seen |= {str(inst.kind.name) for inst in trace.insts}
    for name in list(API_CASES) + list(EXTRA_CASES):
        seen |= {str(inst.kind.name) for inst in _api_case(name)[1].insts}
    assert set(KINDS) - seen == set()


# ---- errors ---------------------------------------------------------------------------------

@pytest.fixture
def matmul():
    sch = Schedule(workload("matmul(m=64,n=64,k=64)").mod)
    [block] = apply_inst(sch, "GetSBlock", [], ["C", "main"], None)
    return sch, block, apply_inst(sch, "GetLoops", [block], [], None)


def test_an_unknown_kind_is_named(matmul):
    sch, block, _ = matmul
    with pytest.raises(dragon_dsl.UnsupportedError, match="'Tile'") as info:
        apply_inst(sch, "Tile", [block], [], None)
    assert info.value.kind == "Tile"


@pytest.mark.parametrize("kind,inputs,attrs,decision,message", [
    ("GetLoops", [], [], None, "takes 1 inputs, but got 0"),
    ("Fuse", [], [], None, "takes 1 attrs, but got 0"),
    ("Split", [], [True, False], None, "takes a loop and its factors"),
    ("Parallel", ["loop"], [], [4], "takes no decision"),
])
def test_a_malformed_instruction_is_a_trace_error(matmul, kind, inputs, attrs, decision,
                                                  message):
    sch, _, loops = matmul
    inputs = [loops[0] if v == "loop" else v for v in inputs]
    with pytest.raises(dragon_dsl.TraceError, match=message):
        apply_inst(sch, kind, inputs, attrs, decision)


def test_a_refusal_names_the_kind_and_keeps_tvms_reason(matmul):
    sch, _, loops = matmul
    with pytest.raises(ApplyError, match="refuses Split") as info:
        apply_inst(sch, "Split", [loops[0], 3, 5], [True, False], None)
    assert info.value.kind == "Split" and info.value.tvm_reason
    assert isinstance(info.value, dragon_dsl.DragonError)


def test_a_refused_record_points_at_its_statement():
    sch, env = Schedule(workload("matmul(m=64,n=64,k=64)").mod), {}
    decoded = decode_program(dragon_dsl.parse('block "C" -> C\nblock "D" -> D\n'))
    apply_record(sch, decoded.insts[0], env)
    with pytest.raises(ApplyError, match="refuses GetSBlock") as info:
        apply_record(sch, decoded.insts[1], env)
    assert (info.value.line, info.value.column) == (2, 1)
    with pytest.raises(dragon_dsl.TraceError, match="'X'"):
        apply_record(sch, Inst("GetLoops", [Ref("X")], [], ["l1"]), env)


# A script a model wrote (schedule-aware decoding admitted it; `dragon eval` then refused it on
# replay): it annotates the root block, which TVM's schedule applies to the module it is given in
# place, so that before `schedule_of` every later use of the same workload met other loops.
ROOT_ANNOTATED = '''block "PaddedInput" -> PaddedInput
block "root" -> root
annotate root tiling_structure="SSRSRS"
loops PaddedInput -> i0, i1, i2, i3
tile i1 [1, 1, 4, 168] -> i10, i11, i12, i13
postproc auto llvm
'''


def test_applying_a_script_leaves_the_workload_as_it_was():
    from codegen.apply import apply as codegen_apply
    from dragon_dsl.live import LiveSchedule

    wl = workload("depthwise_conv2d(h=16,w=16,c=672,kh=5,kw=5,pad=2,layout=NCHW)")
    before = tvm.ir.save_json(wl.mod)
    target = {"kind": "llvm", "num-cores": 2}
    for _ in range(2):  # the second time meets the workload the first left behind
        dragon_dsl.to_schedule(ROOT_ANNOTATED, workload=wl, target=target)
        codegen_apply(ROOT_ANNOTATED, wl, target)
        live = LiveSchedule(wl, target)
        for line in ROOT_ANNOTATED.splitlines():
            live.step(line)
        assert tvm.ir.save_json(wl.mod) == before
    assert dragon_dsl.check(ROOT_ANNOTATED, workload=wl, target=target) == []


# What the built-in model wrote for a softmax (schedule-aware decoding admitted each statement):
# a second rfactor of a block rfactored already.  TVM applies it, but it leaves two blocks named
# T_softmax_maxelem_rf, so every `postproc auto` after it failed and the sample could not end.
TWICE_RFACTORED = '''block "T_softmax_maxelem" -> T_softmax_maxelem
loops T_softmax_maxelem -> i0, k
tile k [2, 32] -> k0, k1
rfactor k0 1 -> b0
loops T_softmax_maxelem -> l0, l1
tile l1 [2, 1] -> l2, l3
'''


def test_a_block_is_not_rfactored_twice():
    from dragon_dsl.live import LiveSchedule

    live = LiveSchedule(workload("softmax(m=32,n=64)"), "llvm")
    for line in TWICE_RFACTORED.splitlines():
        live.step(line)
    with pytest.raises(dragon_dsl.DragonError, match="rfactored already"):
        live.step("rfactor l3 1 -> b1")
    live.step("postproc auto llvm")  # the refused statement left nothing behind


# A script the RL run of docs/rl-kl sampled (step 54): its reorder leaves `ff3` where it was,
# above `ff2`; with the cache write copied back at `xx1` and the outer loops parallel, the kernel
# raced (72,548 of 147,456 outputs wrong).  Up to and including that reorder.
RACING = """\
block "pad_temp" -> pad_temp
block "conv2d_nchw" -> conv2d_nchw
block "root" -> root
annotate conv2d_nchw tiling_structure="SSRSRS"
loops conv2d_nchw -> nn, ff, yy, xx, rc, ry, rx
tile nn [1, 1, 1, 1] -> nn0..nn3
tile ff [1, 2, 2, 64] -> ff0..ff3
tile yy [1, 1, 2, 12] -> yy0..yy3
tile xx [1, 1, 12, 2] -> xx0..xx3
tile rc [1, 256] -> rc0, rc1
tile ry [1, 3] -> ry0, ry1
tile rx [1, 3] -> rx0, rx1
reorder nn0 ff0 yy0 xx0 nn1 ff1 yy1 xx1 rc0 ry0 rx0 nn2 ff2 yy3 xx2 xx3
"""


def test_the_samplers_schedules_refuse_tiles_out_of_order():
    """With ``keep_tile_order`` (the schedule-aware sampler's schedules) a reorder that leaves a
    piece of a tiled loop above an outer piece of the same loop is refused, naming both, and
    the schedule is as before it; without it TVM takes the reorder, as the language does."""
    from dragon_dsl.errors import DslSemanticError
    from dragon_dsl.live import apply_script

    wl = workload("conv2d(h=24,w=24,ci=256,co=256,layout=NCHW)")
    assert apply_script(RACING, wl, "llvm").statements == len(RACING.splitlines())
    with pytest.raises(DslSemanticError, match=r"`ff3` would be above `ff2`.*pieces of `ff`"):
        apply_script(RACING, wl, "llvm", keep_tile_order=True)
    head, _, last = RACING.rstrip("\n").rpartition("\n")
    live = apply_script(head, wl, "llvm", keep_tile_order=True)
    before = str(live.sch.mod)
    with pytest.raises(DslSemanticError, match="out of order"):
        live.step(last)
    assert str(live.sch.mod) == before and live.statements == len(head.splitlines())
    live.step("reorder nn0 ff0 yy0 xx0 nn1 ff1 yy1 xx1 rc0 ry0 rx0 nn2 ff2 yy2 xx2 rc1 ry1 "
              "rx1 nn3 ff3 yy3 xx3")  # every piece named, in order: MetaSchedule's form


@pytest.mark.parametrize("spec,rules", FAST_PAIRS[:3])
def test_metaschedule_scripts_keep_their_tiles_in_order(spec, rules):
    """Every MetaSchedule script applies under the sampler's rule on reorders: it refuses
    nothing MetaSchedule writes."""
    from dragon_dsl.live import apply_script

    reorders = 0
    for trace in _traces(spec, rules):
        script = dragon_dsl.from_trace(trace)
        live = apply_script(script, workload(spec), target_of(rules), keep_tile_order=True)
        assert live.statements == len(dragon_dsl.parse(script).statements)
        reorders += script.count("\nreorder ")
    assert reorders or spec.startswith("softmax"), "no reorder: the test shows nothing"
