"""Do constraints pay?  Shares of samples that parse, apply, build and are numerically correct,
for a tiny model untrained and after a few minutes of supervised training, sampled four ways in
one run: unconstrained, under the language's grammar, under the grammar narrowed to the workload
(``training.grammars.constraints``), and schedule-aware (``training.sampling.schedule_aware``: each
statement applied as it is written, refused ones sampled again).

    python benchmarks/bench_constraints.py [--samples 16] [--sft-steps 300]

Training data: construction prompts (``training.prompts.templates``) for scripts that MetaSchedule
sampled on the training workloads (ranges spelled out, as the sampling grammars write them);
evaluation: held-out shapes of the same families.  Every sample goes through
``codegen.Evaluator`` on llvm (worker processes, the unscheduled kernel as the reference).
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter

TRAIN = [
    "matmul(m=128,n=128,k=128)", "matmul(m=64,n=256,k=64)", "matmul(m=256,n=64,k=128)",
    "dense(m=64,n=128,k=256,bias=1,act=relu)", "dense(m=32,n=256,k=128)",
    "batch_matmul(b=2,m=32,n=64,k=32)", "softmax(m=32,n=64)", "softmax(m=64,n=256)",
    "layer_norm(m=32,n=128)", "conv2d(h=14,w=14,ci=16,co=16)", "conv2d(h=7,w=7,ci=32,co=32)",
    "reduce(m=64,n=128,op=sum)", "elementwise(m=64,n=64)",
]
EVAL = ["matmul(m=128,n=64,k=256)", "dense(m=64,n=256,k=128,bias=1,act=relu)",
        "softmax(m=128,n=128)", "conv2d(h=14,w=14,ci=32,co=16)"]


def corpus(specs: list[str], per_workload: int):
    import dragon_dsl
    from codegen.search import sample_traces
    from codegen.workloads import workload
    from training.grammars.constraints import expand_ranges
    from training.prompts.templates import construction_prompt, format_completion

    rows = []
    for spec in specs:
        wl = workload(spec)
        for trace in sample_traces(wl.mod, "llvm", "llvm", per_workload, seed=3):
            script = dragon_dsl.from_trace(trace, postproc="auto", postproc_set="llvm",
                                           workload=wl)
            rows.append({"prompt": construction_prompt(wl, "llvm"),
                         "completion": format_completion(expand_ranges(script))})
    return rows


def sft(model, tokenizer, rows, steps: int, out_dir: str):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=out_dir, max_steps=steps, per_device_train_batch_size=8,
                     learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=10,
                     logging_steps=50, save_strategy="no", report_to=[], use_cpu=True,
                     max_length=1024, seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer)
    trainer.train()
    return trainer.model.eval()


def shares(model, tokenizer, evaluator, samples: int, mode: str, reasons: Counter):
    """Shares of non-empty samples that parse, apply, build and are correct; the share of empty
    scripts (an empty script leaves the kernel unscheduled, which is correct but worthless) and
    of samples cut at the token budget.  ``reasons`` counts the apply errors."""
    from codegen.measure.outcomes import Status
    from codegen.workloads import workload
    from training.grammars.constraints import workload_grammar
    from training.prompts.templates import construction_prompt
    from training.sampling import SamplingConfig, sample, sample_schedule_aware

    counts = Counter()
    for spec in EVAL:
        wl = workload(spec)
        config = SamplingConfig(n=samples, max_new_tokens=384, seed=1, batch_size=samples,
                                constrained=mode != "unconstrained",
                                grammar=workload_grammar(wl, "llvm") if mode == "workload"
                                else None)
        prompt = construction_prompt(wl, "llvm")
        if mode == "schedule":
            drawn = sample_schedule_aware(model, tokenizer, prompt, wl, "llvm", config)
        else:
            drawn = sample(model, tokenizer, prompt, config)
        counts["samples"] += len(drawn)
        counts["resampled"] += sum(s.resampled for s in drawn)
        counts["statements"] += sum(_statements(s.text) for s in drawn)
        counts["cut"] += sum(s.finish_reason == "length" for s in drawn)
        scripts = [s.text for s in drawn if s.text.strip()]
        counts["empty"] += len(drawn) - len(scripts)
        for o in evaluator.evaluate(wl, scripts):
            counts["parse"] += o.status is not Status.PARSE_ERROR
            counts["apply"] += o.status not in (Status.PARSE_ERROR, Status.APPLY_ERROR)
            counts["build"] += o.status not in (Status.PARSE_ERROR, Status.APPLY_ERROR,
                                                Status.BUILD_ERROR, Status.TIMEOUT)
            counts["correct"] += o.ok
            if o.status is Status.APPLY_ERROR:
                reasons[_reason(o.message)] += 1
    n = counts["samples"]
    keys = ("empty", "cut", "parse", "apply", "build", "correct", "resampled", "statements")
    return {k: counts[k] / n for k in keys} | {"n": n}


def _statements(text: str) -> int:
    """Statements before ``postproc``: what the model scheduled itself."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return sum(1 for ln in lines if not ln.startswith("postproc"))


def _reason(message: str) -> str:
    """An apply error without its names and numbers, so that alike errors count together."""
    first = message.splitlines()[0] if message else "?"
    first = re.sub(r"^line \d+, column \d+: ", "", first)
    return re.sub(r"'[^']*'|\b[A-Za-z_]*\d+\b|\d+", "_", first)[:90]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16, help="samples per eval workload")
    parser.add_argument("--per-workload", type=int, default=12, help="training scripts each")
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--save", help="save the SFT model and its tokenizer in this directory "
                        "(then try it: dragon sample --model DIR --workload SPEC --check)")
    args = parser.parse_args()

    import tempfile

    from codegen.measure import MeasureConfig
    from codegen.measure.evaluator import Evaluator
    from training.models.tokenizer import tiny_model, train_tokenizer

    start = time.time()
    rows = corpus(TRAIN, args.per_workload)
    eval_rows = corpus(EVAL, 2)  # the tokenizer sees the eval prompts' vocabulary, not scripts
    tokenizer = train_tokenizer([r["prompt"] + r["completion"] for r in rows] +
                                [r["prompt"] for r in eval_rows])
    model = tiny_model(tokenizer)
    print(f"corpus: {len(rows)} examples from {len(TRAIN)} workloads "
          f"({time.time() - start:.0f} s)", flush=True)
    results, reasons = [], {}
    config = MeasureConfig(repeat=3, min_repeat_ms=1.0, build_timeout_s=60, run_timeout_s=10)
    with Evaluator("llvm", cache=False, config=config) as ev:
        for stage in ("untrained", f"SFT {args.sft_steps} steps"):
            if stage != "untrained":
                t = time.time()
                with tempfile.TemporaryDirectory() as out:
                    model = sft(model, tokenizer, rows, args.sft_steps, out)
                print(f"SFT: {time.time() - t:.0f} s", flush=True)
                if args.save:
                    model.save_pretrained(args.save)
                    tokenizer.save_pretrained(args.save)
            for mode in ("unconstrained", "grammar", "workload", "schedule"):
                t = time.time()
                reasons[stage, mode] = Counter()
                results.append((stage, mode, shares(model, tokenizer, ev, args.samples, mode,
                                                    reasons[stage, mode])))
                print(f"{stage} / {mode}: {time.time() - t:.0f} s", flush=True)
    print()
    print("Each column is a share of all samples; parse, apply, build and correct count "
          "non-empty scripts only.")
    print()
    print("| model | sampling | n | empty | cut at budget | parse | apply | build | correct | "
          "statements per script | resampled per script |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for stage, mode, s in results:
        print(f"| {stage} | {mode} | {s['n']} | {s['empty']:.0%} | {s['cut']:.0%} | "
              f"{s['parse']:.0%} | {s['apply']:.0%} | {s['build']:.0%} | {s['correct']:.0%} | "
              f"{s['statements']:.1f} | {s['resampled']:.2f} |")
    print()
    for (stage, mode), counter in reasons.items():
        if counter:
            print(f"apply errors, {stage} / {mode}: " + "; ".join(
                f"{n} x {r}" for r, n in counter.most_common(4)))


if __name__ == "__main__":
    main()
