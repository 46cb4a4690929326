"""Canonical layout for the sampling grammars: separators written into the rules exactly where
``dragon_dsl.format`` puts them, and nowhere else.

``grammar/dragon.lark`` ignores runs of spaces and tabs between tokens (``%ignore``), as a
parser of hand-written text must.  A sampler under it may write any such run, and the
vocabulary of a large model is full of tokens that are nothing else: an untrained model writes
whitespace until its token budget ends.  Training data is canonical text, so the sampling
grammars admit the canonical layout only:

- lines (``canonical_lines``): one statement per line, each ended by one ``\\n``; no blank
  lines, no comments, no space at the start or the end of a line;
- within a line (``separator``): nothing after ``(``, ``[``, ``{``, ``<`` or before ``)``,
  ``]``, ``}``, ``>``; nothing before ``,``, ``;``, ``:``; nothing on either side of ``=``
  and ``..``; nothing between a word and the ``(`` or ``<`` after it (``map(``, ``min(``,
  ``@Kind(``, ``cast<int64>(``); one space everywhere else: ``tile l0 [4, 8] -> l1, l2``,
  ``fuse l0 l1 -> l2``, ``unroll=16``, ``i * (j + 1)``, ``map(i, j => i // 4; k =>)``,
  ``@K(x; 1)``, ``@K(x;)``, ``{"a": 1}``.

``canonical_spacing`` writes these separators into every rule that ``start`` reaches, rule by
rule: a body is read into its sequences, the separator between two neighbours comes from the
tokens the first may end with and the tokens the second may start with, and an optional part
carries its separator inside it, so that leaving the part out leaves no space behind.  A body
whose separators cannot be placed that way (a separator that depends on more than its two
neighbours, a punctuation token the rules above do not cover) raises ``GrammarError`` naming
the rule, so a new construct in the grammar file gets a decision, not a guess.

>>> g = Grammar.parse('start: s\\ns: "tile" NAME "[" INT ("," INT)* "]" opt?\\n'
...                   'opt: "max_inner" "=" INT\\nNAME: /[a-z]+/\\nINT: /[0-9]+/\\n')
>>> canonical_spacing(g)
>>> g.body("s")
'"tile" " " NAME " " "[" INT ("," " " INT)* "]" (" " opt)?'
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re

from dragon_dsl.errors import GrammarError
from dragon_dsl.grammar import Grammar

__all__ = ["SPACE", "WORD", "canonical_lines", "canonical_spacing", "separator"]

SPACE = '" "'
_OPEN = frozenset("([{<")
_CLOSE = frozenset(")]}>")
_TIGHT_BEFORE = frozenset({",", ";", ":"})
_GLUED = frozenset({"=", ".."})
_OPERATORS = frozenset({"->", "=>", "+", "-", "*", "//", "%"})
_NEWLINE = "\n"
WORD = "word"  # a name, a number, a string, a keyword: any token that is not punctuation
_START = ""    # in a set of preceding tokens: nothing of the rule itself precedes


def separator(before: str, after: str) -> str:
    """What canonical text has between two tokens, each given as its text, or as ``"word"``
    for a name, a number, a string or a keyword: ``""`` or ``" "``.

    >>> [separator(*pair) for pair in [("word", "("), ("*", "("), (",", "word"), ("word", "=")]]
    ['', ' ', ' ', '']
    """
    if (_NEWLINE in (before, after) or before in _OPEN or after in _CLOSE
            or after in _TIGHT_BEFORE or before in _GLUED or after in _GLUED):
        return ""
    if after in ("(", "<") and (before == WORD or before in _CLOSE):
        return ""
    return " "


def canonical_lines(g: Grammar) -> None:
    """``start`` as statements each ended by one ``\\n`` (``(_stmt _NL)*``), no run of spaces
    or tabs ignored between tokens: the lines ``dragon_dsl.format`` writes."""
    why = "canonical layout: spaces only where the printer writes them"
    g.remove_directive("%ignore /[ \\t]+/", why)
    why = "canonical layout: one statement per line, each ended by one newline"
    if g.body("_NL", why) != "/\\r?\\n/":
        raise g.mismatch("_NL", "`/\\r?\\n/`", why)
    g.replace("_NL", '"\\n"')
    if g.body("start", why) != "_LEADING? (_stmt? _NL)*":
        raise g.mismatch("start", "`_LEADING? (_stmt? _NL)*`", why)
    g.replace("start", "(_stmt _NL)*")


@dataclasses.dataclass
class _Alternative:
    items: list[_Item]
    alias: list[str]  # `-> name`, or nothing


@dataclasses.dataclass
class _Item:
    kind: str  # "symbol", "group" for ( ... ), "optional" for [ ... ], "space"
    symbol: str = ""
    alternatives: list[_Alternative] = dataclasses.field(default_factory=list)
    quantifier: str = ""  # "", "?", "*" or "+"


def _space_item() -> _Item:
    return _Item("space", SPACE)


def canonical_spacing(g: Grammar) -> None:
    """Separators in every rule ``start`` reaches, as ``separator`` says, and nothing else
    between tokens (``g`` must have no ``%ignore`` of spaces: ``canonical_lines``)."""
    rules = _reachable(g)
    layout = _Layout(g, rules)
    for name, alternatives in rules.items():
        layout.rule = name
        for alternative in alternatives:
            alternative.items = layout.space(alternative.items)
    for name in layout.leading:
        _lead(g, rules, name)
    for name, alternatives in rules.items():
        g.replace(name, _text(alternatives))


def _reachable(g: Grammar) -> dict[str, list[_Alternative]]:
    """The rules ``start`` reaches (not terminals), each read into its alternatives."""
    rules: dict[str, list[_Alternative]] = {}
    todo = ["start"]
    while todo:
        name = todo.pop()
        if name in rules:
            continue
        definition = g.definition(name, "canonical layout: the rules start reaches")
        rules[name] = _read(definition.lexemes, g, name)
        todo.extend(s for s in _symbols(rules[name])
                    if _is_rule(s) and s not in rules)
    return rules


def _is_rule(symbol: str) -> bool:
    return bool(re.fullmatch(r"_?[a-z]\w*", symbol))


def _symbols(alternatives: list[_Alternative]):
    for alternative in alternatives:
        for item in alternative.items:
            if item.kind == "symbol":
                yield item.symbol
            else:
                yield from _symbols(item.alternatives)


def _read(lexemes: list[str], g: Grammar, rule: str) -> list[_Alternative]:
    alternatives, end = _read_alternatives(lexemes, 0, g, rule)
    if end != len(lexemes):
        raise _error(g, rule, f"an unmatched `{lexemes[end]}`")
    return alternatives


def _read_alternatives(lexemes: list[str], pos: int, g: Grammar,
                       rule: str) -> tuple[list[_Alternative], int]:
    alternatives = [_Alternative([], [])]
    while pos < len(lexemes) and lexemes[pos] not in (")", "]"):
        lexeme = lexemes[pos]
        if lexeme == "|":
            alternatives.append(_Alternative([], []))
            pos += 1
            continue
        if lexeme == "->":  # an alias: `?atom: NAME -> name`
            alternatives[-1].alias = lexemes[pos:pos + 2]
            pos += 2
            continue
        if lexeme in ("(", "["):
            inner, pos = _read_alternatives(lexemes, pos + 1, g, rule)
            close = ")" if lexeme == "(" else "]"
            if pos == len(lexemes) or lexemes[pos] != close:
                raise _error(g, rule, f"a `{lexeme}` without its `{close}`")
            item = _Item("group" if lexeme == "(" else "optional", alternatives=inner)
        elif re.fullmatch(r'"(?:[^"\\]|\\.)*"|/.+/[imslux]*|_?[A-Za-z]\w*', lexeme):
            item = _Item("symbol", lexeme)
        else:
            raise _error(g, rule, f"`{lexeme}`, which it cannot lay out")
        pos += 1
        if pos < len(lexemes) and lexemes[pos] in ("?", "*", "+"):
            item.quantifier = lexemes[pos]
            pos += 1
        alternatives[-1].items.append(item)
    if any(not a.items for a in alternatives):
        raise _error(g, rule, "an empty alternative")
    return alternatives, pos


def _text(alternatives: list[_Alternative]) -> str:
    return " | ".join(" ".join([*map(_item_text, a.items), *a.alias]) for a in alternatives)


def _item_text(item: _Item) -> str:
    body = {"group": lambda: f"({_text(item.alternatives)})",
            "optional": lambda: f"[{_text(item.alternatives)}]"}.get(item.kind,
                                                                     lambda: item.symbol)()
    return body + item.quantifier


def _error(g: Grammar, rule: str, what: str) -> GrammarError:
    return GrammarError(f"{g.source}'s rule `{rule}` has {what}; training.grammars.layout expects "
                        f"it (canonical layout: the printer's spacing in every rule)", rule=rule)


_Sets = tuple[frozenset[str], frozenset[str], bool]  # first tokens, last tokens, may be empty


class _Layout:
    """The separators of one grammar: token sets of every rule, then rule by rule."""

    def __init__(self, g: Grammar, rules: dict[str, list[_Alternative]]) -> None:
        self.g, self.rules = g, rules
        self.rule = "start"
        self.leading: set[str] = set()  # rules that may be empty, with a space before them
        self._kinds: dict[str, str] = {}
        empty: _Sets = (frozenset(), frozenset(), False)
        self._sets = dict.fromkeys(rules, empty)
        changed = True
        while changed:  # a fixed point: rules refer to each other
            changed = False
            for name, alternatives in rules.items():
                self.rule = name
                sets = self._alternatives(alternatives)
                if sets != self._sets[name]:
                    self._sets[name], changed = sets, True

    # ---- the tokens an item may start and end with ----------------------------------------

    def item(self, item: _Item) -> _Sets:
        if item.kind == "space":
            return frozenset(), frozenset(), True
        if item.kind == "symbol":
            if item.symbol in self.rules:
                first, last, nullable = self._sets[item.symbol]
            else:
                first = last = frozenset([self._kind(item.symbol)])
                nullable = False
        else:
            first, last, nullable = self._alternatives(item.alternatives)
        return first, last, nullable or item.kind == "optional" or item.quantifier in ("?", "*")

    def _alternatives(self, alternatives: list[_Alternative]) -> _Sets:
        first: set[str] = set()
        last: set[str] = set()
        nullable = False
        for alternative in alternatives:
            starts, ends, empty = self._sequence(alternative.items)
            first |= starts
            last |= ends
            nullable = nullable or empty
        return frozenset(first), frozenset(last), nullable

    def _sequence(self, items: list[_Item]) -> _Sets:
        first: frozenset[str] = frozenset()
        last: frozenset[str] = frozenset()
        nullable = True
        for item in items:
            starts, ends, empty = self.item(item)
            if nullable:
                first |= starts
            last = last | ends if empty else ends
            nullable = nullable and empty
        return first, last, nullable

    def _kind(self, symbol: str) -> str:
        """A terminal's kind for ``separator``: its text when it is one literal, else a word."""
        if symbol not in self._kinds:
            text = symbol
            if re.fullmatch(r"_?[A-Z]\w*", symbol):
                lexemes = self.g.definition(symbol, "canonical layout").lexemes
                text = lexemes[0] if len(lexemes) == 1 else "/"
            if text.startswith('"'):
                try:
                    literal = json.loads(text)
                except ValueError:  # `"x"i` and escapes JSON does not know
                    raise _error(self.g, self.rule, f"the literal {text}, which it cannot "
                                 "read") from None
                if literal == _NEWLINE or literal in (_OPEN | _CLOSE | _TIGHT_BEFORE | _GLUED
                                                      | _OPERATORS):
                    kind = literal
                elif re.search(r'[\w"@]', literal):
                    kind = WORD
                else:
                    raise _error(self.g, self.rule, f"the token {text}, whose spacing "
                                 "training.grammars.layout.separator does not know")
            else:
                kind = WORD  # a regular expression: names, numbers, strings
            self._kinds[symbol] = kind
        return self._kinds[symbol]

    # ---- separators -------------------------------------------------------------------------

    def space(self, items: list[_Item]) -> list[_Item]:
        """``items`` with the separators between them."""
        for item in items:
            if item.kind in ("group", "optional"):
                for alternative in item.alternatives:
                    alternative.items = self.space(alternative.items)
        return self._arrange(items)

    def _arrange(self, items: list[_Item]) -> list[_Item]:
        """``items``, whose parts are spaced already, with the separators between them."""
        out: list[_Item] = []
        before, starts = frozenset([_START]), []  # what may precede each item of ``out``
        for item in items:
            pieces = [item]
            if item.quantifier == "+":  # X+ is X X*: the first has another separator
                pieces = [dataclasses.replace(item, quantifier=""),
                          dataclasses.replace(copy.deepcopy(item), quantifier="*")]
            for piece in pieces:
                before = self._place(piece, before, out, starts)
        return out

    def _place(self, item: _Item, before: frozenset[str], out: list[_Item],
               starts: list[frozenset[str]]) -> frozenset[str]:
        """Append ``item`` to ``out`` with its separator; what may precede the next item."""
        first, last, nullable = self.item(item)
        repeated = item.quantifier == "*"
        context = before | last if repeated else before
        seps = {separator(p, f) for p in context - {_START} for f in first}
        if len(seps) > 1:
            raise _error(self.g, self.rule, f"`{_item_text(item)}`, whose separator depends on "
                         f"more than what precedes it ({', '.join(sorted(context - {_START}))})")
        sep = seps.pop() if seps else ""
        if sep and _START in context:
            if repeated:  # X* first in its sequence: [X X*]
                once = dataclasses.replace(item, quantifier="")
                more = copy.deepcopy(item)
                return self._place(_Item("optional", alternatives=[_Alternative(
                    self._arrange([once, more]), [])]), before, out, starts)
            self._space_after(out, starts, item, nullable)
        elif sep:
            self._space_before(item, nullable, out)
        starts.append(before)
        out.append(item)
        return before | last if nullable else last

    def _space_before(self, item: _Item, nullable: bool, out: list[_Item]) -> None:
        if item.kind == "optional" or item.quantifier:
            if item.kind == "symbol":  # X? -> (" " X)?
                inner = dataclasses.replace(item, quantifier="")
                item.kind, item.symbol = "group", ""
                item.alternatives = [_Alternative([_space_item(), inner], [])]
            else:
                for alternative in item.alternatives:
                    alternative.items.insert(0, _space_item())
        elif nullable:
            if item.kind != "symbol":
                raise _error(self.g, self.rule, f"`{_item_text(item)}`, which may be empty, "
                             "after a token it is spaced from")
            self.leading.add(item.symbol)
        else:
            out.append(_space_item())

    def _space_after(self, out: list[_Item], starts: list[frozenset[str]], item: _Item,
                     nullable: bool) -> None:
        """The separator before ``item`` goes at the end of the optional item before it, the
        only thing of the sequence that may precede it (``[x ("," x)*] "=>"``)."""
        previous = out[-1] if out else None
        if (nullable or previous is None or starts[-1] != {_START}
                or not (previous.kind == "optional" or previous.quantifier == "?")):
            raise _error(self.g, self.rule, f"`{_item_text(item)}`, whose separator depends on "
                         "whether the optional part before it is there")
        if previous.kind == "symbol":
            inner = dataclasses.replace(previous, quantifier="")
            previous.kind, previous.symbol = "group", ""
            previous.alternatives = [_Alternative([inner, _space_item()], [])]
        else:
            for alternative in previous.alternatives:
                alternative.items.append(_space_item())


def _lead(g: Grammar, rules: dict[str, list[_Alternative]], name: str) -> None:
    """A rule that may be empty, spaced from what precedes it: the separator goes inside its
    optional body (``attrs: [" " value ("," " " value)*]``), so it is there only when the rule
    is not empty.  Only a rule used in one place can take it."""
    uses = sum(s == name for alternatives in rules.values() for s in _symbols(alternatives))
    [*alternatives] = rules[name]
    if uses != 1 or len(alternatives) != 1 or len(alternatives[0].items) != 1 \
            or alternatives[0].items[0].kind != "optional":
        raise _error(g, name, f"a body that may be empty and {uses} uses; a separator before "
                     "it needs one use and a body `[...]`")
    for alternative in alternatives[0].items[0].alternatives:
        alternative.items.insert(0, _space_item())
