"""Wall clock to a result, each side in a fresh process, as a user waits for it.

``dragon demo`` runs ``dragon optimize`` and then MetaSchedule's ``tune_tir`` in one process,
so the second finds TVM warm: the first design space a process generates costs it some 15 s
(TVM's lazy initialisation, whatever the workload), which ``tune_tir`` then does not pay.  Here
each run is a new Python process, its imports, model, cost model and corpus loading included:

* **dragon**: ``dragon optimize WORKLOAD --json -q`` with the demo's layer configuration
  (``--transfer 8 -k 2 --rounds 0 --search 22``; the built-in model and cost model);
* **MetaSchedule**: ``tune_tir`` as a user runs it (``training.optimize.demo.tune_tir``:
  ``codegen.search.metaschedule_best`` in a fresh memo directory, so nothing is read back),
  ``max_trials_global`` the kernels dragon's first run timed, baselines and re-timing
  included, as the demo counts them.

The two alternate for ``--runs`` rounds (dragon first in even rounds); the table gives each
side's median, min and max seconds and MetaSchedule's median over dragon's (above 1: dragon
was done sooner).  Only wall clock is compared here; which kernel is faster is
``bench_vs_metaschedule.py``'s question.

    python benchmarks/wall_clock_cold.py                                  # the demo's layer
    python benchmarks/wall_clock_cold.py --workload 'softmax(m=384,n=768)' --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAGON = str(Path(sys.executable).parent / "dragon")
DEMO_FLAGS = ["--transfer", "8", "-k", "2", "--rounds", "0", "--search", "22"]


def run_dragon(spec: str, flags: list[str]) -> tuple[float, dict]:
    """One ``dragon optimize`` process: its wall clock and its JSON result."""
    started = time.perf_counter()
    done = subprocess.run([DRAGON, "optimize", spec, *flags, "--json", "-q"], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 1: no script beat the baselines, still a result
        raise RuntimeError(f"dragon optimize exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def run_metaschedule(spec: str, trials: int, seed: int) -> tuple[float, dict]:
    """One ``tune_tir`` process (this script with --side): its wall clock and what it said."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--side", spec, "--trials", str(trials),
                           "--seed", str(seed)], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"tune_tir exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout.strip().splitlines()[-1])


def side(spec: str, trials: int, seed: int) -> None:
    """The MetaSchedule side, inside its own process: prints its trials as JSON."""
    sys.path.insert(0, str(ROOT))
    from codegen.targets import as_target
    from codegen.workloads import workload
    from training.optimize.demo import tune_tir

    script, measured, seconds, why = tune_tir(workload(spec), as_target("llvm"), trials, seed)
    if script is None:
        raise SystemExit(f"tune_tir: {why}")
    print(json.dumps({"trials": measured, "tune_tir_s": seconds}))


def _row(name: str, values: list[float]) -> str:
    return (f"{name:<14} {statistics.median(values):>8.1f} {min(values):>8.1f} "
            f"{max(values):>8.1f}  {' '.join(f'{v:.1f}' for v in values)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="dense(m=128,n=3072,k=768,bias=1,act=gelu)")
    p.add_argument("--runs", type=int, default=2, help="Rounds, one run of each side a round.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flags", nargs=argparse.REMAINDER, default=DEMO_FLAGS,
                   help="dragon optimize's flags instead of the demo's (last on the line).")
    p.add_argument("--side", default=None, help=argparse.SUPPRESS)
    p.add_argument("--trials", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:
        side(args.side, args.trials, args.seed)
        return 0
    if args.runs < 1:
        p.error(f"--runs {args.runs}: expected at least 1")
    flags = [*args.flags, "--seed", str(args.seed)]
    times: dict[str, list[float]] = {"dragon": [], "metaschedule": []}
    phases: list[dict] = []
    trials = 0
    for index in range(args.runs):
        order = ["dragon", "metaschedule"] if index % 2 == 0 else ["metaschedule", "dragon"]
        if not trials:  # MetaSchedule's budget is what dragon timed: dragon goes first once
            order = ["dragon", "metaschedule"]
        for name in order:
            if name == "dragon":
                seconds, result = run_dragon(args.workload, flags)
                trials = trials or result["measurements"]
                phases.append(result.get("seconds", {}))
            else:
                seconds, result = run_metaschedule(args.workload, trials, args.seed)
            times[name].append(seconds)
            print(f"round {index}: {name} {seconds:.1f} s", file=sys.stderr, flush=True)
    print(f"\n{args.workload}: {trials} kernels timed by each side, each run a fresh process, "
          f"{args.runs} runs each\n")
    print(f"{'':<14} {'median':>8} {'min':>8} {'max':>8}  runs (s)")
    print(_row("dragon", times["dragon"]))
    print(_row("MetaSchedule", times["metaschedule"]))
    ratio = statistics.median(times["metaschedule"]) / statistics.median(times["dragon"])
    spread = [max(v) - min(v) for v in times.values()]
    tie = abs(statistics.median(times["metaschedule"]) - statistics.median(times["dragon"])) \
        <= max(spread)
    print(f"\nMetaSchedule's median over dragon's: {ratio:.2f}x"
          f"{' (a tie: inside the runs spread)' if tie and args.runs > 1 else ''}")
    keys = list(dict.fromkeys(k for p in phases for k in p))  # start, transfer, ... in order
    print("dragon's phases, median s: " + ", ".join(
        f"{k} {statistics.median(p.get(k, 0.0) for p in phases):.1f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
