"""The one walk over a kernel's blocks and loops.

Prompts (``training.prompts.kernel_text``), the workload grammar's tile rules
(``training.grammars.constraints``), ``dragon workloads show`` and verification (which buffers are
outputs) all describe a kernel by its blocks and loops, and a script names the same things
(``block "C"``, ``loops C -> i, j, k``), so they all read them from here.

>>> from codegen.workloads import workload
>>> [(b.name, [(lp.name, lp.extent, lp.kind) for lp in b.loops])
...  for b in blocks(workload("matmul(m=8,n=8,k=4)"))]
[('C', [('i', 8, 'S'), ('j', 8, 'S'), ('k', 4, 'R')])]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..targets import as_module

if TYPE_CHECKING:
    from .workload import WorkloadLike

__all__ = ["Block", "Loop", "blocks", "index_extents", "main_func", "root_block"]


@dataclass(frozen=True)
class Loop:
    """A loop around a block, as ``get_loops`` returns it."""

    name: str    # the loop variable's name: what ``loops B -> ...`` names it after
    extent: Any  # an int when constant (workloads' loops are), else the TIR expression
    kind: str    # "S" spatial or "R" reduction: whether it feeds a reduction variable of the block
    node: Any    # the tirx.For


@dataclass(frozen=True)
class Block:
    """A block in program order, with the loops between it and its parent block."""

    name: str
    loops: tuple[Loop, ...]
    reads: tuple[Any, ...]   # buffers, in read-index order (the order cache_read counts)
    writes: tuple[Any, ...]
    realize: Any             # the s_tir.SBlockRealize
    block: Any               # the s_tir.SBlock


def main_func(workload: WorkloadLike):
    """The workload's PrimFunc ``main`` (a Workload, IRModule or PrimFunc)."""
    mod = as_module(workload)
    names = [gv.name_hint for gv in mod.functions]
    if "main" not in names:
        raise ValueError(f"Expected a module with a PrimFunc 'main' but got functions {names}")
    return mod["main"]


def root_block(workload: WorkloadLike):
    """The root block of ``main``, or None for a function written without one."""
    from tvm import s_tir

    body = main_func(workload).body
    return body.block if isinstance(body, s_tir.SBlockRealize) else None


def blocks(workload: WorkloadLike) -> list[Block]:
    """Every block under the root, nested ones included, in program order."""
    root = root_block(workload)
    found: list[Block] = []
    if root is not None:
        _walk(root.body, [], found)
    return found


def _walk(stmt, loops: list, found: list[Block]) -> None:
    from tvm import s_tir, tirx

    if isinstance(stmt, tirx.For):
        _walk(stmt.body, [*loops, stmt], found)
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _walk(child, loops, found)
    elif isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        reduce_vars = _reduce_vars(block, stmt)
        rows = tuple(Loop(str(loop.loop_var.name), _extent(loop.extent),
                          "R" if any(v.same_as(loop.loop_var) for v in reduce_vars) else "S",
                          loop) for loop in loops)
        found.append(Block(str(block.name_hint), rows,
                           tuple(r.source for r in block.reads),
                           tuple(w.source for w in block.writes), stmt, block))
        _walk(block.body, [], found)
    else:
        for attr in ("body", "then_case", "else_case"):
            child = getattr(stmt, attr, None)
            if child is not None:
                _walk(child, loops, found)


def _reduce_vars(block, realize) -> list:
    from tvm import tirx
    from tvm.tirx.analysis import undefined_vars

    return [v for iv, value in zip(block.iter_vars, realize.iter_values, strict=True)
            if int(iv.iter_type) == tirx.IterVar.CommReduce for v in undefined_vars(value)]


def _extent(value) -> Any:
    return int(value) if type(value).__name__ == "IntImm" else value


def index_extents(workload: Any) -> dict[str, int]:
    """Integer parameters some block uses as an index into another buffer (a gather's indices:
    ``A[idx[i], j]``), each with the smallest extent of an axis it indexes: the values that
    read within bounds are ``range(extent)``."""
    func = main_func(workload)
    params = {str(param.name): param for param in func.params}
    extents: dict[str, int] = {}
    for block in blocks(func):
        for region in (*block.block.reads, *block.block.writes):
            for axis, rng in zip(region.source.shape, region.region, strict=True):
                for name in _loaded_buffers(rng.min):
                    if name in params and name != str(region.source.name) \
                            and "int" in str(params[name].dtype) and _is_int(axis):
                        extents[name] = min(extents.get(name, int(axis)), int(axis))
    return extents


def _loaded_buffers(expr) -> set[str]:
    """Names of the buffers an index expression loads from (casts and arithmetic looked
    through)."""
    from tvm.ir import Expr, TensorLoad

    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, TensorLoad):
            found.add(str(node.source.name))
            stack.extend(node.indices)
            continue
        for attr in ("a", "b", "value", "condition", "true_value", "false_value"):
            child = getattr(node, attr, None)
            if isinstance(child, Expr):
                stack.append(child)
        stack.extend(arg for arg in getattr(node, "args", ()) if isinstance(arg, Expr))
    return found


def _is_int(value) -> bool:
    return type(value).__name__ == "IntImm"
