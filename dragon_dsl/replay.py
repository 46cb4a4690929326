"""Replaying a decoded script on a workload: locating the statement where TVM refuses it, and
regenerating the deterministic postprocessing that ``postproc auto SET`` stands for."""

from __future__ import annotations

from typing import Any

from .errors import DragonError, DslSemanticError
from .tvm_bridge import Inst
from .tvm_support import as_module, as_target, import_tensor_intrinsics, tvm_message

__all__ = ["apply_insts", "loop_names_of", "regenerate_postproc"]


def _locate(inst: Inst, lines: list[str], message: str) -> DslSemanticError:
    line = inst.line
    return DslSemanticError(
        message, line=line, column=inst.column,
        source_line=lines[line - 1] if line and line <= len(lines) else None)


def apply_insts(insts: list[Inst], trace, workload: Any, source: str | None = None):
    """Apply a decoded trace to a fresh schedule of the workload; a refusal becomes a
    DslSemanticError at the statement that caused it.  Returns the Schedule."""
    from tvm.s_tir.schedule import Schedule

    lines = (source or "").split("\n")
    mod = as_module(workload)
    sch = Schedule(mod, error_render_level="detail")  # debug checks off, as in MetaSchedule
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
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(as_module(workload))
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
    if product != extent or any(int(f) < 1 for f in decision):
        raise _locate(inst, lines,
                      f"tile factors {[int(f) for f in decision]} multiply to {product}, but the "
                      f"loop {loop.loop_var.name!r} has extent {extent}")


def regenerate_postproc(prefix_trace, workload: Any, target: Any, postproc_set: str):
    """Run a postprocessor set on the schedule of the pre-postproc trace, as MetaSchedule does
    after sampling; returns the full trace (prefix, EnterPostproc, postprocessing)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    mod = as_module(workload)
    tgt = as_target(target)
    import_tensor_intrinsics()
    context = ms.TuneContext(
        mod=mod, target=tgt,
        space_generator=ms.space_generator.PostOrderApply(
            sch_rules=[], postprocs=postproc_set, mutator_probs={}),
        task_name="main", num_threads=1)
    sch = Schedule(mod)
    prefix_trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    for postproc in context.space_generator.postprocs:
        if not postproc.apply(sch):
            raise DragonError(f"postprocessor {type(postproc).__name__} of the "
                              f"{postproc_set!r} set rejects this schedule")
    return sch.trace
