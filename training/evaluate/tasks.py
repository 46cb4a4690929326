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
import random
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
               max_tasks: int | None = None,
               families: tuple[str, ...] | None = None,
               sample: int | None = None, seed: int = 0) -> list[EvalTask]:
    """The distinct tasks of ``split`` in a ``dragon datagen`` output, construction first;
    ``families``: only the workloads of these operator families (None: all); ``max_tasks``
    caps each kind (the first ones in the dataset's order; None: all); ``sample`` draws that
    many of each kind at random instead (``random.Random(seed)``; kept in the dataset's
    order): the first ones of a dataset written workload by workload are not a fair part."""
    root = Path(data)
    if max_tasks is not None and max_tasks < 1:
        raise TaskError(f"Expected max_tasks >= 1 (None for all tasks) but got "
                        f"max_tasks={max_tasks}")
    if sample is not None and sample < 1:
        raise TaskError(f"Expected sample >= 1 (None for all tasks) but got sample={sample}")
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
        splits = _load(path)
        if split not in splits:
            raise TaskError(f"the {kind} dataset in {path} has no {split!r} split")
        seen: set[str] = set()
        kept: list[EvalTask] = []
        for row in _rows(path, splits[split]):
            if families is not None and row["family"] not in families:
                continue
            start = row.get("start_script") if kind == "refinement" else None
            key = row["workload"] + "\0" + (start or "")
            if key in seen:
                continue
            seen.add(key)
            task_id = f"{kind}/{row['workload_id']}" + (f"/{_digest(start)}" if start else "")
            kept.append(EvalTask(task_id, kind, row["workload"], row["family"], start,
                                 best.get(row["workload"])))
        if sample is not None and sample < len(kept):
            drawn = set(random.Random(seed).sample(range(len(kept)), sample))
            kept = [task for i, task in enumerate(kept) if i in drawn]
        tasks += kept if max_tasks is None else kept[:max_tasks]
    return tasks


def _load(path: Path) -> Any:
    """The ``DatasetDict`` saved in ``path``; a TaskError naming the file that does not read
    (a cut or edited ``dataset_dict.json``, ``state.json`` or arrow file)."""
    from datasets import load_from_disk

    try:
        return load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001  datasets, json and pyarrow all raise
        raise TaskError(f"{_culprit(path)}: not a readable dataset file "
                        f"({_first_line(exc)}); write it again with `dragon datagen`") from None


def _rows(path: Path, rows: Any) -> Any:
    """The rows of a split, each with the columns a task needs."""
    try:
        for row in rows:
            if not all(isinstance(row.get(c), str) for c in ("workload", "workload_id", "family")):
                raise TaskError(f"{path}: a row lacks the text columns workload, workload_id "
                                "and family; write it again with `dragon datagen`")
            yield row
    except TaskError:
        raise
    except Exception as exc:  # noqa: BLE001  a batch past the end of a cut arrow file
        raise TaskError(f"{_culprit(path)}: not a readable dataset file "
                        f"({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _culprit(path: Path) -> Path:
    """The first file of a saved dataset that does not read, else the dataset's folder."""
    import json

    import pyarrow as pa

    for file in [path / "dataset_dict.json", *sorted(path.glob("*/*.json"))]:
        try:
            json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return file
    for file in sorted(path.glob("*/*.arrow")):
        try:
            with pa.memory_map(str(file)) as source:
                pa.ipc.open_stream(source).read_all()
        except Exception:  # noqa: BLE001  pyarrow's errors for a cut or foreign file
            return file
    return path


def _metaschedule_best(root: Path) -> dict[str, str]:
    """Workload spec -> the lowest-latency verified construction completion, any split."""
    path = root / "construction"
    if not (path / "dataset_dict.json").is_file():
        return {}
    best: dict[str, tuple[float, str]] = {}
    for rows in _load(path).values():
        for row in _rows(path, rows):
            latency = row.get("latency_s")
            if latency is None or not row.get("verified", True):
                continue
            held = best.get(row["workload"])
            if held is None or latency < held[0]:
                best[row["workload"]] = (latency, row["script"])
    return {w: script for w, (_, script) in best.items()}
