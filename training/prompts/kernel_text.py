"""A compact text description of a kernel, for prompts: far fewer tokens than TVMScript.

``describe(workload)`` lists the kernel's buffers (parameters in order, then intermediates) and
each block in program order: its name, its loops (name, extent, ``S`` spatial or ``R``
reduction), the buffers it reads (in read-index order, which ``cache_read`` counts) and writes,
and its computation as one infix line. Names are the ones a Dragon script uses: ``block "C"``
fetches the block, and ``loops C -> i, j, k`` names the loops after the workload's loop
variables, so the block's expression is written with loop names too (``C[i, j]``, not TIR's
``C[v_i, v_j]``). For ``matmul(m=64,n=64,k=64)``::

    input A float32[64, 64]
    input B float32[64, 64]
    output C float32[64, 64]
    block "C"
      loops i 64 S, j 64 S, k 64 R
      reads A, B; writes C
      init C[i, j] = 0
      C[i, j] += A[i, k] * B[k, j]

Constants are printed in their dtype's shortest exact form (``-3.4028235e+38``, ``1e-05``) and
integral floats without ``.0``; casts read ``int32(x)``; intrinsics drop their prefix
(``exp(x)``). An expression or statement the printer does not know falls back to TVMScript's
own one-line text (with TIR's variable names). The output is deterministic: the same module
gives the same bytes. Changing the format changes every prompt, so it must come with a new
``training.prompts.templates.PROMPT_VERSION``.

``token_counts`` measures the description against ``mod.script()`` in cl100k tokens
(``benchmarks/bench_prompts.py`` prints the table).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from codegen.targets import as_module
from codegen.workloads import workload
from codegen.workloads import workload as build

if TYPE_CHECKING:
    from codegen.workloads.workload import WorkloadLike

__all__ = ["describe", "token_counts", "tvmscript"]

# Binary operators: TIR node name -> (infix symbol, precedence). Higher binds tighter.
_INFIX = {
    "Or": ("or", 1), "And": ("and", 2),
    "EQ": ("==", 4), "NE": ("!=", 4), "LT": ("<", 4), "LE": ("<=", 4), "GT": (">", 4),
    "GE": (">=", 4),
    "Add": ("+", 5), "Sub": ("-", 5),
    "Mul": ("*", 6), "FloorDiv": ("//", 6), "FloorMod": ("%", 6),
}
# Binary nodes printed as calls: TIR node name -> function name.
_CALLS = {"Min": "min", "Max": "max", "Mod": "truncmod", "BitwiseAnd": "bitwise_and",
          "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor", "LShift": "shift_left",
          "RShift": "shift_right"}
_ATOM = 9
_UNARY = 7
# TVMScript declarations that its printer puts before a free-standing statement.
_DECLARATION = re.compile(r"^\s*\w+ = T\.\w+\(.*\)$")
_ITER_KINDS = {0: "S", 2: "R"}  # IterVar.DataPar, IterVar.CommReduce
_FOR_KINDS = {1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread_binding"}


def describe(workload: WorkloadLike) -> str:
    """The compact description of a workload's ``main``.

    ``workload`` is a Workload, IRModule, PrimFunc, spec or TVMScript path.

    >>> print(describe("matmul(m=8,n=8,k=4)"), end="")
    input A float32[8, 4]
    input B float32[4, 8]
    output C float32[8, 8]
    block "C"
      loops i 8 S, j 8 S, k 4 R
      reads A, B; writes C
      init C[i, j] = 0
      C[i, j] += A[i, k] * B[k, j]
    """
    from codegen.workloads import inspect  # not loaded by `dragon --help`

    func = inspect.main_func(_module(workload))
    root = inspect.root_block(func)
    if root is None:  # no root block (a plain TIR function): TVMScript says it best
        return tvmscript(workload)
    names = _Names()
    params = [names.add(p) for p in func.params]
    blocks = inspect.blocks(func)
    temps = [names.add(b) for b in root.alloc_buffers]
    for b in blocks:
        temps += [names.add(buffer) for buffer in b.block.alloc_buffers]
    written = {names.name(w) for b in blocks for w in b.writes}
    free = {int(i) for i in (func.attrs or {}).get("layout_free_buffers", [])}
    lines = []
    for index, (param, name) in enumerate(zip(func.params, params, strict=True)):
        role = "output" if name in written else "input"
        lines.append(f"{role} {name} {_buffer_type(param)}" + (" layout_free" * (index in free)))
    lines += [f"temp {name} {_buffer_type(names.var(name))}" for name in temps]
    for b in blocks:
        lines += _block_lines(b, names)
    return "\n".join(lines) + "\n"


def tvmscript(workload: WorkloadLike) -> str:
    """The module's TVMScript without the import comments the printer puts first.

    >>> tvmscript("matmul(m=8,n=8,k=4)").splitlines()[0]
    '@I.ir_module'
    """
    text = _module(workload).script()
    lines = text.splitlines()
    while lines and (lines[0].startswith("# from ") or not lines[0].strip()):
        lines.pop(0)
    return "\n".join(lines) + "\n"


def token_counts(specs: Iterable[str]) -> list[dict[str, Any]]:
    """cl100k tokens of ``describe`` against ``mod.script()`` for each workload spec.

    Needs ``bpe-openai`` (a dev dependency).

    >>> token_counts(["matmul(m=8,n=8,k=4)"])[0]["compact"] < 100
    True
    """
    from bpe_openai import get_encoding


    encoding = get_encoding("cl100k_base")
    rows = []
    for spec in specs:
        wl = workload(spec)
        compact = len(encoding.encode(describe(wl)))
        script = len(encoding.encode(wl.mod.script()))
        rows.append({"spec": spec, "compact": compact, "tvmscript": script,
                     "ratio": compact / script})
    return rows


# ---- the module and its names ----------------------------------------------------------------

def _module(workload: WorkloadLike):
    if isinstance(workload, str | os.PathLike):
        workload = build(workload)

    return as_module(workload)


class _Names:
    """Unique printed names for buffers: the first holder of a name keeps it, later ones get
    ``_1``, ``_2``, ... (as TVMScript's printer does)."""

    def __init__(self) -> None:
        self._by_id: dict[Any, str] = {}
        self._vars: dict[str, Any] = {}

    def add(self, var) -> str:
        base = str(var.name)
        name, n = base, 0
        while name in self._vars:
            n += 1
            name = f"{base}_{n}"
        self._vars[name] = var
        self._by_id[var] = name
        return name

    def name(self, var) -> str:
        return self._by_id.get(var, str(var.name))

    def var(self, name: str):
        return self._vars[name]


def _buffer_type(var) -> str:
    dims = ", ".join(_dim(d) for d in var.shape)
    return f"{var.dtype}[{dims}]"


def _dim(value) -> str:
    return str(int(value)) if _is_const(value) else _Printer({}, None).expr(value)


def _is_const(value) -> bool:
    return isinstance(value, int) or type(value).__name__ == "IntImm"


def _block_lines(b, names: _Names) -> list[str]:
    """The lines of one ``codegen.workloads.inspect.Block``."""
    block, loops = b.block, [lp.node for lp in b.loops]
    bindings, iters = {}, []
    for iv, value in zip(block.iter_vars, b.realize.iter_values, strict=True):
        if _bound_to_loop(iv, value, loops):
            bindings[iv.var] = value  # written with the loop's name, as scripts name it
        else:
            iters.append((iv, value))
    printer = _Printer(bindings, names)
    lines = [f'block "{block.name_hint}"']
    if loops:
        lines.append("  loops " + ", ".join(_loop_text(lp, printer) for lp in b.loops))
    reads = ", ".join(names.name(r.source) for r in block.reads)
    writes = ", ".join(names.name(w.source) for w in block.writes)
    lines.append(f"  reads {reads or '-'}; writes {writes or '-'}")
    if iters:  # block variables that are not simply one loop: their domain and binding
        lines.append("  iters " + ", ".join(
            f"{iv.var.name} {_dim(iv.dom.extent)} {_ITER_KINDS.get(int(iv.iter_type), '?')} = "
            f"{printer.expr(value)}" for iv, value in iters))
    if block.annotations:
        lines.append("  attrs " + ", ".join(f"{key}={_attr(block.annotations[key])}"
                                            for key in sorted(block.annotations)))
    if block.init is not None:
        lines += [f"  init {line}" for line in printer.stmt(block.init)]
    lines += [f"  {line}" for line in printer.stmt(block.body)]
    return lines


def _loop_text(lp, printer: _Printer) -> str:
    loop = lp.node
    text = f"{lp.name} {_dim(loop.extent)} {lp.kind}"
    if not (_is_const(loop.min) and int(loop.min) == 0):
        text += f" min={printer.expr(loop.min)}"
    if int(loop.kind) != 0:  # not serial (workloads are unscheduled, but files may differ)
        text += f" {_FOR_KINDS.get(int(loop.kind), int(loop.kind))}"
    return text


def _bound_to_loop(iv, value, loops: list) -> bool:
    """The block variable is one enclosing loop with the same extent, so the loop's entry in the
    ``loops`` line says everything about it."""
    if type(value).__name__ != "Var" or int(iv.iter_type) not in _ITER_KINDS:
        return False
    loop = next((lp for lp in loops if lp.loop_var.same_as(value)), None)
    return loop is not None and _dim(loop.extent) == _dim(iv.dom.extent)


def _attr(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if _is_const(value):
        return str(int(value))
    return str(value)


# ---- printing expressions --------------------------------------------------------------------

class _Printer:
    """Prints TIR statements and expressions in compact infix form.

    Node kinds are dispatched by class name to ``_<Kind>`` methods; a kind without one falls
    back to TVMScript's text. ``bindings`` maps block variables to their loop expressions.
    """

    def __init__(self, bindings: dict, names: _Names | None) -> None:
        self.bindings = bindings
        self.names = names

    # statements
    def stmt(self, node) -> list[str]:
        kind = type(node).__name__
        if kind == "BufferStore":
            return [self._store(node)]
        if kind == "SeqStmt":
            return [line for child in node.seq for line in self.stmt(child)]
        if kind == "IfThenElse":
            lines = [f"if {self.expr(node.condition)}:"]
            lines += ["  " + line for line in self.stmt(node.then_case)]
            if node.else_case is not None:
                lines += ["else:"] + ["  " + line for line in self.stmt(node.else_case)]
            return lines
        if kind == "For":
            head = f"for {node.loop_var.name} in range({self.expr(node.extent)}):"
            return [head] + ["  " + line for line in self.stmt(node.body)]
        if kind == "Evaluate":
            return [self.expr(node.value)]
        return [line for line in node.script().splitlines()
                if line.strip() and not _DECLARATION.match(line)]

    def _store(self, node) -> str:
        target = self._indexed(self._buffer(node.buffer), node.indices)
        value = node.value
        if type(value).__name__ == "Add" and type(value.a).__name__ == "TensorLoad" and \
                self.expr(value.a) == target:
            return f"{target} += {self.expr(value.b)}"
        return f"{target} = {self.expr(value)}"

    # expressions
    def expr(self, node) -> str:
        return self._prec(node)[0]

    def _prec(self, node) -> tuple[str, int]:
        """The text of ``node`` and its precedence."""
        if isinstance(node, int | float | str):
            return (repr(node) if isinstance(node, str) else str(node)), _ATOM
        kind = type(node).__name__
        if kind in _INFIX:
            symbol, prec = _INFIX[kind]
            left, right = self._prec(node.a), self._prec(node.b)
            return f"{_wrap(left, prec)} {symbol} {_wrap(right, prec + 1)}", prec
        if kind == "Div":
            if str(node.ty).startswith(("int", "uint")):
                return f"truncdiv({self.expr(node.a)}, {self.expr(node.b)})", _ATOM
            left, right = self._prec(node.a), self._prec(node.b)
            return f"{_wrap(left, 6)} / {_wrap(right, 7)}", 6
        if kind in _CALLS:
            return f"{_CALLS[kind]}({self.expr(node.a)}, {self.expr(node.b)})", _ATOM
        method = getattr(self, f"_{kind}", None)
        if method is not None:
            return method(node)
        return _fallback(node), _ATOM

    def _Var(self, node) -> tuple[str, int]:
        bound = self.bindings.get(node)
        if bound is not None:
            return self._prec(bound)
        return str(node.name), _ATOM

    def _IntImm(self, node) -> tuple[str, int]:
        value = int(node.value)
        if str(node.ty) == "bool":
            return ("True" if value else "False"), _ATOM
        return str(value), (_UNARY if value < 0 else _ATOM)

    def _FloatImm(self, node) -> tuple[str, int]:
        text = _float_text(float(node.value), str(node.ty))
        return text, (_UNARY if text.startswith("-") else _ATOM)

    def _Cast(self, node) -> tuple[str, int]:
        return f"{node.ty}({self.expr(node.value)})", _ATOM

    def _Not(self, node) -> tuple[str, int]:
        return f"not {_wrap(self._prec(node.a), 3)}", 3

    def _Select(self, node) -> tuple[str, int]:
        args = (node.condition, node.true_value, node.false_value)
        return f"select({', '.join(self.expr(a) for a in args)})", _ATOM

    def _TensorLoad(self, node) -> tuple[str, int]:
        return self._indexed(self._buffer(node.source), node.indices), _ATOM

    def _Call(self, node) -> tuple[str, int]:
        op = getattr(node.op, "name", None)
        if op is None:  # a call to a global function, not an intrinsic
            return _fallback(node), _ATOM
        name = op.split(".", 1)[1] if op.startswith(("prim.", "tirx.", "tir.")) else op
        return f"{name}({', '.join(self.expr(a) for a in node.args)})", _ATOM

    def _Ramp(self, node) -> tuple[str, int]:
        args = (node.base, node.stride, node.lanes)
        return f"ramp({', '.join(self.expr(a) for a in args)})", _ATOM

    def _Broadcast(self, node) -> tuple[str, int]:
        return f"broadcast({self.expr(node.value)}, {self.expr(node.lanes)})", _ATOM

    def _StringImm(self, node) -> tuple[str, int]:
        return f'"{node.value}"', _ATOM

    def _buffer(self, var) -> str:
        return self.names.name(var) if self.names is not None else str(var.name)

    def _indexed(self, name: str, indices) -> str:
        inner = ", ".join(self.expr(i) for i in indices)
        return f"{name}[{inner or '()'}]"


def _wrap(text_prec: tuple[str, int], needed: int) -> str:
    text, prec = text_prec
    return f"({text})" if prec < needed else text


def _float_text(value: float, dtype: str) -> str:
    """The shortest text that reads back as the same ``dtype`` value; integral values without
    ``.0``."""
    import numpy as np

    if np.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    kinds = {"float32": np.float32, "float16": np.float16}
    return str(kinds[dtype](value)) if dtype in kinds else repr(value)


def _fallback(node) -> str:
    """TVMScript's own text for a node the printer does not handle, on one line."""
    lines = [line.strip() for line in node.script().splitlines()
             if line.strip() and not _DECLARATION.match(line)]
    return " ".join(lines)
