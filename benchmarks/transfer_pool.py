"""How wide should the pool of carried-over scripts be that the cost model ranks?

``dragon optimize``'s first round carries scripts over from the kept corpus (the fastest
records of the nearest workloads, tiles refitted: ``training.optimize.transfer``) and, with a
cost model, times the ``n`` of them it ranks first.  At a budget of 8 kernels that round is
everything timed, so its pool decides the result.  For each held-out workload this script
carries over the widest pool (``--neighbours`` workloads x ``--per-neighbour`` records),
scores it once with the cost model as ``optimize`` does, times every script in it once, and
then, for each narrower pool (the same function's first neighbours and first records of
each), takes the ``--n`` the cost model ranks first and the fastest of them.  The pools'
winners are then timed again together, interleaved (``--retimes`` rounds), and the table gives
each pool's winner's median over the current default's (``--default``), the geometric mean
over workloads, and how many are faster, tied or slower by the measured spread.

    python benchmarks/transfer_pool.py                          # the benchmark's 7 workloads
    python benchmarks/transfer_pool.py --workloads 'reduce(m=512,n=1024,op=sum)' --n 8
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from bench_vs_metaschedule import HELD_OUT, TARGET, head_to_head, kept_records

POOLS = ((4, 4), (4, 8), (8, 4), (8, 8), (16, 4))  # (neighbours, per neighbour)


def _pool(spec, wl, corpus, neighbours: int, per_neighbour: int) -> list[str]:
    from training.optimize.kernel import _canonical
    from training.optimize.transfer import transferred

    carried = transferred(spec, corpus, TARGET, workload=wl, neighbours_k=neighbours,
                          per_neighbour=per_neighbour, limit=neighbours * per_neighbour)
    return list(dict.fromkeys(_canonical(t.script) for t in carried))


def _top(scripts: list[str], scores: dict[str, float], n: int) -> list[str]:
    return _mixed(scripts, scores, n, 0)


def _mixed(pool: list[str], scores: dict[str, float], n: int, nearest: int) -> list[str]:
    """The ``n - nearest`` the cost model ranks first, then the ``nearest`` first of the pool
    (the nearest workloads' fastest) not among them: ``optimize``'s own choice
    (``training.optimize.kernel.ranked_picks``, ``--transfer-nearest``)."""
    from training.optimize.kernel import ranked_picks

    return [pool[i] for i in ranked_picks([scores[s] for s in pool], n, nearest)]


def _retime(evaluator, spec: str, scripts: list[str], rounds: int) -> dict[str, list]:
    """Each script timed ``rounds`` times, interleaved beside the unscheduled kernel
    (``bench_vs_metaschedule.head_to_head``): its median and spread, when it ran correctly."""
    timed = head_to_head(evaluator, spec, {str(i): s for i, s in enumerate(scripts)}, rounds)
    return {s: [timed[str(i)]["median_s"], timed[str(i)]["spread_s"] or 0.0]
            for i, s in enumerate(scripts) if timed[str(i)]["median_s"] is not None}


def measure(spec: str, corpus, cost_model_path: str, evaluator, n: int, retimes: int,
            nearest: int = 2) -> dict:
    from codegen.search.cost_model import CostModel
    from codegen.workloads import workload

    wl = workload(spec)
    started = time.perf_counter()
    pools = {f"{k}x{p}": _pool(spec, wl, corpus, k, p) for k, p in POOLS}
    widest = list(dict.fromkeys(s for pool in pools.values() for s in pool))
    cost_model = CostModel.load(cost_model_path)  # fresh: as optimize's first round sees it
    scores = dict(zip(widest, cost_model.score(wl, TARGET, widest), strict=True))
    outcomes = dict(zip(widest, evaluator.evaluate(wl, widest), strict=True))
    latency = {s: o.latency_s for s, o in outcomes.items() if o.ok}
    picks = {}
    for name, pool in pools.items():
        top = [s for s in _top(pool, scores, n) if s in latency]
        first = [s for s in pool[:n] if s in latency]   # no ranking: the nearest first
        mixed = _mixed(pool, scores, n, nearest)
        picks[name] = {
            "size": len(pool),
            "ranked": min(top, key=latency.get) if top else None,
            "mixed": min((s for s in mixed if s in latency), key=latency.get, default=None),
            "unranked": min(first, key=latency.get) if first else None,
            "oracle": min((s for s in pool if s in latency), key=latency.get, default=None)}
    winners = list(dict.fromkeys(s for p in picks.values() for s in p.values()
                                 if isinstance(s, str)))
    timed = _retime(evaluator, spec, winners, retimes)
    return {"workload": spec, "pool": len(widest), "correct": len(latency),
            "seconds": round(time.perf_counter() - started, 1),
            "picks": picks, "timed": timed,
            "scripts": winners,
            "pool_scripts": widest, "latency_s": [latency.get(s) for s in widest],
            "scores": [float(scores[s]) for s in widest]}


def _ratio(row: dict, base: str, name: str, how: str) -> tuple[float, float] | None:
    """The default pool's winner's median over ``name``'s, and the larger relative spread."""
    a, b = row["picks"][base]["ranked"], row["picks"][name].get(how)
    if a not in row["timed"] or b not in row["timed"]:
        return None
    (ma, sa), (mb, sb) = row["timed"][a], row["timed"][b]
    return ma / mb, max(sa / ma, sb / mb)


def table(rows: list[dict], base: str) -> str:
    lines = ["| pool (neighbours x per neighbour) | size, median | how | geomean over "
             f"{base} ranked | median | faster / tie / slower |", "|---|---|---|---|---|---|"]
    for name in rows[0]["picks"]:
        sizes = statistics.median(r["picks"][name]["size"] for r in rows)
        for how in ("ranked", "mixed", "unranked", "oracle"):
            got = [x for x in (_ratio(r, base, name, how) for r in rows) if x is not None]
            if not got:
                continue
            ratios = [x for x, _ in got]
            faster = sum(x > 1 + s for x, s in got)
            slower = sum(x < 1 / (1 + s) for x, s in got)
            g = math.exp(statistics.fmean(math.log(x) for x in ratios))
            lines.append(f"| {name} | {sizes:g} | {how} | {g:.2f}x | "
                         f"{statistics.median(ratios):.2f}x | "
                         f"{faster} / {len(got) - faster - slower} / {slower} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from codegen.measure import Evaluator
    from training.models.builtin import DEFAULT_MODEL
    from training.optimize.kernel import MEASURE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=HELD_OUT)
    p.add_argument("--n", type=int, default=8, help="Scripts timed from the pool.")
    p.add_argument("--default", default="4x4", help="The pool the others are compared with.")
    p.add_argument("--cost-model", default=str(DEFAULT_MODEL / "cost_model.tar"))
    p.add_argument("--retimes", type=int, default=5)
    p.add_argument("--nearest", type=int, default=2,
                   help="'mixed': this many of the n are the pool's first (nearest) ones.")
    p.add_argument("--out", default="runs/transfer_pool.json")
    args = p.parse_args(argv)
    corpus = kept_records()
    trained = {r.workload for r in corpus}
    held = [s for s in args.workloads if s not in trained]
    if len(held) < len(args.workloads):
        print(f"left out, in the corpus: {sorted(set(args.workloads) - set(held))}",
              file=sys.stderr)
    rows = []
    with Evaluator(TARGET, cache=False, config=MEASURE) as evaluator:
        for spec in held:
            rows.append(measure(spec, corpus, args.cost_model, evaluator, args.n, args.retimes,
                                args.nearest))
            print(f"{spec}: pool {rows[-1]['pool']}, {rows[-1]['seconds']} s", file=sys.stderr)
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    print(table(rows, args.default))
    return 0


if __name__ == "__main__":
    sys.exit(main())
