"""The error hierarchy: one root, one subclass per stage.

Syntax and semantic errors carry ``line``, ``column`` (1-based), the offending source line with a
caret, and what was expected, as attributes as well as in the message, so tools and reward code
read fields and never parse messages.
"""

from __future__ import annotations

__all__ = [
    "DragonError",
    "DslSemanticError",
    "DslSyntaxError",
    "GrammarError",
    "TraceError",
    "UnsupportedError",
]


class DragonError(Exception):
    """Root of every error this package raises on bad input."""


class _Located(DragonError):
    stage = "error"

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        source_line: str | None = None,
        expected: list[str] | None = None,
    ) -> None:
        self.reason = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.expected = sorted(set(expected or []))
        super().__init__(self._render())

    @property
    def snippet(self) -> str:
        """The offending line with a caret under the column (empty when unknown)."""
        if self.source_line is None or self.column is None:
            return ""
        line, column = self.source_line, self.column
        if len(line) > 160:  # a window around the column, for very long lines
            start = max(0, column - 80)
            line, column = line[start : start + 160], column - start
        pad = "".join("\t" if c == "\t" else " " for c in line[: column - 1])
        return f"{line}\n{pad}^"

    def _render(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line is not None else ""
        text = f"{where}{self.reason}"
        if self.expected:
            text += "\nExpected one of: " + ", ".join(self.expected)
        if self.snippet:
            text += "\n" + self.snippet
        return text


class DslSyntaxError(_Located):
    """The text is not a script of the language."""

    stage = "syntax"


class DslSemanticError(_Located):
    """The script parses but is not meaningful (undefined names, wrong arity or types, or it
    does not fit the workload it is checked against)."""

    stage = "semantic"


class UnsupportedError(DragonError):
    """A trace holds something the language cannot express; names the instruction."""

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        self.kind = kind
        super().__init__(message)


class TraceError(DragonError):
    """A trace, or trace JSON, is malformed (or TVM rejected building it)."""


class GrammarError(DragonError):
    """``grammar/dragon.lark`` cannot be read, or lacks (or has in another shape) a rule, terminal,
    directive or alternative that a tool derives from it.  ``rule`` names it; ``expected`` says
    what the tool expected, when it expected a shape."""

    def __init__(self, message: str, *, rule: str | None = None,
                 expected: str | None = None) -> None:
        self.rule = rule
        self.expected = expected
        super().__init__(message)
