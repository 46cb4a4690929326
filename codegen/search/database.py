"""MetaSchedule JSON databases written from scripts: what a tuned model leaves for TVM.

A ``DatabaseRecord`` is one task's best script and its measured latency; ``write_database``
commits each task's workload and the script's trace (``dragon_dsl.to_trace``, postprocessing
regenerated) as a ``TuningRecord``, as ``tune_relax`` would, so ``MetaScheduleApplyDatabase``
and ``relax.build`` pick the schedules up (``codegen.model_build``).

>>> write_database("model.database", [DatabaseRecord(task.workload, script, [4.1e-6])],
...                "llvm")                                             # doctest: +SKIP
1
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dragon_dsl

from ..targets import as_module, as_target

if TYPE_CHECKING:
    from ..targets import TargetLike

__all__ = ["DatabaseRecord", "read_database", "write_database"]


@dataclass(frozen=True)
class DatabaseRecord:
    """One task's schedule for the database."""

    workload: Any = field(metadata={"help": "the task (a Workload or IRModule with main)"})
    script: str = field(metadata={"help": "the Dragon script of its schedule"})
    run_secs: list[float] = field(metadata={"help": "its measured latencies, seconds"})


def _database(work_dir: str):
    from tvm.s_tir import meta_schedule as ms

    return ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")


def write_database(work_dir: str, records: list[DatabaseRecord], target: TargetLike) -> int:
    """Commit ``records`` to the MetaSchedule JSON database in ``work_dir`` (made when missing;
    records already there stay); returns how many were written."""
    from tvm.s_tir import meta_schedule as ms

    tgt = as_target(target)
    os.makedirs(work_dir, exist_ok=True)
    database = _database(work_dir)
    for record in records:
        mod = as_module(record.workload)
        trace = dragon_dsl.to_trace(record.script, workload=record.workload, target=tgt)
        entry = database.commit_workload(mod)
        database.commit_tuning_record(ms.database.TuningRecord(
            trace, entry, [float(s) for s in record.run_secs], tgt,
            ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
    return len(records)


def read_database(work_dir: str) -> list[tuple[Any, float]]:
    """Each tuning record of the database in ``work_dir``: its workload's IRModule and its
    mean latency in seconds (MetaSchedule's 1e10 for a failed candidate)."""
    records = _database(work_dir).get_all_tuning_records()
    return [(r.workload.mod, sum(float(s) for s in r.run_secs) / len(r.run_secs))
            for r in records]
