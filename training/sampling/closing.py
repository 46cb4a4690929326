"""Closing an unfinished script: a short string after which the grammar accepts.

Used near the end of the token budget (``SamplingConfig.wind_down``), so that a script the model
has not finished still ends where the grammar allows it rather than being cut mid-statement.

The string is built from pieces: ``CLOSING_PIECES``, then the grammar's own literals (keywords
such as `partition_pos`, which some statements require).  Greedily first: the end-of-script
marker when the grammar accepts right after it, else the pieces in that order, never two of a
group of ``APART_PIECES`` in a row (`x0x0...` would grow a name for ever) and no other piece more
than ``GREEDY_REPEATS`` times (`{4-x-x-x...` would not end): a newline ends a statement; a quote
closes a string (before `]`, which a string would take forever); then brackets, `->` and `=>`,
separators; then what a statement may still require: a space, a name, a number (`.` before `0`
so that `probs=[-0` gets its fraction, `1` after `0` for an integer that a `-` began, since
`-0` is not how the printer writes zero), an opening bracket, a few keywords, and the bytes that
complete a character cut mid-UTF-8.  When that does not end within ``SEARCH_DEPTH`` pieces, the
end of a keyword the matcher stopped in (`ile` after `t`) is tried before the greedy pieces;
then an iterative-deepening search over ``CLOSING_PIECES`` looks for the shortest string, giving
up after ``SEARCH_BUDGET`` tries.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable

import llguidance

__all__ = ["APART_PIECES", "CLOSING_PIECES", "GREEDY_REPEATS", "SEARCH_BUDGET", "SEARCH_DEPTH",
           "Closer", "grammar_literals"]

CLOSING_PIECES = (b"\n", b'"', b"]", b")", b"}", b">", b"=", b";", b":", b"-", b" ", b"x", b".",
                  b"0", b"1", b",", b"[", b"(", b"read", b"true", b"map", b"int32", b"llvm", b"K",
                  b"\x80", b"\xa0")
GREEDY_REPEATS = 10  # a tile of 8 factors binds 8 names: 7 commas
# Pieces the greedy pass never puts next to one of their group: canonical text has one space at a
# time, and one letter or digit completes a name or a number, where more only grow it (`x0x0...`).
APART_PIECES = ((b" ",), (b"x", b"0", b"1"))
SEARCH_DEPTH = 32
SEARCH_BUDGET = 1000


def grammar_literals(lark: str) -> list[bytes]:
    """The quoted literals of a Lark grammar, in order of first appearance.

    >>> grammar_literals('s_tile: "tile" " " name " " "[" INT "]"  // "x"')
    [b'tile', b' ', b'[', b']']
    """
    # Comments and regular expressions are skipped.
    tokens = re.finditer(r'//[^\n]*|"((?:[^"\\\n]|\\.)*)"|/(?:[^/\\\n]|\\.)+/', lark)
    literals = []
    for m in tokens:
        if not m.group(1):
            continue
        try:
            literal = json.loads(f'"{m.group(1)}"').encode()
        except ValueError:
            continue
        if literal not in literals:
            literals.append(literal)
    return literals


class Closer:
    """Finds closing strings for matchers over one tokenizer; each piece is spelled in tokens
    once (pieces the tokenizer cannot spell exactly are dropped).  ``extra`` pieces (a
    grammar's literals, the longest first) are tried after ``pieces``, by the greedy pass only;
    ``finals`` (an end marker) are taken first whenever the grammar accepts right after one."""

    def __init__(self, tokenizer: llguidance.LLTokenizer,
                 pieces: Iterable[bytes] = CLOSING_PIECES, extra: Iterable[bytes] = (),
                 finals: Iterable[bytes] = ()):
        base = list(dict.fromkeys(pieces))
        # Longest first: `innerpart_factor` whole before `i`, a loop name that only begins it.
        extra = sorted(extra, key=len, reverse=True)
        finals = list(finals)
        spelled = {p: _spell(tokenizer, p) for p in [*base, *extra, *finals]}
        self.pieces = [spelled[p] for p in base if spelled[p]]
        self.greedy_pieces = [*dict.fromkeys(spelled[p] for p in [*base, *extra] if spelled[p])]
        self.finals = [spelled[p] for p in finals if spelled[p]]
        # The ends of words (`ile` of `tile`), for a matcher stopped inside a keyword.
        words = [p for p in [*base, *extra] if len(p) > 2 and p.decode().isidentifier()]
        ends = sorted({w[k:] for w in words for k in range(1, len(w))},
                      key=lambda e: (-len(e), e))  # the longest first
        self.completions = [s for s in (_spell(tokenizer, e) for e in ends) if s]
        self._apart = {_spell(tokenizer, p): i for i, group in enumerate(APART_PIECES)
                       for p in group if _spell(tokenizer, p)}

    def path(self, matcher: llguidance.LLMatcher) -> list[int] | None:
        """Tokens after which ``matcher`` accepts, or None; ``matcher`` is left as it was."""
        pieces = self._greedy(matcher)
        if pieces is None:
            pieces = self._completed(matcher)
        if pieces is None:
            pieces = self._shortest(matcher)
        return None if pieces is None else [t for piece in pieces for t in piece]

    def _greedy(self, matcher: llguidance.LLMatcher) -> list[tuple[int, ...]] | None:
        path: list[tuple[int, ...]] = []
        uses: Counter = Counter()
        while not matcher.is_accepting() and len(path) < SEARCH_DEPTH:
            last = path[-1] if path else None
            piece = self._final_piece(matcher) or next(
                (p for p in self.greedy_pieces
                 if (uses[p] < GREEDY_REPEATS or p in self._apart)
                 and not (p in self._apart and self._apart.get(last) == self._apart[p])
                 and _consume(matcher, p)), None)
            if piece is None:
                break
            path.append(piece)
            uses[piece] += 1
        accepted = matcher.is_accepting()
        matcher.rollback(sum(len(p) for p in path))
        return path if accepted else None

    def _completed(self, matcher: llguidance.LLMatcher) -> list[tuple[int, ...]] | None:
        """The end of the word ``matcher`` stopped in, then the greedy pieces."""
        for end in self.completions:
            if _consume(matcher, end):
                rest = self._greedy(matcher)
                matcher.rollback(len(end))
                if rest is not None:
                    return [end, *rest]
        return None

    def _final_piece(self, matcher: llguidance.LLMatcher) -> tuple[int, ...] | None:
        """A final piece after which ``matcher`` accepts, consumed."""
        for piece in self.finals:
            if _consume(matcher, piece):
                if matcher.is_accepting():
                    return piece
                matcher.rollback(len(piece))
        return None

    def _shortest(self, matcher: llguidance.LLMatcher) -> list[tuple[int, ...]] | None:
        budget = SEARCH_BUDGET

        def search(depth: int, path: list[tuple[int, ...]]) -> bool:
            nonlocal budget
            if matcher.is_accepting():
                return True
            if depth == 0:
                return False
            for piece in self.pieces:
                budget -= 1
                if budget < 0:
                    return False
                if _consume(matcher, piece):
                    path.append(piece)
                    found = search(depth - 1, path)
                    matcher.rollback(len(piece))
                    if found:
                        return True
                    path.pop()
            return False

        for depth in range(1, SEARCH_DEPTH + 1):
            path: list[tuple[int, ...]] = []
            if search(depth, path):
                return path
            if budget < 0:
                break
        return None


def _spell(tokenizer: llguidance.LLTokenizer, piece: bytes) -> tuple[int, ...]:
    ids = tuple(tokenizer.tokenize_bytes(piece))
    return ids if ids and tokenizer.decode_bytes(list(ids)) == piece else ()


def _consume(matcher: llguidance.LLMatcher, piece: tuple[int, ...]) -> bool:
    """Consume all of ``piece`` or nothing."""
    n = matcher.try_consume_tokens(list(piece))
    if n == len(piece):
        return True
    if n:
        matcher.rollback(n)
    return False
