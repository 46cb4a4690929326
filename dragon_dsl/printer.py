"""AST -> canonical text.

Every program has exactly one canonical text: one statement per line, single spaces, options
in the order the grammar lists them, and the shortest literal that parses back to the same
value.  A statement ``op`` is printed by ``print_<op>`` when this module has one, else by the
generic rule ``op args... options... -> targets``.
"""

from __future__ import annotations

import json
import math
import re

from .ast import Dict, Expr, Imm, IndexMapValue, IndexVar, Program, Ref, Stmt, Word
from .errors import UnsupportedError
from .grammar import reserved_words, statement_options
from .parser import expr_dtype
from .statements import PLAIN_ANNOTATION_KEYS, STATEMENTS

__all__ = ["annotation_key_text", "expand_ranges", "format_program", "format_statement",
           "format_value"]

_DTYPE_SUFFIX = {
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "float32": "f32", "float64": "f64", "bool": "b",
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PRECEDENCE = {"add": 1, "sub": 1, "mul": 2, "floordiv": 2, "floormod": 2}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}
_CALLS = {"min": "min", "max": "max", "div": "truncdiv", "mod": "truncmod"}


def _float(value: float) -> str:
    if not math.isfinite(value):
        raise UnsupportedError(f"the language has no literal for the float {value!r}")
    text = repr(float(value))
    return text if any(c in text for c in ".e") else text + ".0"


def format_value(value, *, dtype: str = "int32") -> str:
    """One value in its canonical spelling (``dtype``: the default of enclosing expressions)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, Word):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, IndexVar):
        return value.name
    if isinstance(value, Imm):
        return _imm(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_value(v, dtype=dtype) for v in value) + "]"
    if isinstance(value, Dict):
        return "{" + ", ".join(
            f"{format_value(k, dtype=dtype)}: {format_value(v, dtype=dtype)}"
            for k, v in value.items
        ) + "}"
    if isinstance(value, IndexMapValue):
        return _index_map(value)
    if isinstance(value, Expr):
        return _expr(value, dtype)
    raise TypeError(f"Expected a script value but got {type(value).__name__}: {value!r}")


def _imm(value: Imm) -> str:
    if value.dtype not in _DTYPE_SUFFIX:
        raise UnsupportedError(f"the language has no literal for dtype {value.dtype!r}")
    suffix = _DTYPE_SUFFIX[value.dtype]
    if value.dtype.startswith("float"):
        text = _float(value.value)
        return text + suffix
    return f"{int(value.value)}{suffix}"


def _operand(value, sibling, dtype: str, parent_prec: int, right: bool) -> str:
    if isinstance(value, Imm) and not value.dtype.startswith("float") and value.dtype != "bool":
        if value.dtype == (expr_dtype(sibling) or dtype):
            return str(int(value.value))
        return _imm(value)
    text = _expr(value, dtype)
    if isinstance(value, Expr) and value.op in _PRECEDENCE:
        prec = _PRECEDENCE[value.op]
        if prec < parent_prec or (right and prec == parent_prec):
            return f"({text})"
    return text


def _expr(value, dtype: str) -> str:
    if not isinstance(value, Expr):
        if isinstance(value, Imm):
            return str(int(value.value)) if value.dtype == dtype else _imm(value)
        return format_value(value, dtype=dtype)
    if value.op == "cast":
        inner = value.args[0]
        arg = str(int(inner.value)) if isinstance(inner, Imm) and inner.dtype == dtype \
            else _expr(inner, dtype)
        return f"cast<{value.dtype}>({arg})"
    a, b = value.args
    if value.op in _CALLS:
        return f"{_CALLS[value.op]}({_operand(a, b, dtype, 0, False)}, " \
               f"{_operand(b, a, dtype, 0, False)})"
    prec = _PRECEDENCE[value.op]
    return f"{_operand(a, b, dtype, prec, False)} {_INFIX[value.op]} " \
           f"{_operand(b, a, dtype, prec, True)}"


def _index_map(value: IndexMapValue) -> str:
    kw = {"int32": "map", "int64": "map64"}.get(value.dtype)
    if kw is None:
        raise UnsupportedError(f"index maps default to int32 or int64, not {value.dtype!r}")
    return f"{kw}({_map_body(value, value.dtype)}" + \
        (f"; {_map_body(value.inverse, value.dtype)})" if value.inverse else ")")


def _map_body(value: IndexMapValue, dtype: str) -> str:
    params = ", ".join(
        p.name if p.dtype == dtype else f"{p.name}: {p.dtype}" for p in value.params
    )
    results = ", ".join(_expr(r, dtype) for r in value.results)
    return f"{params} => {results}".strip()


def _name(name: str) -> str:
    if not _IDENT.match(name) or name in reserved_words():
        raise UnsupportedError(f"{name!r} cannot be used as a name")
    return name


# ---- statements ------------------------------------------------------------------------

_NUMBERED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*?)(0|[1-9][0-9]*)\Z")


def _names(names) -> str:
    """Names, with runs of three or more numbered names written as ranges (l3..l6)."""
    parts, i = [], 0
    names = [_name(n) for n in names]
    while i < len(names):
        m = _NUMBERED.match(names[i])
        j = i
        if m:
            prefix, start = m.group(1), int(m.group(2))
            while j + 1 < len(names) and names[j + 1] == f"{prefix}{start + j + 1 - i}":
                j += 1
        if j - i >= 2:
            parts.append(f"{names[i]}..{names[j]}")
        else:
            parts.extend(names[i : j + 1])
        i = j + 1
    return ", ".join(parts)


_RANGE_TEXT = re.compile(
    r"\b([A-Za-z_][A-Za-z0-9_]*?)([0-9]+)\.\.([A-Za-z_][A-Za-z0-9_]*?)([0-9]+)\b")


def expand_ranges(script: str) -> str:
    """A script with each ``l3..l6`` written out (``l3, l4, l5, l6`` in results and brackets,
    ``l3 l4 l5 l6`` among positional arguments), meaning the same: the form the sampling
    grammars produce (no context-free grammar can say which ranges are valid), and so the form
    a model is shown and trained on (``training.prompts.format_completion``).  Formatting
    gives the ranges back.

    >>> expand_ranges("fuse i0..i1 -> l0..l1")
    'fuse i0 i1 -> l0, l1'
    """
    def spell(m: re.Match) -> str:
        prefix, first, last = m.group(1), int(m.group(2)), int(m.group(4))
        if m.group(3) != prefix or first >= last:
            return m.group(0)
        before = m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()]
        listed = "->" in before or before.count("[") > before.count("]")
        return (", " if listed else " ").join(f"{prefix}{k}" for k in range(first, last + 1))

    return _RANGE_TEXT.sub(spell, script)


def _targets(stmt: Stmt) -> str:
    return " -> " + _names(stmt.targets) if stmt.targets else ""


def print_tile(stmt: Stmt) -> str:
    loop, factors = stmt.args
    options = {k: v for k, v in stmt.options.items() if k != "factors"}
    text = " ".join([stmt.op, _arg(loop), _arg(factors)] +
                    _options(Stmt(stmt.op, [], options))) + _targets(stmt)
    if "factors" in stmt.options:
        text += " factors " + _names(stmt.options["factors"])
    return text


def _options(stmt: Stmt) -> list[str]:
    order = statement_options().get("general" if stmt.op.startswith("@") else stmt.op, ())
    unknown = set(stmt.options) - set(order)
    if unknown:
        raise ValueError(f"Expected options of {stmt.op!r} among {list(order)} but got "
                         f"{sorted(unknown)}")
    return [f"{k}={_option_value(k, stmt.options[k])}" for k in order if k in stmt.options]


def _option_value(key: str, value) -> str:
    if key == "probs":
        return "[" + ", ".join(
            _float(v.value) if isinstance(v, Imm) and v.dtype == "float32" else format_value(v)
            for v in value
        ) + "]"
    return format_value(value)


def _arg(value) -> str:
    if not isinstance(value, tuple):
        return format_value(value)
    # Runs of numbered names print as ranges; other items one by one.
    parts: list[str] = []
    run: list[str] = []
    for item in value:
        if isinstance(item, Ref):
            run.append(item.name)
            continue
        if run:
            parts.append(_names(run))
            run = []
        parts.append(_arg(item))
    if run:
        parts.append(_names(run))
    return "[" + ", ".join(parts) + "]"


_KEYWORD_KEYS = ("parallel", "vectorize", "unroll")


def _ann_key(key: str) -> str:
    # Bare when the bare spelling reads back as this key (statements.annotation_key).
    if key in PLAIN_ANNOTATION_KEYS:
        return key
    prefix = "meta_schedule."
    short = key[len(prefix):] if key.startswith(prefix) else None
    if short is not None and short not in PLAIN_ANNOTATION_KEYS and _IDENT.match(short) and \
            (short not in reserved_words() or short in _KEYWORD_KEYS):
        return short
    return format_value(key)


def annotation_key_text(key: str) -> str:
    """How an annotation key is written in a script (``parallel``, ``"pragma_x.y"``)."""
    return _ann_key(key)


def print_annotate(stmt: Stmt) -> str:
    target, key, value = stmt.args
    return f"annotate {_arg(target)} {_ann_key(key)}={_arg(value)}"


def print_unannotate(stmt: Stmt) -> str:
    target, key = stmt.args
    return f"unannotate {_arg(target)} {_ann_key(key)}"


print_partitioned_tile = print_tile


def print_postproc(stmt: Stmt) -> str:
    return "postproc auto " + stmt.args[0] if stmt.args else "postproc"


def print_general(stmt: Stmt) -> str:
    inputs, attrs = stmt.args
    left = ", ".join(format_value(v) for v in inputs)
    right = ", ".join(format_value(v) for v in attrs)
    text = f"{stmt.op}({left}; {right})" if right else f"{stmt.op}({left};)"
    opts = _options(stmt)
    return text + (" " + " ".join(opts) if opts else "") + _targets(stmt)


def format_statement(stmt: Stmt) -> str:
    """One statement, canonically, without comments."""
    if stmt.op.startswith("@"):
        return print_general(stmt)
    printer = globals().get(f"print_{stmt.op}")
    if printer is not None:
        return printer(stmt)
    spec = STATEMENTS.get(stmt.op)
    if spec is not None and spec.spread:  # reorder l1..l4 l9
        args = [_names([a.name for a in stmt.args]).replace(", ", " ")]
    else:
        args = [_arg(a) for a in stmt.args]
    parts = [stmt.op] + args + _options(stmt)
    return " ".join(parts) + _targets(stmt)


def format_program(program: Program) -> str:
    """The canonical text of a program, with its comments (and single blank lines) kept."""
    lines: list[str] = []
    for stmt in program.statements:
        lines.extend(stmt.leading)
        text = format_statement(stmt)
        if stmt.comment:
            text += "  " + stmt.comment
        lines.append(text)
    lines.extend(program.trailing)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""
