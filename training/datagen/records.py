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

A store kept for long (the repository's corpus) packs its committed tasks into shards:

    OUT/shards/<n>.jsonl.gz         one committed task a line: its summary and its records

``RecordStore.pack`` writes a shard of the loose tasks (whole, then renamed into place), then
removes their loose files; a task found both in a shard and loose (a pack killed between the
two) is the same task, read once.  Reading is the same either way.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from dragon_dsl.errors import DragonError
from dragon_dsl.files import write_atomic

__all__ = ["RECORD_VERSION", "DataError", "Record", "RecordStore", "TaskSummary", "read_shard",
           "shard_paths"]

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
    """The ``records/``, ``tasks/`` and ``shards/`` folders of a datagen output directory."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.records_dir = os.path.join(root, "records")
        self.tasks_dir = os.path.join(root, "tasks")
        self.shards_dir = os.path.join(root, "shards")
        self._shards: dict[str, _Packed] | None = None

    def _paths(self, key: str) -> tuple[str, str]:
        return (os.path.join(self.records_dir, f"{key}.jsonl"),
                os.path.join(self.tasks_dir, f"{key}.json"))

    def _loose(self) -> dict[str, TaskSummary]:
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

    def packed(self) -> dict[str, _Packed]:
        """The tasks held in shards, by key (read once per store)."""
        if self._shards is None:
            self._shards = {}
            for path in shard_paths(self.shards_dir):
                for packed in read_shard(path):
                    self._shards.setdefault(packed.summary.key, packed)
        return self._shards

    def done(self) -> dict[str, TaskSummary]:
        """Committed tasks by key (failed ones included), loose or in a shard."""
        out = {key: packed.summary for key, packed in self.packed().items()}
        out.update(self._loose())
        return dict(sorted(out.items()))

    def commit(self, summary: TaskSummary, records: list[Record]) -> None:
        """Write a task's records, then its summary (the commit)."""
        records_path, task_path = self._paths(summary.key)
        write_atomic(records_path, "".join(r.to_json() + "\n" for r in records))
        write_atomic(task_path, summary.to_json() + "\n")

    def forget(self, key: str) -> None:
        """Remove a loosely committed task (its summary first), so that it runs again."""
        if key in self.packed():
            raise DataError(f"{self.root}: task {key} is packed in {self.packed()[key].path}; "
                            "a packed task is kept")
        for path in reversed(self._paths(key)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def read(self, key: str) -> list[Record]:
        """The records of a committed task; a DataError naming file and line for a bad one."""
        if os.path.exists(self._paths(key)[1]) or key not in self.packed():
            return list(read_records(self._paths(key)[0]))
        packed = self.packed()[key]
        return list(packed.read())

    def all_records(self) -> Iterator[Record]:
        """Every record of every committed task, in task-key order."""
        for key, summary in self.done().items():
            if summary.status != "failed":
                yield from self.read(key)

    def pack(self, per_shard: int = 100) -> list[str]:
        """Move the loose committed tasks, in key order, into shards of at most ``per_shard``
        tasks (the last shard filled up first, then new ones); returns the shards written.
        Each shard is whole before any loose file is removed, so a kill at any moment loses
        no task."""
        if per_shard < 1:
            raise ValueError(f"Expected per_shard >= 1 but got {per_shard}")
        packed = self.packed()
        loose = self._loose()
        written: list[str] = []
        # A task both loose and packed: the same task where a pack was killed before its
        # clean-up, a newer one where --retry-failed ran a packed failed task again (its shard
        # is written again with the new one).
        newer = {k for k in loose if k in packed and packed[k].summary != loose[k]}
        for path in sorted({packed[k].path for k in newer}):
            lines = [_line(loose[p.summary.key], self._loose_records(p.summary.key))
                     if p.summary.key in newer else _line(p.summary, p.records)
                     for p in read_shard(path)]
            _write_shard(path, lines)
            written.append(path)
        self._shards = None
        for key in [k for k in loose if k in packed]:
            self._remove_loose(key)
        keys = [k for k in loose if k not in packed]
        paths = shard_paths(self.shards_dir)
        while keys:
            if paths and len(held := list(read_shard(paths[-1]))) < per_shard:
                path, lines = paths.pop(), [_line(p.summary, p.records) for p in held]
            else:
                number = int(os.path.basename(paths[-1]).split(".")[0]) + 1 if paths else 0
                path, lines = os.path.join(self.shards_dir, f"{number:05d}.jsonl.gz"), []
            taken, keys = keys[:per_shard - len(lines)], keys[per_shard - len(lines):]
            lines += [_line(loose[k], self._loose_records(k)) for k in taken]
            _write_shard(path, lines)
            self._shards = None
            for key in taken:
                self._remove_loose(key)
            written.append(path)
            paths = shard_paths(self.shards_dir)
        return written

    def _loose_records(self, key: str) -> list[Any]:
        return [json.loads(r.to_json()) for r in read_records(self._paths(key)[0])]

    def _remove_loose(self, key: str) -> None:
        for path in reversed(self._paths(key)):  # the summary first: never a half task
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


@dataclass(frozen=True)
class _Packed:
    """One task in a shard: its summary, and its records as read (checked on ``read``)."""

    path: str
    line: int
    summary: TaskSummary
    records: list[Any]

    def read(self) -> Iterator[Record]:
        for i, data in enumerate(self.records):
            try:
                yield Record.from_dict(data)
            except (ValueError, TypeError) as exc:
                raise DataError(f"{self.path}:{self.line}: record {i} of task "
                                f"{self.summary.key} is not a record ({exc})") from None


def _line(summary: TaskSummary, records: list[Any]) -> str:
    return json.dumps({"summary": asdict(summary), "records": records}, sort_keys=True,
                      allow_nan=False)


def _write_shard(path: str, lines: list[str]) -> None:
    # mtime=0: the same tasks give the same bytes (a shard kept in git stays unchanged).
    write_atomic(path, gzip.compress("".join(line + "\n" for line in lines).encode(),
                                     compresslevel=9, mtime=0))


def shard_paths(folder: str) -> list[str]:
    """The shards of a ``shards/`` folder, in the order they were written."""
    if not os.path.isdir(folder):
        return []
    return [os.path.join(folder, n) for n in sorted(os.listdir(folder))
            if n.endswith(".jsonl.gz") and not n.startswith(".")]


def read_shard(path: str) -> Iterator[_Packed]:
    """The tasks of one shard, each line checked; a DataError naming the file and line."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a gzip shard of tasks ({exc}); restore it from version "
                        "control") from None
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
            summary = TaskSummary(**data["summary"])
            records = data["records"]
            if not isinstance(records, list):
                raise TypeError("records is not a list")
        except (ValueError, TypeError, KeyError) as exc:
            raise DataError(f"{path}:{number}: not a packed task ({exc})") from None
        yield _Packed(path, number, summary, records)


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
