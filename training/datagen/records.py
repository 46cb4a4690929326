"""Measured candidates as records, and the directory that holds them safely.

A ``Record`` is one candidate MetaSchedule proposed (or a tuning database held) and what our
measurement made of it: failed and incorrect candidates included, since evaluation and RL need
the negatives.  Records are written one file per task (a workload searched on a target), and a
task is complete only when its summary file exists:

    OUT/records/<task key>.jsonl    the task's records, one JSON object per line
    OUT/tasks/<task key>.json       the task's summary, written after the records: the commit

Both are written to a temporary file and renamed into place, so a run killed at any moment (kill
-9 included) leaves either a complete task or none, and a rerun does exactly the tasks without a
summary.  ``RecordStore.read`` checks every line and names the file and line of any it cannot
use.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from dragon_dsl.errors import DragonError
from dragon_dsl.files import write_atomic

__all__ = ["RECORD_VERSION", "DataError", "Record", "RecordStore", "TaskSummary"]

RECORD_VERSION = 1


class DataError(DragonError):
    """A dataset directory or file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Record:
    """One measured candidate.

    ``status`` is a ``codegen.measure.Status`` value; only ``correct`` records have a latency.
    ``verified`` is False for records taken as-is from a tuning database (MetaSchedule timed
    them, but nobody compared their output with the reference).
    """

    workload: str                  # the workload's spec, e.g. "matmul(m=64,n=64,k=64)"
    workload_id: str               # codegen.workloads.Workload.identity (structural hash)
    family: str                    # operator family, or "model"/"file"/"database"
    target: str                    # "llvm" or "cuda" (training.prompts.templates.target_name)
    target_json: str               # the full target, as JSON
    device: str                    # where it was measured
    rules: str                     # MetaSchedule rule set (codegen.targets.RULE_SETS)
    source: str                    # "search" or "database"
    round: int                     # search round (0 first); database order for imports
    index: int                     # position within the task, in measurement order
    script: str | None             # canonical Dragon script (None: the trace did not encode)
    status: str
    stage: str = ""
    message: str = ""
    latency_s: float | None = None
    spread_s: float | None = None
    verified: bool = True
    workload_script: str | None = None  # TVMScript, for workloads without a spec (databases)
    version: int = RECORD_VERSION

    @property
    def correct(self) -> bool:
        return self.status == "correct" and self.latency_s is not None

    def to_json(self) -> str:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        return json.dumps(data, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        known = {f.name for f in fields(cls)}
        missing = [f.name for f in fields(cls)
                   if f.name not in data and f.default is MISSING]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)}")
        if data.get("version", RECORD_VERSION) != RECORD_VERSION:
            raise ValueError(f"record version {data.get('version')!r}, expected {RECORD_VERSION}")
        record = cls(**{k: v for k, v in data.items() if k in known})
        if record.status == "correct" and not (
                isinstance(record.latency_s, int | float) and record.latency_s > 0):
            raise ValueError(f"a correct record needs a positive latency_s, got "
                             f"{record.latency_s!r}")
        return record


@dataclass(frozen=True)
class TaskSummary:
    """What happened to one task; its file is the task's commit marker."""

    key: str
    workload: str
    target: str
    status: str                    # "done", "time_limit" (stopped early, records kept), "failed"
    records: int = 0
    correct: int = 0
    best_latency_s: float | None = None
    seconds: float = 0.0
    attempts: int = 1
    error: str = ""
    worker: str = ""               # host:pid that ran it
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class RecordStore:
    """The ``records/`` and ``tasks/`` folders of a datagen output directory."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.records_dir = os.path.join(root, "records")
        self.tasks_dir = os.path.join(root, "tasks")

    def _paths(self, key: str) -> tuple[str, str]:
        return (os.path.join(self.records_dir, f"{key}.jsonl"),
                os.path.join(self.tasks_dir, f"{key}.json"))

    def done(self) -> dict[str, TaskSummary]:
        """Committed tasks by key (failed ones included)."""
        out: dict[str, TaskSummary] = {}
        if not os.path.isdir(self.tasks_dir):
            return out
        for name in sorted(os.listdir(self.tasks_dir)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = os.path.join(self.tasks_dir, name)
            try:
                with open(path, encoding="utf-8") as f:
                    summary = TaskSummary(**json.load(f))
            except (OSError, ValueError, TypeError) as exc:
                raise DataError(f"{path}: not a task summary ({exc}); delete it to run the "
                                f"task again") from None
            out[summary.key] = summary
        return out

    def commit(self, summary: TaskSummary, records: list[Record]) -> None:
        """Write a task's records, then its summary (the commit)."""
        records_path, task_path = self._paths(summary.key)
        write_atomic(records_path, "".join(r.to_json() + "\n" for r in records))
        write_atomic(task_path, summary.to_json() + "\n")

    def forget(self, key: str) -> None:
        """Remove a committed task (its summary first), so that it runs again."""
        for path in reversed(self._paths(key)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def read(self, key: str) -> list[Record]:
        """The records of a committed task; a DataError naming file and line for a bad one."""
        path = self._paths(key)[0]
        return list(read_records(path))

    def all_records(self) -> Iterator[Record]:
        """Every record of every committed task, in task-key order."""
        for key, summary in sorted(self.done().items()):
            if summary.status != "failed":
                yield from self.read(key)


def read_records(path: str) -> Iterator[Record]:
    """Records from a JSONL file, each line checked."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise DataError(f"{path}: cannot read records ({exc.strerror or exc})") from None
    with f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            if not line.endswith("\n"):
                raise DataError(f"{path}:{number}: the last line is cut short (a partial write)")
            try:
                yield Record.from_dict(json.loads(line))
            except (ValueError, TypeError) as exc:
                raise DataError(f"{path}:{number}: not a record ({exc})") from None
