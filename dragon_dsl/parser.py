"""Text -> AST: Lark's LALR parser over ``grammar/dragon.lark`` and a transformer.

The parse tree is already the AST's shape: each ``s_<op>`` rule becomes one ``Stmt`` with
``op``, positional ``args``, ``options`` and ``targets``; values become the plain objects of
``dragon_dsl.ast``.  Parsing never evaluates anything.
"""

from __future__ import annotations

import functools
import json
import math
import re

import lark
from lark import Token, Transformer, v_args

from .ast import Dict, Expr, Imm, IndexMapValue, IndexVar, Program, Ref, Stmt, Word
from .errors import DragonError, DslSyntaxError
from .grammar import grammar_text, option_keys, statement_options
from .limits import DEFAULT_LIMITS, Limits
from .statements import annotation_key

__all__ = ["parse", "parser"]

_RANGE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*?)(0|[1-9][0-9]*)\Z")
_SUFFIX_DTYPES = {
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64", "b": "bool",
}

_FLOAT_MAX = {"float16": 65504.0, "float32": 3.4028234663852886e38,
              "float64": 1.7976931348623157e308}


def _short(text: str) -> str:
    """A literal as an error message shows it: long ones cut in the middle."""
    return text if len(text) <= 24 else f"{text[:10]}...{text[-10:]} ({len(text)} characters)"


def _int_range(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return 0, 1
    bits = int(dtype.removeprefix("u").removeprefix("int"))
    return (0, 2**bits - 1) if dtype.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


@functools.cache
def parser() -> lark.Lark:
    """The shared LALR parser (built once per process)."""
    return lark.Lark(
        grammar_text(),
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=False,
    )


def parse_number(text: str):
    """A NUMBER token: ``0.25`` is a float; ``4i64``, ``1b``, ``0.5f32`` are typed immediates."""
    for suffix in sorted(_SUFFIX_DTYPES, key=len, reverse=True):
        if text.endswith(suffix) and not text.endswith("e" + suffix):
            body, dtype = text[: -len(suffix)], _SUFFIX_DTYPES[suffix]
            if dtype.startswith("float"):
                value = float(body)
                if not abs(value) <= _FLOAT_MAX[dtype]:
                    raise ValueError(f"{_short(body)} is out of the range of {dtype} "
                                     f"(magnitude at most {_FLOAT_MAX[dtype]:g})")
                return Imm(dtype, value)
            if "." in body or "e" in body.lower():
                raise ValueError(f"integer dtype {dtype} with a non-integer value "
                                 f"{_short(body)!r}")
            low, high = _int_range(dtype)
            # Beyond 40 digits no dtype holds it (and int() of thousands of digits is refused).
            if len(body) > 40 or not low <= int(body) <= high:
                raise ValueError(f"{_short(body)} is out of the range of {dtype} "
                                 f"({low} to {high})")
            return Imm(dtype, int(body))
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{_short(text)} is out of the range of a 64-bit float")
    return value


# Python refuses to convert more than 4300 digits (sys.get_int_max_str_digits); a literal
# that long is never a schedule's, so the language stops a little below.
MAX_INT_DIGITS = 4000


def parse_int(text: str) -> int:
    """An INT token: a POD integer (of at most ``MAX_INT_DIGITS`` digits)."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits} digits: at most {MAX_INT_DIGITS} are allowed")
    return int(text)


class _Option:
    __slots__ = ("key", "value")

    def __init__(self, key: str, value) -> None:
        self.key, self.value = key, value


class _Outs(list):
    positions: list[tuple[int, int]]


class _RangeList(list):
    pass


def _flatten(items) -> list:
    """Items with each range (l3..l6) spread into its names."""
    return [x for item in items for x in (item if isinstance(item, _RangeList) else [item])]


class _Param(tuple):
    def __new__(cls, name: str, dtype: str | None):
        return super().__new__(cls, (name, dtype))


class _MapBody(tuple):
    def __new__(cls, params, results):
        return super().__new__(cls, (params, results))


def _build_map(body: _MapBody, default: str, inverse=None) -> IndexMapValue:
    params, results = body
    bound = {n: IndexVar(n, d or default) for n, d in params}
    if len(bound) != len(params):
        raise _UserError("an index map binds the same variable twice")
    return IndexMapValue(
        tuple(bound[n] for n, _ in params),
        tuple(_resolve_ints(r, default, bound) for r in results),
        default,
        inverse,
    )


class _Section(list):
    def __init__(self, name: str, items) -> None:
        super().__init__(items)
        self.name = name


def _resolve_ints(value, dtype: str, params: dict[str, IndexVar] | None = None):
    """Inside expressions, bound names are index variables and a bare integer is an immediate
    of its sibling operand's dtype (TVM requires both operands of a binary node to agree), or
    of the context's default dtype when the sibling says nothing (see ``expr_dtype``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return Imm(dtype, value)
    if isinstance(value, Ref) and params and value.name in params:
        return params[value.name]
    if isinstance(value, Expr):
        args = tuple(a if isinstance(a, int) and not isinstance(a, bool)
                     else _resolve_ints(a, dtype, params) for a in value.args)
        if value.op == "cast":
            return Expr("cast", (_resolve_ints(args[0], dtype, params),), value.dtype)
        resolved = []
        for i, a in enumerate(args):
            if isinstance(a, int) and not isinstance(a, bool):
                sibling = args[1 - i] if len(args) == 2 else None
                a = Imm(expr_dtype(sibling) or dtype, a)
            resolved.append(a)
        return Expr(value.op, tuple(resolved), value.dtype)
    return value


def expr_dtype(value) -> str | None:
    """The dtype an operand shows in the text: known for index variables, casts and nodes over
    them; unknown for literals and random variables."""
    if isinstance(value, IndexVar):
        return value.dtype
    if isinstance(value, Expr):
        if value.op == "cast":
            return value.dtype
        for a in value.args:
            found = expr_dtype(a)
            if found:
                return found
    return None


@v_args(inline=True)
class _ToAst(Transformer):
    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__()
        self.limits = limits
        self.range_names = 0  # names the ranges seen so far stand for

    def _bounded(self, items, what: str):
        if len(items) > self.limits.max_list:
            raise _UserError(f"{what} has {len(items)} items; at most {self.limits.max_list} "
                             "are allowed (--max-list)")
        return items

    # ---- tokens --------------------------------------------------------------------
    def INT(self, tok):
        return parse_int(str(tok))

    def NUMBER(self, tok):
        return parse_number(str(tok))

    def STRING(self, tok):
        return json.loads(str(tok))

    def bool(self, tok):
        return str(tok) == "true"

    def NONE(self, tok):
        return None

    def buffer_kind(self, tok):
        return Word(tok)

    def postproc_set(self, tok):
        return str(tok)

    def map_kw(self, tok):
        return str(tok)

    def call_op(self, tok):
        return str(tok)

    def DTYPE(self, tok):
        return str(tok)

    # ---- values --------------------------------------------------------------------
    def name(self, tok):
        return Ref(str(tok), tok.line, tok.column)

    def outs(self, *items):
        names = self._bounded(_flatten(items), "the list of results")
        outs = _Outs(n.name for n in names)
        outs.positions = [(n.line, n.column) for n in names]
        return outs

    def name_range(self, first, last):
        a, b = _RANGE.match(first.name), _RANGE.match(last.name)
        if not (a and b and a.group(1) == b.group(1) and int(a.group(2)) < int(b.group(2))):
            raise _UserError(f"{first.name}..{last.name} is not a range: expected the same "
                             "prefix and increasing numbers, as in l3..l6")
        prefix, start, stop = a.group(1), int(a.group(2)), int(b.group(2))
        count = stop - start + 1
        if count > self.limits.max_list:
            raise _UserError(f"{first.name}..{last.name} stands for {count} names; at most "
                             f"{self.limits.max_list} are allowed (--max-list)")
        self.range_names += count
        if self.range_names > self.limits.max_names:
            raise _UserError(f"the ranges of this script stand for more than "
                             f"{self.limits.max_names} names (--max-names)")
        return _RangeList(Ref(f"{prefix}{k}", first.line, first.column)
                          for k in range(start, stop + 1))

    def tile_factors(self, outs):
        return _Option("factors", tuple(outs))

    def name_list(self, *items):
        return tuple(self._bounded(_flatten(items), "a list"))

    int_list = name_list
    factor_list = name_list

    def list(self, *items):
        return tuple(self._bounded(items, "a list"))

    def dict(self, *pairs):
        return Dict(tuple(self._bounded(pairs, "a dict")))

    def pair(self, key, value):
        if isinstance(key, tuple | Dict):  # TVM's maps in traces are keyed by scalars
            raise _UserError("a dict key must be a string, number, name or none, not a "
                             f"{'list' if isinstance(key, tuple) else 'dict'}")
        return (key, value)

    def ann_key(self, tok):
        if isinstance(tok, Token):  # a bare key: see statements.annotation_key
            return annotation_key(str(tok))
        return tok

    def inputs(self, *values):
        return _Section("inputs", self._bounded(values, "the inputs"))

    def attrs(self, *values):
        return _Section("attrs", self._bounded(values, "the attrs"))

    # ---- expressions ---------------------------------------------------------------
    def add(self, a, b):
        return Expr("add", (a, b))

    def sub(self, a, b):
        return Expr("sub", (a, b))

    def mul(self, a, b):
        return Expr("mul", (a, b))

    def floordiv(self, a, b):
        return Expr("floordiv", (a, b))

    def floormod(self, a, b):
        return Expr("floormod", (a, b))

    def call(self, op, a, b):
        return Expr({"truncdiv": "div", "truncmod": "mod"}.get(str(op), str(op)), (a, b))

    def cast(self, dtype, value):
        return Expr("cast", (value,), dtype)

    def map_body(self, *items):
        self._bounded(items, "an index map")
        params = [i for i in items if isinstance(i, _Param)]
        results = [i for i in items if not isinstance(i, _Param)]
        return _MapBody(params, results)

    def map_param(self, name, dtype=None):
        return _Param(str(name), dtype)

    def index_map(self, kw, body, inverse=None):
        default = "int64" if str(kw) == "map64" else "int32"
        return _build_map(body, default, _build_map(inverse, default) if inverse else None)

    # ---- options (methods for every opt_<rule> are installed from the grammar) ------
    def opt_probs(self, *values):
        return _Option("probs", tuple(v if isinstance(v, Imm) else Imm("float32", float(v))
                                      for v in values))

    def start(self, *stmts):
        return [s for s in stmts if isinstance(s, Stmt)]


class _UserError(DragonError):
    """Raised inside the transformer; ``parse`` turns it into a located DslSyntaxError."""


def _statement(op: str, children: list, meta, limits: Limits) -> Stmt:
    stmt = Stmt(op, line=getattr(meta, "line", None), column=getattr(meta, "column", None))
    for child in children:
        if isinstance(child, _Option):
            if child.key in stmt.options:
                raise _UserError(f"option {child.key!r} given twice")
            stmt.options[child.key] = child.value
        elif isinstance(child, _Outs):
            stmt.targets = list(child)
            stmt.target_positions = child.positions
        elif isinstance(child, _Section):
            stmt.args.append(
                [_resolve_ints(v, "int32") if isinstance(v, Expr) else v for v in child]
            )
        elif isinstance(child, _RangeList):
            stmt.args.extend(child)
        elif isinstance(child, Token) and child.type == "KIND":
            stmt.op = str(child)
        else:
            stmt.args.append(child)
    if len(stmt.args) > limits.max_list:
        raise _UserError(f"{op} has {len(stmt.args)} arguments; at most {limits.max_list} are "
                         "allowed (--max-list)")
    return stmt


def _make_stmt_method(op: str):
    @v_args(meta=True)
    def method(self, meta, children):
        return _statement(op, list(children), meta, self.limits)

    return method


def _make_option_method(key: str):
    def method(self, values):
        return _Option(key, values[0] if len(values) == 1 else tuple(values))

    return method


def _install_rules() -> None:
    for op in statement_options():
        setattr(_ToAst, "s_" + op, _make_stmt_method(op))
    for rule, key in option_keys().items():
        if not hasattr(_ToAst, rule):
            setattr(_ToAst, rule, _make_option_method(key))


_install_rules()


def parse(text: str | bytes, *, limits: Limits | None = None) -> Program:
    """Parse a script into a ``Program``; ``limits`` (``dragon_dsl.limits.DEFAULT_LIMITS`` when
    not given) bounds its size, its ranges, lists and nesting.

    >>> parse('block "C" -> C').statements[0].args
    ['C']
    """
    limits = limits or DEFAULT_LIMITS
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DslSyntaxError(f"the script is not UTF-8: {exc.reason} at byte {exc.start}",
                                 line=1, column=1) from None
    if not isinstance(text, str):
        raise TypeError(f"Expected str or bytes but got text={type(text).__name__}")
    size = len(text) if len(text) * 4 <= limits.max_bytes else \
        len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise DslSyntaxError(f"the script is {size} bytes; at most {limits.max_bytes} are "
                             "allowed (--max-bytes)", line=1, column=1)
    source = text if text.endswith("\n") else text + "\n"
    lines = source.split("\n")
    try:
        tree = parser().parse(source)
        _check_depth(tree, limits.max_depth, lines)
        statements = _ToAst(limits).transform(tree)
        program = Program(statements, source=text)
        _attach_comments(program, lines)
    except lark.exceptions.UnexpectedInput as exc:
        raise _syntax_error(exc, lines) from None
    except RecursionError:
        raise DslSyntaxError("expressions are nested too deeply", line=1, column=1) from None
    except lark.exceptions.VisitError as exc:
        orig = exc.orig_exc
        if isinstance(exc.obj, Token):  # a token's own value is wrong (a number out of range)
            line, column = exc.obj.line, exc.obj.column
        else:
            meta = getattr(exc.obj, "meta", None)
            line = getattr(meta, "line", None) if meta is not None and not meta.empty else None
            column = getattr(meta, "column", None) if line is not None else None
        raise DslSyntaxError(
            str(orig), line=line, column=column,
            source_line=lines[line - 1] if line else None,
        ) from None
    return program


def _check_depth(tree: lark.Tree, max_depth: int, lines: list[str]) -> None:
    """Values nest at most ``max_depth`` deep below their statement (every later stage walks
    them recursively); measured without recursion, and reported where the limit is crossed."""
    stack = [(stmt, 0) for stmt in tree.children if isinstance(stmt, lark.Tree)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            meta = node.meta
            line = None if meta.empty else meta.line
            column = None if meta.empty else meta.column
            raise DslSyntaxError(f"values nest more than {max_depth} deep (--max-depth)",
                                 line=line, column=column,
                                 source_line=lines[line - 1] if line else None)
        stack.extend((child, depth + 1) for child in node.children
                     if isinstance(child, lark.Tree))


def _attach_comments(program: Program, lines: list[str]) -> None:
    """Full-line comments and blank lines go to the next statement's ``leading`` list; a
    comment after a statement on its line goes to its ``comment``."""
    by_line = {s.line: s for s in program.statements}
    pending: list[str] = []
    for number, raw in enumerate(lines[:-1], start=1):
        stripped = raw.strip()
        stmt = by_line.get(number)
        if stmt is not None:
            stmt.leading = pending
            pending = []
            hash_at = _comment_start(raw)
            if hash_at is not None:
                stmt.comment = raw[hash_at:].rstrip()
        elif stripped.startswith("#"):
            pending.append(stripped)
        elif not stripped and pending[-1:] != [""]:
            pending.append("")
    if program.statements and program.statements[0].leading[:1] == [""]:
        program.statements[0].leading.pop(0)
    program.trailing = pending


def _comment_start(line: str) -> int | None:
    in_string = escaped = False
    for i, ch in enumerate(line):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "#":
            return i
    return None


_TERMINAL_NAMES = {
    "NAME": "a name", "INT": "an integer", "NUMBER": "a number", "STRING": "a string",
    "NONE": "none",
    "KIND": "@InstructionKind", "_NL": "end of line", "DTYPE": "a dtype such as int64",
    "$END": "end of input",
}


def _expected_names(exc) -> list[str]:
    names = []
    p = parser()
    for term in getattr(exc, "expected", None) or getattr(exc, "allowed", None) or []:
        if term in _TERMINAL_NAMES:
            names.append(_TERMINAL_NAMES[term])
            continue
        try:
            pattern = p.get_terminal(term).pattern
            names.append(repr(pattern.value) if pattern.type == "str" else term)
        except KeyError:
            names.append(term)
    return names


def _syntax_error(exc: lark.exceptions.UnexpectedInput, lines: list[str]) -> DslSyntaxError:
    line: int = getattr(exc, "line", None) or 0
    column: int = getattr(exc, "column", None) or 1
    if line < 1:
        line, column = len(lines), 1
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        found = source_line[column - 1 : column] or "end of line"
        reason = f"unexpected character {found!r}"
    elif isinstance(exc, lark.exceptions.UnexpectedToken):
        tok = exc.token
        reason = ("unexpected end of input" if tok.type == "$END"
                  else "unexpected end of line" if tok.type == "_NL"
                  else f"unexpected {str(tok)!r}")
    else:
        reason = "unexpected end of input"
    return DslSyntaxError(reason, line=line, column=column, source_line=source_line,
                          expected=_expected_names(exc))
