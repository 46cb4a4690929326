"""Datagen throughput: the same workloads searched with 1 and with 2 local workers, in one run;
and the per-trial cost of CUDA search here (search + nvcc, no GPU), for the ``paper`` plan.

    python benchmarks/bench_datagen.py [--workloads 8] [--trials 16] [--cuda-workloads 2]

Each worker count gets its own output directory and measurement cache, so nothing is shared
between them.  Examples are what ``build_examples`` makes of the records with the default
selection; "per core-hour" divides by wall time x the machine's cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from codegen.measure import MeasureConfig
from codegen.search.tune import SearchConfig

LLVM = {"kind": "llvm", "num-cores": 2}
MEASURE = MeasureConfig(repeat=5, min_repeat_ms=10.0, build_timeout_s=30.0, run_timeout_s=10.0)


def _run(specs, workers: int, trials: int, tmp: str) -> dict:
    from training.datagen.build import build_datasets
    from training.datagen.generate import generate
    from training.datagen.pool import LocalPool
    from training.datagen.runner import RunnerSettings
    from training.datagen.tasks import tasks_for

    out = os.path.join(tmp, f"w{workers}")
    tasks = tasks_for(specs, LLVM, "llvm", SearchConfig(trials=trials, per_round=8,
                                                       population=64), 600)
    settings = RunnerSettings(MEASURE, builders=max(1, (os.cpu_count() or 1) // workers),
                              cache=os.path.join(out, "cache.sqlite"))
    start = time.perf_counter()
    report = generate(tasks, out, LocalPool(workers, settings), progress=False)
    seconds = time.perf_counter() - start
    built = build_datasets(out, progress=False)
    return {"workers": workers, "seconds": seconds, "records": report.records,
            "correct": report.correct, "examples": built.count,
            "task_seconds": statistics.median(s.seconds for s in report.summaries)}


def _cuda_cost(specs, trials: int) -> dict:
    """Search and build on CUDA with no GPU: every candidate is built with nvcc and not run."""
    from codegen.measure import Evaluator
    from codegen.search.tune import search
    from codegen.workloads import workload

    target = "nvidia/nvidia-h100"
    seconds, candidates, built = 0.0, 0, 0
    with Evaluator(target, config=MEASURE, cache=False) as ev:
        for spec in specs:
            for rnd in search(workload(spec), target, ev,
                              SearchConfig(trials=trials, per_round=8, population=64)):
                seconds += rnd.seconds
                candidates += len(rnd.outcomes)
                built += sum(o.status.value == "built" for o in rnd.outcomes)
    return {"seconds_per_trial": seconds / max(1, candidates), "candidates": candidates,
            "built": built}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=8)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--cuda-workloads", type=int, default=2)
    args = parser.parse_args()

    from training.datagen.tasks import TINY_WORKLOADS

    specs = [s for s in TINY_WORKLOADS if not s.startswith("model")][:args.workloads]
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-datagen-") as tmp:
        for workers in (1, 2):
            print(f"{len(specs)} workloads x {args.trials} trials, {workers} worker(s) ...",
                  flush=True)
            rows.append(_run(specs, workers, args.trials, tmp))
    base = rows[0]["seconds"]
    print(f"\nllvm, {len(specs)} workloads x {args.trials} trials, {cores} cores")
    print("workers  wall s  speedup  candidates/s  examples  examples/core-hour  "
          "median task s")
    for r in rows:
        per_core_hour = r["examples"] / (r["seconds"] * cores / 3600)
        print(f"{r['workers']:>7}  {r['seconds']:6.0f}  {base / r['seconds']:6.2f}x  "
              f"{r['records'] / r['seconds']:12.2f}  {r['examples']:8d}  "
              f"{per_core_hour:18.0f}  {r['task_seconds']:13.1f}")
    if args.cuda_workloads:
        cuda = _cuda_cost(specs[:args.cuda_workloads], args.trials)
        print(f"\ncuda (nvidia/nvidia-h100), search + nvcc per trial, no GPU: "
              f"{cuda['seconds_per_trial']:.2f} s ({cuda['built']} of {cuda['candidates']} "
              f"built)")


if __name__ == "__main__":
    main()
