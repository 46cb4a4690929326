"""Does dragon pick the wrong winner from single timings?  At a budget of 16 on each held-out
workload of bench_vs_metaschedule.py (its default split), the 4 fastest kernels by their one
timing in the run, timed again together with the unscheduled kernel (5 interleaved rounds):
how much faster the best re-timed is than the first by single timing.

    python docs/vs-metaschedule/finalists.py SEED OUT.json   (from the repository root)
"""

import json
import math
import sys

sys.path.insert(0, "benchmarks")
import bench_vs_metaschedule as bench

from codegen.measure import Evaluator
from training.cli.common import load_model
from training.models.builtin import DEFAULT_MODEL, default_model_dir
from training.optimize.kernel import MEASURE

seed = int(sys.argv[1])
out = sys.argv[2]
model, tok = load_model(str(default_model_dir()))
corpus = bench.kept_records()
rep = []
with Evaluator(bench.TARGET, cache=False, config=MEASURE) as ev:
    for spec in bench.HELD_OUT:
        side = bench.dragon(
            spec,
            16,
            seed,
            model,
            tok,
            str(DEFAULT_MODEL / "cost_model.tar"),
            ev,
            0.1,
            16,
            None,
            8,
            corpus,
        )
        ok = sorted({s: lat for s, lat in side.timed if s and lat}.items(), key=lambda x: x[1])[:4]
        timed = bench.head_to_head(ev, spec, {f"r{i}": s for i, (s, _) in enumerate(ok)}, 5)
        med = {k: v["median_s"] for k, v in timed.items()}
        rep.append(
            {
                "workload": spec,
                "single": [lat for _, lat in ok],
                "retimed": med,
                "sources": side.extra["sources"],
                "scripts": [s for s, _ in ok],
            }
        )
        print(
            spec,
            " ".join(f"{k}:{(v or 0) * 1e6:.1f}" for k, v in med.items()),
            "single",
            " ".join(f"{lat * 1e6:.1f}" for _, lat in ok),
            flush=True,
        )
        json.dump(rep, open(out, "w"), indent=1)
for n in (2, 3, 4):
    r = [
        e["retimed"]["r0"]
        / min(v for k, v in e["retimed"].items() if k != "unscheduled" and v and int(k[1:]) < n)
        for e in rep
    ]
    print(
        f"top-{n} re-timed pick over top-1: geomean {math.exp(sum(map(math.log, r)) / len(r)):.3f}",
        " ".join(f"{x:.3f}" for x in r),
    )
