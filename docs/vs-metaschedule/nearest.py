"""Offline, on transfer_pool.py reports (their single timings of every script in the pool):
the best of the 8 timed from the 4x4 pool when the cost model picks all 8 ('ranked'), or
8-j of them and the j nearest not among them.

    python docs/vs-metaschedule/nearest.py REPORT.json[.gz] ...   (from the repository root)
"""

import gzip
import json
import math
import sys

sys.path.insert(0, "benchmarks")
from bench_vs_metaschedule import kept_records
from transfer_pool import _pool

from codegen.workloads import workload
from training.optimize.kernel import ranked_picks

corpus = kept_records()
for path in sys.argv[1:]:
    op = gzip.open if path.endswith(".gz") else open
    d = json.load(op(path, "rt"))
    logs = {j: [] for j in (1, 2)}
    for row in d["rows"]:
        spec = row["workload"]
        lat = dict(zip(row["pool_scripts"], row["latency_s"]))
        sc = dict(zip(row["pool_scripts"], row["scores"]))
        pool = [s for s in _pool(spec, workload(spec), corpus, 4, 4) if s in lat]

        def best(ss):
            v = [lat[s] for s in ss if lat[s]]
            return min(v) if v else math.inf

        scores = [sc[s] for s in pool]
        ranked = best([pool[i] for i in ranked_picks(scores, 8)])
        out = []
        for j in (1, 2):
            mixed = [pool[i] for i in ranked_picks(scores, 8, j)]
            r = ranked / best(mixed)
            logs[j].append(math.log(r))
            out.append(f"n{j}={r:.3f}")
        print(
            f"{spec:62s} ranked {ranked * 1e6:8.1f} us  oracle {ranked / best(pool):.3f} "
            + " ".join(out)
        )
    print(
        path,
        "geomean ranked/mixed:",
        {j: round(math.exp(sum(v) / len(v)), 3) for j, v in logs.items()},
    )
