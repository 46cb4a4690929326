"""``dragon cost-model``: MetaSchedule's cost model trained on ``dragon datagen`` records, and a
measured report of how well it ranks the candidates of workloads it has never seen.

The records of every folder given are grouped by workload and target (every candidate: correct
ones with their latency, failed ones as MetaSchedule's 1e10 s) and featurized once
(``codegen.search.cost_model.featurize``).  Whole workloads are held out, never single
candidates: every workload of ``holdout_families``, and a seeded ``holdout_fraction`` of the
others that can be evaluated (a correct candidate and at least two in all); or, with ``folds``,
each of those workloads in turn (K-fold cross-validation, for a corpus too small for one split
to say much).  A model trained on the rest ranks each held-out workload's candidates, beside
MetaSchedule's untrained model (its random start) under ``untrained_seeds`` seeds, with
``codegen.search.ranking``'s metrics.  Then, unless ``final`` is off, the model is trained
again on every record and saved: the shipped model, with the report beside it as JSON.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from codegen.search import ranking
from codegen.search.cost_model import DEFAULT_KEEP, CostModel, Featurized, Group, featurize
from dragon_dsl.configs import names
from dragon_dsl.errors import DragonError
from dragon_dsl.files import write_atomic
from training.datagen.examples import default_resolver
from training.datagen.records import DataError, Record, RecordStore

__all__ = ["CostModelConfig", "CostModelReport", "NothingToLearn", "WorkloadRecords",
           "read_workloads", "report_path", "run_cost_model", "summarize"]

TOP_K = 5


class NothingToLearn(DataError):
    """Records that were read, but without a correct candidate to learn from."""


@dataclass(frozen=True)
class CostModelConfig:
    """How the cost model is trained and evaluated."""

    holdout_families: tuple[str, ...] = field(default=(), metadata={
        "help": "Operator families whose workloads are all held out, comma-separated."})
    holdout_fraction: float = field(default=0.2, metadata={
        "help": "Fraction of the other workloads held out (whole workloads, drawn with "
                "--seed among those with a correct candidate)."})
    folds: int = field(default=0, metadata={
        "help": "K >= 2: K-fold cross-validation over workloads instead of one split (every "
                "workload with a correct candidate held out once); 0: one split."})
    seed: int = field(default=0, metadata={"help": "Seed of the held-out workloads."})
    untrained_seeds: int = field(default=5, metadata={
        "help": "Seeds of the untrained model's random scores, pooled in its row."})
    keep: int = field(default=DEFAULT_KEEP, metadata={
        "help": "Candidates the saved model keeps for online retraining during a search "
                "(its booster learns from all of them)."})
    final: bool = field(default=True, metadata={
        "help": "Train again on every record and save that model (--no-final: save the "
                "model trained on the training split)."})
    threads: int = field(default=1, metadata={"help": "XGBoost threads."})

    def __post_init__(self) -> None:
        if isinstance(self.holdout_families, str | list):
            object.__setattr__(self, "holdout_families", names(self.holdout_families))
        checks = [("holdout_fraction", 0 <= self.holdout_fraction < 1,
                   "0 <= holdout_fraction < 1"),
                  ("folds", self.folds == 0 or self.folds >= 2, "folds 0 or >= 2"),
                  ("untrained_seeds", self.untrained_seeds >= 1, "untrained_seeds >= 1"),
                  ("keep", self.keep >= 1, "keep >= 1"), ("threads", self.threads >= 1,
                                                          "threads >= 1")]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"Expected {expected} but got {name}={getattr(self, name)!r}")
        if self.folds and self.holdout_families:
            raise ValueError("Expected folds or holdout_families, not both, but got "
                             f"folds={self.folds}, holdout_families={self.holdout_families!r}")
        if self.folds and not self.final:
            raise ValueError("Expected final=True with folds (cross-validation trains no one "
                             f"model to save) but got folds={self.folds}, final=False")


@dataclass
class WorkloadRecords:
    """The records of one workload on one target, from every folder read."""

    spec: str
    family: str
    workload_id: str
    target_json: str
    records: list[Record]

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.records)

    def group(self, resolve) -> Group:
        return Group(resolve(self.records[0]), json.loads(self.target_json),
                     [(r.script, r.latency_s if r.correct else None) for r in self.records])


def read_workloads(folders: Sequence[str]) -> list[WorkloadRecords]:
    """Every committed record of the ``dragon datagen`` folders, by workload and target; a
    DataError naming the folder or file that holds none or a bad one."""
    by_key: dict[tuple[str, str], WorkloadRecords] = {}
    for folder in folders:
        if not os.path.isdir(folder):
            raise DataError(f"{folder}: no such folder (expected a `dragon datagen` output)")
        store = RecordStore(folder)
        tasks = {k: s for k, s in store.done().items() if s.status != "failed"}
        if not tasks:
            raise DataError(f"{folder}: no committed task (expected a `dragon datagen` output "
                            "with records/ and tasks/)")
        for key in sorted(tasks):
            for record in store.read(key):
                item = by_key.setdefault(
                    (record.workload_id, record.target_json),
                    WorkloadRecords(record.workload, record.family, record.workload_id,
                                    record.target_json, []))
                item.records.append(record)
    items = [w for _, w in sorted(by_key.items())]
    if not any(w.records for w in items):
        raise DataError(f"{', '.join(folders)}: no records")
    return items


def _evaluable(f: Featurized | None) -> bool:
    return f is not None and f.correct > 0 and len(f.costs) >= 2


def _heldout_sets(items: list[WorkloadRecords], feats: list[Featurized | None],
                  config: CostModelConfig) -> list[list[int]]:
    """The held-out workloads (indices): one set for a split, one per fold."""
    evaluable = [i for i, f in enumerate(feats) if _evaluable(f)]
    rng = random.Random(config.seed)
    if config.folds:
        order = rng.sample(evaluable, len(evaluable))
        folds = [sorted(order[k::config.folds]) for k in range(config.folds)]
        return [f for f in folds if f]
    unknown = set(config.holdout_families) - {w.family for w in items}
    if unknown:
        known = ", ".join(sorted({w.family for w in items}))
        raise DataError(f"holdout_families: no workload of family {', '.join(sorted(unknown))} "
                        f"in the records (families: {known})")
    held = [i for i in evaluable if items[i].family in config.holdout_families]
    others = [i for i in evaluable if i not in held]
    count = round(config.holdout_fraction * len(others))
    if config.holdout_fraction > 0 and len(others) >= 2:
        count = min(max(count, 1), len(others) - 1)
    held += rng.sample(others, min(count, len(others)))
    return [sorted(held)] if held else []


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """numpy's global random state (MetaSchedule's ``predict`` draws from it) set to ``seed``,
    and given back afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _row(model: str, seed: int | None, scores: np.ndarray, f: Featurized,
         item: WorkloadRecords) -> dict[str, Any]:
    latencies = f.latencies()
    return {"model": model, "seed": seed, "workload": item.spec, "family": item.family,
            "candidates": len(latencies), "correct": f.correct,
            "kendall_tau": ranking.kendall_tau(scores, latencies),
            "top1": ranking.top_k_recall(scores, latencies, 1),
            f"top{TOP_K}": ranking.top_k_recall(scores, latencies, TOP_K),
            f"best_of_top{TOP_K}": ranking.best_of_top_k(scores, latencies, TOP_K)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One model's rows as the report's numbers: the median Kendall tau, the share of
    evaluations whose measured best is in the top 1 and top 5, and the geometric mean of
    best-of-top-5 over best.

    >>> s = summarize([{"workload": "a", "seed": None, "candidates": 3, "kendall_tau": 0.5,
    ...                 "top1": 1.0, "top5": 1.0, "best_of_top5": 1.0},
    ...                {"workload": "b", "seed": None, "candidates": 4, "kendall_tau": -0.1,
    ...                 "top1": 0.0, "top5": 1.0, "best_of_top5": 4.0}])
    >>> s["kendall_tau_median"], s["top1_recall"], s["best_of_top5_geomean"], s["records"]
    (0.2, 0.5, 2.0, 7)
    """
    def share(key: str) -> float:
        values = [r[key] for r in rows if math.isfinite(r[key])]
        return float(np.sum(values) / len(values)) if values else math.nan

    first_seed = rows[0]["seed"] if rows else None
    return {"workloads": len({r["workload"] for r in rows}),
            "records": sum(r["candidates"] for r in rows if r["seed"] == first_seed),
            "evaluations": len(rows),
            "kendall_tau_median": ranking.median([r["kendall_tau"] for r in rows]),
            "top1_recall": share("top1"), f"top{TOP_K}_recall": share(f"top{TOP_K}"),
            f"best_of_top{TOP_K}_geomean": ranking.geometric_mean(
                [r[f"best_of_top{TOP_K}"] for r in rows])}


@dataclass
class CostModelReport:
    """What ``run_cost_model`` trained, measured and saved."""

    folders: list[str]
    config: CostModelConfig
    workloads: int = 0
    records: int = 0
    skipped_records: int = 0            # no script, no longer applies, or no features
    skipped_workloads: dict[str, str] = field(default_factory=dict)  # spec -> why
    heldout: list[str] = field(default_factory=list)                # held-out specs
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)  # model -> summary
    rows: list[dict[str, Any]] = field(default_factory=list)
    model_path: str | None = None
    model_bytes: int = 0
    trained_on: int = 0                 # candidates the saved model learned from
    kept: int = 0                       # of them, kept in the file
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["config"]["holdout_families"] = list(self.config.holdout_families)
        return _finite(data)

    def table(self) -> list[str]:
        """The held-out ranking quality, pretrained beside untrained, as text rows."""
        from dragon_dsl.cli_kit import text_table

        header = ["model", "workloads", "records", "kendall tau (median)", "top-1 recall",
                  f"top-{TOP_K} recall", f"best of top-{TOP_K} / best (geomean)"]
        rows = [header]
        for name, s in self.summaries.items():
            seeds = f" x{self.config.untrained_seeds} seeds" if name == "untrained" else ""
            rows.append([name, f"{s['workloads']}{seeds}", str(s["records"]),
                         _number(s["kendall_tau_median"], "+.3f"),
                         _number(s["top1_recall"], ".2f"), _number(s[f"top{TOP_K}_recall"], ".2f"),
                         _number(s[f"best_of_top{TOP_K}_geomean"], ".3f", "x")])
        return text_table(rows)


def _number(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:{spec}}{unit}"


def _finite(value: Any) -> Any:
    """JSON has no nan: None instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def report_path(out: str) -> str:
    """The JSON report beside the saved model: ``cost_model.tar`` -> ``cost_model.json``."""
    return os.path.splitext(out)[0] + ".json"


def _featurize_all(items: list[WorkloadRecords], report: CostModelReport,
                   progress: bool) -> list[Featurized | None]:
    from tqdm import tqdm

    resolve = default_resolver()
    feats: list[Featurized | None] = []
    for item in tqdm(items, desc="features", unit="workload", disable=not progress,
                     file=sys.stderr):
        try:
            f = featurize(item.group(resolve))
        except (DragonError, ValueError) as exc:  # a workload that no longer builds
            report.skipped_workloads[item.spec] = f"{type(exc).__name__}: {exc}"
            feats.append(None)
            continue
        report.skipped_records += f.skipped
        feats.append(f)
    return feats


def _train(feats: Sequence[Featurized | None], config: CostModelConfig) -> CostModel:
    groups = [f for f in feats if f is not None]
    try:
        return CostModel.train(groups, keep=config.keep, threads=config.threads)
    except ValueError as exc:  # no group with a correct candidate
        raise NothingToLearn(str(exc)) from None


def run_cost_model(folders: Sequence[str], out: str, config: CostModelConfig | None = None, *,
                   progress: bool = True) -> CostModelReport:
    """Train MetaSchedule's cost model on the records of ``folders``, measure how it ranks
    held-out workloads beside the untrained model, save the model to ``out`` (a tar file) and
    the report beside it (``report_path``)."""
    from tqdm import tqdm

    config = config or CostModelConfig()
    start = time.perf_counter()
    report = CostModelReport(list(folders), config)
    items = read_workloads(folders)
    report.workloads = len(items)
    report.records = sum(len(w.records) for w in items)
    feats = _featurize_all(items, report, progress)
    heldout_sets = _heldout_sets(items, feats, config)
    held_all = sorted(i for held in heldout_sets for i in held)
    report.heldout = [items[i].spec for i in held_all]
    model = None
    for held in tqdm(heldout_sets, desc="held-out", unit="split", disable=not progress,
                     file=sys.stderr):
        model = _train([f for i, f in enumerate(feats) if i not in held], config)
        report.rows += [_row("pretrained", None, model.predict_features(feats[i].features),
                             feats[i], items[i]) for i in held]
    untrained = CostModel.untrained(threads=config.threads)
    for seed in range(config.untrained_seeds if held_all else 0):
        with _seeded(seed):
            report.rows += [_row("untrained", seed, untrained.predict_features(feats[i].features),
                                 feats[i], items[i]) for i in held_all]
    for name in ("pretrained", "untrained"):
        rows = [r for r in report.rows if r["model"] == name]
        if rows:
            report.summaries[name] = summarize(rows)
    if config.final or model is None:
        model = _train(feats, config)
        used = [f for f in feats if f is not None and f.correct]
    else:
        used = [f for i, f in enumerate(feats) if f is not None and f.correct
                and i not in held_all]
    report.trained_on = sum(len(f.costs) for f in used)
    report.kept = model.data_size
    model.save(out)
    report.model_path = out
    report.model_bytes = os.path.getsize(out)
    report.seconds = time.perf_counter() - start
    write_atomic(report_path(out), json.dumps(report.to_dict(), indent=1, sort_keys=True) + "\n")
    return report
