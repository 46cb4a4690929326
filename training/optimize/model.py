"""``optimize_model()``: every task of a Relax model optimized, a MetaSchedule database written,
and the model measured end to end against MetaSchedule at the same number of measurements.

1. **Starts.** Each task's baselines are made (DLight may have no rule for some); the budget
   must cover every task's fixed cost (``budget.start_cost``: baselines, one sampled script,
   the final re-timing), else ``OptimizeError`` before anything is measured.  Then each task's
   baselines are timed by one shared ``Evaluator``.
2. **The split.** What the budget leaves above the fixed costs is shared in proportion to
   weight x unscheduled latency, each task's share of the unscheduled model's time (largest
   remainders, so the shares add up to the budget exactly); without a budget each task gets
   ``k x (rounds + 1)`` samples.
3. **Tasks.** ``optimize()`` per task, its share as its budget.
4. **Database.** Each task whose best script won its final re-timing, faster than the
   unscheduled kernel and the default (``OptimizeResult.winner``, ``only_faster``; a slower one
   would slow the model down, and a task without a record keeps the default build): its trace,
   with the re-timed latency, in a MetaSchedule JSON database (``codegen.search.database``).
5. **MetaSchedule at equal measurements.** ``codegen.search.rival_search`` per task, with as
   many trials as our optimize measured for that task, into a database of its own.
6. **End to end.** ``codegen.model_build.measure_models``: the default build ("before"), ours
   ("dragon") and MetaSchedule's, checked against "before" and timed in interleaved rounds
   (``e2e_rounds=0`` skips it: ``end_to_end`` is empty, for a caller that times the builds
   itself).

>>> with Evaluator("llvm", cache=False) as ev:                         # doctest: +SKIP
...     result = optimize_model(model, tokenizer, "bert-tiny", mod, tasks,
...                             database="bert.database", evaluator=ev)
>>> result.end_to_end["dragon"].latency_s                              # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from codegen.measured import make_baselines, speedup
from codegen.search.rival import rival_search
from dragon_dsl.files import replace_dir
from training.optimize.budget import check_fits, split_budget, start_cost
from training.optimize.kernel import OptimizeConfig, OptimizeResult, measure_start, optimize
from training.sampling.config import SamplingConfig

if TYPE_CHECKING:
    from codegen.measure import Evaluator, MeasureConfig
    from codegen.targets import TargetLike

__all__ = ["END_TO_END", "ModelOptimizeConfig", "ModelResult", "TaskResult", "optimize_model"]

# The end-to-end rows, in order: the default build, ours, MetaSchedule's at equal measurements.
END_TO_END = ("before", "dragon", "metaschedule")


@dataclass(frozen=True)
class ModelOptimizeConfig:
    """What a whole-model optimization adds to each task's ``OptimizeConfig``."""

    e2e_rounds: int = field(default=5, metadata={
        "help": "Interleaved rounds of end-to-end timing of each build of the model; 0 "
                "measures no build (the database is written all the same)."})
    metaschedule: bool = field(default=True, metadata={
        "help": "Also tune each task with MetaSchedule's search given as many measurements as "
                "dragon spent on it, and measure that build end to end."})
    only_faster: bool = field(default=True, metadata={
        "help": "Write a task's schedule to the database only when it beat the unscheduled "
                "kernel and the default when re-timed beside them; the others keep the "
                "default build."})
    population: int = field(default=512, metadata={
        "help": "Population of MetaSchedule's evolutionary search (the comparison)."})

    def __post_init__(self) -> None:
        if self.e2e_rounds < 0:
            raise ValueError(f"Expected e2e_rounds >= 0 but got e2e_rounds={self.e2e_rounds}")
        if self.population < 2:
            raise ValueError(f"Expected population >= 2 but got population={self.population}")


@dataclass(frozen=True)
class TaskResult:
    """One task: its weight, its share of the budget, dragon's result and MetaSchedule's."""

    spec: str
    name: str
    weight: int
    budget: int | None
    result: OptimizeResult
    in_database: bool = False      # its best script is in the database
    metaschedule_trials: int = 0
    metaschedule_best_s: float | None = None

    @property
    def unscheduled_s(self) -> float | None:
        return self.result.start.baseline("unscheduled").latency_s

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        return {"spec": self.spec, "name": self.name, "weight": self.weight,
                "budget": self.budget, "unscheduled_s": self.unscheduled_s,
                "best_s": r.latency_s, "speedup": r.speedup("unscheduled"),
                "measurements": r.measurements, "ok": r.ok, "winner": r.winner,
                "in_database": self.in_database,
                "script": r.best.script if r.ok and r.best else None,
                "metaschedule_trials": self.metaschedule_trials,
                "metaschedule_best_s": self.metaschedule_best_s}


@dataclass(frozen=True)
class ModelResult:
    """Every task's result, the databases written and the model measured end to end."""

    model: str
    target: str
    device: str
    budget: int | None
    tasks: tuple[TaskResult, ...]
    database: str
    records: int                           # tasks with a schedule in the database
    metaschedule_database: str | None
    end_to_end: dict[str, Any]             # END_TO_END name -> codegen.model_build.EndToEnd
    wall_s: float

    @property
    def measurements(self) -> int:
        return sum(t.result.measurements for t in self.tasks)

    @property
    def metaschedule_measurements(self) -> int:
        return sum(t.metaschedule_trials for t in self.tasks)

    def speedup(self, name: str) -> float | None:
        """How many times faster build ``name`` ran than the default build, end to end."""
        before, this = self.end_to_end.get("before"), self.end_to_end.get(name)
        return speedup(before.latency_s if before is not None and before.ok else None,
                       this.latency_s if this is not None and this.ok else None)

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "device": self.device,
                "budget": self.budget, "measurements": self.measurements,
                "metaschedule_measurements": self.metaschedule_measurements,
                "database": self.database, "records": self.records,
                "metaschedule_database": self.metaschedule_database, "wall_s": self.wall_s,
                "tasks": [t.as_dict() for t in self.tasks],
                "end_to_end": {n: {**e.as_dict(), "speedup": self.speedup(n)}
                               for n, e in self.end_to_end.items()}}


def _write(database: str, records: list, target: TargetLike) -> None:
    """The database in directory ``database``, replacing what a run before left there."""
    from codegen.search.database import write_database

    with replace_dir(database) as tmp:
        write_database(tmp, records, target)


def _metaschedule(task, target, evaluator, trials: int, population: int,
                  work_dir: str) -> float | None:
    """MetaSchedule's search on one task, ``trials`` candidates; its best correct latency."""
    best = rival_search(task.workload, target, evaluator, trials, population=population,
                        per_round=min(16, trials), work_dir=work_dir).best
    return None if best is None else float(best.outcome.latency_s)


def optimize_model(model, tokenizer, label: str, mod, tasks: list, *,
                   database: str, evaluator: Evaluator, config: OptimizeConfig | None = None,
                   model_config: ModelOptimizeConfig | None = None,
                   sampling: SamplingConfig | None = None, measure: MeasureConfig | None = None,
                   progress: bool = False, say=None, loader=None,
                   cost_model: Any = None, corpus: Any = None) -> ModelResult:
    """Optimize every task of ``mod`` (``tasks``: ``codegen.workloads.models.ModelTask``s) on
    ``evaluator``'s target and measure the model end to end (see the module's docstring).
    ``config.budget`` is the budget of the whole model.  ``model`` and ``tokenizer`` may be
    None with ``loader``, a function that returns both, called once the starts are measured
    (loading a model takes seconds a usage error should not wait for).  ``say(text)`` hears
    each step.  ``cost_model`` ranks samples and the searches of every task (``optimize``), and
    learns from all of them; ``corpus`` is where ``config.transfer`` scripts come from."""
    from codegen.model_build import measure_models
    from codegen.search.database import DatabaseRecord

    clock = time.perf_counter()
    config = config or OptimizeConfig()
    model_config = model_config or ModelOptimizeConfig()
    say = say or (lambda text: None)
    target = evaluator.target
    say(f"{len(tasks)} tasks: making the baselines")
    made = [make_baselines(t.workload, target) for t in tasks]
    minimums = [start_cost(m.available) for m in made]
    if config.budget is not None:
        check_fits(config.budget, minimums)  # before measuring anything
    free = replace(config, budget=None)
    starts = []
    for i, (task, m) in enumerate(zip(tasks, made, strict=True)):
        say(f"task {i + 1}/{len(tasks)} {task.name}: timing the baselines")
        starts.append(measure_start(task.workload, evaluator, config=free, made=m))
    shares = [t.weight * (s.baseline("unscheduled").latency_s or 0.0)
              for t, s in zip(tasks, starts, strict=True)]
    budgets: list[int | None] = list(split_budget(config.budget, minimums, shares)) \
        if config.budget is not None else [None] * len(tasks)
    if model is None and loader is not None:
        model, tokenizer = loader()
    results = []
    for i, (task, start, budget) in enumerate(zip(tasks, starts, budgets, strict=True)):
        result = optimize(model, tokenizer, task.workload,
                          config=replace(config, budget=budget), sampling=sampling,
                          evaluator=evaluator, start=start, progress=progress,
                          cost_model=cost_model, corpus=corpus,
                          label=f"task {i + 1}/{len(tasks)} {task.name}: ")
        results.append(TaskResult(task.spec, task.name, task.weight, budget, result))
    records = []
    for i, (task, r) in enumerate(zip(tasks, results, strict=True)):
        faster = r.result.winner == "best"  # beat every baseline when re-timed
        if r.result.ok and r.result.best is not None and (faster or not model_config.only_faster):
            again = r.result.final["best"]
            records.append(DatabaseRecord(task.workload, r.result.best.script,
                                          list(again.repeats) or [float(again.latency_s)]))
            results[i] = replace(r, in_database=True)
    say(f"writing {len(records)} schedules to {database}")
    _write(database, records, target)
    databases: dict[str, str | None] = {"before": None, "dragon": database}
    ms_dir = None
    if model_config.metaschedule:
        ms_dir = database.rstrip("/") + ".metaschedule"
        shutil.rmtree(ms_dir, ignore_errors=True)
        os.makedirs(ms_dir)
        for i, (task, r) in enumerate(zip(tasks, results, strict=True)):
            trials = r.result.measurements
            say(f"task {i + 1}/{len(tasks)} {task.name}: MetaSchedule, {trials} trials")
            best = _metaschedule(task, target, evaluator, trials, model_config.population,
                                 ms_dir)
            results[i] = replace(r, metaschedule_trials=trials, metaschedule_best_s=best)
        databases["metaschedule"] = ms_dir
    end_to_end = {}
    if model_config.e2e_rounds:
        say("measuring the model end to end")
        end_to_end = measure_models(mod, target, databases, reference="before",
                                    rounds=model_config.e2e_rounds, config=measure,
                                    progress=say)
    return ModelResult(label, target.kind.name, evaluator.device, config.budget, tuple(results),
                       database, len(records), ms_dir, end_to_end,
                       time.perf_counter() - clock)

