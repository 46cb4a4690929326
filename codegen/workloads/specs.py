"""Workloads: text specs of operator-family instances, TVMScript files, and their IRModules.

A spec reads ``family(key=value,...)``, e.g. ``matmul(m=128,n=128,k=128,dtype=float16)``;
parameters left out take the family's defaults (``codegen.workloads.families``). Every family also
takes ``layout_free=I``, which marks parameter I (a weight) layout-free as Relax does for
constants. String values holding a comma are quoted: ``elementwise(ops="add,relu")``.

Two more spec forms are not families:

- ``file(path="kernels/add.py")``: a TVMScript file holding one ``@I.ir_module`` class or one
  ``@T.prim_func``. ``workload`` also takes the path itself (a ``.py`` file or an existing
  file); the function becomes ``main`` (its ``global_symbol`` too, as for TE workloads), so
  a spec's printed module, read back, has the spec's identity.
- ``model(name=bert,preset=tiny,task=3)``: a task of a real model, from
  ``codegen.workloads.models``.

``canonical_spec`` gives one text per workload: parameters in the family's order, defaults
dropped, values normalised, so textual variants dedupe. ``Workload.identity`` names the
module itself (a structural hash), so different specs that build the same module share it.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path
from typing import Any

from .families import FAMILIES, Family, WorkloadError
from .workload import Workload

__all__ = ["FAMILIES", "Workload", "WorkloadError", "canonical_spec", "format_spec",
           "parse_spec", "script_workload", "workload"]

_SPEC = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(?:\((.*)\))?\s*$")
_PLAIN = re.compile(r"[A-Za-z0-9_.+\-/]+")
_PSEUDO = ("file", "model")  # spec forms that are not operator families
_DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16",
                  "f16": "float16", "half": "float16", "i8": "int8"}


# ---- parsing -------------------------------------------------------------------------------

def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``family(k=v,...)`` into the family name and keyword arguments (digits -> int).

    >>> parse_spec('elementwise(m=8,ops="add,relu")')
    ('elementwise', {'m': 8, 'ops': 'add,relu'})
    """
    if not isinstance(spec, str):
        raise WorkloadError(f"Expected a workload spec string but got spec={spec!r}")
    match = _SPEC.match(spec)
    if not match:
        raise WorkloadError(
            f"Expected a workload spec like 'matmul(m=64,n=64,k=64)' but got {spec!r}")
    family, body = match.group(1), match.group(2) or ""
    if family not in FAMILIES and family not in _PSEUDO:
        names = sorted(FAMILIES) + list(_PSEUDO)
        raise WorkloadError(f"Expected one of {', '.join(names)} but got family={family!r} "
                            f"(unknown workload family)", family=family, expected=names)
    kwargs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in _split_args(body))):
        key, eq, value = (s.strip() for s in part.partition("="))
        if not eq or not key:
            raise WorkloadError(f"Expected key=value in workload spec {spec!r} but got {part!r}",
                                family=family)
        if key in kwargs:
            raise WorkloadError(f"Expected each parameter once in {spec!r} but got {key} twice",
                                family=family, param=key)
        value = value.strip('"')
        kwargs[key] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return family, kwargs


def _split_args(body: str) -> list[str]:
    # Commas inside quotes belong to the value (``ops="add,relu"``).
    parts, quoted, cur = [], False, []
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _normalise(family: Family, kwargs: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """Check a family's keyword arguments; return all its parameters and ``layout_free``."""
    name, params = family.name, dict(family.params)
    layout_free = None
    for key, value in kwargs.items():
        if key == "layout_free":
            _check_int(name, key, value, low=0)
            layout_free = value
            continue
        if key not in family.params:
            allowed = [*family.params, "layout_free"]
            raise WorkloadError(f"Expected one of {', '.join(allowed)} as a {name} parameter "
                                f"but got {key}={value!r}", family=name, param=key, value=value,
                                expected=allowed)
        default = family.params[key]
        if isinstance(default, int):
            _check_int(name, key, value, low=0 if key in family.nonneg else 1)
        else:
            value = _check_str(family, key, str(value))
        if key in family.choices and not isinstance(default, str):
            _check_choice(name, key, value, family.choices[key])
        params[key] = value
    return params, layout_free


def _check_int(family: str, key: str, value: Any, low: int) -> None:
    if not isinstance(value, int):
        raise WorkloadError(f"Expected an integer for {family} parameter {key} but got "
                            f"{key}={value!r}", family=family, param=key, value=value)
    if value < low:
        what = "positive" if low == 1 else f">= {low}"
        raise WorkloadError(f"Expected {key} {what} for {family} but got {key}={value}",
                            family=family, param=key, value=value)


def _check_str(family: Family, key: str, value: str) -> str:
    if key == "dtype":
        value = _DTYPE_ALIASES.get(value.lower(), value.lower())
        _check_choice(family.name, key, value, family.dtypes)
        return value
    choices = family.choices.get(key)
    if choices is None:
        return value
    items = [v.strip() for v in value.split(",")] if key in family.lists else [value]
    picked = []
    for item in items:
        if key not in family.lists:
            item = item.replace(" ", "")
        by_case = {c.lower(): c for c in choices}
        _check_choice(family.name, key, by_case.get(item.lower(), item), choices, shown=value)
        picked.append(by_case[item.lower()])
    return ",".join(picked)


def _check_choice(family: str, key: str, value: Any, choices, shown: Any = None) -> None:
    if value not in choices:
        shown = value if shown is None else shown
        raise WorkloadError(f"Expected one of {', '.join(map(str, choices))} for {family} "
                            f"{key} but got {key}={shown!r}", family=family, param=key,
                            value=shown, expected=[str(c) for c in choices])


# ---- canonical text ------------------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def _show_text(text: str) -> str:
    return text if _PLAIN.fullmatch(text) else f'"{text}"'


def _show(value: Any) -> str:
    return str(value) if isinstance(value, int) else _show_text(str(value))


def format_spec(family: str, params: dict[str, Any]) -> str:
    """The canonical spec of checked parameters: family order, defaults dropped.

    No checking is done here (``canonical_spec`` checks); the sampler builds specs with it.

    >>> format_spec("matmul", {"k": 32, "m": 64, "dtype": "float16"})
    'matmul(k=32,dtype=float16)'
    """
    parts = [f"{key}={value}" if type(value) is int else f"{key}={_show_text(str(value))}"
             for key, default in FAMILIES[family].params.items()
             if (value := params.get(key, default)) != default]
    if params.get("layout_free") is not None:
        parts.append(f"layout_free={params['layout_free']}")
    return f"{family}({','.join(parts)})"


def canonical_spec(spec: str | os.PathLike) -> str:
    """The one canonical text of a spec (or TVMScript path), after checking its parameters.

    Family-specific constraints (groups dividing channels, windows that fit) are checked
    only when the workload is built.

    >>> canonical_spec("conv2d(layout=nchw, ci=16, dtype=fp16)")
    'conv2d(layout=NCHW,dtype=float16)'
    """
    path = _as_path(spec)
    if path is not None:
        return f"file(path={_show(str(path))})"
    family, kwargs = parse_spec(str(spec))
    if family == "file":
        return f"file(path={_show(_file_path(kwargs))})"
    if family == "model":
        from .models import model_spec, parse_model_spec

        return _wrap(lambda: model_spec(**parse_model_spec(str(spec))), str(spec))
    params, layout_free = _normalise(FAMILIES[family], kwargs)
    return format_spec(family, {**params, "layout_free": layout_free})


# ---- building ------------------------------------------------------------------------------

def workload(spec_or_path: str | os.PathLike) -> Workload:
    """Build the workload of a spec, or of a TVMScript file.

    >>> workload("matmul(m=16,n=16,k=16)").mod["main"].params[0].name
    'A'
    """
    path = _as_path(spec_or_path)
    if path is not None:
        return _from_file(path, f"file(path={_show(str(path))})")
    spec = str(spec_or_path).strip()
    family, kwargs = parse_spec(spec)
    if family == "file":
        return _from_file(Path(_file_path(kwargs)), spec)
    if family == "model":
        return _wrap(lambda: _model_workload(spec), spec)
    params, layout_free = _normalise(FAMILIES[family], kwargs)
    func = _wrap(lambda: _prim_func(FAMILIES[family](**params)), spec)
    if layout_free is not None:
        if layout_free >= len(func.params):
            raise WorkloadError(f"Expected layout_free < {len(func.params)} (a parameter index) "
                                f"for {family} but got layout_free={layout_free}",
                                family=family, param="layout_free", value=layout_free)
        # Mark a parameter (a weight) as layout-free, as Relax does for constants: on llvm,
        # MetaSchedule's RewriteLayout postprocessor then rewrites its layout.
        func = func.with_attr("layout_free_buffers", [int(layout_free)])
    import tvm

    return Workload(spec, tvm.IRModule({"main": func}))


def _model_workload(spec: str) -> Workload:
    from .models import model_workload

    return model_workload(spec)


def _prim_func(made: Any):
    import tvm
    from tvm import te

    return made if isinstance(made, tvm.tirx.PrimFunc) else te.create_prim_func(made)


def _wrap(build, spec: str):
    """Run a builder; TVM's and Python's own errors become one-line ``WorkloadError``s."""
    try:
        return build()
    except WorkloadError:
        raise
    except Exception as exc:  # noqa: BLE001  TVM raises its own error types
        raise WorkloadError(f"Expected a buildable workload but got {spec!r}: "
                            f"{_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


# ---- TVMScript files -----------------------------------------------------------------------

def _as_path(value: Any) -> Path | None:
    if isinstance(value, os.PathLike):
        return Path(value)
    if isinstance(value, str) and not _SPEC.match(value):
        text = value.strip()
        if text.endswith(".py") or Path(text).is_file():
            return Path(text)
    return None


def _file_path(kwargs: dict[str, Any]) -> str:
    if set(kwargs) != {"path"}:
        raise WorkloadError(f"Expected only path= in a file spec but got {sorted(kwargs)}",
                            family="file", expected=["path"])
    return str(kwargs["path"])


def _from_file(path: Path, spec: str) -> Workload:
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"Expected a readable TVMScript file but got path={str(path)!r} "
                            f"({_first_line(exc)})", family="file", value=str(path)) from None
    return script_workload(source, spec, where=str(path))


def script_workload(source: str, spec: str = "file(path=-)", where: str = "<stdin>") -> Workload:
    """The workload of TVMScript text: one ``@I.ir_module`` class or ``@T.prim_func``.

    >>> text = workload("softmax(m=4,n=8)").mod.script()
    >>> script_workload(text).identity == workload("softmax(m=4,n=8)").identity
    True
    """
    import tvm

    segment = _script_segment(source, where)
    try:
        parsed = _wrap(lambda: tvm.script.from_source(segment), spec)
    except WorkloadError as exc:
        if "well-formed" in str(exc) and "s_tir=True" not in segment:
            raise WorkloadError(f"{exc} (blocks need @T.prim_func(s_tir=True))",
                                family="file", value=where) from None
        raise
    if isinstance(parsed, tvm.IRModule):
        funcs = [(gv.name_hint, f) for gv, f in parsed.functions.items()]
        if len(funcs) != 1 or not isinstance(funcs[0][1], tvm.tirx.PrimFunc):
            raise WorkloadError(f"Expected one PrimFunc in the module of {where!r} but got "
                                f"{[name for name, _ in funcs]}", family="file", value=where)
        parsed = funcs[0][1]
    return Workload(spec, tvm.IRModule({"main": parsed.with_attr("global_symbol", "main")}))


def _script_segment(source: str, where: str) -> str:
    """The text of the file's one decorated ``ir_module`` class or ``prim_func`` (TVMScript's
    parser takes no imports or other statements)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise WorkloadError(f"Expected Python syntax in {where!r} but got {exc.msg} at line "
                            f"{exc.lineno}", family="file", value=where) from None
    found = [node for node in tree.body
             if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and any(
                 "ir_module" in ast.unparse(d) or "prim_func" in ast.unparse(d)
                 for d in node.decorator_list)]
    if len(found) != 1:
        raise WorkloadError(f"Expected one @I.ir_module class or @T.prim_func in {where!r} "
                            f"but got {len(found)}: {[n.name for n in found]}",
                            family="file", value=where)
    node = found[0]
    start = min(d.lineno for d in node.decorator_list)
    return "\n".join(source.splitlines()[start - 1:node.end_lineno]) + "\n"
