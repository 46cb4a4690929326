"""Two models' attempts from several `dragon eval` runs of the same tasks, pooled, and tested:
``training.evaluate.metrics.permutation_test`` on each kind's tasks, at best of k (each
attempt's speedup is over the unscheduled kernel timed in its own run, so runs with other
sampling seeds, on other days, pool).  Prints, per kind and per family, the geometric-mean
ratio of the first model's expected best of k over the second's and the permutation p.

    python docs/rl-kl/pooled.py A B K SAMPLES [SAMPLES ...]

    python docs/rl-kl/pooled.py rl sft 4 docs/rl-kl/scale-batch/construction-whole/samples.jsonl.gz \\
        docs/rl-kl/scale-batch/construction-seed1/samples.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict

from training.evaluate.metrics import permutation_test, slow_tasks

NUMBERS = ("latency_s", "unscheduled_s", "spread_s")


def rows_of(path: str) -> list[dict]:
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:          # older files kept every field as text
        for key in NUMBERS:
            if isinstance(row.get(key), str):
                row[key] = float(row[key]) if row[key] else None
    return rows


def main(a: str, b: str, k: int, paths: list[str]) -> None:
    rows = [r for path in paths for r in rows_of(path)]
    kept = slow_tasks(rows, 50e-6)
    rows = [r for r in rows if r["task"] in kept and r["model"] in (a, b)]
    for kind in sorted({r["kind"] for r in rows}):
        t = permutation_test(rows, a, b, kind, k=k)
        print(f"{kind}: {t['tasks']} tasks, {len(paths)} runs; expected best of {k}, {a} over "
              f"{b}: geomean {t['ratio']:.3f}, permutation p {t['p']:.3g}")
        families = defaultdict(list)
        for r in rows:
            if r["kind"] == kind:
                families[r.get("family", "")].append(r)
        for family, group in sorted(families.items()):
            f = permutation_test(group, a, b, kind, k=k, rounds=500)
            print(f"  {family:18s} {f['tasks']:3d} tasks  {f['ratio']:.2f}  p {f['p']:.2g}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
