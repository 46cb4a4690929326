"""Replaying a decoded script on a workload: locating the statement where TVM refuses it, and
regenerating the deterministic postprocessing that ``postproc auto SET`` stands for."""

from __future__ import annotations

from typing import Any

from .errors import DragonError, DslSemanticError, TraceError
from .tvm_bridge import Inst, plain_json, value_from_tvm
from .tvm_support import (
    as_module,
    import_tensor_intrinsics,
    postprocessors,
    schedule_of,
    tvm_message,
    uses_tensor_intrinsics,
)

__all__ = ["apply_insts", "loop_names_of", "plain_json", "regenerate_postproc",
           "replay_exactly", "replay_tvm_json"]


def _locate(inst: Inst, lines: list[str], message: str) -> DslSemanticError:
    line = inst.line
    return DslSemanticError(
        message, line=line, column=inst.column,
        source_line=lines[line - 1] if line and line <= len(lines) else None)


def apply_insts(insts: list[Inst], trace, workload: Any, source: str | None = None):
    """Apply a decoded trace to a fresh schedule of the workload; a refusal becomes a
    DslSemanticError at the statement that caused it.  Returns the Schedule."""

    lines = (source or "").split("\n")
    mod = as_module(workload)
    sch = schedule_of(mod, error_render_level="detail")  # debug checks off, as in MetaSchedule
    position = {"index": -1}
    found: list[DslSemanticError] = []

    def provider(inst, inputs, attrs, decision):
        position["index"] += 1
        current = insts[position["index"]]
        if current.kind in ("GetLoops", "GetChildBlocks"):
            try:
                _check_count(sch, inputs[0], current, lines)
            except DslSemanticError as exc:
                found.append(exc)
                raise
        if current.kind == "SamplePerfectTile" and decision is not None:
            try:
                _check_tile(sch, inputs[0], decision, current, lines)
            except DslSemanticError as exc:
                found.append(exc)  # TVM's FFI would wrap it; hand it over this way
                raise
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=False, decision_provider=provider)
    except Exception as exc:  # noqa: BLE001  TVM raises ScheduleError and friends
        if found:
            raise found[0] from None
        index = max(position["index"], 0)
        inst = insts[index] if index < len(insts) else Inst("?", [], [])
        raise _locate(inst, lines, f"the workload refuses {inst.kind}: {tvm_message(exc)}") \
            from None
    return sch


def loop_names_of(trace, workload: Any) -> dict[int, list[str]] | None:
    """For each GetLoops instruction (by index), the names its loops have in the workload at
    that point of the schedule; None when the trace does not replay."""

    sch = schedule_of(workload)
    names: dict[int, list[str]] = {}
    position = {"index": -1}

    def provider(inst, inputs, attrs, decision):
        position["index"] += 1
        if inst.kind.name == "GetLoops":
            names[position["index"]] = [str(sch.get(loop).loop_var.name)
                                        for loop in sch.get_loops(inputs[0])]
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=False, decision_provider=provider)
    except Exception:  # noqa: BLE001  naming is a nicety; the encoder falls back to l<N>
        return None
    return names


def _decision_text(decision, kind: str) -> str:
    from .printer import format_value

    if decision is None:
        return "none"
    return format_value(value_from_tvm(decision, lambda obj: None, kind))


def _first_changed_decision(original, replayed) -> None:
    """TVM's replay re-samples a decision that does not fit the workload (a tile whose factors
    do not multiply to the loop's extent): the first such instruction is a TraceError."""
    if len(original.insts) != len(replayed.insts):
        raise TraceError(f"the trace has {len(original.insts)} instructions but replays as "
                         f"{len(replayed.insts)} on the workload")
    for index, (a, b) in enumerate(zip(original.insts, replayed.insts, strict=True)):
        kind = str(a.kind.name)
        was, now = original.get_decision(a), replayed.get_decision(b)
        if (was is None) != (now is None) or \
                (was is not None and _decision_text(was, kind) != _decision_text(now, kind)):
            raise TraceError(
                f"instruction {index} ({kind}) does not replay on the workload: its decision "
                f"{_decision_text(was, kind)} does not fit, and TVM would replace it by "
                f"{_decision_text(now, kind)} (is this the trace's workload?)")


def _needs_intrinsics(kinds) -> None:
    if "Tensorize" in kinds:
        import_tensor_intrinsics()


def replay_exactly(trace, workload: Any) -> dict[int, list[str]]:
    """Replay a Trace on the workload and check that it replays exactly: TraceError naming the
    first instruction that TVM refuses or whose decision it changes.  Returns, for each
    GetLoops instruction (by index), the names its loops have in the workload."""

    _needs_intrinsics({str(inst.kind.name) for inst in trace.insts})
    sch = schedule_of(workload)
    position = {"index": -1}

    def provider(inst, inputs, attrs, decision):
        position["index"] += 1
        return decision

    try:
        trace.apply_to_schedule(sch, remove_postproc=False, decision_provider=provider)
    except Exception as exc:  # noqa: BLE001  TVM raises ScheduleError and friends
        index = max(position["index"], 0)
        kind = str(trace.insts[index].kind.name) if index < len(trace.insts) else "?"
        raise TraceError(f"instruction {index} ({kind}) does not replay on the workload: "
                         f"{tvm_message(exc)}") from None
    _first_changed_decision(trace, sch.trace)
    # Naming asks the schedule for loops, which a traced schedule records: a second replay.
    return loop_names_of(trace, workload) or {}


def replay_tvm_json(data, workload: Any):
    """The Trace that TVM's own trace JSON (a MetaSchedule database record, with plain numbers)
    stands for: TVM's replay on the workload gives the values their types.  The replay must be
    exact: TraceError naming the first instruction TVM refuses or whose decision it changes."""
    from tvm.s_tir.schedule import Trace

    from .tvm_bridge import json_preview

    if not (isinstance(data, list) and len(data) == 2 and isinstance(data[0], list)
            and isinstance(data[1], list)):
        raise TraceError(f"trace JSON must be [instructions, decisions] but got "
                         f"{json_preview(data)}")
    _needs_intrinsics({entry[0] for entry in data[0]
                       if isinstance(entry, list) and entry and isinstance(entry[0], str)})
    mod = as_module(workload)

    def replay(insts):
        sch = schedule_of(mod)
        Trace.apply_json_to_schedule([insts, [d for d in data[1] if isinstance(d, list)
                                              and d and isinstance(d[0], int)
                                              and d[0] < len(insts)]], sch)
        return sch

    try:
        sch = replay(data[0])
    except Exception as exc:  # noqa: BLE001  TVM's error types
        # Prefixes that replay are monotone: the first failing instruction by bisection.
        low, high = 0, len(data[0])  # the prefix of `low` instructions replays
        while high - low > 1:
            middle = (low + high) // 2
            try:
                replay(data[0][:middle])
                low = middle
            except Exception:  # noqa: BLE001
                high = middle
        entry = data[0][low] if low < len(data[0]) else None
        kind = entry[0] if isinstance(entry, list) and entry else "?"
        raise TraceError(f"instruction {low} ({str(kind)[:40]}) does not replay on the "
                         f"workload: {tvm_message(exc)}") from None
    plain = plain_json(sch.trace.as_json())
    given = {d[0]: plain_json(d[1]) for d in data[1] if isinstance(d, list) and len(d) == 2}
    for index, decision in sorted(plain[1]):
        if given.get(index) != decision:
            kind = plain[0][index][0] if index < len(plain[0]) else "?"
            raise TraceError(
                f"instruction {index} ({kind}) does not replay on the workload: its decision "
                f"{given.get(index)} does not fit, and TVM would replace it by {decision} "
                "(is this the trace's workload?)")
    return sch.trace


def _check_count(sch, parent_rv, inst: Inst, lines: list[str]) -> None:
    """``loops B -> ...`` and ``children X -> ...`` must name exactly what is there."""
    if inst.kind == "GetLoops":
        found = [str(sch.get(loop).loop_var.name) for loop in sch.get_loops(parent_rv)]
        what = f"block {sch.get(parent_rv).name_hint!r} has {len(found)} loops"
    else:
        found = [str(sch.get(block).name_hint) for block in sch.get_child_blocks(parent_rv)]
        what = f"it has {len(found)} child blocks"
    if len(found) != len(inst.outputs):
        statement = "loops" if inst.kind == "GetLoops" else "children"
        raise _locate(inst, lines, f"`{statement}` names {len(inst.outputs)} but {what} "
                                   f"({', '.join(found)})")


def _check_tile(sch, loop_rv, decision, inst: Inst, lines: list[str]) -> None:
    import tvm

    loop = sch.get(loop_rv)
    if not isinstance(loop.extent, tvm.tirx.IntImm):
        return
    extent = int(loop.extent.value)
    product = 1
    for factor in decision:
        product *= int(factor)
    factors = [int(f) for f in decision]
    shown = str(factors) if len(factors) <= 12 else \
        f"[{', '.join(map(str, factors[:8]))}, ..., {factors[-1]}] ({len(factors)} factors)"
    if any(f < 1 for f in factors):
        raise _locate(inst, lines, f"tile factors {shown}: every factor must be positive")
    if product != extent:
        raise _locate(inst, lines,
                      f"tile factors {shown} multiply to {product}, but the "
                      f"loop {loop.loop_var.name!r} has extent {extent}")


def regenerate_postproc(prefix_trace, workload: Any, target: Any, postproc_set: str):
    """Run a postprocessor set on the schedule of the pre-postproc trace, as MetaSchedule does
    after sampling; returns the full trace (prefix, EnterPostproc, postprocessing)."""
    mod = as_module(workload)
    sch = schedule_of(mod)
    needs = uses_tensor_intrinsics(prefix_trace)
    if needs:
        import_tensor_intrinsics()  # before the replay: a Tensorize looks its intrinsic up
    prefix_trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    for postproc in postprocessors(mod, target, postproc_set, intrinsics=needs):
        if not postproc.apply(sch):
            raise DragonError(f"postprocessor {type(postproc).__name__} of the "
                              f"{postproc_set!r} set rejects this schedule")
    return sch.trace
