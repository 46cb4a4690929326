"""A whole model end to end: ``dragon optimize MODEL`` against MetaSchedule's ``tune_relax``
at the same number of kernels timed (``bench_vs_metaschedule.py --network``).

* **MetaSchedule** as a user runs it on a model: ``relax_integration.tune_relax(mod, {},
  target, work_dir, max_trials_global=budget x tasks, num_trials_per_iter=budget)`` (its
  LocalBuilder, LocalRunner, XGBoost model and gradient task scheduler; one round of
  ``budget`` trials per task is its warm-up, so every task gets its share);
* **dragon**: ``training.optimize.model.optimize_model`` with the whole model's budget of
  ``budget x tasks`` kernels (its baselines and re-timings counted in it), split over the
  tasks by their weight, ``transfer`` scripts carried over from the kept corpus per task, the
  rest to MetaSchedule's search seeded with them (as the kernel benchmark's dragon side);
* then the model built three times (no database: TVM's default build, dragon's database,
  MetaSchedule's database), each build checked against the default build's outputs and the
  three timed in interleaved rounds (``codegen.model_build.measure_models``), in this run.

    python benchmarks/bench_vs_metaschedule.py --workloads --network \\
        'model(name=bert,preset=tiny)' --network-budgets 8
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench_vs_metaschedule import TARGET


def metaschedule_network(mod, tasks: int, budget: int, work_dir: str, seed: int) -> float:
    """``tune_relax`` with ``budget`` trials per task (``budget x tasks`` in all) into
    ``work_dir``; its wall-clock seconds."""
    from tvm.s_tir import meta_schedule as ms

    from codegen.measure import MeasureConfig
    from codegen.search.baselines import unnamed_handlers_aside
    from codegen.targets import as_target

    limits = MeasureConfig()
    started = time.perf_counter()
    with unnamed_handlers_aside():
        ms.relax_integration.tune_relax(
            mod, {}, as_target(TARGET), work_dir, max_trials_global=budget * tasks,
            num_trials_per_iter=budget, seed=seed,
            builder=ms.builder.LocalBuilder(timeout_sec=limits.build_timeout_s),
            runner=ms.runner.LocalRunner(timeout_sec=limits.run_timeout_s))
    return time.perf_counter() - started


def dragon_network(model, tokenizer, label: str, mod, tasks: list, budget: int, database: str,
                   evaluator, seed: int, transfer: int, corpus) -> tuple[float, dict]:
    """``optimize_model`` with ``budget x len(tasks)`` kernels for the whole model, writing
    ``database``; its wall-clock seconds and per-task summary."""
    from training.optimize.kernel import OptimizeConfig
    from training.optimize.model import ModelOptimizeConfig, optimize_model
    from training.sampling.config import SamplingConfig

    total = budget * len(tasks)
    config = OptimizeConfig(k=1, rounds=0, search=total, budget=total,
                            transfer=transfer if corpus is not None else 0)
    started = time.perf_counter()
    result = optimize_model(model, tokenizer, label, mod, tasks, database=database,
                            evaluator=evaluator, config=config,
                            model_config=ModelOptimizeConfig(metaschedule=False, e2e_rounds=0),
                            sampling=SamplingConfig(n=1, seed=seed),
                            corpus=corpus if transfer else None)
    seconds = time.perf_counter() - started
    return seconds, {"measurements": result.measurements, "in_database": result.records,
                     "tasks": [{"task": t.name, "budget": t.budget,
                                "measured": t.result.measurements,
                                "best_s": t.result.best.outcome.latency_s
                                if t.result.ok and t.result.best else None}
                               for t in result.tasks]}


def network_showdown(spec: str, budget: int, model, tokenizer, evaluator, *, seed: int,
                     transfer: int, corpus, rounds: int, keep: str | None = None) -> dict:
    """Both sides on the model ``spec`` at ``budget`` kernels per task, then the three builds
    checked and timed together; with ``keep``, both databases are kept in its folder
    ``LABEL-BUDGET`` (``dragon`` and ``metaschedule``, TVM's JSON databases; LABEL as
    ``dragon optimize`` names the model) for a check of one's own."""
    from codegen.model_build import measure_models
    from training.cli.optimize_model import load_whole_model

    label, mod, tasks = load_whole_model(spec)
    with tempfile.TemporaryDirectory(prefix="bench-network-") as tmp:
        where = Path(keep) / f"{label}-{budget}" if keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        ms_dir, ours = str(where / "metaschedule"), str(where / "dragon")
        print(f"{label}: MetaSchedule tune_relax, {budget} x {len(tasks)} tasks ...",
              flush=True)
        ms_seconds = metaschedule_network(mod, len(tasks), budget, ms_dir, seed)
        print(f"{label}: dragon, {budget} x {len(tasks)} tasks ...", flush=True)
        dragon_seconds, summary = dragon_network(model, tokenizer, label, mod, tasks, budget,
                                                 ours, evaluator, seed, transfer, corpus)
        print(f"{label}: the three builds, end to end ...", flush=True)
        timed = measure_models(mod, TARGET, {"default": None, "dragon": ours,
                                             "metaschedule": ms_dir},
                               reference="default", rounds=rounds)
    return {"network": spec, "label": label, "tasks": len(tasks), "budget": budget,
            "databases": str(where) if keep else None,
            "seconds": {"dragon": dragon_seconds, "metaschedule": ms_seconds},
            "dragon": summary, "end_to_end": {n: e.as_dict() for n, e in timed.items()}}


def print_networks(entries: list[dict]) -> None:
    """One row per model and budget: each build's median, MetaSchedule's over dragon's."""
    if not entries:
        return
    print(f"\n{'model':24s} {'budget':>13s} {'default':>10s} {'MetaSchedule':>13s} "
          f"{'dragon':>10s} {'MS/dragon':>9s} {'wall s (dragon / MS)':>21s}")
    for e in entries:
        lat = {n: v.get("latency_s") for n, v in e["end_to_end"].items()}
        ms_, ours = lat.get("metaschedule"), lat.get("dragon")
        ratio = f"{ms_ / ours:.2f}x" if ms_ and ours else "-"
        print(f"{e['label']:24s} {e['budget']:>4d} x {e['tasks']:>2d} tasks "
              f"{_ms(lat.get('default')):>10s} {_ms(ms_):>13s} {_ms(ours):>10s} {ratio:>9s} "
              f"{e['seconds']['dragon']:>10.0f} / {e['seconds']['metaschedule']:.0f}")
        for name, v in e["end_to_end"].items():
            if v.get("status") != "correct":
                print(f"  {name}: {v.get('status')} {v.get('message', '')[:120]}")


def _ms(secs: float | None) -> str:
    return "-" if secs is None else f"{secs * 1e3:.3f} ms"
