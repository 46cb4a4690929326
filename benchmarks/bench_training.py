"""Training throughput of the two stages, measured in one run on this machine.

SFT: a short ``dragon sft`` run of the ``tiny`` preset; tokens per second (completion and prompt
tokens the trainer consumed) and seconds per optimizer step.  GRPO: a short ``dragon rl`` run
of the ``tiny`` preset from an SFT model; per step, the median seconds and the share of the step
spent generating (schedule-aware decoding), measuring (build, verify, time: the reward) and
optimising (the rest: forward, backward, optimizer).

    python benchmarks/bench_training.py --data data/tiny [--sft-steps 30] [--rl-steps 4] \\
        [--sft-model runs/sft-tiny]

Without ``--sft-model`` the GRPO run starts from the SFT model this script just trained (a
short run, so its rollouts differ from a converged model's: longer, more rolled back).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a `dragon datagen` output (tiny)")
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--rl-steps", type=int, default=4)
    parser.add_argument("--sft-model", default=None, help="start GRPO from this SFT run")
    args = parser.parse_args()

    from training.train import resolve, resolve_rl, run_rl, run_sft

    # The trainers print their log lines on stdout; the table is this script's output.
    with tempfile.TemporaryDirectory(prefix="bench-training-") as tmp, \
            contextlib.redirect_stdout(sys.stderr):
        sft_out = Path(tmp) / "sft"
        sft = run_sft(resolve("tiny", data=args.data, out=str(sft_out),
                              max_steps=args.sft_steps, eval_steps=args.sft_steps,
                              save_steps=args.sft_steps), progress=False)
        rl_out = Path(tmp) / "rl"
        run_rl(resolve_rl("tiny", model=args.sft_model or str(sft_out), data=args.data,
                          out=str(rl_out), max_steps=args.rl_steps, save_steps=args.rl_steps,
                          logging_steps=1), progress=False)
        steps = [r for r in _rows(rl_out) if "time/generation_s" in r]
        step_s = [float(r.get("step_time") or r.get("time/step_s") or "nan") for r in steps]
        gen = [r["time/generation_s"] for r in steps]
        meas = [r["time/measurement_s"] for r in steps]
        opt = [max(0.0, s - g - m) for s, g, m in zip(step_s, gen, meas, strict=True)]

    print(f"SFT (tiny preset, {sft.steps} steps)")
    print(f"  tokens/s              {sft.tokens_per_second:10.0f}")
    print(f"  s/step (mean of run)  {sft.seconds / max(1, sft.steps):10.2f}")
    print()
    print(f"GRPO (tiny preset, {len(steps)} steps, medians over steps)")
    print(f"  {'':22}{'seconds':>10}{'share':>9}")
    total = _median(step_s)
    for name, values in (("step", step_s), ("generation", gen), ("measurement", meas),
                         ("optimisation", opt)):
        value = _median(values)
        print(f"  {name:22}{value:10.2f}{value / total:9.1%}")


if __name__ == "__main__":
    main()
