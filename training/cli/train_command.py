"""What ``dragon sft`` and ``dragon rl`` share: their flags and their flow.

A ``TrainCommand`` holds one trainer's config dataclass, presets and functions.  Its flags are
``--preset``, ``--config FILE.yaml``, ``--resume``, ``--validate``, ``--json``, ``-q`` and one
per config field; only the field flags given count, over the preset and the file.  Its flow:
the config is resolved (or, with ``--resume``, read back from ``RUN/config.yaml``) and checked
by the dataclass itself; ``--validate`` prints it; otherwise the run function trains and its
result is printed, one line or JSON.  A bad config or a run that cannot start is a
``UsageError`` (exit code 2).  ``--resume`` on a finished run (it saved ``final/`` and
``result.json``, and no larger ``--max-steps`` is given) trains nothing, says so and exits 0
(with ``--json``, printing its ``result.json``).

>>> from training.train import PRESETS, SFTRunConfig, resolve, resumed_config, run_sft
>>> command = TrainCommand(SFTRunConfig, PRESETS, resolve, resumed_config, run_sft, str)
>>> flags = argparse.Namespace(preset="tiny", config=None, resume=False, max_steps=5)
>>> command.config(flags).max_steps
5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dragon_dsl.cli_kit import ExitCode, UsageError, add_config_arguments, given_flags
from training.train.run_dir import RunError, RunFinished
from training.train.sft_config import ConfigError, config_dict

__all__ = ["TrainCommand", "number"]


@dataclass(frozen=True)
class TrainCommand:
    """One training subcommand: ``add_arguments(parser)`` makes its flags, calling it with the
    parsed flags runs it (``parser.set_defaults(func=command)``)."""

    kind: type                                  # the config dataclass
    presets: Mapping[str, Any]                  # name -> config
    resolve: Callable[..., Any]                 # (preset, file, **fields) -> config
    resumed: Callable[..., Any]                 # (run_dir, **fields) -> config
    run: Callable[..., Any]                     # (config, resume=, progress=) -> result
    summary: Callable[[Any], str]               # the result in one line

    def given(self, args: argparse.Namespace) -> dict[str, Any]:
        """The config fields given as flags (argparse leaves the others out)."""
        return given_flags(self.kind, args)

    def config(self, args: argparse.Namespace) -> Any:
        """The config the flags name; ``UsageError`` for one that cannot be used."""
        given = self.given(args)
        try:
            if args.resume:
                if args.preset or args.config:
                    raise UsageError("--resume reads RUN/config.yaml: give --out RUN (and flags "
                                     "to change), not --preset or --config")
                if not given.get("out"):
                    raise UsageError("--resume needs --out RUN")
                return self.resumed(given.pop("out"), **given)
            if not (args.preset or args.config):
                raise UsageError(f"choose a config: --preset {'|'.join(self.presets)} "
                                 "or --config FILE.yaml")
            return self.resolve(args.preset, args.config, **given)
        except (ConfigError, RunError) as exc:
            raise UsageError(str(exc)) from None

    def __call__(self, args: argparse.Namespace) -> int:
        config = self.config(args)
        if args.validate:
            print(json.dumps(config_dict(config), indent=2))
            return ExitCode.OK
        try:
            # The Trainer prints its logs on stdout; with --json, stdout is the summary alone.
            with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
                result = self.run(config, resume=args.resume, progress=not args.quiet)
        except RunFinished as exc:  # --resume on a finished run: nothing to do, and no error
            print(json.dumps(exc.result, indent=2) if args.json else str(exc))
            return ExitCode.OK
        except RunError as exc:
            raise UsageError(str(exc)) from None
        print(json.dumps(result.as_dict(), indent=2) if args.json else self.summary(result))
        return ExitCode.OK

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The command's flags, and ``func``: this command."""
        parser.add_argument("--preset", choices=sorted(self.presets), help="a named config")
        parser.add_argument("--config", metavar="FILE.yaml",
                            help="a YAML mapping of config fields (a 'preset:' key names its "
                                 "base)")
        parser.add_argument("--resume", action="store_true",
                            help="continue the run in --out from its newest checkpoint")
        parser.add_argument("--validate", action="store_true",
                            help="check the config and print it, without training")
        parser.add_argument("--json", action="store_true",
                            help="print the run's summary as JSON")
        parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
        # Only the flags given count: the preset and the YAML file supply the rest.
        add_config_arguments(parser, self.kind, layered=True)
        parser.set_defaults(func=self)


def number(x: float | None) -> str:
    """``x`` with three decimals, or "-" for None."""
    return "-" if x is None else f"{x:.3f}"
