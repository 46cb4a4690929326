"""The apply stage of ``dragon check --workload``, in a worker process.

``dragon_dsl`` checks syntax and semantics itself; whether a script applies to a kernel needs
TVM's schedule primitives, which can abort the process, hang or take gigabytes on hostile
input.  So, as for ``dragon apply`` and ``dragon bench``, they run in a
``codegen.measure.worker.Worker`` within a time and memory limit.  The script is applied
statement by statement (``dragon_dsl.live.apply_script``), as the schedule-aware sampler applies
it: the first statement refused is the one reported, with the sampler's message.
``dragon_dsl`` reaches this module through the ``dragon.check_workload`` entry point, since it
may not import codegen.
"""

from __future__ import annotations

from typing import Any

from dragon_dsl import Diagnostic, DslSemanticError

__all__ = ["check_on_workload"]


def check_on_workload(texts: list[str], spec: str, target: str | None, *, timeout_s: float,
                      memory_mb: int) -> list[list[Diagnostic]]:
    """For each script (already clean of syntax and semantic errors), the ``apply``
    diagnostics of applying it to the workload ``spec``: empty when it applies.  A bad spec or
    target is a UsageError or ValueError; a worker that runs past ``timeout_s`` or above
    ``memory_mb`` MiB is a diagnostic of that script, and the next script gets a fresh worker.

    >>> check_on_workload(['block "C" -> C\\n'], "matmul(m=8,n=8,k=8)", None,
    ...                   timeout_s=300, memory_mb=4096)
    [[]]
    """
    from ..measure.protocol import Applied, ApplyJob, WorkloadData
    from ..measure.worker import Worker, WorkerError
    from ..targets import as_target, target_dict
    from .workloads import cli_workload

    wl = cli_workload(spec)
    tgt = target_dict(as_target(target or "llvm"))
    if not texts:
        return []
    data = WorkloadData.of(wl)
    results: list[list[Diagnostic]] = []
    with Worker(memory_limit_mb=memory_mb) as worker:
        for text in texts:
            try:
                reply: Any = worker.call(ApplyJob(data, text, tgt, stepwise=True),
                                         timeout=timeout_s)
            except WorkerError as exc:  # the worker is replaced for the next script
                results.append([Diagnostic("apply", f"checking against {wl.spec} did not "
                                                    f"finish: {exc}")])
                continue
            if isinstance(reply, Applied):
                results.append([])
                continue
            lines = text.split("\n")
            line = reply.line if reply.line and reply.line <= len(lines) else None
            located = DslSemanticError(reply.message, line=line, column=reply.column,
                                       source_line=lines[line - 1] if line else None)
            results.append([Diagnostic("apply", reply.message, line, reply.column,
                                       snippet=located.snippet)])
    return results
