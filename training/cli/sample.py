"""``dragon sample``: scripts for a workload from a local model, under the grammar.

    dragon sample --model runs/tiny --workload 'matmul(m=512,n=512,k=512)' -n 8
    dragon sample --model runs/tiny --workload SPEC --refine old.dragon --check

By default decoding is schedule-aware (``training.sampling.schedule_aware``): each statement is
applied to the kernel as it is written and the next is narrowed by the live schedule, so every
sample applies.  ``--decoding workload`` constrains by the grammar narrowed to the workload
(``training.grammars.constraints``) only, ``--decoding plain`` (or ``--plain-grammar``) by the
language's grammar alone, and ``--decoding none`` (or ``--no-constraints``) samples freely.
``--check`` builds, verifies and times every sample (``training.optimize.propose``) and prints JSON.
Exit codes (``ExitCode``): 0 ok, 1 no sample parsed (or, with --check, none was correct),
2 usage errors.
"""

from __future__ import annotations

import json

from codegen.cli.workloads import cli_workload
from codegen.measure import Evaluator
from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
    parse_target,
)
from training.cli.common import load_model, model_path, script_to_refine
from training.optimize.propose import GRAMMARS
from training.sampling.config import SamplingConfig

__all__ = ["register"]

# The SamplingConfig fields that are flags; the grammar and the stop marker are not.
_FLAGS = ("n", "temperature", "top_p", "seed", "max_new_tokens", "batch_size", "wind_down",
          "backend")


def cmd_sample(args) -> int:
    from training.optimize.propose import ProposeError, measured_latency, propose

    wl = cli_workload(args.workload)
    target = parse_target(args.target)
    if args.latency_us is not None and not args.latency_us > 0:
        raise UsageError(f"Expected --latency-us > 0 but got --latency-us {args.latency_us}")
    config = config_from_args(SamplingConfig, args)
    old = script_to_refine(args.refine) if args.refine else None
    grammar = "none" if args.no_constraints else "plain" if args.plain_grammar else args.decoding
    model, tokenizer = load_model(model_path(args.model))
    evaluator = None
    if args.check or (old is not None and args.latency_us is None):
        evaluator = Evaluator(target)
    try:
        latency = args.latency_us * 1e-6 if args.latency_us is not None else None
        if old is not None and latency is None:
            latency = measured_latency(wl, old, evaluator)
        proposals = propose(model, tokenizer, wl, target, config=config, grammar=grammar,
                            refine=old, latency_s=latency,
                            evaluator=evaluator if args.check else None)
    except ProposeError as exc:
        raise UsageError(f"{args.refine}: {exc}") from None
    finally:
        if evaluator is not None:
            evaluator.close()
    if args.check or args.json:
        print(json.dumps({"workload": wl.spec, "target": args.target,
                          "samples": [p.as_dict() for p in proposals]}, indent=2))
    else:
        for i, p in enumerate(proposals):
            s = p.sample
            note = {"end": "", "error": " (ended by an error)"}.get(
                s.finish_reason, f" (cut at {s.n_tokens} tokens)")
            print(f"# sample {i}{note}\n{s.text.rstrip()}\n")
    if args.check:
        return ExitCode.OK if any(p.outcome and p.outcome.ok for p in proposals) \
            else ExitCode.FINDINGS
    return ExitCode.OK if any(p.sample.parses for p in proposals) else ExitCode.FINDINGS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sample", help="sample scripts for a workload from a local model",
        description="Sample scripts for a workload from a local model directory; by default "
                    "each statement is applied to the kernel as it is written, so every "
                    "sample applies.",
        **examples("dragon init-model runs/tiny    # an untrained tiny model to try it",
                   "dragon sample --model runs/tiny --workload 'matmul(m=512,n=512,k=512)' "
                   "-n 8 --check",
                   "dragon sample --model runs/tiny --workload 'matmul(m=512,n=512,k=512)' "
                   "--refine old.dragon --latency-us 850"))
    p.add_argument("--model", help="a local model directory (with its tokenizer) or a "
                   "`dragon sft`/`dragon rl` run directory; default: the built-in "
                   "demonstration model (training/models/dragon-tiny)")
    p.add_argument("--workload", required=True, help="a workload spec or TVMScript file")
    p.add_argument("--target", default="llvm", help="llvm or cuda (the prompt names it)")
    p.add_argument("--refine", help="a script to improve (the refinement prompt)")
    p.add_argument("--latency-us", type=float, help="the refined script's latency; measured "
                   "when not given")
    add_config_arguments(p, SamplingConfig, only=_FLAGS, aliases={"n": ("-n",)})
    p.add_argument("--decoding", choices=GRAMMARS, default="schedule",
                   help="schedule: apply each statement as it is written (every sample "
                        "applies); workload: the workload's grammar; plain: the language's "
                        "grammar; none: no constraint (default: schedule; --backend and "
                        "--wind-down concern the other modes, schedule-aware decoding closes a "
                        "script near the budget itself)")
    p.add_argument("--plain-grammar", action="store_true", help="same as --decoding plain")
    p.add_argument("--no-constraints", action="store_true", help="same as --decoding none")
    p.add_argument("--check", action="store_true",
                   help="build, verify and time every sample; print JSON")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_sample)
