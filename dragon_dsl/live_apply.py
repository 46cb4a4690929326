"""Applying instructions one at a time to a live ``Schedule``: what TVM's
``InstructionKind.f_apply_to_schedule`` does, which TVM does not expose to Python.

A schedule-aware sampler keeps one ``tvm.s_tir.schedule.Schedule`` per script and applies each
statement as soon as it is complete, instead of replaying the whole prefix with
``Trace.apply_to_schedule`` after every statement (quadratic in the script's length).

- ``apply_inst(sch, kind, inputs, attrs, decision)`` applies one instruction given in TVM's
  own layout (inputs already the schedule's random variables), exactly as the C++
  ``<Kind>Traits::UnpackedApplyToSchedule`` does: the same ``Schedule`` method with the same
  arguments, so the traced schedule records the same instruction and decision.
- ``apply_record(sch, inst, env)`` applies one decoded ``Inst`` record, its names resolved in
  ``env`` (name -> the schedule's random variable), and binds its outputs in ``env``.
- ``apply_trace_incrementally(sch, trace)`` walks a Trace instruction by instruction, mapping
  its random variables to the schedule's as ``Trace.apply_to_schedule`` does (mainly for tests).

Every kind in ``tvm_bridge.ALL_KINDS`` is covered (``KINDS``); ``UNSUPPORTED`` is empty.  A
refusal by TVM is an ``ApplyError``; the schedule may then hold part of the instruction's
work, so keep a ``sch.copy()`` of a schedule you need to go back to.

Cost, measured by ``benchmarks/bench_live_apply.py`` on 2 shared cores over 22 MetaSchedule
traces (llvm, cuda, cuda-tensorcore and mma rules; 1,619 instructions):

- one ``apply_inst`` call: median 10 us per instruction (p90 211 us, mean 96 us).  The
  Get*, Annotate and Sample* kinds take 3-10 us; Split and Fuse 60-90 us; the compute-at
  family, TransformLayout, Tensorize and Blockize 0.3-1.4 ms.  The Python dispatch adds
  about 3 us to what TVM's own replay spends on the instruction.
- one full ``Trace.apply_to_schedule`` replay on a fresh schedule: median 2.3-2.7 ms for the
  llvm and cuda traces (about 50 instructions), 18.7 ms for the tensor-core ones (147).
- replaying every prefix, as a sampler without a live schedule must: 60-86 ms and 1.3 s per
  trace; applying the same trace incrementally: 3.1-3.7 ms and 23 ms (about 1.3 full replays).
- ``Schedule.copy()`` of the scheduled modules: 13-41 us.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import DslSemanticError, TraceError, UnsupportedError
from .tvm_bridge import ALL_KINDS, Inst, value_to_tvm

__all__ = ["KINDS", "UNSUPPORTED", "ApplyError", "apply_inst", "apply_record",
           "apply_trace_incrementally"]

# Kinds in ALL_KINDS that apply_inst cannot apply, each with the reason.  None today.
UNSUPPORTED: dict[str, str] = {}


class ApplyError(DslSemanticError):
    """TVM refuses an instruction on the live schedule.  ``kind`` names the instruction and
    ``tvm_reason`` is TVM's sentence; ``line``/``column`` locate the statement when it came
    from a script (``apply_record``)."""

    def __init__(self, message: str, *, kind: str, tvm_reason: str,
                 line: int | None = None, column: int | None = None) -> None:
        self.kind = kind
        self.tvm_reason = tvm_reason
        super().__init__(message, line=line, column=column)


@dataclass(frozen=True)
class _Rule:
    """How one kind applies: its arity (None: any number of inputs; Split and LoopPartition
    take at least one) and the call.  ``returns``: "none", "one" or "list", the shape of
    ``UnpackedApplyToSchedule``'s result."""

    inputs: int | None
    attrs: int
    sampling: bool
    returns: str
    call: Callable[..., Any]


def _int(value) -> int:
    """The value of an attr that the trait unpacks as an IntImm (an int or a bool in traces
    that Python built)."""
    return int(getattr(value, "value", value))


_RULES: dict[str, _Rule] = {}


def _rules() -> dict[str, _Rule]:
    """The table, built on first use so that importing dragon_dsl does not import TVM.  Each
    call is the body of the kind's ``UnpackedApplyToSchedule`` in TVM's
    src/s_tir/schedule/primitive/*.cc (inputs, then attrs, then the decision, in TVM's order),
    through the FFI function that the Python ``Schedule`` method wraps."""
    if _RULES:
        return _RULES
    from tvm.s_tir.schedule import _ffi_api as f

    table: dict[str, _Rule] = {}

    def rule(kind: str, inputs: int | None, attrs: int, returns: str, call, sampling=False):
        table[kind] = _Rule(inputs, attrs, sampling, returns, call)

    # ---- sampling (the decision is the last argument) ----
    rule("SampleCategorical", 0, 2, "one", sampling=True, call=lambda s, i, a, d:
         f.ScheduleSampleCategorical(s, a[0], a[1], d))
    rule("SamplePerfectTile", 1, 2, "list", sampling=True, call=lambda s, i, a, d:
         f.ScheduleSamplePerfectTile(s, i[0], _int(a[0]), _int(a[1]), d))
    rule("SamplePartitionedTile", 1, 3, "list", sampling=True, call=lambda s, i, a, d:
         f.ScheduleSamplePartitionedTile(s, i[0], _int(a[0]), _int(a[1]), _int(a[2]), d))
    rule("SampleComputeLocation", 1, 0, "one", sampling=True, call=lambda s, i, a, d:
         f.ScheduleSampleComputeLocation(s, i[0], d))
    # ---- getting blocks and loops ----
    rule("GetSBlock", 0, 2, "one", lambda s, i, a, d: f.ScheduleGetSBlock(s, a[0], a[1]))
    rule("GetLoops", 1, 0, "list", lambda s, i, a, d: f.ScheduleGetLoops(s, i[0]))
    rule("GetChildBlocks", 1, 0, "list", lambda s, i, a, d: f.ScheduleGetChildBlocks(s, i[0]))
    rule("GetProducers", 1, 0, "list", lambda s, i, a, d: f.ScheduleGetProducers(s, i[0]))
    rule("GetConsumers", 1, 0, "list", lambda s, i, a, d: f.ScheduleGetConsumers(s, i[0]))
    rule("GetOutputBlocks", 1, 0, "list",
         lambda s, i, a, d: f.ScheduleGetOutputBlocks(s, i[0]))
    # ---- loops (Split and LoopPartition: the loop, then every factor as its own input;
    # Fuse, Merge and Reorder: every input is a loop) ----
    rule("Split", None, 2, "list", lambda s, i, a, d:
         f.ScheduleSplit(s, i[0], i[1:], bool(_int(a[0])), bool(_int(a[1]))))
    rule("LoopPartition", None, 1, "list", lambda s, i, a, d:
         f.ScheduleLoopPartition(s, i[0], i[1:], bool(_int(a[0]))))
    rule("Fuse", None, 1, "one", lambda s, i, a, d: f.ScheduleFuse(s, i, bool(_int(a[0]))))
    rule("Merge", None, 0, "one", lambda s, i, a, d: f.ScheduleMerge(s, i))
    rule("Reorder", None, 0, "none", lambda s, i, a, d: f.ScheduleReorder(s, i))
    rule("ReorderBlockIterVar", 2, 0, "none",
         lambda s, i, a, d: f.ScheduleReorderBlockIterVar(s, i[0], i[1]))
    rule("AddUnitLoop", 1, 0, "one", lambda s, i, a, d: f.ScheduleAddUnitLoop(s, i[0]))
    rule("Parallel", 1, 0, "none", lambda s, i, a, d: f.ScheduleParallel(s, i[0]))
    rule("Vectorize", 1, 0, "none", lambda s, i, a, d: f.ScheduleVectorize(s, i[0]))
    rule("Unroll", 1, 0, "none", lambda s, i, a, d: f.ScheduleUnroll(s, i[0]))
    rule("Bind", 1, 1, "none", lambda s, i, a, d: f.ScheduleBind(s, i[0], a[0]))
    # ---- caches and buffers ----
    rule("CacheRead", 2, 2, "one", lambda s, i, a, d:
         f.ScheduleCacheRead(s, i[0], _int(a[0]), a[1], i[1]))
    rule("CacheWrite", 2, 2, "one", lambda s, i, a, d:
         f.ScheduleCacheWrite(s, i[0], _int(a[0]), a[1], i[1]))
    rule("CacheInplace", 1, 2, "list", lambda s, i, a, d:
         f.ScheduleCacheInplace(s, i[0], _int(a[0]), a[1]))
    rule("CacheIndex", 1, 2, "list", lambda s, i, a, d:
         f.ScheduleCacheIndex(s, i[0], a[0], _int(a[1])))
    rule("ReIndex", 1, 2, "one", lambda s, i, a, d:
         f.ScheduleReIndex(s, i[0], _int(a[0]), _int(a[1])))
    rule("ReindexCacheRead", 2, 2, "one", lambda s, i, a, d:
         f.ScheduleReindexCacheRead(s, i[0], _int(a[0]), a[1], i[1]))
    rule("ReindexCacheWrite", 2, 2, "one", lambda s, i, a, d:
         f.ScheduleReindexCacheWrite(s, i[0], _int(a[0]), a[1], i[1]))
    rule("ReadAt", 2, 2, "one", lambda s, i, a, d:
         f.ScheduleReadAt(s, i[0], i[1], _int(a[0]), a[1]))
    rule("WriteAt", 2, 2, "one", lambda s, i, a, d:
         f.ScheduleWriteAt(s, i[0], i[1], _int(a[0]), a[1]))
    rule("RollingBuffer", 1, 1, "none",
         lambda s, i, a, d: f.ScheduleRollingBuffer(s, i[0], _int(a[0])))
    rule("StorageAlign", 1, 4, "none", lambda s, i, a, d:
         f.ScheduleStorageAlign(s, i[0], _int(a[0]), _int(a[1]), _int(a[2]), _int(a[3])))
    rule("SetScope", 1, 2, "none",
         lambda s, i, a, d: f.ScheduleSetScope(s, i[0], _int(a[0]), a[1]))
    rule("UnsafeSetDType", 1, 2, "none",
         lambda s, i, a, d: f.ScheduleUnsafeSetDType(s, i[0], _int(a[0]), a[1]))
    rule("UnsafeHideBufferAccess", 3, 0, "none",
         lambda s, i, a, d: f.ScheduleUnsafeHideBufferAccess(s, i[0], i[1], i[2]))
    rule("AnnotateBufferAccess", 4, 0, "none", lambda s, i, a, d:
         f.ScheduleAnnotateBufferAccess(s, i[0], _int(i[1]), _int(i[2]), i[3]))
    # ---- compute location ----
    rule("ComputeAt", 2, 2, "none", lambda s, i, a, d:
         f.ScheduleComputeAt(s, i[0], i[1], bool(_int(a[0])), _int(a[1])))
    rule("ReverseComputeAt", 2, 2, "none", lambda s, i, a, d:
         f.ScheduleReverseComputeAt(s, i[0], i[1], bool(_int(a[0])), _int(a[1])))
    rule("ComputeInline", 1, 0, "none", lambda s, i, a, d: f.ScheduleComputeInline(s, i[0]))
    rule("ReverseComputeInline", 1, 0, "none",
         lambda s, i, a, d: f.ScheduleReverseComputeInline(s, i[0]))
    rule("FuseReductionEpilogue", 2, 0, "none",
         lambda s, i, a, d: f.ScheduleFuseReductionEpilogue(s, i[0], i[1]))
    # ---- reductions, padding, layouts ----
    rule("DecomposeReduction", 2, 0, "one",
         lambda s, i, a, d: f.ScheduleDecomposeReduction(s, i[0], i[1]))
    rule("RFactor", 1, 1, "one", lambda s, i, a, d: f.ScheduleRFactor(s, i[0], _int(a[0])))
    rule("DecomposePadding", 2, 0, "one",
         lambda s, i, a, d: f.ScheduleDecomposePadding(s, i[0], i[1]))
    rule("PadEinsum", 1, 1, "none", lambda s, i, a, d: f.SchedulePadEinsum(s, i[0], a[0]))
    rule("TransformLayout", 2, 4, "none", lambda s, i, a, d: f.ScheduleTransformLayout(
        s, i[0], _int(a[0]), _int(a[1]), i[1], a[2], bool(_int(a[3]))))
    rule("TransformBlockLayout", 1, 1, "none",
         lambda s, i, a, d: f.ScheduleTransformBlockLayout(s, i[0], a[0]))
    # ---- blockize, tensorize, annotations, postprocessing ----
    rule("Blockize", 1, 1, "one",
         lambda s, i, a, d: f.ScheduleBlockize(s, i[0], bool(_int(a[0]))))
    rule("Tensorize", 1, 2, "none", _tensorize)
    rule("Annotate", 2, 1, "none", lambda s, i, a, d: f.ScheduleAnnotate(s, i[0], a[0], i[1]))
    rule("Unannotate", 1, 1, "none", lambda s, i, a, d: f.ScheduleUnannotate(s, i[0], a[0]))
    rule("EnterPostproc", 0, 0, "none", lambda s, i, a, d: f.ScheduleEnterPostproc(s))
    _RULES.update(table)  # all at once: a failure above leaves no half-built table
    return _RULES


def _tensorize(sch, inputs, attrs, decision):
    from tvm.s_tir.schedule import _ffi_api

    from .tvm_support import import_tensor_intrinsics

    import_tensor_intrinsics()  # the intrinsics register themselves when imported
    return _ffi_api.ScheduleTensorize(sch, inputs[0], attrs[0], bool(_int(attrs[1])))


KINDS: frozenset[str] = frozenset(ALL_KINDS) - frozenset(UNSUPPORTED)


def _arity_error(kind: str, rule: _Rule, inputs: list, attrs: list, decision) -> str | None:
    if rule.inputs is None:
        if kind in ("Split", "LoopPartition") and not inputs:
            return "takes a loop and its factors as inputs, but got none"
    elif len(inputs) != rule.inputs:
        return f"takes {rule.inputs} inputs, but got {len(inputs)}"
    if len(attrs) != rule.attrs:
        return f"takes {rule.attrs} attrs, but got {len(attrs)}"
    if decision is not None and not rule.sampling:
        return "takes no decision, but got one"
    return None


def apply_inst(sch, kind: str, inputs: list, attrs: list, decision: Any = None) -> list:
    """Apply one instruction to ``sch`` and return its outputs (random variables, in order).

    ``inputs``, ``attrs`` and ``decision`` are in TVM's instruction layout, as
    ``Trace.apply_to_schedule`` hands them to ``f_apply_to_schedule``: inputs hold ``sch``'s
    own random variables, and a decision is what a trace holds (an int for SampleCategorical
    and SampleComputeLocation, a list of ints for the tile samplers); ``decision=None``
    samples afresh.  Values reach TVM's ``Schedule`` method converted as the kind's trait
    converts them, no more (an IntImm in a tile decision fails here as it fails there).
    Raises ``UnsupportedError`` for a kind it does not know, ``TraceError`` for an
    instruction of the wrong shape and ``ApplyError`` when TVM refuses it.

    >>> import tvm
    >>> from tvm import te
    >>> from tvm.s_tir.schedule import Schedule
    >>> a = te.placeholder((64,), name="A")
    >>> sch = Schedule(te.create_prim_func([a, te.compute((64,), lambda i: a[i], name="B")]))
    >>> [block] = apply_inst(sch, "GetSBlock", [], ["B", "main"], None)
    >>> [loop] = apply_inst(sch, "GetLoops", [block], [], None)
    >>> tiles = apply_inst(sch, "SamplePerfectTile", [loop], [2, 16], [8, 8])
    >>> [sch.get(v) for v in tiles]
    [8, 8]
    >>> outer, inner = apply_inst(sch, "Split", [loop, *tiles], [True, False], None)
    >>> str(sch.trace.insts[-1].kind.name), int(sch.get(inner).extent)
    ('Split', 8)
    """
    rule = _RULES.get(kind) or _rules().get(kind)
    if rule is None:
        reason = UNSUPPORTED.get(kind)
        raise UnsupportedError(
            f"cannot apply the instruction kind {kind!r} to a live schedule: " +
            (reason or "TVM 0.27 has no such kind"), kind=kind)
    problem = _arity_error(kind, rule, inputs, attrs, decision)
    if problem is not None:
        raise TraceError(f"{kind} {problem}")
    try:
        result = rule.call(sch, inputs, attrs, decision)
    except Exception as exc:  # noqa: BLE001  TVM raises ScheduleError, TypeError, ...
        from .tvm_support import tvm_message

        reason = tvm_message(exc)
        raise ApplyError(f"the schedule refuses {kind}: {reason}", kind=kind,
                         tvm_reason=reason) from exc
    if rule.returns == "none":
        return []
    if rule.returns == "one":
        return [result]
    return result[:]  # an FFI Array's slice is a list, made twice as fast as list(result)


def apply_record(sch, inst: Inst, env: dict[str, Any]) -> list:
    """Apply one decoded ``Inst`` record (``dragon_dsl.codec``): its names resolve in ``env``,
    which maps names to ``sch``'s random variables, and its outputs are bound there.  A
    refusal is an ``ApplyError`` at the record's line and column.

    >>> from tvm import te
    >>> from tvm.s_tir.schedule import Schedule
    >>> a = te.placeholder((64,), name="A")
    >>> sch = Schedule(te.create_prim_func([a, te.compute((64,), lambda i: a[i], name="B")]))
    >>> env = {}
    >>> _ = apply_record(sch, Inst("GetSBlock", [], ["B", "main"], ["b0"], None, "block"), env)
    >>> sch.get(env["b0"]).name_hint
    'B'
    """
    try:
        inputs = [value_to_tvm(v, env) for v in inst.inputs]
        attrs = [value_to_tvm(v, env) for v in inst.attrs]
        decision = None if inst.decision is None else value_to_tvm(inst.decision, env)
    except KeyError as exc:
        raise TraceError(f"{inst.kind}: uses {exc.args[0]!r}, which no earlier instruction "
                         "defines") from None
    try:
        outputs = apply_inst(sch, inst.kind, inputs, attrs, decision)
    except ApplyError as exc:
        raise ApplyError(exc.reason, kind=exc.kind, tvm_reason=exc.tvm_reason,
                         line=inst.line, column=inst.column) from exc.__cause__
    if len(outputs) != len(inst.outputs):
        raise ApplyError(
            f"{inst.kind} gives {len(outputs)} results here, but the statement names "
            f"{len(inst.outputs)}", kind=inst.kind, tvm_reason="", line=inst.line,
            column=inst.column)
    env.update(zip(inst.outputs, outputs, strict=True))
    return outputs


# ---- a whole trace ------------------------------------------------------------------------

class _Translator:
    """The map from a trace's random variables to a schedule's, applied to inputs as TVM's
    ``TranslateInputRVs`` does (src/s_tir/schedule/trace.cc)."""

    def __init__(self) -> None:
        import tvm
        from tvm.s_tir.schedule import LoopRV, SBlockRV

        self.tvm = tvm
        self.rv_types = (SBlockRV, LoopRV, tvm.tirx.Var)
        self.plain_types = (bool, int, float, str, tvm.tirx.IntImm, tvm.tirx.FloatImm)
        self.rvs: dict[int, Any] = {}  # the trace's RV (by handle) -> the schedule's
        self.old_vars: list[Any] = []  # the trace's expression RVs, in order
        self.new_vars: list[Any] = []  # ... and the schedule's

    def add(self, old: list, new: list, kind: str) -> None:
        if len(old) != len(new):
            raise TraceError(f"{kind} gives {len(new)} results on the schedule, but the trace "
                             f"records {len(old)}")
        for o, n in zip(old, new, strict=True):
            self.rvs[o.__chandle__()] = n
            if isinstance(o, self.tvm.tirx.Var):
                self.old_vars.append(o)
                self.new_vars.append(n)

    def __call__(self, value, kind: str):
        tvm = self.tvm
        if value is None or isinstance(value, self.plain_types):
            return value
        if isinstance(value, self.rv_types):
            try:
                return self.rvs[value.__chandle__()]
            except KeyError:
                raise TraceError(f"{kind}: uses a random variable that no earlier instruction "
                                 "defines") from None
        if isinstance(value, tvm.tirx.IndexMap):
            return self._index_map(value)
        if isinstance(value, tvm.ir.Expr):
            return self._expr(value)
        if isinstance(value, tvm.ir.Array | list | tuple):
            return [self(v, kind) for v in value]
        raise TraceError(f"{kind}: cannot translate an input of type {type(value).__name__} "
                         "(nor can Trace.apply_to_schedule)")

    def _expr(self, expr):
        if not self.old_vars:
            return expr
        from tvm.tirx import _ffi_api

        # tirx's Substitute, through the one FFI function that exposes it without simplifying.
        return _ffi_api.LambdaExprApply(_ffi_api.LambdaExpr(self.old_vars, expr), self.new_vars)

    def _index_map(self, index_map):
        inverse = index_map.inverse_index_map
        return self.tvm.tirx.IndexMap(
            list(index_map.initial_indices), [self._expr(e) for e in index_map.final_indices],
            None if inverse is None else self._index_map(inverse))


def apply_trace_incrementally(sch, trace, *, remove_postproc: bool = False) -> list[list]:
    """Apply a Trace to ``sch`` one ``apply_inst`` call per instruction, with the trace's own
    decisions; the same schedule as ``trace.apply_to_schedule(sch, remove_postproc)``.
    Returns each instruction's outputs on ``sch``."""
    translate = _Translator()
    applied = []
    for inst in trace.insts:
        kind = str(inst.kind.name)
        if remove_postproc and kind == "EnterPostproc":  # TVM's InstructionKind::IsPostproc
            break
        inputs = [translate(v, kind) for v in inst.inputs]
        outputs = apply_inst(sch, kind, inputs, list(inst.attrs), trace.get_decision(inst))
        translate.add(list(inst.outputs), outputs, kind)
        applied.append(outputs)
    return applied
