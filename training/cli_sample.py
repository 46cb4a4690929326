"""``dragon sample``: scripts for a workload from a local model, under the grammar.

    dragon sample --model runs/tiny --workload 'matmul(m=512,n=512,k=512)' -n 8
    dragon sample --model runs/tiny --workload SPEC --refine old.dragon --check

By default every token is constrained by the grammar narrowed to the workload
(``training.constraints``); ``--plain-grammar`` uses the language's grammar alone and
``--no-constraints`` samples freely.  ``--check`` builds, verifies and times every sample
(``codegen.Evaluator``) and prints JSON.  Exit codes: 0 ok, 1 no sample parsed (or, with
--check, none was correct), 2 usage errors.
"""

from __future__ import annotations

import json
from pathlib import Path

from dragon_dsl.cli import UsageError

__all__ = ["register"]


def cmd_sample(args) -> int:
    from codegen.workloads import workload

    try:
        wl = workload(args.workload)
        old = Path(args.refine).read_text(encoding="utf-8") if args.refine else None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    from training.prompts import construction_prompt, refinement_prompt
    from training.sampling import SamplingConfig, load, sample

    try:
        model, tokenizer = load(args.model)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot load the model: {exc}") from None
    evaluator = None
    if args.check or (old is not None and args.latency_us is None):
        from codegen.evaluate import Evaluator

        evaluator = Evaluator(args.target)
    try:
        if old is None:
            prompt = construction_prompt(wl, args.target)
        else:
            latency = args.latency_us * 1e-6 if args.latency_us is not None else None
            if latency is None:
                [measured] = evaluator.evaluate(wl, [old])
                if not measured.ok:
                    raise UsageError(f"{args.refine} is not a working script for {wl.spec}: "
                                 f"{measured.summary()}")
                latency = measured.latency_s
            prompt = refinement_prompt(wl, args.target, old, latency)
        grammar = None
        if not (args.no_constraints or args.plain_grammar):
            from training.constraints import workload_grammar

            grammar = workload_grammar(wl)
        config = SamplingConfig(n=args.n, temperature=args.temperature, top_p=args.top_p,
                                seed=args.seed, max_new_tokens=args.max_new_tokens,
                                constrained=not args.no_constraints, grammar=grammar)
        samples = sample(model, tokenizer, prompt, config)
        outcomes = evaluator.evaluate(wl, [s.text for s in samples]) if args.check else None
    finally:
        if evaluator is not None:
            evaluator.close()
    if args.check or args.json:
        rows = []
        for i, s in enumerate(samples):
            row = {"script": s.text, "finish_reason": s.finish_reason, "tokens": s.n_tokens,
                   "parses": s.parses}
            if outcomes is not None:
                row["outcome"] = outcomes[i].as_dict()
            rows.append(row)
        print(json.dumps({"workload": wl.spec, "target": args.target, "samples": rows},
                         indent=2))
    else:
        for i, s in enumerate(samples):
            note = "" if s.finish_reason == "end" else f" (cut at {s.n_tokens} tokens)"
            print(f"# sample {i}{note}\n{s.text.rstrip()}\n")
    if outcomes is not None:
        return 0 if any(o.ok for o in outcomes) else 1
    return 0 if any(s.parses for s in samples) else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("sample", help="sample scripts for a workload from a local model")
    p.add_argument("--model", required=True, help="a local model directory (with its tokenizer)")
    p.add_argument("--workload", required=True, help="a workload spec or TVMScript file")
    p.add_argument("--target", default="llvm", help="llvm or cuda (the prompt names it)")
    p.add_argument("--refine", help="a script to improve (the refinement prompt)")
    p.add_argument("--latency-us", type=float, help="the refined script's latency; measured "
                   "when not given")
    p.add_argument("-n", type=int, default=8, help="how many scripts")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--plain-grammar", action="store_true",
                   help="constrain by the language's grammar only, not the workload's")
    p.add_argument("--no-constraints", action="store_true", help="sample without any grammar")
    p.add_argument("--check", action="store_true",
                   help="build, verify and time every sample; print JSON")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_sample)
