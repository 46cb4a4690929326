"""``dragon init-model DIR``: an untrained tiny model and its tokenizer, to try ``dragon sample``.

    dragon init-model runs/tiny
    dragon sample --model runs/tiny --workload 'matmul(m=512,n=512,k=512)' -n 4

The tokenizer is a byte-level BPE trained on scripts of MetaSchedule-sampled traces and on the
construction prompts (``training.models.tokenizer.build_tokenizer``); the model is
``training.models.tokenizer.tiny_model`` (a Llama, hidden 64, 2 layers) with random weights.  Its
samples all parse, because every token is constrained by the grammar, but it has learned
nothing: it shows the tools working, not good schedules.  Exit codes (``ExitCode``): 0 saved,
2 usage errors (such as a DIR that holds files, without ``--force``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from codegen.cli.workloads import cli_workload
from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
    parse_target,
)
from training.models.tokenizer import TokenizerConfig, build_tokenizer, tiny_model

__all__ = ["init_model", "register"]

# The TokenizerConfig fields that are flags (the tuples have flags of their own below).
_FLAGS = ("vocab_size", "min_frequency", "traces_per_workload", "seed")


def init_model(path: str | Path, config: TokenizerConfig | None = None, *,
               hidden_size: int = 64, layers: int = 2) -> Path:
    """Train a tokenizer as ``config`` says, make an untrained tiny model for it, and save both
    in ``path`` (created if needed); returns the path.  About a minute on 2 cores."""
    import torch


    out = Path(path)
    tokenizer = build_tokenizer(config)
    torch.manual_seed(config.seed if config else 0)
    model = tiny_model(tokenizer, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                       num_hidden_layers=layers)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def cmd_init_model(args) -> int:
    out = Path(args.dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise UsageError(f"{out} is not empty (--force writes the model there anyway)")
    if args.hidden_size < 4 or args.hidden_size % 4:
        raise UsageError(f"Expected --hidden-size a positive multiple of 4 (4 attention heads) "
                         f"but got --hidden-size {args.hidden_size}")
    if args.layers < 1:
        raise UsageError(f"Expected --layers >= 1 but got --layers {args.layers}")
    overrides = {k: tuple(v) for k, v in (("workloads", args.workload),
                                           ("targets", args.target)) if v}
    config = config_from_args(TokenizerConfig, args, **overrides)
    if config.vocab_size < 259:
        raise UsageError(f"Expected --vocab-size >= 259 (every byte and the special tokens) but "
                         f"got --vocab-size {config.vocab_size}")
    for name in ("min_frequency", "traces_per_workload"):
        if getattr(config, name) < 1:
            raise UsageError(f"Expected --{name.replace('_', '-')} >= 1 but got "
                             f"{getattr(config, name)}")
    _check_specs(config)
    init_model(out, config, hidden_size=args.hidden_size, layers=args.layers)
    print(f"{out}: an untrained tiny model (hidden {args.hidden_size}, {args.layers} layers) and "
          f"its {config.vocab_size}-token tokenizer; try: dragon sample --model {out} "
          "--workload 'matmul(m=128,n=128,k=128)' -n 4")
    return ExitCode.OK


def _check_specs(config: TokenizerConfig) -> None:
    for spec in config.workloads:
        cli_workload(spec)
    for target in config.targets:
        parse_target(target)


def register(subparsers) -> None:
    """Add ``dragon init-model`` (the ``dragon.commands`` entry point)."""
    defaults = {f.name: f.default for f in dataclasses.fields(TokenizerConfig)}
    p = subparsers.add_parser(
        "init-model", help="save an untrained tiny model and its tokenizer, to try dragon sample",
        description="Train a BPE tokenizer on scripts of MetaSchedule-sampled traces and on "
                    "prompts, and save it with an untrained tiny Llama in DIR (about a minute "
                    "on 2 cores).  Its samples parse (the grammar constrains every token) but "
                    "it has learned nothing.",
        **examples("dragon init-model runs/tiny",
                   "dragon init-model runs/small --hidden-size 256 --layers 4 --vocab-size 2048",
                   "dragon sample --model runs/tiny --workload 'matmul(m=128,n=128,k=128)' -n 4"))
    p.add_argument("dir", metavar="DIR", help="where to save the model (created if needed)")
    p.add_argument("--force", action="store_true", help="write into a DIR that holds files")
    p.add_argument("--hidden-size", type=int, default=64, help="model width (default: 64)")
    p.add_argument("--layers", type=int, default=2, help="transformer layers (default: 2)")
    p.add_argument("--workload", action="append", metavar="SPEC",
                   help="a workload whose traces the tokenizer learns from (repeatable; "
                        f"default: {len(defaults['workloads'])} small shapes of the main "
                        "families)")
    p.add_argument("--target", action="append", metavar="TARGET",
                   help="a target to sample traces for (repeatable; default: llvm and cuda)")
    add_config_arguments(p, TokenizerConfig, only=_FLAGS)
    p.set_defaults(func=cmd_init_model)
