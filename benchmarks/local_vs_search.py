"""Does exploiting the fastest kernels beat exploring with MetaSchedule's search?  For each
held-out workload of ``bench_vs_metaschedule.py``, dragon's side at one budget (its default
split: 8 carried over from the corpus, the model's share, the rest searched) against the same
with a share of the searched part given to mutants of the fastest kernels so far
(``OptimizeConfig.local``, ``codegen.search.mutate``), timed last; both winners then re-timed
together with the unscheduled kernel, interleaved (``--retimes`` rounds).  Prints each
workload's medians, the geometric mean of the search-only latency over each configuration's,
and each one's wall clock.

    python benchmarks/local_vs_search.py --budget 16 --share 1.0 0.5 --seed 0 --out local.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    import bench_vs_metaschedule as bench

    from codegen.measure import Evaluator
    from training.cli.common import load_model
    from training.models.builtin import DEFAULT_MODEL, default_model_dir
    from training.optimize.kernel import MEASURE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=bench.HELD_OUT)
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--share", nargs="+", type=float, default=[1.0, 0.5],
                   help="Shares of the searched part timed as mutants, each a configuration "
                        "beside the search alone (0).")
    p.add_argument("--retimes", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="local_vs_search.json")
    args = p.parse_args(argv)
    configs = {"search": 0.0, **{f"local {s:g}": s for s in args.share}}
    model, tokenizer = load_model(str(default_model_dir()))
    corpus = bench.kept_records()
    report = {"args": vars(args), "workloads": []}
    with Evaluator(bench.TARGET, cache=False, config=MEASURE) as ev:
        for spec in args.workloads:
            entry = {"workload": spec, "sides": {}}
            for name, share in configs.items():
                side = bench.dragon(spec, args.budget, args.seed, model, tokenizer,
                                    str(DEFAULT_MODEL / "cost_model.tar"), ev, bench.MODEL_SHARE,
                                    bench.WIDTH, None, bench.TRANSFER, corpus, 0, share)
                entry["sides"][name] = {"script": side.best_of_first(args.budget)[0],
                                        "seconds": side.seconds, **side.extra}
                print(f"{spec}: {name}, {side.seconds:.0f} s", flush=True)
            entry["timed"] = bench.head_to_head(
                ev, spec, {n: s["script"] for n, s in entry["sides"].items()}, args.retimes)
            report["workloads"].append(entry)
            Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"\nbudget {args.budget}, seed {args.seed}: median latency (us) of each winner, "
          "re-timed together")
    print(f"{'workload':58s} " + " ".join(f"{n:>10s}" for n in configs))
    ratios: dict[str, list[float]] = {n: [] for n in configs}
    for entry in report["workloads"]:
        timed = entry["timed"]
        print(f"{entry['workload']:58s} " + " ".join(
            f"{timed[n]['median_s'] * 1e6:10.1f}" if timed[n]["median_s"] else f"{'-':>10s}"
            for n in configs))
        for n in configs:
            if timed[n]["median_s"] and timed["search"]["median_s"]:
                ratios[n].append(timed["search"]["median_s"] / timed[n]["median_s"])
    print(f"{'search over each, geomean (faster / slower)':58s} " + " ".join(
        f"{math.exp(sum(map(math.log, r)) / len(r)):10.3f}" if r else f"{'-':>10s}"
        for r in ratios.values()))
    print(f"{'':58s} " + " ".join(
        f"{sum(x > 1 for x in r):>4d} / {sum(x < 1 for x in r):<3d}" for r in ratios.values()))
    print(f"{'wall clock, all workloads (s)':58s} " + " ".join(
        f"{sum(e['sides'][n]['seconds'] for e in report['workloads']):10.0f}"
        for n in configs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
