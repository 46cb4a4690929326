"""One task: search a workload on a target, measuring with a long-lived ``Evaluator``.

``TaskRunner`` keeps one ``Evaluator`` per target for its whole life (starting workers and TVM
costs seconds), so a pool process or a Ray worker runs task after task with it.  A task stops at
its time limit after the round in progress, keeping the records measured so far (status
``time_limit``); the pool kills a task that overruns that by far.  The result is plain data
(records, a summary and MetaSchedule's own JSON database files), so it crosses process and
machine boundaries and the driver alone writes the output directory.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from codegen.measure import Evaluator, MeasureConfig
from codegen.search.tune import search
from codegen.targets import as_target, target_dict
from codegen.workloads import workload
from training.datagen.records import Record, TaskSummary
from training.datagen.tasks import Task, family_of
from training.prompts.templates import target_name

if TYPE_CHECKING:
    from codegen.targets import TargetLike

__all__ = ["RunnerSettings", "TaskResult", "TaskRunner", "database_files"]

DATABASE_FILES = ("database_workload.json", "database_tuning_record.json")


@dataclass(frozen=True)
class RunnerSettings:
    """How a runner measures: shared by every task of a run."""

    measure: MeasureConfig = field(default_factory=MeasureConfig)
    builders: int = 1
    cache: str | None = None        # the measurement cache file (None: the default one)
    rpc: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"measure": asdict(self.measure), "builders": self.builders, "cache": self.cache,
                "rpc": self.rpc}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunnerSettings:
        return cls(MeasureConfig(**data["measure"]), data["builders"], data["cache"],
                   data["rpc"])


@dataclass
class TaskResult:
    """What a task produced: JSON-safe, to be committed by the driver."""

    summary: TaskSummary
    records: list[Record]
    database: dict[str, str]        # MetaSchedule's JSON database files, by name

    def to_dict(self) -> dict[str, Any]:
        return {"summary": asdict(self.summary), "records": [asdict(r) for r in self.records],
                "database": self.database}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskResult:
        return cls(TaskSummary(**data["summary"]),
                   [Record.from_dict(r) for r in data["records"]], data["database"])


def database_files(folder: str) -> dict[str, str]:
    out = {}
    for name in DATABASE_FILES:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                out[name] = f.read()
    return out


class TaskRunner:
    """Runs tasks one after another, with one Evaluator per target."""

    def __init__(self, settings: RunnerSettings | None = None) -> None:
        self.settings = settings or RunnerSettings()
        self._evaluators: dict[str, Evaluator] = {}

    def evaluator(self, target: TargetLike) -> Evaluator:
        key = json.dumps(target_dict(as_target(target)), sort_keys=True)
        if key not in self._evaluators:
            self._evaluators[key] = Evaluator(
                target, builders=self.settings.builders, config=self.settings.measure,
                cache=self.settings.cache, rpc=self.settings.rpc)
        return self._evaluators[key]

    def run(self, task: Task) -> TaskResult:
        start = time.perf_counter()
        wl = workload(task.workload)
        tgt = as_target(task.target)
        evaluator = self.evaluator(task.target)
        base = {"workload": task.workload, "workload_id": wl.identity,
                "family": family_of(task.workload), "target": target_name(tgt),
                "target_json": json.dumps(target_dict(tgt), sort_keys=True),
                "device": evaluator.device, "rules": task.rules, "source": "search"}
        records: list[Record] = []
        status = "done"
        with tempfile.TemporaryDirectory(prefix="dragon-datagen-") as work_dir:
            for rnd in search(wl, tgt, evaluator, task.search, rules=task.rules,
                              work_dir=work_dir):
                for script, outcome in zip(rnd.scripts, rnd.outcomes, strict=True):
                    records.append(Record(
                        **base, round=rnd.index, index=len(records), script=script,
                        status=outcome.status.value, stage=outcome.stage,
                        message=outcome.message[:2000], latency_s=outcome.latency_s,
                        spread_s=outcome.spread_s))
                if time.perf_counter() - start > task.time_limit_s:
                    status = "time_limit"
                    break
            database = database_files(work_dir)
        correct = [r.latency_s for r in records if r.correct]
        summary = TaskSummary(
            key=task.key, workload=task.workload, target=base["target"], status=status,
            records=len(records), correct=len(correct),
            best_latency_s=min(correct) if correct else None,
            seconds=round(time.perf_counter() - start, 3),
            worker=f"{socket.gethostname()}:{os.getpid()}")
        return TaskResult(summary, records, database)

    def close(self) -> None:
        for evaluator in self._evaluators.values():
            evaluator.close()
        self._evaluators.clear()
