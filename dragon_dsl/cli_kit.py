"""What every ``dragon`` subcommand shares: the exit codes, ``UsageError``, reading a source,
and command-line flags made from a config dataclass's fields (as TRL's parser makes them), so
that a default and its help text live in the dataclass and nowhere else.

>>> import argparse
>>> from dataclasses import dataclass, field
>>> @dataclass(frozen=True)
... class Config:
...     repeat: int = field(default=9, metadata={"help": "Timed repeats."})
>>> parser = argparse.ArgumentParser()
>>> add_config_arguments(parser, Config)
>>> config_from_args(Config, parser.parse_args(["--repeat", "3"]))
Config(repeat=3)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from enum import IntEnum
from typing import Any, TypeVar

from .errors import DragonError

__all__ = ["ExitCode", "UsageError", "add_config_arguments", "config_from_args", "examples",
           "format_latency", "format_ratio", "given_flags", "parse_target", "read_source",
           "text_table"]

T = TypeVar("T")


class ExitCode(IntEnum):
    """The exit codes of every ``dragon`` subcommand."""

    OK = 0           # success: clean, formatted, applied, at least one correct result
    FINDINGS = 1     # the input was read but fails: check findings, unformatted files, a script
                     # that does not apply, no correct kernel, no sample that parses
    USAGE = 2        # bad arguments, or input that cannot be read (missing, not UTF-8, too
                     # large); with several files the others are still processed
    INTERRUPTED = 130


class UsageError(DragonError):
    """Bad arguments or unreadable input: ``dragon`` prints ``dragon: MESSAGE`` and exits 2.
    Subcommands added through ``dragon.commands`` raise it too."""


def format_latency(seconds: float | None) -> str:
    """A latency as people read it; "-" for none.

    >>> format_latency(0.0123), format_latency(4.2e-6), format_latency(None)
    ('12.300 ms', '4.2 us', '-')
    """
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} us"


def format_ratio(value: float | None, digits: int = 2) -> str:
    """A speedup: ``1.97x``; "-" for none."""
    return "-" if value is None else f"{value:.{digits}f}x"


def text_table(rows: list[list[str]]) -> list[str]:
    """Rows (the first is the header) as aligned lines, a rule under the header.

    >>> print("\\n".join(text_table([["a", "bb"], ["ccc", "d"]])))
    a    bb
    ---  --
    ccc  d
    """
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def examples(*lines: str) -> dict[str, Any]:
    """``add_parser`` keywords for a help text that ends with these example command lines,
    printed as written.

    >>> examples("dragon fmt a.dragon")["epilog"]
    'examples:\\n  dragon fmt a.dragon'
    """
    return {"epilog": "examples:\n" + "\n".join(f"  {e}" for e in lines),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def read_source(path: str, *, max_bytes: int | None = None) -> str:
    """A file's text (UTF-8), or standard input's for ``-``; UsageError when it cannot be read,
    is not UTF-8, or is larger than ``max_bytes`` (``dragon_dsl.limits.DEFAULT_LIMITS`` when
    not given): at most that many bytes are ever read, so ``/dev/zero`` ends too."""
    from .limits import DEFAULT_LIMITS

    limit = DEFAULT_LIMITS.max_bytes if max_bytes is None else max_bytes
    name = "standard input" if path == "-" else path
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", sys.stdin)  # text when a test replaced it
            data = stream.read(limit + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise UsageError(f"cannot read {name}: larger than {limit} bytes (--max-bytes)")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {name}: not UTF-8 ({exc.reason} at byte {exc.start})") \
            from None


def parse_target(value: Any) -> Any:
    """The TVM ``Target`` of a ``--target`` value (a short name, a tag, a JSON dict), parsed
    once where a command reads its flags and carried from there; None stays None.  A value
    TVM refuses is a UsageError.  (Library functions take the text as well.)"""
    if value is None:
        return None
    from .tvm_support import as_target

    try:
        return as_target(value)
    except (ValueError, TypeError) as exc:  # TargetError
        raise UsageError(str(exc)) from None


def add_config_arguments(parser: argparse.ArgumentParser, config: type, *,
                         only: tuple[str, ...] | None = None,
                         aliases: dict[str, tuple[str, ...]] | None = None,
                         layered: bool = False, given_only: bool = False,
                         defaults: Any = None) -> None:
    """Add ``--field-name`` for each field of the dataclass ``config`` (those in ``only``, when
    given), with the field's ``help`` metadata, type and default (``defaults``' value when
    given: an instance of ``config``, for a command whose defaults differ); a nested config field
    (``dragon_dsl.configs``) adds the flags its ``flags`` metadata names, under their own names
    and with its default's values.  ``aliases`` adds more flags for a field
    (``{"n": ("-n",)}``).  ``given_only``: a flag not given is left out of the parsed flags
    (``given_flags`` names those given; ``config_from_args`` still fills in the defaults).
    ``layered``: that, and the help says a preset or a config file supplies the default
    (``configs.layered``)."""
    from .configs import nested

    inner = nested(config)
    own = tuple(f.name for f in dataclasses.fields(config)
                if f.name not in inner and (only is None or f.name in only))
    _add_fields(parser, config, defaults, own, aliases or {}, layered, given_only)
    for name, (kind, default, flags) in inner.items():
        if only is None or name in only:
            _add_fields(parser, kind, default, flags, aliases or {}, layered, given_only)


def _add_fields(parser: argparse.ArgumentParser, config: type, values: Any,
                names: tuple[str, ...], aliases: dict[str, tuple[str, ...]],
                layered: bool, given_only: bool) -> None:
    hints = typing.get_type_hints(config)
    for f in dataclasses.fields(config):
        if f.name not in names:
            continue
        if values is not None:
            default = getattr(values, f.name)
        else:
            default = f.default if f.default is not dataclasses.MISSING else None
        kind = _scalar(hints[f.name])
        flags = [f"--{f.name.replace('_', '-')}", *aliases.get(f.name, ())]
        help_text = f.metadata.get("help", "")
        shown = f"the preset's, else {default}" if layered else default
        options: dict[str, Any] = {"dest": f.name,
                                   "default": argparse.SUPPRESS if layered or given_only
                                   else default,
                                   "help": f"{help_text} (default: {shown})"}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = kind
            options["metavar"] = f.name.upper()
        for key in ("choices", "nargs"):  # nargs "+": a tuple field's values, one flag
            if key in f.metadata:
                options[key] = f.metadata[key]
        parser.add_argument(*flags, **options)


def given_flags(config: type, args: argparse.Namespace) -> dict[str, Any]:
    """The flags of ``config`` (its fields, its nested configs' flags) present in ``args``."""
    from .configs import flag_names

    names = flag_names(config)
    return {k: v for k, v in vars(args).items() if k in names}


def config_from_args(config: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """The config dataclass from parsed flags (fields without a flag keep their default, nested
    configs included); a value the config refuses is a UsageError."""
    from .configs import build, merge

    try:
        return build(config, merge(config, merge(config, {}, given_flags(config, args)),
                                    overrides))
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _scalar(hint: Any) -> type:
    """``int`` for ``int`` and ``int | None``; the one type a flag's text converts to."""
    if typing.get_origin(hint) is tuple:  # tuple[str, ...]: several values of one type
        hint = typing.get_args(hint)[0]
    options = [t for t in (typing.get_args(hint) or (hint,)) if t is not type(None)]
    kind = options[0] if len(options) == 1 else str
    return kind if kind in (bool, int, float, str) else str
