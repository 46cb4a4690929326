"""The script AST: values, statements and programs.

Values are plain immutable Python objects, so that the AST needs no TVM:

========================  ==========================================================
Script                    Python value
========================  ==========================================================
``l3``                    ``Ref("l3")``: a random variable (block, loop or expression)
``4``, ``true``, ``0.5``  ``int``, ``bool``, ``float`` (TVM POD values)
``4i64``, ``0.5f32``      ``Imm("int64", 4)``, ``Imm("float32", 0.5)`` (IntImm, FloatImm)
``"shared"``              ``str``
``none``                  ``None``
``[a, 1]``                ``tuple`` (an Array)
``{"k": 1}``              ``Dict`` (a Map)
``map(i, j => j, i)``     ``IndexMapValue``
``v1 * 2``                ``Expr`` (a PrimExpr over random variables)
========================  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "Dict",
    "Expr",
    "Imm",
    "IndexMapValue",
    "IndexVar",
    "Program",
    "Ref",
    "Stmt",
    "Value",
    "Word",
    "map_refs",
    "refs_in",
]


@dataclass(frozen=True)
class Ref:
    """A reference to a random variable defined by an earlier statement (``line`` and
    ``column`` locate it in the source, when it came from one)."""

    name: str
    line: int | None = field(default=None, compare=False, hash=False, repr=False)
    column: int | None = field(default=None, compare=False, hash=False, repr=False)


class Word(str):
    """A bare keyword argument, such as ``read`` in ``reindex C read 0``."""

    __slots__ = ()


@dataclass(frozen=True)
class Imm:
    """A typed TVM immediate: IntImm (integer or bool dtype) or FloatImm."""

    dtype: str
    value: int | float


@dataclass(frozen=True)
class IndexVar:
    """A variable bound by an index map (``dtype`` None means the map's default)."""

    name: str
    dtype: str


@dataclass(frozen=True)
class Expr:
    """A PrimExpr node: ``op`` is one of ``OPS``; ``args`` are Expr, Imm, Ref or IndexVar."""

    op: str
    args: tuple
    dtype: str | None = None  # only for "cast"

    OPS = ("add", "sub", "mul", "floordiv", "floormod", "div", "mod", "min", "max", "cast")


@dataclass(frozen=True)
class IndexMapValue:
    """An IndexMap: bound variables, result expressions, its default integer dtype, and the
    inverse map TVM stores with some maps."""

    params: tuple[IndexVar, ...]
    results: tuple
    dtype: str = "int32"
    inverse: IndexMapValue | None = None


@dataclass(frozen=True)
class Dict:
    """A Map value, kept as ordered (key, value) pairs."""

    items: tuple


Value = Union[Ref, Imm, Expr, IndexMapValue, Dict, tuple, str, int, float, bool, None]  # noqa: UP007


@dataclass
class Stmt:
    """One statement: ``op args... key=value... -> targets``.

    ``op`` is a statement keyword, or ``@Kind`` for the general form.
    """

    op: str
    args: list[Any] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)
    target_positions: list[tuple[int, int]] = field(default_factory=list, compare=False,
                                                    repr=False)
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)
    comment: str | None = field(default=None, compare=False)
    leading: list[str] = field(default_factory=list, compare=False, repr=False)


@dataclass
class Program:
    """A parsed script.  Comments and paragraph breaks ride along for the printer: a statement's
    ``comment`` (same line), its ``leading`` lines (full-line comments, "" for a blank line) and
    the program's ``trailing`` lines; they never change the meaning."""

    statements: list[Stmt] = field(default_factory=list)
    source: str | None = field(default=None, compare=False, repr=False)
    trailing: list[str] = field(default_factory=list, compare=False, repr=False)


def map_refs(value, fn):
    """Apply ``fn`` to every Ref inside a value."""
    if isinstance(value, Ref):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(map_refs(v, fn) for v in value)
    if isinstance(value, Dict):
        return Dict(tuple((map_refs(k, fn), map_refs(v, fn)) for k, v in value.items))
    if isinstance(value, Expr):
        return Expr(value.op, tuple(map_refs(a, fn) for a in value.args), value.dtype)
    if isinstance(value, IndexMapValue):
        return IndexMapValue(value.params, tuple(map_refs(r, fn) for r in value.results),
                             value.dtype, map_refs(value.inverse, fn))
    return value


def refs_in(value) -> list[Ref]:
    found: list[Ref] = []

    def collect(ref: Ref) -> Ref:
        found.append(ref)
        return ref

    map_refs(value, collect)
    return found
