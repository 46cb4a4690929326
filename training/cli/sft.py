"""``dragon sft``: supervised fine-tuning on `dragon datagen` data (``training.train``).

    dragon sft --preset tiny --data data/tiny --out runs/sft-tiny
    dragon sft --config training/configs/sft_paper.yaml --model /models/llama-8b-instruct \\
        --data data/paper --out runs/sft-paper
    dragon sft --resume --out runs/sft-tiny

The config is a preset, then ``--config FILE.yaml``'s fields, then the flags given (every field
of ``SFTRunConfig`` is a flag).  ``--resume`` reads ``RUN/config.yaml`` back and continues from
the newest checkpoint; ``--validate`` only checks the config and prints it.  Exit codes
(``ExitCode``): 0 trained (or valid), 2 usage errors (bad flags, a config field out of range,
missing data, a run directory that already holds a run).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys

from dragon_dsl.cli_kit import ExitCode, UsageError, add_config_arguments, examples

from ..train.config import PRESETS, ConfigError, SFTRunConfig, config_dict, resolve

__all__ = ["register"]


def _given(args: argparse.Namespace) -> dict:
    """The config fields given as flags (argparse leaves the others out)."""
    names = {f.name for f in dataclasses.fields(SFTRunConfig)}
    return {k: v for k, v in vars(args).items() if k in names}


def cmd_sft(args) -> int:
    from ..train.sft import RunError, resumed_config, run_sft

    given = _given(args)
    try:
        if args.resume:
            if args.preset or args.config:
                raise UsageError("--resume reads RUN/config.yaml: give --out RUN (and flags to "
                                 "change), not --preset or --config")
            if not given.get("out"):
                raise UsageError("--resume needs --out RUN")
            config = resumed_config(given.pop("out"), **given)
        else:
            if not (args.preset or args.config):
                raise UsageError("choose a config: --preset tiny|paper or --config FILE.yaml")
            config = resolve(args.preset, args.config, **given)
    except (ConfigError, RunError) as exc:
        raise UsageError(str(exc)) from None
    if args.validate:
        print(json.dumps(config_dict(config), indent=2))
        return ExitCode.OK
    try:
        # The Trainer prints its logs on stdout; with --json, stdout is the summary alone.
        with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
            result = run_sft(config, resume=args.resume, progress=not args.quiet)
    except RunError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        def num(x):
            return "-" if x is None else f"{x:.3f}"

        print(f"{result.run_dir}: {result.steps} steps in {result.seconds:.0f} s; train loss "
              f"{num(result.first_loss)} -> {num(result.last_loss)}, eval loss "
              f"{num(result.first_eval_loss)} -> {num(result.last_eval_loss)}; "
              f"{num(result.tokens_per_second)} tokens/s; model in {result.final_dir}")
    return ExitCode.OK


def register(subparsers) -> None:
    """Add ``dragon sft`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "sft", help="supervised fine-tuning (TRL SFTTrainer) on dragon datagen data",
        description="Fine-tune a model on the construction and refinement datasets of a "
                    "`dragon datagen` output (loss on completions only), evaluate on their "
                    "validation splits, and save checkpoints, metrics and the final model in "
                    "the run directory.  The config is a preset, then --config's fields, then "
                    "the flags given (a default below is the field's own; a preset or file "
                    "replaces it).",
        **examples("dragon sft --preset tiny --data data/tiny --out runs/sft-tiny",
                   "dragon sft --config training/configs/sft_paper.yaml --model "
                   "/models/llama-8b-instruct --data data/paper --out runs/sft-paper",
                   "dragon sft --resume --out runs/sft-tiny",
                   "dragon sft --preset paper --validate"))
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named config")
    p.add_argument("--config", metavar="FILE.yaml",
                   help="a YAML mapping of config fields (a 'preset:' key names its base)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest checkpoint")
    p.add_argument("--validate", action="store_true",
                   help="check the config and print it, without training")
    p.add_argument("--json", action="store_true", help="print the run's summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_config_arguments(p, SFTRunConfig)
    # Only the flags given count: the preset and the YAML file supply the rest.
    names = {f.name for f in dataclasses.fields(SFTRunConfig)}
    for action in p._actions:
        if action.dest in names:
            action.default = argparse.SUPPRESS
    p.set_defaults(func=cmd_sft)
