"""What does the grammar cost?  Tokens per second sampled unconstrained, under the language's
grammar, under the grammar narrowed to the workload and schedule-aware, on the same model and
prompts in one run; the mask time per row and step (median, p99); grammar compile times; for
schedule-aware decoding, the median time to apply one statement and to narrow the next.

    python benchmarks/bench_sampling.py [--tokens 128] [--batch 16] [--repeats 5]

Every mode generates up to ``--tokens`` tokens per row (the wind-down is off); a constrained
script ends when the grammar says so (the canonical sampling grammar admits nothing after a
complete script), so modes are compared per decoding step (one forward pass for the batch) with
the prefill (one forward pass over the prompts, timed apart) taken out.  Modes alternate within
each repeat; the table gives medians over repeats, each mode's time per step relative to
unconstrained, and the share of the wall time spent in the constraint (the logits processor:
feeding matchers, computing and applying masks; schedule-aware: masks, applying statements and
narrowing the next), which machine noise does not move as much as the ratio.

Schedule-aware decoding runs its own loop (it takes rolled-back tokens out of the cache) rather
than ``model.generate``; its time per step includes that loop's own bookkeeping.
Models are untrained Llama models from ``training.models.tokenizer`` (CPU, the torch default
thread count): the smaller the model, the cheaper its forward pass and the more the mask shows.
"""

from __future__ import annotations

import argparse
import statistics
import time

STATEMENTS = ["matmul(m=128,n=128,k=128)", "softmax(m=32,n=64)", "conv2d(h=14,w=14,ci=16,co=16)",
         "layer_norm(m=32,n=64)"]
MODES = ("unconstrained", "grammar", "workload", "schedule")


def compile_times(tokenizer, workloads) -> dict[str, float]:
    """Seconds to compile the plain grammar, and (median over workloads) to build and compile a
    workload grammar, each until the first mask is computed."""
    import llguidance

    from training.grammars.constraints import sampling_grammar, workload_grammar
    from training.sampling import llg_tokenizer

    tok = llg_tokenizer(tokenizer)

    def compile_once(make) -> float:
        start = time.perf_counter()
        matcher = llguidance.LLMatcher(tok, llguidance.grammar_from("lark", make()), log_level=0)
        matcher.compute_bitmask()
        assert not matcher.is_error(), matcher.get_error()
        return time.perf_counter() - start

    plain = statistics.median(compile_once(sampling_grammar) for _ in range(5))
    narrow = statistics.median(compile_once(lambda wl=wl: workload_grammar(wl))
                               for wl in workloads for _ in range(3))
    return {"grammar": plain, "workload": narrow}


def run_mode(model, tokenizer, prompts, grammars, mode: str, tokens: int, batch: int):
    """Seconds for one pass over the prompts, and the processors' (seconds, rows) per step."""
    import torch
    from transformers import LogitsProcessorList

    from training.sampling import grammar_logits_processor

    if mode == "schedule":
        return run_schedule(model, tokenizer, prompts, tokens, batch)
    elapsed, steps, masks = 0.0, 0, []
    for prompt, grammar in zip(prompts, grammars, strict=True):
        inputs = tokenizer([prompt] * batch, return_tensors="pt")
        hooks = {}
        if mode != "unconstrained":
            processor = grammar_logits_processor(tokenizer, grammar if mode == "workload" else None)
            processor.steps = []
            hooks = {"logits_processor": LogitsProcessorList([processor])}
        torch.manual_seed(0)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=True, top_k=0, max_new_tokens=tokens,
                                 pad_token_id=tokenizer.pad_token_id, **hooks)
        elapsed += time.perf_counter() - start
        steps += out.shape[1] - inputs["input_ids"].shape[1]
        if hooks:
            masks += processor.steps
    return elapsed, steps, masks, {}


WORKLOADS: dict = {}


def run_schedule(model, tokenizer, prompts, tokens: int, batch: int):
    """Schedule-aware decoding of the same prompts: seconds with the prefill taken out, steps,
    and the per-statement timings."""
    import torch

    from training.sampling import SamplingConfig, schedule_aware_generate

    elapsed, steps = 0.0, 0
    extra = {"replay": [], "narrow": [], "overhead": 0.0}
    for prompt in prompts:
        part: dict = {}
        torch.manual_seed(0)
        start = time.perf_counter()
        schedule_aware_generate(model, tokenizer, [prompt] * batch, [WORKLOADS[prompt]] * batch,
                                "llvm", sampling=SamplingConfig(max_new_tokens=tokens),
                                stats=part)
        elapsed += time.perf_counter() - start - part["prefill_seconds"]
        steps += part["steps"]
        extra["replay"] += part["replay_seconds"]
        extra["narrow"] += part["narrow_seconds"]
        extra["overhead"] += (part["mask_seconds"] + sum(part["replay_seconds"])
                              + sum(part["narrow_seconds"]))
    return elapsed, steps, [], extra


def prefill_seconds(model, tokenizer, prompts, batch: int) -> float:
    """One forward pass over each prompt's batch: the prefill both loops start with."""
    import torch

    total = 0.0
    for prompt in prompts:
        inputs = tokenizer([prompt] * batch, return_tensors="pt")
        start = time.perf_counter()
        with torch.no_grad():
            model(**inputs)
        total += time.perf_counter() - start
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per row")
    parser.add_argument("--batch", type=int, default=16, help="rows per prompt")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", default="64x2,256x4",
                        help="models as hidden x layers, comma-separated")
    args = parser.parse_args()

    import numpy as np
    import torch

    from codegen.workloads import workload
    from training.grammars.constraints import workload_grammar
    from training.models.tokenizer import TokenizerConfig, build_tokenizer, tiny_model
    from training.prompts.templates import construction_prompt

    tokenizer = build_tokenizer(TokenizerConfig(workloads=tuple(STATEMENTS), targets=("llvm",),
                                                traces_per_workload=3))
    workloads = [workload(s) for s in STATEMENTS]
    prompts = [construction_prompt(wl, "llvm") for wl in workloads]
    grammars = [workload_grammar(wl) for wl in workloads]
    WORKLOADS.update(zip(prompts, workloads, strict=True))
    compiled = compile_times(tokenizer, workloads)
    print(f"vocabulary {len(tokenizer)}, {len(STATEMENTS)} prompts x {args.batch} rows x "
          f"{args.tokens} tokens, {args.repeats} repeats, torch threads "
          f"{torch.get_num_threads()}", flush=True)

    rows, notes = [], []
    for size in args.sizes.split(","):
        hidden, layers = (int(x) for x in size.split("x"))
        torch.manual_seed(0)
        model = tiny_model(tokenizer, hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers)
        params = sum(p.numel() for p in model.parameters())
        run_mode(model, tokenizer, prompts[:1], grammars[:1], "grammar", 8, 2)  # warm-up
        run_mode(model, tokenizer, prompts[:1], grammars[:1], "schedule", 8, 2)
        per_step = {m: [] for m in MODES}
        masks = {m: [] for m in MODES}
        in_processor = {m: [] for m in MODES}
        statement = {"replay": [], "narrow": []}
        for _ in range(args.repeats):
            prefill = prefill_seconds(model, tokenizer, prompts, args.batch)
            for mode in MODES:
                t, n, mask, extra = run_mode(model, tokenizer, prompts, grammars, mode,
                                             args.tokens, args.batch)
                if mode == "schedule":  # its own loop times the prefill apart
                    statement["replay"] += extra["replay"]
                    statement["narrow"] += extra["narrow"]
                    in_processor[mode].append(extra["overhead"] / t)
                else:
                    t -= prefill
                    in_processor[mode].append(sum(x for x, _ in mask) / t)
                per_step[mode].append(t / n)
                masks[mode] += mask
        base = statistics.median(per_step["unconstrained"])
        for mode in MODES:
            median = statistics.median(per_step[mode])
            per_row = np.array([s / r for s, r in masks[mode] if r]) * 1e6
            rows.append((f"{hidden}x{layers} ({params / 1e6:.2f}M)", mode, median * 1e3,
                         median / base, statistics.median(in_processor[mode]),
                         *(np.percentile(per_row, [50, 99]) if len(per_row) else (None, None)),
                         compiled.get(mode)))
        replay = np.array(statement["replay"]) * 1e3
        narrow = np.array(statement["narrow"]) * 1e3
        notes.append(f"{size}: schedule-aware, per statement: apply median {np.median(replay):.2f}"
                     f" ms (p90 {np.percentile(replay, 90):.2f}), narrowing the next median "
                     f"{np.median(narrow):.2f} ms (p90 {np.percentile(narrow, 90):.2f}); "
                     f"{len(replay)} statements")
        print(f"model {size} done", flush=True)

    print()
    print(f"| model (hidden x layers) | sampling | ms per step ({args.batch} rows) | "
          "time per step vs unconstrained | time in the constraint | mask per row-step, median "
          "| p99 | grammar compile |")
    print("|---|---|---|---|---|---|---|---|")
    for model, mode, ms, ratio, share, p50, p99, compile_s in rows:
        mask = ("-", "-") if p50 is None else (f"{p50:.0f} us", f"{p99:.0f} us")
        comp = "-" if compile_s is None else f"{compile_s * 1e3:.0f} ms"
        print(f"| {model} | {mode} | {ms:.2f} | {ratio:.2f}x | {share:.1%} | {mask[0]} | "
              f"{mask[1]} | {comp} |")
    print()
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
