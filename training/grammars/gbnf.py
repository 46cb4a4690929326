"""Lark grammars (the sampling grammar's dialect) to GBNF, for XGrammar and llama.cpp servers.

GBNF (llama.cpp's grammar format, which XGrammar's EBNF reads as well) has rules, literals,
character classes, groups and repetitions, but no terminals, no lexer and no regular
expressions; so the translation writes each Lark terminal as rules over characters.  It knows
exactly the Lark the sampling grammars use and raises ``GrammarError`` naming anything else:

- rules and terminals, ``|``, groups, ``[...]``, ``? * +``; ``?rule``/``!rule`` and
  ``-> alias`` only shape Lark's tree, so they go;
- ``"literals"`` and ``/regular expressions/`` (alternation, groups, classes, ``? * + {m,n}``,
  ``.``, escapes) as GBNF literals, classes and repetitions;
- llguidance's ``/[first][rest]*/ & ~("kw" | ...)``, a name that is no keyword, as a trie of
  the keywords (GBNF has no intersection or complement);
- direct left recursion (``sum: product | sum "+" product``) as repetition (llama.cpp refuses
  left recursion);
- ``%ignore X``: ``X*`` after every token and at the start.

GBNF is read character by character where Lark lexes first; for the sampling grammars, which
spell out every separator (``training.grammars.layout``) and keep keywords out of names, the two
accept the same scripts (``tests/test_gbnf.py`` checks canonical scripts in XGrammar).
XGrammar's own ``Grammar.from_lark`` refuses ``&`` and ``~``, and its output keeps Lark's
``_`` in rule names, which llama.cpp does not read.

>>> print(lark_to_gbnf('start: "a" B*\\nB: /[0-9]{2}/\\n'), end="")
root ::= "a" B*
B ::= [0-9]{2}
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import TYPE_CHECKING

from dragon_dsl.errors import GrammarError
from dragon_dsl.grammar import Definition, Grammar
from training.grammars.constraints import sampling_grammar, with_end_marker, workload_grammar

if TYPE_CHECKING:
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["FORMATS", "lark_to_gbnf", "sampling_grammar_as"]

_USER = "training.grammars.gbnf"
FORMATS = ("lark", "gbnf")


def sampling_grammar_as(fmt: str, workload: WorkloadLike | None = None, target: TargetLike = "llvm",
                        rules: str | None = None, *, end_marker: bool = True) -> str:
    """The sampling grammar (``workload``'s with a workload) as a server reads it: ``fmt``
    ``"lark"`` (llguidance) or ``"gbnf"``; with ``end_marker`` a script may end with ``<end>``
    (``constraints.with_end_marker``).  What ``dragon grammar`` writes and ``dragon eval`` sends."""
    if fmt not in FORMATS:
        raise ValueError(f"Expected a format among {', '.join(FORMATS)} but got fmt={fmt!r}")
    lark = sampling_grammar() if workload is None else workload_grammar(workload, target, rules)
    if end_marker:
        lark = with_end_marker(lark)
    return lark if fmt == "lark" else lark_to_gbnf(lark, source="the sampling grammar")


# ---- a small syntax tree, shared by grammar bodies and regular expressions ----------------

@dataclasses.dataclass
class _Alt:
    seqs: list[list[_Node]]


@dataclasses.dataclass
class _Sym:
    name: str


@dataclasses.dataclass
class _Lit:
    text: str


@dataclasses.dataclass
class _Class:
    ranges: list[tuple[int, int]]
    negated: bool = False


@dataclasses.dataclass
class _Repeat:
    node: _Node
    low: int
    high: int | None  # None: unbounded


@dataclasses.dataclass
class _Except:  # llguidance's `A & ~(B)`
    base: _Node
    words: list[str]


_Node = _Alt | _Sym | _Lit | _Class | _Repeat | _Except


def _error(source: str, where: str, what: str) -> GrammarError:
    return GrammarError(f"{source}'s `{where}` has {what}, which training.grammars.gbnf cannot "
                        "translate to GBNF", rule=where)


# ---- Lark bodies ----------------------------------------------------------------------------

class _Descent:
    """What both recursive-descent readers share (a Lark rule body, a regular expression):
    alternatives separated by ``|``, each a sequence the reader defines."""

    pos: int

    def peek(self) -> str | None:
        raise NotImplementedError

    def sequence(self) -> list[_Node]:
        raise NotImplementedError

    def alternatives(self) -> _Node:
        seqs = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            seqs.append(self.sequence())
        return seqs[0][0] if len(seqs) == 1 and len(seqs[0]) == 1 else _Alt(seqs)


class _Body(_Descent):
    """One definition's lexemes read into a ``_Node``."""

    def __init__(self, lexemes: list[str], source: str, where: str) -> None:
        self.lexemes, self.pos, self.source, self.where = lexemes, 0, source, where

    def fail(self, what: str) -> GrammarError:
        return _error(self.source, self.where, what)

    def peek(self) -> str | None:
        return self.lexemes[self.pos] if self.pos < len(self.lexemes) else None

    def read(self) -> _Node:
        node = self.alternatives()
        if self.peek() is not None:
            raise self.fail(f"an unexpected `{self.peek()}`")
        return node

    def sequence(self) -> list[_Node]:
        items: list[_Node] = []
        while self.peek() not in (None, "|", ")", "]"):
            if self.peek() == "->":  # an alias names a tree node: nothing to translate
                self.pos += 2
                continue
            item = self.atom()
            if self.peek() == "&":
                self.pos += 1
                item = self.intersection(item)
            while self.peek() in ("?", "*", "+"):
                item = _Repeat(item, int(self.peek() == "+"), 1 if self.peek() == "?" else None)
                self.pos += 1
            items.append(item)
        return items

    def atom(self) -> _Node:
        lexeme = self.peek()
        assert lexeme is not None
        self.pos += 1
        if lexeme in ("(", "["):
            inner = self.alternatives()
            close = ")" if lexeme == "(" else "]"
            if self.peek() != close:
                raise self.fail(f"a `{lexeme}` without its `{close}`")
            self.pos += 1
            return inner if lexeme == "(" else _Repeat(inner, 0, 1)
        if lexeme.startswith('"'):
            if lexeme.endswith("i"):
                raise self.fail(f"the case-insensitive literal {lexeme}")
            return _Lit(_literal(lexeme, self.fail))
        if lexeme.startswith("/"):
            pattern, _, flags = lexeme[1:].rpartition("/")
            if flags:
                raise self.fail(f"the regular expression flags `{flags}` of {lexeme}")
            return _Regex(pattern, self.fail).read()
        if re.fullmatch(r"_?[A-Za-z]\w*", lexeme):
            return _Sym(lexeme)
        raise self.fail(f"`{lexeme}`")

    def intersection(self, base: _Node) -> _Node:
        """``A & ~(("w" | ...))``: A but none of the words."""
        if self.peek() != "~":
            raise self.fail("`&` without `~` after it (only `A & ~(literals)` is known)")
        self.pos += 1
        excluded = self.atom()
        seqs = excluded.seqs if isinstance(excluded, _Alt) else [[excluded]]
        if not all(len(s) == 1 and isinstance(s[0], _Lit) for s in seqs):
            raise self.fail("`& ~(...)` of something other than literals")
        return _Except(base, [s[0].text for s in seqs if isinstance(s[0], _Lit)])


def _literal(lexeme: str, fail) -> str:
    """A Lark literal's text (Lark reads its escapes as Python does)."""
    try:
        value = ast.literal_eval(lexeme)
    except (ValueError, SyntaxError):
        raise fail(f"the literal {lexeme}") from None
    if not isinstance(value, str):
        raise fail(f"the literal {lexeme}")
    return value


# ---- regular expressions ----------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_CLASSES = {"d": [(48, 57)], "w": [(48, 57), (65, 90), (95, 95), (97, 122)]}


class _Regex(_Descent):
    """A regular expression (what Python's ``re`` reads, without anchors, lookarounds,
    backreferences or lazy quantifiers) read into a ``_Node``."""

    def __init__(self, pattern: str, fail) -> None:
        self.text, self.pos, self._fail = pattern, 0, fail

    def fail(self, what: str) -> GrammarError:
        return self._fail(f"{what} in /{self.text}/")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def read(self) -> _Node:
        node = self.alternatives()
        if self.pos != len(self.text):
            raise self.fail(f"an unmatched `{self.peek()}`")
        return node

    def sequence(self) -> list[_Node]:
        items: list[_Node] = []
        while self.peek() not in ("", "|", ")"):
            item = self.atom()
            while self.peek() in ("?", "*", "+", "{"):
                item = self.quantified(item)
            if isinstance(item, _Lit) and items and isinstance(items[-1], _Lit):
                items[-1] = _Lit(items[-1].text + item.text)
            else:
                items.append(item)
        return items

    def quantified(self, item: _Node) -> _Node:
        c = self.peek()
        self.pos += 1
        if c == "{":
            m = re.compile(r"(\d+)(,(\d*))?\}").match(self.text, self.pos)
            if m is None:
                raise self.fail("a `{` that is no repetition")
            self.pos = m.end()
            low = int(m.group(1))
            high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            node = _Repeat(item, low, high)
        else:
            node = _Repeat(item, int(c == "+"), 1 if c == "?" else None)
        if self.peek() in ("?", "+"):
            raise self.fail(f"the lazy or possessive quantifier `{c}{self.peek()}`")
        return node

    def atom(self) -> _Node:
        c = self.peek()
        self.pos += 1
        if c == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            elif self.peek() == "?":
                raise self.fail(f"the group `(?{self.text[self.pos + 1:self.pos + 2]}`")
            inner = self.alternatives()
            if self.peek() != ")":
                raise self.fail("a `(` without its `)`")
            self.pos += 1
            return inner
        if c == "[":
            return self.char_class()
        if c == ".":
            return _Class([(10, 10)], negated=True)
        if c in "^$":
            raise self.fail(f"the anchor `{c}`")
        if c in "*+?{":
            raise self.fail(f"a `{c}` that repeats nothing")
        if c == "\\":
            ranges = self.escape()
            return _Lit(chr(ranges[0][0])) if len(ranges) == 1 and ranges[0][0] == ranges[0][1] \
                else _Class(ranges)
        return _Lit(c)

    def escape(self) -> list[tuple[int, int]]:
        """The characters of the escape after a backslash."""
        c = self.peek()
        self.pos += 1
        if c in _CLASSES:
            return list(_CLASSES[c])
        if c in _ESCAPES:
            return [(ord(_ESCAPES[c]),) * 2]
        if c in "xu":
            width = 2 if c == "x" else 4
            digits = self.text[self.pos:self.pos + width]
            if not re.fullmatch(f"[0-9a-fA-F]{{{width}}}", digits):
                raise self.fail(f"the escape `\\{c}{digits}`")
            self.pos += width
            return [(int(digits, 16),) * 2]
        if c and not c.isalnum():
            return [(ord(c), ord(c))]
        raise self.fail(f"the escape `\\{c}`")

    def char_class(self) -> _Node:
        negated = self.peek() == "^"
        self.pos += negated
        ranges: list[tuple[int, int]] = []
        first = True
        while first or self.peek() != "]":
            if not self.peek():
                raise self.fail("a `[` without its `]`")
            first = False
            low = self.class_char()
            if self.peek() == "-" and self.text[self.pos + 1:self.pos + 2] not in ("]", ""):
                self.pos += 1
                high = self.class_char()
                if len(low) != 1 or len(high) != 1 or low[0][0] > high[0][0]:
                    raise self.fail("a bad range in a character class")
                ranges.append((low[0][0], high[0][0]))
            else:
                ranges.extend(low)
        self.pos += 1
        return _Class(ranges, negated)

    def class_char(self) -> list[tuple[int, int]]:
        c = self.peek()
        self.pos += 1
        if c == "\\":
            return self.escape()
        if c == "[" and self.peek() == ":":
            raise self.fail("a POSIX class `[:...:]`")
        return [(ord(c), ord(c))]


# ---- GBNF text --------------------------------------------------------------------------------

def _char(code: int, in_class: bool) -> str:
    c = chr(code)
    if c in '"\\' or (in_class and c in "[]"):
        return "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\t":
        return "\\t"
    if c == "\r":
        return "\\r"
    if in_class and c in "-^":
        return f"\\x{code:02X}"
    if 0x20 <= code < 0x7F:
        return c
    return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}" if code < 0x10000 \
        else f"\\U{code:08X}"


def _class_text(ranges: list[tuple[int, int]], negated: bool) -> str:
    parts = [_char(lo, True) + (f"-{_char(hi, True)}" if hi > lo else "")
             for lo, hi in _merge(ranges)]
    return "[" + ("^" if negated else "") + "".join(parts) + "]"


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def _minus(ranges: list[tuple[int, int]], chars: set[int]) -> list[tuple[int, int]]:
    out = []
    for lo, hi in _merge(ranges):
        start = lo
        for c in sorted(x for x in chars if lo <= x <= hi):
            if c > start:
                out.append((start, c - 1))
            start = c + 1
        if start <= hi:
            out.append((start, hi))
    return out


class _Writer:
    """GBNF text for the definitions ``start`` reaches."""

    def __init__(self, nodes: dict[str, _Node], terminals: set[str], ignore: _Node | None,
                 source: str) -> None:
        self.nodes, self.terminals, self.ignore, self.source = nodes, terminals, ignore, source
        self.names: dict[str, str] = {}
        self.taken: set[str] = set()
        self.rules: list[tuple[str, str]] = []
        for name in nodes:
            self.names[name] = self.fresh("root" if name == "start" else
                                          name.lstrip("_").replace("_", "-")
                                          + ("-" if name.startswith("_") else ""))

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}-{k}"
        self.taken.add(name)
        return name

    def write(self) -> str:
        ignore = ""
        if self.ignore is not None:
            ignore = self.fresh("ignored-")
            self.rules.append((ignore, self.expr(self.ignore, False)))
        self.ignored = ignore
        for name, node in self.nodes.items():
            text = self.expr(node, name not in self.terminals)
            if name == "start" and ignore:
                text = f"{ignore}* ({text})"
            self.rules.append((self.names[name], text))
        order = {n: i for i, n in enumerate(self.names.values())}
        self.rules.sort(key=lambda r: order.get(r[0], len(order)))
        return "".join(f"{name} ::= {text}\n" for name, text in self.rules)

    def expr(self, node: _Node, in_rule: bool) -> str:
        """GBNF for ``node``; in a rule (not a terminal) each token takes the ignored after it."""
        token = self._expr(node, in_rule)
        if in_rule and self.ignored and isinstance(node, (_Lit, _Class, _Except)):
            return f"({token} {self.ignored}*)"
        return token

    def _expr(self, node: _Node, in_rule: bool) -> str:
        if isinstance(node, _Sym):
            if node.name not in self.names:
                raise GrammarError(f"{self.source} has no definition `{node.name}`",
                                   rule=node.name)
            ref = self.names[node.name]
            if in_rule and self.ignored and node.name in self.terminals:
                return f"({ref} {self.ignored}*)"
            return ref
        if isinstance(node, _Lit):
            return '"' + "".join(_char(ord(c), False) for c in node.text) + '"'
        if isinstance(node, _Class):
            return _class_text(node.ranges, node.negated)
        if isinstance(node, _Repeat):
            inner = self.expr(node.node, in_rule)
            if not (isinstance(node.node, (_Sym, _Class))
                    or (isinstance(node.node, _Lit) and len(node.node.text) == 1)):
                inner = inner if inner.startswith("(") and _balanced(inner) else f"({inner})"
            quantifier = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get(
                (node.low, node.high),
                f"{{{node.low}}}" if node.low == node.high
                else f"{{{node.low},{'' if node.high is None else node.high}}}")
            return inner + quantifier
        if isinstance(node, _Alt):
            alts = [" ".join(self.expr(n, in_rule) for n in seq) or '""' for seq in node.seqs]
            return "(" + " | ".join(alts) + ")" if len(alts) > 1 else alts[0]
        assert isinstance(node, _Except)
        return self.keywordless(node)

    def keywordless(self, node: _Except) -> str:
        """``/[first][rest]*/ & ~(words)``: a trie of the words, each prefix a rule that
        accepts its end unless the prefix is a word."""
        base = node.base
        if not (isinstance(base, _Alt) and len(base.seqs) == 1 and len(base.seqs[0]) == 2
                and isinstance(first := base.seqs[0][0], _Class) and not first.negated
                and isinstance(more := base.seqs[0][1], _Repeat)
                and isinstance(rest := more.node, _Class) and not rest.negated
                and more.low == 0 and more.high is None):
            raise GrammarError(f"{self.source}: the GBNF writer translates `A & ~(words)` only "
                               "for A a /[first][rest]*/ name pattern", rule="&")

        def inside(c: int, ranges: list[tuple[int, int]]) -> bool:
            return any(lo <= c <= hi for lo, hi in ranges)

        words = sorted({w for w in node.words if w and inside(ord(w[0]), first.ranges)
                        and all(inside(ord(c), rest.ranges) for c in w[1:])})
        prefixes = sorted({w[:i] for w in words for i in range(1, len(w))} | set(words))
        tail = _class_text(rest.ranges, False) + "*"
        rule = {p: self.fresh("kw-" + "".join(c if c.isalnum() else "-" for c in p))
                for p in prefixes}

        def body(prefix: str, ranges: list[tuple[int, int]]) -> str:
            children = sorted({w[len(prefix)] for w in words
                               if w.startswith(prefix) and len(w) > len(prefix)})
            alts = [f'"{_char(ord(c), False)}" {rule[prefix + c]}' for c in children]
            others = _minus(ranges, {ord(c) for c in children})
            if others:
                alts.append(f"{_class_text(others, False)} {tail}")
            return " | ".join(alts)

        for prefix in prefixes:
            text = body(prefix, rest.ranges)
            if prefix not in words:
                text = f"({text})?" if text else '""'
            self.rules.append((rule[prefix], text or '""'))
        return f"({body('', first.ranges)})"


def _balanced(text: str) -> bool:
    """Whether ``text``'s first parenthesis closes at its end (it is one group)."""
    depth, quoted, escaped, klass = 0, False, False, False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif quoted:
            quoted = c != '"'
        elif klass:
            klass = c != "]"
        elif c == '"':
            quoted = True
        elif c == "[":
            klass = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0 and i != len(text) - 1:
                return False
    return True


# ---- the translation --------------------------------------------------------------------------

def _left_recursion(name: str, node: _Node) -> _Node:
    """``A: b | A x | A y`` as ``A: b (x | y)*``, the same language without left recursion."""
    if not isinstance(node, _Alt):
        return node
    recursive = [s[1:] for s in node.seqs if s and s[0] == _Sym(name)]
    if not recursive:
        return node
    base = [s for s in node.seqs if not (s and s[0] == _Sym(name))]
    return _Alt([[_Alt(base), _Repeat(_Alt(recursive), 0, None)]])


def _leftmost(node: _Node, nullable: dict[str, bool]) -> tuple[set[str], bool]:
    """The rules that may come first in ``node``, and whether it may be empty."""
    if isinstance(node, _Sym):
        return {node.name}, nullable.get(node.name, False)
    if isinstance(node, _Repeat):
        inner, empty = _leftmost(node.node, nullable)
        return inner, empty or node.low == 0
    if isinstance(node, _Alt):
        first: set[str] = set()
        any_empty = False
        for seq in node.seqs:
            empty = True
            for item in seq:
                f, e = _leftmost(item, nullable)
                first |= f
                if not e:
                    empty = False
                    break
            any_empty = any_empty or empty
        return first, any_empty
    return set(), False


def _check_no_left_recursion(nodes: dict[str, _Node], terminals: set[str], source: str) -> None:
    nullable = dict.fromkeys(nodes, False)
    changed = True
    while changed:
        changed = False
        for name, node in nodes.items():
            if name not in terminals and not nullable[name] and _leftmost(node, nullable)[1]:
                nullable[name] = changed = True
    first = {n: _leftmost(node, nullable)[0] & set(nodes) for n, node in nodes.items()}
    for name in nodes:
        seen, todo = set(), list(first[name])
        while todo:
            other = todo.pop()
            if other == name:
                raise GrammarError(f"{source}'s `{name}` is left-recursive through other rules; "
                                   "training.grammars.gbnf rewrites only direct left recursion "
                                   "(llama.cpp refuses it)", rule=name)
            if other not in seen:
                seen.add(other)
                todo.extend(first.get(other, ()))


def lark_to_gbnf(text: str, *, source: str = "the grammar") -> str:
    """``text``, a Lark grammar with a ``start`` rule, as GBNF whose ``root`` is ``start``;
    only what ``start`` reaches is written.  ``GrammarError`` names a construct it cannot
    translate (a ``%import``, a template, a lookahead, ``"x"i``, ...)."""
    g = Grammar.parse(text, source=source, user=_USER)
    ignored: list[_Node] = []
    for directive in g.directives():
        words = directive.split(None, 1)
        if words[0] != "%ignore" or len(words) < 2:
            raise _error(source, words[0], f"the directive `{directive.strip()}`")
        ignored.append(_Body(Definition("%ignore", words[1]).lexemes, source,
                             "%ignore").read())
    if "start" not in g:
        raise GrammarError(f"{source} has no `start` rule; GBNF's root is the start rule",
                           rule="start")
    nodes: dict[str, _Node] = {}
    terminals: set[str] = set()
    todo = ["start"] + [s.name for n in ignored for s in _symbols(n)]
    while todo:
        name = todo.pop(0)
        if name in nodes:
            continue
        definition = g.definition(name, "GBNF: a definition the start rule reaches")
        node = _Body(definition.lexemes, source, name).read()
        if definition.is_terminal:
            terminals.add(name)
        else:
            node = _left_recursion(name, node)
        nodes[name] = node
        todo.extend(s.name for s in _symbols(node) if s.name not in nodes)
    _check_no_left_recursion(nodes, terminals, source)
    ignore = None
    if ignored:
        ignore = ignored[0] if len(ignored) == 1 else _Alt([[n] for n in ignored])
    return _Writer(nodes, terminals, ignore, source).write()


def _symbols(node: _Node):
    if isinstance(node, _Sym):
        yield node
    elif isinstance(node, _Repeat):
        yield from _symbols(node.node)
    elif isinstance(node, _Alt):
        for seq in node.seqs:
            for item in seq:
                yield from _symbols(item)
    elif isinstance(node, _Except):
        yield from _symbols(node.base)
