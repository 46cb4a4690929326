"""``compare_kernel`` and ``compare_network``: the main job, as ``make demo`` shows it,
against MetaSchedule at equal budgets.

A model optimizes a real layer and a real (tiny) model on this machine, and MetaSchedule's own
evolutionary search gets as many measured candidates as the model's search measured, in the
same session, on the same evaluator:

1. **a layer**: BERT-base's FFN up-projection (``DEMO_KERNEL``: 128 tokens, 768 -> 3072, bias,
   GELU).  ``optimize`` samples ``k`` scripts by schedule-aware decoding and refines its best
   for ``rounds`` rounds; then MetaSchedule as a user runs it, ``tune_tir`` from nothing in a
   new process (its LocalBuilder, LocalRunner and XGBoost model:
   ``codegen.search.metaschedule_best``, no memo; ``tune_tir_fresh``),
   with ``max_trials_global`` as many as the model's search timed kernels (baselines and
   re-timing included); the two winners, the unscheduled kernel and the rule-based default are
   re-timed together at the end, and each side's wall clock is kept (``KernelShowdown``);
2. **a model** (``DEMO_MODEL``, tiny BERT): ``training.optimize.model`` optimizes every task,
   writes a MetaSchedule database, and measures the built model end to end before, after and
   with MetaSchedule's database at the same number of measurements (per task MetaSchedule's
   evolutionary search, ``rival_search``, measured by our evaluator: ``tune_relax`` as a user
   runs it is ``benchmarks/network_vs_metaschedule.py``, about 20 minutes for tiny BERT).

The measurements are what they are: the built-in model is a 0.6M-parameter demonstration, and
the table says how it does against MetaSchedule, whichever way that goes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from codegen.measured import Comparison, compare, speedup

__all__ = ["DEMO_KERNEL", "DEMO_MODEL", "DemoConfig", "KernelShowdown", "compare_kernel",
           "compare_network", "tune_tir", "tune_tir_fresh"]

DEMO_KERNEL = "dense(m=128,n=3072,k=768,bias=1,act=gelu)"
DEMO_MODEL = "model(name=bert,preset=tiny)"


@dataclass(frozen=True)
class DemoConfig:
    """What ``dragon demo`` runs."""

    kernel: str = field(default=DEMO_KERNEL, metadata={
        "help": "The layer optimized first (a workload spec); empty: skip it."})
    network: str = field(default=DEMO_MODEL, metadata={
        "help": "The network optimized end to end (a model spec without task=); empty: skip "
                "it."})
    transfer: int = field(default=8, metadata={
        "help": "Scripts of the layer carried over from the kept corpus (the nearest "
                "workloads' fastest, tiles refitted) timed first; the model's first round "
                "refines the best of them (0: none; none either without a kept corpus)."})
    k: int = field(default=2, metadata={"help": "Scripts sampled per round."})
    rounds: int = field(default=0, metadata={
        "help": "Refinement rounds after the first (the model refines its best script)."})
    network_k: int = field(default=2, metadata={
        "help": "Scripts sampled per task of the network (one round: no refinement)."})
    width: int = field(default=0, metadata={
        "help": "Scripts sampled per model round for the cost model to rank; the k it ranks "
                "first are timed (0: all k timed, no ranking; needs a cost model)."})
    search: int = field(default=22, metadata={
        "help": "Kernels of the layer timed by MetaSchedule's evolutionary search after the "
                "model's rounds, started from every script timed before and ranked by the "
                "cost model (0: no search)."})
    local: int = field(default=0, metadata={
        "help": "Kernels of the layer timed last, from mutants of the fastest kernels so far "
                "(OptimizeConfig.local; what they cannot time goes to the search; 0: none)."})
    network_search: int = field(default=4, metadata={
        "help": "The same per task of the network."})
    population: int = field(default=64, metadata={
        "help": "Population of MetaSchedule's evolutionary search in the network's comparison "
                "(per task): how long each of its rounds takes, not how many kernels it may "
                "time (that is the model's count).  The layer's tune_tir keeps its default."})
    seed: int = field(default=0, metadata={"help": "Seed of sampling and of MetaSchedule."})

    def __post_init__(self) -> None:
        if self.k < 1 or self.rounds < 0 or self.network_k < 1:
            raise ValueError(f"Expected k >= 1, network_k >= 1 and rounds >= 0 but got "
                             f"k={self.k}, network_k={self.network_k}, rounds={self.rounds}")
        if min(self.width, self.search, self.local, self.network_search, self.transfer) < 0:
            raise ValueError(f"Expected width, search, local, network_search and transfer >= 0 "
                             f"but got width={self.width}, search={self.search}, "
                             f"local={self.local}, "
                             f"network_search={self.network_search}, "
                             f"transfer={self.transfer}")
        if not (self.kernel or self.network):
            raise ValueError("Expected a kernel, a network or both but got neither")


@dataclass(frozen=True)
class KernelShowdown:
    """One kernel: the model's search and MetaSchedule's at the same number of measured
    candidates, their winners re-timed together with the baselines."""

    workload: str
    result: Any                      # training.optimize.kernel.OptimizeResult
    trials: int                      # candidates the model's search timed: tune_tir's budget
    metaschedule: str | None         # MetaSchedule's best script; None when none was correct
    final: dict[str, Any]            # re-timed together: dragon, metaschedule, the baselines
    metaschedule_trials: int = 0     # the records tune_tir's database holds (<= trials)
    seconds: dict[str, float] = field(default_factory=dict)  # wall clock: dragon, metaschedule

    def latency_s(self, name: str) -> float | None:
        outcome = self.final.get(name)
        return outcome.latency_s if outcome is not None and outcome.ok else None

    def speedup(self, name: str, over: str = "unscheduled") -> float | None:
        """How many times faster ``name`` ran than ``over``, both timed at the end."""
        return speedup(self.latency_s(over), self.latency_s(name))

    def comparison(self, name: str, over: str = "unscheduled") -> Comparison | None:
        """``name`` beside ``over`` in the final timing, with both timings' spread: faster,
        slower or a tie (``codegen.measured.compare``); None unless both are correct."""
        return compare(self.final.get(over), self.final.get(name))

    def as_dict(self) -> dict[str, Any]:
        pairs = {f"dragon vs {over}": self.comparison("dragon", over)
                 for over in ("unscheduled", "default", "metaschedule")}
        return {"workload": self.workload, "trials": self.trials,
                "metaschedule_trials": self.metaschedule_trials, "seconds": self.seconds,
                "metaschedule_script": self.metaschedule,
                "comparison": {k: c.as_dict() if c else None for k, c in pairs.items()},
                "latency_s": {n: self.latency_s(n) for n in self.final},
                "final": {n: o.as_dict() for n, o in self.final.items()},
                "optimize": self.result.as_dict()}


def compare_kernel(model, tokenizer, workload: Any, evaluator: Any, *, k: int = 4,
                   rounds: int = 1, seed: int = 0, width: int = 0, search: int = 0,
                   cost_model: Any = None, transfer: int = 0, corpus: Any = None,
                   progress: bool = False, local: int = 0) -> KernelShowdown:
    """``optimize`` with ``transfer`` scripts carried over from ``corpus`` first (when
    given), ``k`` and ``rounds`` (``width`` samples a round ranked by ``cost_model`` when both
    are given), then ``search`` kernels of MetaSchedule's search seeded with every script
    timed (and ``local`` mutants of the fastest, last), then MetaSchedule's ``tune_tir`` in a
    new process (``tune_tir_fresh``) with as many trials as the model's search timed kernels
    (its baselines and re-timing included, as ``optimize_model`` counts them), then both
    winners and the baselines re-timed together on ``evaluator`` (best without a cache: every
    figure is from this session)."""
    from codegen.measured import Baselines, measure_beside, outcomes
    from training.optimize.kernel import OptimizeConfig, optimize
    from training.sampling.config import SamplingConfig

    ranked = width > k and cost_model is not None
    started = time.perf_counter()
    result = optimize(model, tokenizer, workload,
                      config=OptimizeConfig(k=k, rounds=rounds, search=search, local=local,
                                            width=width if ranked else None,
                                            transfer=transfer if corpus is not None else 0),
                      sampling=SamplingConfig(n=k, seed=seed), evaluator=evaluator,
                      cost_model=cost_model, corpus=corpus, progress=progress)
    seconds = {"dragon": time.perf_counter() - started}
    trials = result.measurements
    if progress:
        print(f"MetaSchedule: tune_tir, max_trials_global={trials} ...", flush=True)
    ms_script, ms_trials, seconds["metaschedule"], why = tune_tir_fresh(
        workload, evaluator.target, trials, seed)
    if why and progress:
        print(f"MetaSchedule: {why}", flush=True)
    scripts = {name: text for name, text in (
        ("dragon", result.best.script if result.ok and result.best else None),
        ("metaschedule", ms_script)) if text is not None}
    final = outcomes(measure_beside(evaluator, workload, scripts,
                                    Baselines(result.start.modules)))
    return KernelShowdown(str(getattr(workload, "spec", workload)), result, trials, ms_script,
                          final, ms_trials, seconds)


def tune_tir_fresh(workload: Any, target: Any, trials: int, seed: int = 0
                   ) -> tuple[str | None, int, float, str]:
    """MetaSchedule's ``tune_tir`` as a user runs it: in a new process, from nothing (a fresh
    memo directory, so nothing is read back).  Run here, after our search, it would find TVM
    warm: the first design space a process generates costs that process some 15 s, whatever
    the workload (measured: 39 s for the demo's 37 kernels in a fresh process, 25 s after a
    tiny matmul's design space).  Returns its best script (None when none of its candidates
    built and ran), the candidates it measured, its seconds inside that process (its imports
    left out, as our side's model loading is) and why there is no script."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(tune_tir, workload, target, trials, seed).result()


def tune_tir(workload: Any, target: Any, trials: int, seed: int = 0
             ) -> tuple[str | None, int, float, str]:
    """``tune_tir_fresh``'s work, in this process: ``metaschedule_best`` in a fresh memo
    directory, timed; the same four results."""
    import tempfile

    from codegen.search.baselines import BaselineUnavailable, metaschedule_best

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dragon-demo-ms-") as memo:
        try:
            best = metaschedule_best(workload, target, trials, seed=seed, cache_dir=memo)
        except BaselineUnavailable as exc:  # none of its candidates built and ran
            return None, trials, time.perf_counter() - started, str(exc)
    return best.script, best.trials, time.perf_counter() - started, ""


def compare_network(model, tokenizer, label: str, mod, tasks: list, evaluator: Any, database: str,
                    *, k: int = 2, seed: int = 0, population: int = 64, width: int = 0,
                    search: int = 0, cost_model: Any = None, progress: bool = False, say=None):
    """``training.optimize.model.optimize_model`` with ``k`` samples per task and no refinement:
    every task, the database at ``database``, MetaSchedule given as many measurements per task,
    and the three builds of the model timed end to end (``ModelResult``)."""
    from training.optimize.kernel import OptimizeConfig
    from training.optimize.model import ModelOptimizeConfig, optimize_model
    from training.sampling.config import SamplingConfig

    return optimize_model(model, tokenizer, label, mod, tasks, database=database,
                          evaluator=evaluator, cost_model=cost_model,
                          config=OptimizeConfig(k=k, rounds=0, search=search,
                                                width=width if width > k and cost_model
                                                is not None else None),
                          model_config=ModelOptimizeConfig(population=population),
                          sampling=SamplingConfig(n=k, seed=seed), progress=progress, say=say)
