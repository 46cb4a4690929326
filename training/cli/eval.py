"""``dragon eval``: models side by side on the held-out tasks of a ``dragon datagen`` output.

    dragon eval --model sft=runs/sft-tiny --model rl=runs/rl-tiny --data data/tiny --out eval/
    dragon eval --model rl=runs/rl-tiny --data data/tiny --out eval/ --kinds refinement -k 8
    dragon eval --model qwen=http://localhost:8000/v1#Qwen/Qwen3-8B?grammar=lark --data ...

Each model writes ``--attempts`` scripts per task, a local model by schedule-aware decoding, an
OpenAI-compatible endpoint (``training.evaluate.http_model``) through its server, and
MetaSchedule's search (the model ``metaschedule``, unless ``--no-metaschedule``) gets as many
trials per workload; every script and every reference (the unscheduled kernel, the start
script, MetaSchedule's best from the dataset) is measured in this run.  Writes OUT/report.md
with its plots, OUT/summary.json and OUT/samples.jsonl; a rerun with the same settings measures
only what is missing.  Exit codes (``ExitCode``): 0 evaluated,
2 usage errors (a model or data that cannot be read, an OUT holding another evaluation).
"""

from __future__ import annotations

import contextlib
import json
import sys

from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
)

__all__ = ["register"]


def _models(values: list[str]) -> dict[str, str]:
    models: dict[str, str] = {}
    for value in values:
        if value.startswith(("http://", "https://")):
            raise UsageError(f"--model {value!r}: name an endpoint, NAME=URL#SERVED_MODEL")
        name, sep, path = value.partition("=")
        if not sep:
            name, path = value.rstrip("/").rsplit("/", 1)[-1], value
        if not name or not path:
            raise UsageError(f"--model {value!r}: expected NAME=PATH")
        if name in models:
            raise UsageError(f"--model: two models named {name!r}; name them NAME=PATH")
        models[name] = path
    return models


def cmd_eval(args) -> int:
    from training.evaluate import EvalConfig, EvalError, ResultUnwritten, TaskError, run_eval
    from training.train.run_dir import RunError
    from training.train.sft_config import ConfigError

    try:
        config = config_from_args(EvalConfig, args)
        with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
            summary = run_eval(_models(args.model), args.data, args.out, target=args.target,
                               config=config, progress=not args.quiet)
    except ResultUnwritten as exc:
        _show(exc.summary, args)  # the result is not lost: shown here, then where it is not
        raise UsageError(str(exc)) from None
    except (EvalError, TaskError, RunError, ConfigError) as exc:
        raise UsageError(str(exc)) from None
    _show(summary, args)
    if not args.json:
        print(f"report: {args.out}/report.md")
    return ExitCode.OK


def _show(summary: dict, args) -> None:
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        from training.evaluate.report import markdown

        print(markdown(summary).split("\nfast_p:")[0])


def register(subparsers) -> None:
    """Add ``dragon eval`` (the ``dragon.commands`` entry point): its settings' flags made from
    ``EvalConfig``, nested sampling and measurement flags included."""
    from training.evaluate.runner import EvalConfig

    p = subparsers.add_parser(
        "eval", help="evaluate models side by side on held-out tasks, measured",
        description="Sample scripts from each model for the held-out construction and "
                    "refinement tasks of a `dragon datagen` output, build, verify and time "
                    "every one beside the tasks' references in one session, and report "
                    "per-attempt correctness, speedups (geometric mean, median, fast_p), "
                    "head-to-head counts and budget curves, against MetaSchedule's search "
                    "given as many measurements.",
        **examples("dragon eval --model sft=runs/sft-tiny --model rl=runs/rl-tiny "
                   "--data data/tiny --out eval/tiny",
                   "dragon eval --model rl=runs/rl-tiny --data data/tiny --out eval/r "
                   "--kinds refinement --attempts 8",
                   "dragon eval --model qwen=http://localhost:8000/v1#Qwen/Qwen3-8B "
                   "--model qwen-free='http://localhost:8000/v1#Qwen/Qwen3-8B?grammar=none' "
                   "--data data/tiny --out eval/qwen"))
    p.add_argument("--model", action="append", required=True, metavar="NAME=PATH",
                   help="a local model directory or SFT/RL run directory, or an "
                   "OpenAI-compatible endpoint NAME=http://HOST:PORT/v1#SERVED_MODEL"
                   "[?grammar=lark|lark-guided|gbnf|gbnf-vllm|none] (repeatable)")
    p.add_argument("--data", required=True, help="a `dragon datagen` output directory")
    p.add_argument("--out", required=True, help="the evaluation's directory (resumable)")
    p.add_argument("--target", default=None,
                   help="where kernels are measured (default: the data's target)")
    add_config_arguments(p, EvalConfig, aliases={"attempts": ("-k",)})
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_eval)
