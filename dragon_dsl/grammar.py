"""The one helper that loads ``grammar/dragon.lark`` (shipped in the wheel as package data)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

__all__ = ["GRAMMAR_FILE", "grammar_path", "grammar_text"]

GRAMMAR_FILE = "dragon.lark"


def grammar_path() -> Path:
    """Where the grammar file lies: the installed package data, or the source tree's grammar/."""
    try:
        path = Path(str(resources.files("dragon_dsl._grammar").joinpath(GRAMMAR_FILE)))
        if path.is_file():
            return path
    except (ModuleNotFoundError, NotADirectoryError):
        pass
    return Path(__file__).resolve().parent.parent / "grammar" / GRAMMAR_FILE


@functools.cache
def grammar_text() -> str:
    """The grammar's text, for Lark, llguidance and Hypothesis alike."""
    return grammar_path().read_text(encoding="utf-8")


@functools.cache
def option_keys() -> dict[str, str]:
    """``opt_<rule>`` -> the option's key, read from the rule's first literal."""
    import re

    return dict(re.findall(r'^(opt_[a-z_]+):\s*"([a-z_]+)"', grammar_text(), flags=re.M))


@functools.cache
def statement_options() -> dict[str, tuple[str, ...]]:
    """Statement keyword (``s_<op>`` rule) -> its option keys, in the order the rule lists them."""
    import re

    keys = option_keys()
    result = {}
    for rule, body in re.findall(r"^s_([a-z_]+):(.*)$", grammar_text(), flags=re.M):
        result[rule] = tuple(keys[o] for o in re.findall(r"\b(opt_[a-z_]+)", body))
    return result


@functools.cache
def reserved_words() -> frozenset[str]:
    """Every literal of the grammar that has the shape of a name: a name may not be one."""
    import re

    words = re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', grammar_text())
    return frozenset(words)
