"""Applying a Dragon script to a workload: the scheduled IRModule, or the language's error at the
statement that does not fit the kernel."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dragon_dsl

from .targets import schedule_of

if TYPE_CHECKING:
    from .targets import TargetLike
    from .workloads.workload import WorkloadLike

__all__ = ["apply", "apply_trace"]


def apply(script: str, workload: WorkloadLike, target: TargetLike = "llvm"):
    """The workload scheduled by ``script`` (``dragon_dsl.to_schedule``'s module).

    Raises ``DslSyntaxError`` for text that is not a script, and ``DslSemanticError`` (with
    line and column) when a name, loop or factor does not fit the kernel.  ``target`` matters
    only for ``postproc auto``, which regenerates the postprocessing for it.

    >>> from codegen.workloads import workload
    >>> mod = apply('block "C" -> b0', workload("matmul(m=8,n=8,k=8)"))
    >>> sorted(str(g.name_hint) for g in mod.get_global_vars())
    ['main']
    """
    return dragon_dsl.to_schedule(script, workload=workload, target=target).mod


def apply_trace(trace, workload: WorkloadLike):
    """The workload scheduled by a TVM Trace (as MetaSchedule replays a record)."""

    sch = schedule_of(workload)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod
