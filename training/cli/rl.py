"""``dragon rl``: GRPO from an SFT model, with rollouts by schedule-aware decoding and rewards
measured on the target (``training.train.rl``).

    dragon rl --preset tiny --model runs/sft-tiny --data data/tiny --out runs/rl-tiny
    dragon rl --resume --out runs/rl-tiny

The config is a preset, then ``--config FILE.yaml``'s fields, then the flags given (every field
of ``RLRunConfig`` is a flag).  ``--resume`` reads ``RUN/config.yaml`` back and continues from
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

from ..train.config import ConfigError, config_dict
from ..train.rl_config import RL_PRESETS, RLRunConfig, resolve_rl

__all__ = ["register"]


def _given(args: argparse.Namespace) -> dict:
    """The config fields given as flags (argparse leaves the others out)."""
    names = {f.name for f in dataclasses.fields(RLRunConfig)}
    return {k: v for k, v in vars(args).items() if k in names}


def cmd_rl(args) -> int:
    from ..train.rl import resumed_rl_config, run_rl
    from ..train.sft import RunError

    given = _given(args)
    try:
        if args.resume:
            if args.preset or args.config:
                raise UsageError("--resume reads RUN/config.yaml: give --out RUN (and flags to "
                                 "change), not --preset or --config")
            if not given.get("out"):
                raise UsageError("--resume needs --out RUN")
            config = resumed_rl_config(given.pop("out"), **given)
        else:
            if not (args.preset or args.config):
                raise UsageError("choose a config: --preset tiny|paper or --config FILE.yaml")
            config = resolve_rl(args.preset, args.config, **given)
    except (ConfigError, RunError) as exc:
        raise UsageError(str(exc)) from None
    if args.validate:
        print(json.dumps(config_dict(config), indent=2))
        return ExitCode.OK
    try:
        # The Trainer prints its logs on stdout; with --json, stdout is the summary alone.
        with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
            result = run_rl(config, resume=args.resume, progress=not args.quiet)
    except RunError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        def num(x):
            return "-" if x is None else f"{x:.3f}"

        print(f"{result.run_dir}: {result.steps} steps on {result.prompts} prompts in "
              f"{result.seconds:.0f} s; mean reward {num(result.mean_reward_first_half)} "
              f"(first half) -> {num(result.mean_reward_second_half)} (second half); "
              f"correct {num(result.correct_share)}; model in {result.final_dir}")
    return ExitCode.OK


def register(subparsers) -> None:
    """Add ``dragon rl`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "rl", help="reinforcement learning (TRL GRPOTrainer) with measured rewards",
        description="Improve an SFT model with GRPO on the prompts of a `dragon datagen` "
                    "output: each prompt's completions are sampled with schedule-aware "
                    "decoding, measured on the target (verified, then timed against a "
                    "reference of the same step) and compared within their group.  The config "
                    "is a preset, then --config's fields, then the flags given (a default "
                    "below is the field's own; a preset or file replaces it).",
        **examples("dragon rl --preset tiny --model runs/sft-tiny --data data/tiny "
                   "--out runs/rl-tiny",
                   "dragon rl --resume --out runs/rl-tiny",
                   "dragon rl --preset paper --validate"))
    p.add_argument("--preset", choices=sorted(RL_PRESETS), help="a named config")
    p.add_argument("--config", metavar="FILE.yaml",
                   help="a YAML mapping of config fields (a 'preset:' key names its base)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest checkpoint")
    p.add_argument("--validate", action="store_true",
                   help="check the config and print it, without training")
    p.add_argument("--json", action="store_true", help="print the run's summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    add_config_arguments(p, RLRunConfig)
    # Only the flags given count: the preset and the YAML file supply the rest.
    names = {f.name for f in dataclasses.fields(RLRunConfig)}
    for action in p._actions:
        if action.dest in names:
            action.default = argparse.SUPPRESS
    p.set_defaults(func=cmd_rl)
