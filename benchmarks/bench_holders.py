"""What spreading the live schedules over worker processes buys schedule-aware sampling
(``ScheduleAwareConfig.holders``, ``training.sampling.live_worker.LivePool``).

The built-in model writes ``--n`` construction scripts for each workload, with one worker
holding every row's schedule and with two (statements of rows completed at the same step
applied at once, beside the model's forward pass); the two alternate, ``--repeats`` times,
after one warm-up each.  The same seed writes the same scripts both ways (checked).  Prints
the median seconds of each and their ratio.

    python benchmarks/bench_holders.py [--n 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WORKLOADS = ["conv2d(n=1,h=28,w=28,ci=48,co=64,kh=3,kw=3,stride=1,pad=1)",
             "matmul(m=256,n=256,k=256)", "softmax(m=256,n=1024)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--holders", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    from codegen.workloads import workload
    from training.models.builtin import DEFAULT_MODEL
    from training.optimize.propose import prompt_for
    from training.sampling.config import SamplingConfig
    from training.sampling.generate import load
    from training.sampling.schedule_aware import ScheduleAwareConfig, sample_schedule_aware

    model, tokenizer = load(str(DEFAULT_MODEL))
    print(f"{'workload':<40} " + " ".join(f"{f'{h} holder(s) s':>14}" for h in args.holders)
          + f" {'ratio':>7}")
    for spec in WORKLOADS:
        wl = workload(spec)
        prompt = prompt_for(wl, "llvm")

        def run(holders: int, n: int, seed: int = 0) -> tuple[float, list[str]]:
            start = time.perf_counter()
            samples = sample_schedule_aware(model, tokenizer, prompt, wl, "llvm",
                                            SamplingConfig(n=n, seed=seed),
                                            aware=ScheduleAwareConfig(holders=holders))
            return time.perf_counter() - start, [s.text for s in samples]

        for h in args.holders:
            run(h, 2, seed=9)  # start the workers, warm the grammar cache
        seconds: dict[int, list[float]] = {h: [] for h in args.holders}
        texts: dict[int, list[str]] = {}
        for _ in range(args.repeats):
            for h in args.holders:
                took, texts[h] = run(h, args.n)
                seconds[h].append(took)
        same = all(texts[h] == texts[args.holders[0]] for h in args.holders)
        medians = [statistics.median(seconds[h]) for h in args.holders]
        print(f"{spec[:40]:<40} " + " ".join(f"{m:>14.1f}" for m in medians)
              + f" {medians[0] / medians[-1]:>6.2f}x" + ("" if same else "  (scripts differ!)"),
              flush=True)


if __name__ == "__main__":
    main()
