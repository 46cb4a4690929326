"""Two `dragon rl` runs that drew the same prompts at every step (same data, seed and
`--max-kernel-ms`), compared step by step: each group's reward in one run against the same
prompt's group in the other, so that what differs is the training, the sampler's draw and the
timer, not which kernels a step drew.

    python docs/rl-kl/paired_steps.py docs/rl-kl/max-kernel-20 runs/s35/rl

Prints, by thirds of the run, each run's mean group reward (the raw measured reward, before
the best-of-k transformation), the paired difference with a 95% bootstrap interval over groups,
how many groups the second run scored higher, and the KL each run reached.
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
import sys
from pathlib import Path


def rollouts(run: Path) -> list[dict]:
    """The groups a run measured: ``RUN/rollouts.jsonl``, or a documented run's copy of it
    compressed (``rollouts.jsonl.gz``)."""
    path = run / "rollouts.jsonl"
    lines = path.open() if path.exists() else gzip.open(str(path) + ".gz", "rt")
    with lines:
        return [json.loads(line) for line in lines]


def groups(run: Path) -> dict[tuple[int, str], dict]:
    return {(r["step"], r["workload"]): r for r in rollouts(run)}


def kl(run: Path) -> dict[int, float]:
    metrics = run / "rl.metrics.jsonl" if (run / "rl.metrics.jsonl").exists() else \
        run / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {r["step"]: r.get("kl", 0.0) for r in rows if "loss" in r}


def mean_reward(group: dict) -> float:
    return statistics.fmean(c["reward"] for c in group["completions"])


def interval(diffs: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws)]


def main(first: str, second: str) -> None:
    a, b = groups(Path(first)), groups(Path(second))
    ka, kb = kl(Path(first)), kl(Path(second))
    both = sorted(set(a) & set(b))
    last = max(step for step, _ in both)
    cuts = [(1, last // 3), (last // 3 + 1, 2 * last // 3), (2 * last // 3 + 1, last),
            (1, last)]
    print(f"{len(both)} groups drawn by both runs (steps 1-{last})")
    print("steps    groups  first   second  second-first [95%]     second higher  KL (median)")
    for lo, hi in cuts:
        keys = [k for k in both if lo <= k[0] <= hi]
        ra = [mean_reward(a[k]) for k in keys]
        rb = [mean_reward(b[k]) for k in keys]
        diffs = [y - x for x, y in zip(ra, rb, strict=True)]
        low, high = interval(diffs)
        higher = sum(d > 0 for d in diffs)
        kla = statistics.median(v for s, v in ka.items() if lo <= s <= hi)
        klb = statistics.median(v for s, v in kb.items() if lo <= s <= hi)
        print(f"{lo:>3}-{hi:<4} {len(keys):>6}  {statistics.fmean(ra):.3f}   "
              f"{statistics.fmean(rb):.3f}   {statistics.fmean(diffs):+.3f} "
              f"[{low:+.3f}, {high:+.3f}]  {higher:>3} of {len(keys):<3}     "
              f"{kla:.4f} / {klb:.4f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
