"""Offline: a second round of carried-over scripts (ranked by the cost model taught the first 8)
from the widest pool, on transfer_pool.json.gz's single timings.

    python docs/vs-metaschedule/second_transfer.py   (from the repository root)
"""

import gzip
import json
import math
import random
import sys

sys.path.insert(0, "benchmarks")
from bench_vs_metaschedule import TARGET, kept_records
from transfer_pool import _pool

from codegen.search.cost_model import CostModel
from codegen.workloads import workload

d = json.load(gzip.open("docs/vs-metaschedule/transfer_pool.json.gz"))
corpus = kept_records()
res = {k: [] for k in ("first8", "next7_static", "next7_taught", "rand7", "oracle")}
for row in d["rows"]:
    spec = row["workload"]
    wl = workload(spec)
    lat = dict(zip(row["pool_scripts"], row["latency_s"]))
    sc = dict(zip(row["pool_scripts"], row["scores"]))
    small = [s for s in _pool(spec, wl, corpus, 4, 4) if s in lat]
    first = sorted(small, key=lambda s: -sc[s])[:8]
    rest = [s for s in row["pool_scripts"] if s not in first]

    def best(ss):
        v = [lat[s] for s in ss if lat[s]]
        return min(v) if v else math.inf

    b8 = best(first)
    static = sorted(rest, key=lambda s: -sc[s])[:7]
    cm = CostModel.load(d["args"]["cost_model"], threads=0)
    cm.update(wl, TARGET, first, [lat[s] for s in first])
    new = cm.score(wl, TARGET, rest)
    taught = [rest[i] for i in sorted(range(len(rest)), key=lambda i: -new[i])[:7]]
    rng = random.Random(0)
    rs = [b8 / min(b8, best(rng.sample(rest, 7))) for _ in range(200)]
    out = {
        "first8": 1.0,
        "next7_static": b8 / min(b8, best(static)),
        "next7_taught": b8 / min(b8, best(taught)),
        "rand7": math.exp(sum(map(math.log, rs)) / len(rs)),
        "oracle": b8 / min(b8, best(rest)),
    }
    for k, v in out.items():
        res[k].append(v)
    print(
        f"{spec:60s} small={len(small)} pool={len(rest) + 8} best8={b8 * 1e6:.1f}us "
        + " ".join(f"{k}={v:.3f}" for k, v in out.items()),
        flush=True,
    )
print(
    "geomean:",
    " ".join(f"{k}={math.exp(sum(map(math.log, v)) / len(v)):.3f}" for k, v in res.items()),
)
