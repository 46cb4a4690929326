"""Training examples from measured records: construction and refinement, split by workload.

Only ``correct`` records (verified and timed) with a script become examples; every other
status is counted in ``ExampleStats.by_status`` and nothing else.  Records are grouped by
``(workload_id, target)`` and deduplicated by canonical script, keeping each script's lowest
latency.

**Construction** (write a script for an unscheduled kernel): up to ``k`` distinct scripts per
workload, the fastest first, all within ``tolerance`` of the best latency (1.10x by default).
Several near-best scripts rather than the single best: on a shared CPU two scripts within a
few percent are indistinguishable (see below), so calling one of them *the* answer would teach
noise, while a handful of different good schedules teaches what good schedules share.  The
fastest ``k`` are taken (not a random ``k`` of those within tolerance), so the set does not
depend on the seed.

**Refinement** (improve a script with a known latency): starting points are drawn from across
the search trajectory.  Each search's correct records, in measurement order (``index``), are
cut into early, middle and late thirds, and one start is drawn from each third (a seeded choice
among the scripts of that third with a faster completion), so the model sees poor early
candidates as well as nearly tuned late ones.  The completion is the workload's best script:
the best known answer is what an improvement should head for, and it keeps the completion a
function of the workload alone rather than of the seed (the near-best variety is already in
the construction set).  A pair is kept only if it is *measurably* faster:
``start_latency_s / latency_s >= min_gain`` (1.10 by default).  The relative spread of one
measurement (``spread_s / latency_s``, the interquartile range of its repeats over their
median) is small when the machine is quiet and large when it is not: over the 97 correct
records of five llvm searches on the shared 2-core CPU this was written on (``repeat=5``), its
median was 0.5%, its p75 1.4% and its p90 18%.  Two scripts are measured at different moments,
so a difference of a few percent can be the load of the moment; 10% is well clear of the
typical spread, and ``ExampleStats.spread_ratio`` (reported in the card) shows the
distribution of each data set.  A start is never the completion's own script.

**Splits** are by workload identity, so no kernel is in two splits: a stable hash of
``workload_id`` (independent of the seed, so a workload keeps its split when the data set is
rebuilt) chooses train, validation or test.  Workloads of a held-out family
(``ExampleConfig.holdout_families``) and workloads of real models (family ``model``) go to test
whole; the column ``holdout`` says why (``"family"``, ``"model"`` or ``""``).

**Every script written is re-checked**: it must be canonical (``dragon_dsl.format`` gives it
back unchanged) and ``dragon_dsl.to_schedule`` must apply it to the workload the prompt shows,
on the record's target.  A script that fails is skipped and counted by reason in
``ExampleStats.skipped`` (the card shows the counts); so is a workload that no longer builds or
whose identity changed since it was measured.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import dragon_dsl
from codegen.workloads import script_workload, workload
from dragon_dsl.configs import names
from dragon_dsl.errors import DragonError
from training.datagen.records import Record
from training.prompts.templates import (
    PROMPT_VERSION,
    construction_prompt,
    format_completion,
    refinement_prompt,
)

if TYPE_CHECKING:
    from codegen.workloads.workload import WorkloadLike

__all__ = ["SPLITS", "THIRDS", "ExampleConfig", "ExampleStats", "Examples", "build_examples",
           "split_of"]

SPLITS = ("train", "validation", "test")
THIRDS = ("early", "middle", "late")


@dataclass(frozen=True)
class ExampleConfig:
    """How records become examples.

    >>> ExampleConfig(k=2).train
    0.9
    """

    k: int = field(default=4, metadata={
        "help": "Construction: at most this many distinct scripts per workload and target."})
    tolerance: float = field(default=1.10, metadata={
        "help": "Construction: only scripts at most this many times slower than the best."})
    min_gain: float = field(default=1.10, metadata={
        "help": "Refinement: keep a pair only if start latency / completion latency is at "
                "least this (smaller gains are within measurement noise)."})
    refinement: bool = field(default=True, metadata={
        "help": "Build refinement examples (one start per third of each search)."})
    validation_fraction: float = field(default=0.05, metadata={
        "help": "Fraction of workloads (by identity hash) in the validation split."})
    test_fraction: float = field(default=0.05, metadata={
        "help": "Fraction of workloads (by identity hash) in the test split, besides the "
                "held-out ones."})
    example_seed: int = field(default=0, metadata={
        "help": "Seed of the choice of refinement starts (splits do not depend on it)."})
    holdout_families: tuple[str, ...] = field(default=(), metadata={
        "help": "Operator families whose workloads all go to the test split."})
    verified_only: bool = field(default=False, metadata={
        "help": "Use only records whose output was verified (not taken as-is from a tuning "
                "database)."})

    def __post_init__(self) -> None:
        if isinstance(self.holdout_families, str | list):
            object.__setattr__(self, "holdout_families", names(self.holdout_families))
        checks = [("k", self.k >= 1, "k >= 1"),
                  ("tolerance", self.tolerance >= 1.0, "tolerance >= 1.0"),
                  ("min_gain", self.min_gain > 1.0, "min_gain > 1.0"),
                  ("validation_fraction", 0 <= self.validation_fraction < 1,
                   "0 <= validation_fraction < 1"),
                  ("test_fraction", 0 <= self.test_fraction < 1, "0 <= test_fraction < 1"),
                  ("validation_fraction", self.validation_fraction + self.test_fraction <= 1,
                   "validation_fraction + test_fraction <= 1")]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"Expected {expected} but got {name}={getattr(self, name)!r}")

    @property
    def train(self) -> float:
        return round(1.0 - self.validation_fraction - self.test_fraction, 12)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["holdout_families"] = list(self.holdout_families)
        return data


@dataclass
class ExampleStats:
    """What went into the examples and what was left out, and why."""

    records: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    workloads: int = 0                      # (workload_id, target) groups with a correct record
    skipped: dict[str, int] = field(default_factory=dict)   # reason -> scripts or workloads
    missing_thirds: int = 0                 # thirds of a search with no faster completion
    spread_ratio: list[float] = field(default_factory=list)  # spread_s / latency_s, correct

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count


@dataclass
class Examples:
    """Rows (dicts of the dataset's columns) per split, for each task."""

    construction: dict[str, list[dict[str, Any]]]
    refinement: dict[str, list[dict[str, Any]]]
    stats: ExampleStats
    config: ExampleConfig

    def summary(self) -> dict[str, Any]:
        """Counts for a report (``--json``): examples per task and split, records by status,
        skipped scripts by reason, the configuration.

        >>> build_examples([]).summary()["construction"]
        {'train': 0, 'validation': 0, 'test': 0}
        """
        return {"construction": {s: len(rows) for s, rows in self.construction.items()},
                "refinement": {s: len(rows) for s, rows in self.refinement.items()},
                "records": self.stats.records, "by_status": dict(self.stats.by_status),
                "workloads": self.stats.workloads, "skipped": dict(self.stats.skipped),
                "missing_thirds": self.stats.missing_thirds, "config": self.config.to_dict()}


def split_of(workload_id: str, family: str = "",
             config: ExampleConfig | None = None) -> tuple[str, str]:
    """The split of a workload and why it is held out (``""`` when it is not).

    >>> split_of("00000000000000ff", "model")
    ('test', 'model')
    """
    config = config or ExampleConfig()
    if family in config.holdout_families:
        return "test", "family"
    if family == "model":
        return "test", "model"
    digest = hashlib.sha256(workload_id.encode()).hexdigest()
    u = int(digest[:16], 16) / 2.0 ** 64
    if u < config.test_fraction:
        return "test", ""
    if u < config.test_fraction + config.validation_fraction:
        return "validation", ""
    return "train", ""


def _holdout(families: set[str], config: ExampleConfig) -> str:
    """A workload measured under several labels is held out if any of them is."""
    if families & set(config.holdout_families):
        return next(f for f in sorted(families) if f in config.holdout_families)
    return "model" if "model" in families else min(families)


WorkloadResolver = Callable[[Record], Any]


def default_resolver() -> WorkloadResolver:
    """Workloads by spec (or TVMScript text, for records without a spec), built once each."""
    cache: dict[tuple[str, str | None], Any] = {}

    def resolve(record: Record) -> Any:
        key = (record.workload, record.workload_script)
        if key not in cache:
            cache[key] = (script_workload(record.workload_script, spec=record.workload)
                          if record.workload_script else workload(record.workload))
        return cache[key]

    return resolve


class _Checker:
    """Whether a script is canonical and applies to its workload; one check per script."""

    def __init__(self, stats: ExampleStats) -> None:
        self.stats = stats
        self._seen: dict[tuple[str, str, str], bool] = {}

    def __call__(self, script: str, wl: WorkloadLike, target_json: str) -> bool:
        key = (wl.identity, target_json, script)
        if key not in self._seen:
            reason = _recheck(script, wl, target_json)
            if reason:
                self.stats.skip(reason)
            self._seen[key] = not reason
        return self._seen[key]


def _recheck(script: str, wl: WorkloadLike, target_json: str) -> str:
    try:
        if dragon_dsl.format(script) != script:
            return "script not canonical"
        dragon_dsl.to_schedule(script, workload=wl, target=json.loads(target_json))
    except DragonError as exc:
        return f"script does not re-apply ({type(exc).__name__})"
    except Exception as exc:  # noqa: BLE001  TVM raises its own error types
        return f"script does not re-apply ({type(exc).__name__})"
    return ""


@dataclass
class _Group:
    """The correct records of one workload on one target."""

    records: list[Record]
    best: dict[str, Record] = field(default_factory=dict)   # script -> its fastest record

    def __post_init__(self) -> None:
        for r in self.records:
            known = self.best.get(r.script)
            if known is None or r.latency_s < known.latency_s:
                self.best[r.script] = r

    def ranked(self) -> list[Record]:
        return sorted(self.best.values(), key=lambda r: (r.latency_s, r.script))


def build_examples(records: Iterable[Record], config: ExampleConfig | None = None, *,
                   resolve: WorkloadResolver | None = None,
                   progress: bool = False) -> Examples:
    """Construction and refinement examples from records (any order, several tasks mixed).

    ``resolve`` gives a record's workload (default: ``codegen.workloads.workload`` of its
    spec, or ``script_workload`` of its TVMScript, each built once).  ``progress`` shows a
    bar over workloads (every script is applied again, about 10 ms each).

    >>> ex = build_examples([])
    >>> {s: len(rows) for s, rows in ex.construction.items()}
    {'train': 0, 'validation': 0, 'test': 0}
    """
    config = config or ExampleConfig()
    resolve = resolve or default_resolver()
    stats = ExampleStats()
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    families: dict[str, set[str]] = defaultdict(set)
    status = Counter()
    for r in records:
        stats.records += 1
        status[r.status] += 1
        if not r.correct:
            continue
        if r.script is None:
            stats.skip("correct record without a script")
            continue
        if config.verified_only and not r.verified:
            stats.skip("record not verified")
            continue
        if r.spread_s is not None and r.latency_s:
            stats.spread_ratio.append(r.spread_s / r.latency_s)
        groups[(r.workload_id, r.target)].append(r)
        families[r.workload_id].add(r.family)
    stats.by_status = dict(sorted(status.items()))
    stats.workloads = len(groups)
    check = _Checker(stats)
    construction: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    refinement: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    from tqdm.auto import tqdm

    for (workload_id, target), group_records in tqdm(
            sorted(groups.items()), desc="examples", unit="workload", disable=not progress,
            file=sys.stderr, dynamic_ncols=True):
        group_records.sort(key=lambda r: (r.workload, r.rules, r.device, r.index))
        first = group_records[0]
        try:
            wl = resolve(first)
        except Exception as exc:  # noqa: BLE001  a workload that no longer builds
            stats.skip(f"workload does not build ({type(exc).__name__})", len(group_records))
            continue
        if wl.identity != workload_id:
            stats.skip("workload identity changed since it was measured", len(group_records))
            continue
        split, holdout = split_of(workload_id, _holdout(families[workload_id], config), config)
        group = _Group(group_records)
        base = {"workload": first.workload, "workload_id": workload_id, "family": first.family,
                "target": target, "holdout": holdout, "prompt_version": PROMPT_VERSION}
        chosen = _construction(group, wl, check, config)
        if not chosen:
            continue
        prompt = construction_prompt(wl, target)
        best = chosen[0]
        for rank, r in enumerate(chosen):
            construction[split].append({
                **base, "task": "construction", "device": r.device, "rules": r.rules,
                "prompt": prompt, "completion": format_completion(r.script),
                "script": r.script, "latency_s": r.latency_s, "spread_s": _num(r.spread_s),
                "best_latency_s": best.latency_s, "rank": rank, "verified": r.verified})
        if not config.refinement:
            continue
        for start, third in _starts(group, best, wl, check, config, stats):
            refinement[split].append({
                **base, "task": "refinement", "device": best.device, "rules": best.rules,
                "prompt": refinement_prompt(wl, target, start.script, start.latency_s),
                "completion": format_completion(best.script),
                "script": best.script, "latency_s": best.latency_s,
                "spread_s": _num(best.spread_s), "start_script": start.script,
                "start_latency_s": start.latency_s, "start_spread_s": _num(start.spread_s),
                "start_index": start.index, "start_third": third,
                "speedup": start.latency_s / best.latency_s,
                "verified": best.verified and start.verified})
    return Examples(construction, refinement, stats, config)


def _num(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _construction(group: _Group, wl: WorkloadLike, check: _Checker,
                  config: ExampleConfig) -> list[Record]:
    """The fastest ``k`` scripts within tolerance of the best one that re-applies."""
    chosen: list[Record] = []
    for r in group.ranked():
        if chosen and r.latency_s > config.tolerance * chosen[0].latency_s:
            break
        if check(r.script, wl, r.target_json):
            chosen.append(r)
            if len(chosen) == config.k:
                break
    return chosen


def _starts(group: _Group, best: Record, wl: WorkloadLike, check: _Checker, config: ExampleConfig,
            stats: ExampleStats) -> list[tuple[Record, str]]:
    """One start per third of each search (records of one rule set, device and source, in
    measurement order), each a distinct script at least ``min_gain`` slower than ``best``."""
    searches: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in group.records:
        searches[(r.rules, r.device, r.source)].append(r)
    used = {best.script}
    out: list[tuple[Record, str]] = []
    for key, runs in sorted(searches.items()):
        runs.sort(key=lambda r: r.index)
        for number, third in enumerate(THIRDS):
            part = runs[number * len(runs) // 3:(number + 1) * len(runs) // 3]
            # A start is shown with its script's fastest measurement: no slower than it ran.
            first = {}
            for r in part:
                if r.script not in used and r.script not in first and \
                        group.best[r.script].latency_s >= config.min_gain * best.latency_s:
                    first[r.script] = replace(r, latency_s=group.best[r.script].latency_s,
                                              spread_s=group.best[r.script].spread_s)
            starts = [first[s] for s in sorted(first)]
            rng = random.Random(f"{config.example_seed}/{best.workload_id}/{best.target}/"
                                f"{'/'.join(key)}/{third}")
            rng.shuffle(starts)
            pick = next((s for s in starts if check(s.script, wl, s.target_json)), None)
            if pick is None:
                stats.missing_thirds += 1
                continue
            used.add(pick.script)
            out.append((pick, third))
    return out
