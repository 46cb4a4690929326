"""The driver of ``dragon datagen``: tasks in, committed records out, resumable.

``generate`` writes ``OUT/datagen.json`` (the run's settings and its task list) on the first
run and refuses an ``OUT`` that holds a different run; then it runs every task without a
committed summary on a pool (``LocalPool`` or ``RayPool``) and commits each result as it
arrives: MetaSchedule's JSON database files, the records, then the summary (see
``records.RecordStore``).  A run killed at any moment, ``kill -9`` included, continues when
rerun with the same command: committed tasks are not run again, and a task cut short left no
summary, so it runs again from the start (its measurements come back from the run's own cache).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dragon_dsl.files import write_atomic
from training.datagen.records import DataError, RecordStore, TaskSummary
from training.datagen.runner import TaskResult
from training.datagen.tasks import Task, family_of

__all__ = ["MANIFEST", "RunReport", "appended_specs", "check_manifest", "generate"]

MANIFEST = "datagen.json"
MANIFEST_VERSION = 1


@dataclass
class RunReport:
    """What one invocation did."""

    tasks: int = 0                 # in the run's task list
    skipped: int = 0               # already committed
    ran: int = 0
    failed: int = 0
    records: int = 0               # committed by this invocation
    correct: int = 0
    seconds: float = 0.0
    summaries: list[TaskSummary] = field(default_factory=list)

    @property
    def candidates_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def appended_specs(out: str) -> list[str]:
    """The workloads ``dragon datagen --append`` added to the run in ``out``, in the order they
    were added (none for a new run or a run never appended to); a later run of the same command
    includes them."""
    found = _read_manifest(os.path.join(out, MANIFEST))
    return list(found.get("appended", [])) if found else []


def _read_manifest(path: str) -> dict[str, Any] | None:
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a datagen manifest ({exc})") from None
    if not isinstance(found, dict) or not isinstance(found.get("appended", []), list):
        raise DataError(f"{path}: not a datagen manifest (expected an object whose "
                        "'appended' is a list of workload specs)")
    return found


def check_manifest(out: str, settings: dict[str, Any], tasks: list[Task],
                   appended: list[str] | None = None) -> None:
    """Write ``OUT/datagen.json``, or check that the one there describes the same run.

    ``appended``: the specs ``--append`` added to the command's own list (their tasks end
    ``tasks``).  A manifest whose appended specs and task list are a prefix of these, with the
    same settings, is the same run appended to again: it is rewritten (atomically) with the
    longer lists.  Anything else is another run, and refused."""
    path = os.path.join(out, MANIFEST)
    # As JSON reads it back (tuples become lists), so that it compares with the file.
    wanted = json.loads(json.dumps({"version": MANIFEST_VERSION, "settings": settings,
                                    "tasks": [t.key for t in tasks]}))
    if appended:
        wanted["appended"] = list(appended)
    found = _read_manifest(path)
    if found == wanted:
        return
    if found is not None and not _extends(wanted, found):
        changed = sorted(k for k in wanted if found.get(k) != wanted[k] and k != "appended")
        raise DataError(f"{out} holds a datagen run with other {' and '.join(changed)} "
                        f"({path}); rerun with the same command to continue it, or choose "
                        f"another --out")
    write_atomic(path, json.dumps(wanted, indent=1, sort_keys=True) + "\n")


def _extends(wanted: dict[str, Any], found: dict[str, Any]) -> bool:
    """Whether ``wanted`` is ``found`` with more tasks appended (same version and settings)."""
    if {k: v for k, v in found.items() if k not in ("tasks", "appended")} != \
            {k: v for k, v in wanted.items() if k not in ("tasks", "appended")}:
        return False
    old_tasks, old_specs = found.get("tasks", []), found.get("appended", [])
    new_specs = wanted.get("appended", [])
    added = len(wanted["tasks"]) - len(old_tasks)   # one task per appended spec, no other
    return (added > 0 and added == len(new_specs) - len(old_specs)
            and wanted["tasks"][:len(old_tasks)] == old_tasks
            and new_specs[:len(old_specs)] == old_specs)


def _commit(store: RecordStore, result: TaskResult) -> None:
    folder = os.path.join(store.root, "databases", result.summary.key)
    for name, text in result.database.items():
        write_atomic(os.path.join(folder, name), text)
    store.commit(result.summary, result.records)


def generate(tasks: list[Task], out: str, pool: Any, *, settings: dict[str, Any] | None = None,
             retry_failed: bool = False, progress: bool = True,
             on_task: Callable[[TaskSummary], None] | None = None,
             grow: int | None = None,
             order: Callable[[Task], float] | None = None,
             appended: list[str] | None = None,
             families: Sequence[str] | None = None) -> RunReport:
    """Run the tasks of ``tasks`` not yet committed in ``out`` on ``pool`` and commit them;
    ``grow``: only the first ``grow`` of those (a corpus grown by N workloads a run, the run's
    task list unchanged, so that the next run continues it); ``order``: a key that sorts the
    tasks to run, lowest first (stable: ties keep the list's order), e.g. a task's estimated
    work, so that a corpus grown a few workloads at a time measures the cheap ones first;
    ``appended``: the specs of the tasks ``--append`` added after the command's own (the last
    ones of ``tasks``), recorded in the manifest (``check_manifest``); ``families``: run only
    the tasks of these operator families this time (the list unchanged), e.g. to grow the
    families a corpus has fewest of."""
    from tqdm.auto import tqdm

    os.makedirs(out, exist_ok=True)
    check_manifest(out, settings or {}, tasks, appended)
    store = RecordStore(out)
    done = store.done()
    todo = [t for t in tasks if t.key not in done
            or (retry_failed and done[t.key].status == "failed")]
    report = RunReport(tasks=len(tasks), skipped=len(tasks) - len(todo))
    if families is not None:
        wanted = set(families)
        todo = [t for t in todo if family_of(t.workload) in wanted]
    if order is not None:
        todo = sorted(todo, key=order)
    if grow is not None:
        todo = todo[:grow]
    if not todo:
        return report
    start = time.perf_counter()
    bar = tqdm(total=len(todo), unit="task", desc="datagen", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)

    def on_result(task: Task, result: TaskResult) -> None:
        _commit(store, result)
        summary = result.summary
        report.ran += 1
        report.failed += summary.status == "failed"
        report.records += len(result.records)
        report.correct += summary.correct
        report.summaries.append(summary)
        elapsed = time.perf_counter() - start
        bar.set_postfix(records=report.records, correct=report.correct, failed=report.failed,
                        cand_per_s=f"{report.records / elapsed:.2f}", refresh=False)
        bar.update(1)
        if on_task is not None:
            on_task(summary)

    try:
        pool.run(todo, on_result)
    finally:
        bar.close()
        report.seconds = time.perf_counter() - start
    return report
