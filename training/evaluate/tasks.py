"""The tasks a model is evaluated on: the distinct prompts of a ``dragon datagen`` split.

A construction task is a workload; a refinement task is a workload and a script to improve.
Each task also carries the best script MetaSchedule's search found for its workload (the
rank-0 construction completion), so that models are compared with the search that made the
data, re-measured in the same session.  Prompts are written again for the evaluation target
when it is measured (``training.prompts.templates``); the refinement prompt then carries the start
script's latency measured in this session, not the one recorded in the dataset.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dragon_dsl.errors import DragonError

__all__ = ["KINDS", "EvalTask", "TaskError", "load_tasks"]

KINDS = ("construction", "refinement")


class TaskError(DragonError):
    """The evaluation tasks cannot be read: a missing split, dataset or column."""


@dataclass(frozen=True)
class EvalTask:
    """One prompt to evaluate: ``id`` is stable across runs (resume keys on it)."""

    id: str
    kind: str                       # "construction" or "refinement"
    workload: str                   # the workload spec (codegen.workloads)
    family: str
    start_script: str | None = None  # refinement: the script to improve
    metaschedule_script: str | None = None  # the search's best script for the workload

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "workload": self.workload,
                "family": self.family, "start_script": self.start_script,
                "metaschedule_script": self.metaschedule_script}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def load_tasks(data: str | Path, split: str = "test", kinds: tuple[str, ...] = KINDS, *,
               max_tasks: int | None = None) -> list[EvalTask]:
    """The distinct tasks of ``split`` in a ``dragon datagen`` output, construction first;
    ``max_tasks`` caps each kind (the first ones in the dataset's order)."""
    from datasets import load_from_disk

    root = Path(data)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise TaskError(f"Expected kinds among {KINDS} but got {unknown}")
    best = _metaschedule_best(root)
    tasks: list[EvalTask] = []
    for kind in kinds:
        path = root / kind
        if not (path / "dataset_dict.json").is_file():
            raise TaskError(f"no {kind} dataset in {root}: expected {path}/ written by "
                            "`dragon datagen`")
        try:
            rows = load_from_disk(str(path))[split]
        except KeyError:
            raise TaskError(f"the {kind} dataset in {path} has no {split!r} split") from None
        seen: set[str] = set()
        kept: list[EvalTask] = []
        for row in rows:
            start = row.get("start_script") if kind == "refinement" else None
            key = row["workload"] + "\0" + (start or "")
            if key in seen:
                continue
            seen.add(key)
            task_id = f"{kind}/{row['workload_id']}" + (f"/{_digest(start)}" if start else "")
            kept.append(EvalTask(task_id, kind, row["workload"], row["family"], start,
                                 best.get(row["workload"])))
        tasks += kept[:max_tasks] if max_tasks else kept
    return tasks


def _metaschedule_best(root: Path) -> dict[str, str]:
    """Workload spec -> the lowest-latency verified construction completion, any split."""
    from datasets import load_from_disk

    path = root / "construction"
    if not (path / "dataset_dict.json").is_file():
        return {}
    best: dict[str, tuple[float, str]] = {}
    for rows in load_from_disk(str(path)).values():
        for row in rows:
            latency = row.get("latency_s")
            if latency is None or not row.get("verified", True):
                continue
            held = best.get(row["workload"])
            if held is None or latency < held[0]:
                best[row["workload"]] = (latency, row["script"])
    return {w: script for w, (_, script) in best.items()}
