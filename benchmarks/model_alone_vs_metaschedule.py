"""The model alone against MetaSchedule's search: best of k attempts, no search, no cost model.

Issue 26 asks whether the model itself is worth searching with: on held-out compute-heavy
workloads (the unscheduled kernel takes at least ``--min-us`` microseconds), the best of
``-k`` (8) scripts the built-in model writes from the construction prompt (schedule-aware
decoding, no refinement round, no corpus, no search, no ranking: ``optimize`` with
``k=8, rounds=0``) against MetaSchedule's best after ``--trials`` (64) kernels of its own
``tune_tir`` as a user runs it (or taken from an earlier ``bench_vs_metaschedule.py`` report with
``--metaschedule-from``, whose budgets end at 64).  Both winners are rebuilt, checked against the
unscheduled kernel's output and timed together with it, interleaved (``--retimes`` rounds, the
order alternating), in this run.

Prints each workload's speedups over the unscheduled kernel, the geometric mean of each side's
and their ratio (the issue's bar: 0.7), the median and how many workloads the model's best
reached 0.7 of MetaSchedule's; writes ``--out`` (JSON).

    python benchmarks/model_alone_vs_metaschedule.py \\
        --metaschedule-from docs/vs-metaschedule/default.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vs_metaschedule import (  # noqa: E402  (a sibling script, not a package)
    HELD_OUT,
    TARGET,
    Recorded,
    geomean,
    head_to_head,
    metaschedule,
    trained_specs,
)


def model_alone(spec: str, k: int, seed: int, model, tokenizer, evaluator,
                temperature: float = 1.0) -> dict:
    """The best of ``k`` construction scripts of the model (sampled at ``temperature``),
    timed by ``evaluator``."""
    from codegen.workloads import workload
    from training.optimize.kernel import OptimizeConfig, optimize
    from training.sampling.config import SamplingConfig

    started = time.perf_counter()
    result = optimize(model, tokenizer, workload(spec), config=OptimizeConfig(k=k, rounds=0),
                      sampling=SamplingConfig(seed=seed, temperature=temperature),
                      evaluator=evaluator)
    correct = [c for c in result.candidates if c.latency_s is not None]
    best = min(correct, key=lambda c: c.latency_s) if correct else None
    return {"script": best.script if best else None, "attempts": k,
            "distinct": len(result.candidates), "correct": len(correct),
            "tiles": sum(tiles(c.script) for c in result.candidates),
            "seconds": time.perf_counter() - started}


def tiles(script: str) -> int:
    """1 when ``script`` tiles (``dragon_dsl.stats``), 0 when not or when it does not parse (a
    sample cut at its token budget)."""
    from dragon_dsl.errors import DragonError
    from dragon_dsl.stats import script_stats

    try:
        return int(script_stats(script).tiles > 0)
    except DragonError:
        return 0


def main(argv: list[str] | None = None) -> int:
    from codegen.measure import Evaluator
    from training.cli.common import load_model
    from training.models.builtin import default_model_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=HELD_OUT)
    p.add_argument("-k", type=int, default=8, help="the model's attempts per workload")
    p.add_argument("--trials", type=int, default=64, help="MetaSchedule's kernels timed")
    p.add_argument("--min-us", type=float, default=50.0,
                   help="leave out workloads whose unscheduled kernel is faster than this")
    p.add_argument("--model", default=None, help="a model directory (default: the built-in)")
    p.add_argument("--metaschedule-from", default=None, metavar="JSON",
                   help="a bench_vs_metaschedule.py report: its MetaSchedule best at --trials "
                        "is taken, not searched again")
    p.add_argument("--retimes", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0,
                   help="the model's sampling temperature (dragon optimize's default: 1.0)")
    p.add_argument("--out", default="model_alone_vs_metaschedule.json")
    args = p.parse_args(argv)

    seen = [w for w in args.workloads if w in trained_specs()]
    if seen:
        print(f"not held out (searched by a kept training run): {', '.join(seen)}",
              file=sys.stderr)
        return 2
    earlier = json.loads(Path(args.metaschedule_from).read_text()) \
        if args.metaschedule_from else None
    if earlier is not None and args.trials not in earlier["budgets"]:
        print(f"{args.metaschedule_from}: no budget of {args.trials} kernels", file=sys.stderr)
        return 2
    model, tokenizer = load_model(args.model or str(default_model_dir()))
    report: dict = {"target": TARGET, "args": vars(args), "workloads": []}
    with Evaluator(TARGET, cache=False) as ev:
        for spec in args.workloads:
            print(f"{spec}: the model, best of {args.k} ...", flush=True)
            ours = model_alone(spec, args.k, args.seed, model, tokenizer, ev, args.temperature)
            if earlier is not None:
                theirs = Recorded.of(earlier, spec, args.trials).best_of_first(args.trials)[0]
                ms_seconds = None
            else:
                print(f"{spec}: MetaSchedule {args.trials} ...", flush=True)
                side = metaschedule(spec, args.trials, args.seed)
                theirs, ms_seconds = side.best_of_first(args.trials)[0], side.seconds
            scripts = {"model": ours["script"], "metaschedule": theirs}
            timed = head_to_head(ev, spec, scripts, args.retimes)
            report["workloads"].append({"workload": spec, "model": ours,
                                        "metaschedule_script": theirs,
                                        "metaschedule_seconds": ms_seconds, "timed": timed})
            Path(args.out).write_text(json.dumps(report, indent=1))
    _print(report, args)
    return 0


def speedup(timed: dict, name: str, over: str = "unscheduled") -> float | None:
    """``over``'s median latency over ``name``'s in a ``head_to_head`` result; None unless
    both were timed correct (a side without a script is not in it)."""
    base = (timed.get(over) or {}).get("median_s")
    t = (timed.get(name) or {}).get("median_s")
    return base / t if base and t else None


def _print(report: dict, args) -> None:
    print(f"\n{'workload':58s} {'unscheduled':>12s} {'model':>8s} {'MS':>8s} {'model/MS':>8s}"
          f"  correct  tile  (of the distinct scripts)")
    kept = []
    for e in report["workloads"]:
        t = e["timed"]
        base = t["unscheduled"]["median_s"]
        if base is None or base * 1e6 < args.min_us:
            print(f"{e['workload']:58s} left out: unscheduled under {args.min_us:.0f} us")
            continue
        ours, theirs = speedup(t, "model"), speedup(t, "metaschedule")
        kept.append((ours, theirs))
        ratio = ours / theirs if ours and theirs else None
        print(f"{e['workload']:58s} {base * 1e6:10.1f}us "
              f"{_x(ours):>8s} {_x(theirs):>8s} {_x(ratio):>8s}"
              f"  {e['model']['correct']}/{e['model']['distinct']}"
              f"      {e['model']['tiles']}/{e['model']['distinct']}")
    ours = geomean([o for o, _ in kept if o])
    theirs = geomean([m for _, m in kept if m])
    ratios = [o / m for o, m in kept if o and m]
    print(f"\ngeometric mean speedup over unscheduled: model best of {args.k} {_x(ours)}, "
          f"MetaSchedule after {args.trials} {_x(theirs)}; ratio "
          f"{_x(ours / theirs if ours and theirs else None)} (bar 0.70x); per-workload median "
          f"{_x(statistics.median(ratios) if ratios else None)}, at least 0.7 on "
          f"{sum(r >= 0.7 for r in ratios)} of {len(ratios)}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


if __name__ == "__main__":
    sys.exit(main())
