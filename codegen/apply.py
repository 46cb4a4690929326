"""Applying a Dragon script to a workload: the scheduled IRModule, or the language's error at the
statement that does not fit the kernel."""

from __future__ import annotations

from typing import Any

from dragon_dsl.replay import as_module

__all__ = ["apply", "apply_trace"]


def apply(script: str, workload: Any, target: Any = "llvm"):
    """The workload scheduled by ``script``.

    Raises ``DslSyntaxError`` for text that is not a script, and ``DslSemanticError`` (with
    line and column) when a name, loop or factor does not fit the kernel.  ``target`` matters
    only for ``postproc auto``, which regenerates the postprocessing for it.

    >>> from codegen.workloads import workload
    >>> mod = apply('block "C" -> b0', workload("matmul(m=8,n=8,k=8)"))
    >>> sorted(str(g.name_hint) for g in mod.get_global_vars())
    ['main']
    """
    from dragon_dsl.codec import decode_program
    from dragon_dsl.parser import parse
    from dragon_dsl.replay import apply_insts, regenerate_postproc

    program = parse(script)
    decoded = decode_program(program)
    if decoded.errors:
        raise decoded.errors[0]
    from dragon_dsl.api import _build

    trace = _build(decoded.insts)
    sch = apply_insts(decoded.insts, trace, workload, program.source)
    if decoded.postproc_set is None:
        return sch.mod
    full = regenerate_postproc(trace, workload, target, decoded.postproc_set)
    return apply_trace(full, workload)


def apply_trace(trace, workload: Any):
    """The workload scheduled by a TVM Trace (as MetaSchedule replays a record)."""
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(as_module(workload))
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod
