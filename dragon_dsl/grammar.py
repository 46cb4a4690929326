"""The one helper that loads ``grammar/dragon.lark`` (shipped in the wheel as package data), and
``Grammar``: that file read into its definitions, so that tools derive grammars from it by rule
name, never by its text.

>>> g = Grammar.parse('start: a | b  // two\\na: "a"\\nb: "b"\\n')
>>> g.drop_alternatives("start", ["b"])
>>> print(g, end="")
start: a
a: "a"
b: "b"
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

from .errors import GrammarError

__all__ = ["GRAMMAR_FILE", "Definition", "Grammar", "grammar_path", "grammar_text",
           "option_keys", "reserved_words", "statement_options"]

GRAMMAR_FILE = "dragon.lark"
_SOURCE = "grammar/dragon.lark"


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
    keys = {}
    for d in Grammar.load():
        word = re.match(r'"([a-z_]+)"', d.body)
        if d.name.startswith("opt_") and word:
            keys[d.name] = word.group(1)
    return keys


@functools.cache
def statement_options() -> dict[str, tuple[str, ...]]:
    """Statement keyword (``s_<op>`` rule) -> its option keys, in the order the rule lists them."""
    keys = option_keys()
    return {d.name.removeprefix("s_"): tuple(keys[o] for o in _lexemes(d.body, d.name)
                                            if o.startswith("opt_"))
            for d in Grammar.load() if d.name.startswith("s_")}


@functools.cache
def reserved_words() -> frozenset[str]:
    """Every literal of the grammar that has the shape of a name: a name may not be one."""
    return Grammar.load().words()


# Lark's lexemes for grammar text (lark/load_grammar.py: STRING, REGEXP, RULE, TERMINAL, COMMENT,
# operators), with any other punctuation taken alone for llguidance's `&` and `~`.
_LEXEME = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>//[^\n]*|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regexp>/(?!/)(?:[^/\\\n]|\\.)*/[imslux]*)
  | (?P<name>_?[A-Za-z][_A-Za-z0-9]*)
  | (?P<number>[+-]?[0-9]+)
  | (?P<op>->|\.\.|[^\s\w"/\#])
""", re.X)
_NO_SPACE_AFTER = frozenset("([~")
_NO_SPACE_BEFORE = frozenset(")]?*+")
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")


def _lexemes(text: str, where: str) -> list[str]:
    """The lexemes of a definition's body, comments and spaces left out."""
    lexemes, pos = [], 0
    while pos < len(text):
        m = _LEXEME.match(text, pos)
        if m is None:
            raise GrammarError(f"{where}: cannot read {text[pos:pos + 30]!r}; expected a name, "
                               'a "string", a /regexp/ or an operator')
        if m.lastgroup not in ("space", "comment"):
            lexemes.append(m.group())
        pos = m.end()
    return lexemes


def _spell(lexemes: list[str]) -> str:
    """Lexemes spelled canonically: one space between two, none inside brackets or before
    ``?*+``, so that two bodies compare equal however they were spaced or commented."""
    text = "".join(lexemes[:1])
    for before, lexeme in itertools.pairwise(lexemes):
        if before not in _NO_SPACE_AFTER and lexeme not in _NO_SPACE_BEFORE:
            text += " "
        text += lexeme
    return text


def _normal(text: str, where: str) -> str:
    return _spell(_lexemes(text, where))


def _split(body: str, where: str) -> list[str]:
    """A body's alternatives: split at each ``|`` outside parentheses and brackets (strings and
    regular expressions are single lexemes, so a ``|`` inside one never splits)."""
    parts: list[list[str]] = [[]]
    depth = 0
    for lexeme in _lexemes(body, where):
        depth += (lexeme in _OPEN) - (lexeme in _CLOSE)
        if lexeme == "|" and depth == 0:
            parts.append([])
        else:
            parts[-1].append(lexeme)
    return [_spell(p) for p in parts]


@dataclasses.dataclass(frozen=True)
class Definition:
    """A rule or a terminal.  ``?factor: name | INT`` is ``Definition("factor", "name | INT",
    "?")``.  ``body`` is spelled canonically (comments dropped, continuation lines joined, one
    space between lexemes), so it is the same however the file spaces it; ``source``, the text
    as written, is what prints while the definition is unchanged.

    >>> Definition("factor", "name | INT", "?").alternatives
    ['name', 'INT']
    """

    name: str
    body: str
    prefix: str = ""
    source: str | None = dataclasses.field(default=None, compare=False)

    @property
    def is_terminal(self) -> bool:
        return self.name.lstrip("_")[:1].isupper()

    @property
    def kind(self) -> str:
        return "terminal" if self.is_terminal else "rule"

    @property
    def alternatives(self) -> list[str]:
        return _split(self.body, self.name)

    @property
    def lexemes(self) -> list[str]:
        """The body's lexemes: ``"tile"``, ``name``, ``/[0-9]+/``, ``(``, ``?``, ``|``, ...

        >>> Definition("opt", '"max_inner" "=" INT').lexemes
        ['"max_inner"', '"="', 'INT']
        """
        return _lexemes(self.body, self.name)

    def __str__(self) -> str:
        return self.source if self.source is not None else f"{self.prefix}{self.name}: {self.body}"


_DEFINITION = re.compile(r"\s*(![?]?|[?]!?)?(_?[A-Za-z][_A-Za-z0-9]*)\s*:(.*)", re.S)
_CONTINUATION = re.compile(r"\s*\|")
_BLANK_OR_COMMENT = re.compile(r"\s*((//|#).*)?")
_Item = Definition | str  # a str is a blank line, a comment line or a `%` directive


@functools.lru_cache(maxsize=8)
def _read(text: str, source: str) -> tuple[_Item, ...]:
    """Grammar text -> its items, in order; a definition takes its ``|`` continuation lines
    and the blank lines between them (and comment lines, as Lark does, though llguidance
    refuses those)."""
    lines = text.splitlines()
    items: list[_Item] = []
    i = 0
    while i < len(lines):
        if _BLANK_OR_COMMENT.fullmatch(lines[i]):
            items.append(lines[i])
            i += 1
            continue
        if _CONTINUATION.match(lines[i]):
            raise GrammarError(f"{source}, line {i + 1}: a `|` line continues no definition: "
                               f"{lines[i].strip()!r}")
        end = j = i + 1
        while j < len(lines) and (_BLANK_OR_COMMENT.fullmatch(lines[j])
                                  or _CONTINUATION.match(lines[j])):
            j += 1
            if _CONTINUATION.match(lines[j - 1]):
                end = j
        chunk = "\n".join(lines[i:end])
        if chunk.lstrip().startswith("%"):
            _lexemes(chunk, f"{source}, line {i + 1}")
            items.append(chunk)
        else:
            m = _DEFINITION.fullmatch(chunk)
            if m is None:
                raise GrammarError(f"{source}, line {i + 1}: expected a definition `name: ...`, "
                                   f"a `%` directive, a comment or a blank line but got "
                                   f"{lines[i].strip()!r}")
            prefix, name, body = m.groups()
            items.append(Definition(name, _normal(body, f"{source}, `{name}`"), prefix or "",
                                    chunk))
        i = end
    names = [d.name for d in items if isinstance(d, Definition)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise GrammarError(f"{source} defines {', '.join(twice)} more than once", rule=twice[0])
    return tuple(items)


class Grammar:
    """A Lark grammar read into its definitions (rules and terminals, in order), comments and
    ``%`` directives, to derive other grammars from it by name.  Printing it gives the text back
    (byte for byte while nothing changed).  A name, directive or alternative that is missing
    raises ``GrammarError`` naming it and saying who expected it (``user``) and why.

    >>> g = Grammar.load(user="my_tool")
    >>> g.alternatives("_out")
    ['name', 'name_range']
    >>> try:
    ...     g.body("no_such_rule", "to show the error")
    ... except GrammarError as e:
    ...     print(e)
    grammar/dragon.lark has no rule `no_such_rule`; my_tool expects it (to show the error)
    """

    def __init__(self, items: Iterable[_Item], *, source: str = _SOURCE,
                 user: str | None = None) -> None:
        self._items = list(items)
        self.source = source
        self.user = user

    @classmethod
    def load(cls, *, user: str | None = None) -> Grammar:
        """The language's grammar, ``grammar/dragon.lark``."""
        return cls(_read(grammar_text(), _SOURCE), user=user)

    @classmethod
    def parse(cls, text: str, *, source: str = _SOURCE, user: str | None = None) -> Grammar:
        """``text`` read as a Lark grammar; ``source`` names it in errors."""
        return cls(_read(text, source), source=source, user=user)

    def __str__(self) -> str:
        return "".join(f"{item}\n" for item in self._items)

    def __iter__(self) -> Iterator[Definition]:
        return (item for item in self._items if isinstance(item, Definition))

    def __contains__(self, name: object) -> bool:
        return any(d.name == name for d in self)

    def directives(self) -> list[str]:
        """The ``%`` directives (``%ignore COMMENT``), as written."""
        return [item.strip() for item in self._items
                if isinstance(item, str) and item.lstrip().startswith("%")]

    def definition(self, name: str, why: str | None = None) -> Definition:
        """The rule or terminal ``name``; ``why`` (what it is needed for) goes in the error."""
        item = self._items[self._index(name, why)]
        assert isinstance(item, Definition)
        return item

    def body(self, name: str, why: str | None = None) -> str:
        return self.definition(name, why).body

    def alternatives(self, name: str, why: str | None = None) -> list[str]:
        return self.definition(name, why).alternatives

    def replace(self, name: str, body: str, why: str | None = None) -> None:
        """Give ``name`` a new body (its ``?``/``!`` prefix stays)."""
        i = self._index(name, why)
        old = self._items[i]
        assert isinstance(old, Definition)
        self._items[i] = Definition(name, _normal(body, name), old.prefix)

    def add(self, name: str, body: str, *, after: str | None = None) -> None:
        """A new definition, at the end or right after the definition ``after``."""
        if name in self:
            raise GrammarError(f"{self.source} already has `{name}`; it cannot be added again",
                               rule=name)
        i = len(self._items) if after is None else self._index(after, None) + 1
        self._items.insert(i, Definition(name, _normal(body, name)))

    def remove_directive(self, directive: str, why: str | None = None) -> None:
        """Remove a ``%`` line such as ``%ignore COMMENT`` (compared lexeme by lexeme)."""
        wanted = _normal(directive, directive)
        for i, item in enumerate(self._items):
            if isinstance(item, str) and item.lstrip().startswith("%") \
                    and _normal(item, item) == wanted:
                del self._items[i]
                return
        raise GrammarError(f"{self.source} has no directive `{directive}`{self._expects(why)}",
                           rule=directive)

    def drop_alternatives(self, name: str, alternatives: Iterable[str],
                          why: str | None = None) -> None:
        """Remove these alternatives of ``name``'s body; each must be one of them."""
        self._choose(name, alternatives, False, why)

    def keep_alternatives(self, name: str, alternatives: Iterable[str],
                          why: str | None = None) -> None:
        """Keep only these alternatives of ``name``'s body; each must be one of them."""
        self._choose(name, alternatives, True, why)

    def mismatch(self, name: str, expected: str, why: str | None = None) -> GrammarError:
        """The error to raise when ``name`` is there but not in the shape the caller needs:
        ``raise g.mismatch("s_block", "a body ending with `_outs`", "...")``."""
        d = self.definition(name, why)
        who = f" {self.user}" if self.user else ""
        return GrammarError(
            f"{self.source}'s {d.kind} `{name}` does not have the shape{who} expects"
            f"{f' ({why})' if why else ''}.  Expected {expected} but got {name}: {d.body}",
            rule=name, expected=expected)

    def words(self) -> frozenset[str]:
        """Every literal of the definitions that has the shape of a name (``"tile"``)."""
        return frozenset(lexeme[1:-1] for d in self for lexeme in _lexemes(d.body, d.name)
                         if re.fullmatch(r'"[A-Za-z_][A-Za-z0-9_]*"', lexeme))

    def _choose(self, name: str, chosen: Iterable[str], keep: bool, why: str | None) -> None:
        have = self.alternatives(name, why)
        chosen = [_normal(a, name) for a in chosen]
        for alternative in chosen:
            if alternative not in have:
                raise GrammarError(
                    f"{self.source}'s {self.definition(name).kind} `{name}` has no alternative "
                    f"`{alternative}` (it has {' | '.join(have)}){self._expects(why)}",
                    rule=name, expected=alternative)
        rest = [a for a in have if (a in chosen) == keep]
        if not rest:
            raise GrammarError(f"{self.source}'s `{name}` would have no alternative left "
                               f"(it has {' | '.join(have)}){self._expects(why)}", rule=name)
        self.replace(name, " | ".join(rest))

    def _index(self, name: str, why: str | None) -> int:
        for i, item in enumerate(self._items):
            if isinstance(item, Definition) and item.name == name:
                return i
        kind = Definition(name, "").kind
        raise GrammarError(f"{self.source} has no {kind} `{name}`{self._expects(why)}",
                           rule=name)

    def _expects(self, why: str | None) -> str:
        text = f"; {self.user} expects it" if self.user else ""
        return text + (f" ({why})" if why else "")
