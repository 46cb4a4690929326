"""Workload families: parametric tensor programs written in TE, and their canonical text specs.

A spec reads ``family(key=value,...)``, e.g. ``matmul(m=128,n=128,k=128,dtype=float16)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FAMILIES", "Workload", "parse_spec", "workload"]


@dataclass(frozen=True)
class Workload:
    """A named tensor program: its canonical spec and its IRModule (function ``main``)."""

    spec: str
    mod: Any

    def __str__(self) -> str:
        return self.spec


def _te():
    from tvm import te, topi

    return te, topi


def _acc(dtype: str) -> str:
    return {"float16": "float32", "int8": "int32"}.get(dtype, dtype)


def matmul(m=64, n=64, k=64, dtype="float32"):
    te, _ = _te()
    a = te.placeholder((m, k), dtype, name="A")
    b = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    acc = _acc(dtype)
    c = te.compute(
        (m, n), lambda i, j: te.sum(a[i, r].astype(acc) * b[r, j].astype(acc), axis=r), name="C"
    )
    return [a, b, c]


def batch_matmul(b=4, m=32, n=32, k=32, dtype="float32"):
    te, _ = _te()
    x = te.placeholder((b, m, k), dtype, name="A")
    y = te.placeholder((b, k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    acc = _acc(dtype)
    z = te.compute(
        (b, m, n),
        lambda q, i, j: te.sum(x[q, i, r].astype(acc) * y[q, r, j].astype(acc), axis=r),
        name="C",
    )
    return [x, y, z]


def gemv(m=256, k=256, dtype="float32"):
    te, _ = _te()
    a = te.placeholder((m, k), dtype, name="A")
    x = te.placeholder((k,), dtype, name="x")
    r = te.reduce_axis((0, k), name="k")
    y = te.compute((m,), lambda i: te.sum(a[i, r] * x[r], axis=r), name="y")
    return [a, x, y]


def conv2d(n=1, h=14, w=14, ci=16, co=16, kh=3, kw=3, stride=1, pad=1, dilation=1, groups=1,
           layout="NHWC", dtype="float32"):
    te, topi = _te()
    acc = _acc(dtype)
    if layout == "NHWC":
        x = te.placeholder((n, h, w, ci), dtype, name="X")
        k = te.placeholder((kh, kw, ci // groups, co), dtype, name="W")
        if groups == 1:
            y = topi.nn.conv2d_nhwc(x, k, stride, pad, dilation, out_dtype=acc)
        else:
            y = topi.nn.group_conv2d_nhwc(x, k, stride, pad, dilation, groups, out_dtype=acc)
    else:
        x = te.placeholder((n, ci, h, w), dtype, name="X")
        k = te.placeholder((co, ci // groups, kh, kw), dtype, name="W")
        if groups == 1:
            y = topi.nn.conv2d_nchw(x, k, stride, pad, dilation, out_dtype=acc)
        else:
            y = topi.nn.group_conv2d_nchw(x, k, stride, pad, dilation, groups, out_dtype=acc)
    return [x, k, y]


def depthwise_conv2d(n=1, h=14, w=14, c=16, kh=3, kw=3, stride=1, pad=1, dtype="float32"):
    te, topi = _te()
    x = te.placeholder((n, h, w, c), dtype, name="X")
    k = te.placeholder((kh, kw, c, 1), dtype, name="W")
    y = topi.nn.depthwise_conv2d_nhwc(x, k, stride, pad, 1)
    return [x, k, y]


def conv1d(n=1, l=32,  # noqa: E741  (the spec key for the length)
           ci=16, co=16, k=3, stride=1, pad=1, layout="NWC", dtype="float32"):
    te, topi = _te()
    if layout == "NWC":
        x = te.placeholder((n, l, ci), dtype, name="X")
        w = te.placeholder((k, ci, co), dtype, name="W")
        y = topi.nn.conv1d_nwc(x, w, stride, pad, 1)
    else:
        x = te.placeholder((n, ci, l), dtype, name="X")
        w = te.placeholder((co, ci, k), dtype, name="W")
        y = topi.nn.conv1d_ncw(x, w, stride, pad, 1)
    return [x, w, y]


def conv3d(n=1, d=8, h=8, w=8, ci=8, co=8, k=3, stride=1, pad=1, layout="NDHWC",
           dtype="float32"):
    te, topi = _te()
    if layout == "NDHWC":
        x = te.placeholder((n, d, h, w, ci), dtype, name="X")
        f = te.placeholder((k, k, k, ci, co), dtype, name="W")
        y = topi.nn.conv3d_ndhwc(x, f, stride, pad, 1, 1)
    else:
        x = te.placeholder((n, ci, d, h, w), dtype, name="X")
        f = te.placeholder((co, ci, k, k, k), dtype, name="W")
        y = topi.nn.conv3d_ncdhw(x, f, stride, pad, 1, 1)
    return [x, f, y]


def conv2d_transpose(n=1, h=8, w=8, ci=16, co=16, k=4, stride=2, pad=1, dtype="float32"):
    te, topi = _te()
    x = te.placeholder((n, ci, h, w), dtype, name="X")
    f = te.placeholder((ci, co, k, k), dtype, name="W")
    y = topi.nn.conv2d_transpose_nchw(x, f, (stride, stride), (pad, pad), dtype, (0, 0))
    return [x, f, y]


def pool2d(n=1, c=16, h=16, w=16, k=3, stride=2, pad=1, kind="max"):
    te, topi = _te()
    x = te.placeholder((n, c, h, w), "float32", name="X")
    if kind == "global":
        y = topi.nn.global_pool(x, "avg", "NCHW")
    else:
        y = topi.nn.pool2d(x, (k, k), (stride, stride), (1, 1), (pad, pad, pad, pad), kind,
                           layout="NCHW")
    return [x, y]


def softmax(m=64, n=128):
    te, topi = _te()
    x = te.placeholder((m, n), "float32", name="X")
    return [x, topi.nn.softmax(x, axis=1)]


def layer_norm(m=64, n=128):
    te, topi = _te()
    x = te.placeholder((m, n), "float32", name="X")
    g = te.placeholder((n,), "float32", name="gamma")
    b = te.placeholder((n,), "float32", name="beta")
    return [x, g, b, topi.nn.layer_norm(x, g, b, axis=[1], epsilon=1e-5)]


def reduce(m=64, n=256, op="sum"):
    te, topi = _te()
    x = te.placeholder((m, n), "float32", name="X")
    y = {"sum": topi.sum, "max": topi.max, "min": topi.min}[op](x, axis=1)
    return [x, y]


def elementwise(m=64, n=128, ops="add,relu,exp"):
    te, topi = _te()
    x = te.placeholder((m, n), "float32", name="X")
    y = te.placeholder((m, n), "float32", name="Y")
    out = x
    for op in ops.split(","):
        out = {
            "add": lambda t: topi.add(t, y),
            "mul": lambda t: topi.multiply(t, y),
            "relu": topi.nn.relu,
            "exp": topi.exp,
            "tanh": topi.tanh,
            "sigmoid": topi.sigmoid,
        }[op](out)
    return [x, y, out]


def transpose(m=64, n=128, k=8, axes="2,0,1"):
    te, topi = _te()
    x = te.placeholder((m, n, k), "float32", name="X")
    return [x, topi.transpose(x, [int(a) for a in axes.split(",")])]


def tvm(name="GMM", index=0):
    """One of TVM's own standard MetaSchedule test workloads (te_workload.CONFIGS)."""
    from tvm.s_tir.meta_schedule.testing import te_workload

    if name not in te_workload.CONFIGS:
        raise ValueError(f"Expected one of {sorted(te_workload.CONFIGS)} but got name={name!r}")
    return te_workload.create_te_workload(name, index)


FAMILIES: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (matmul, batch_matmul, gemv, conv1d, conv2d, conv3d, depthwise_conv2d,
              conv2d_transpose, pool2d, softmax, layer_norm, reduce, elementwise, transpose, tvm)
}

_SPEC = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(?:\((.*)\))?\s*$")


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``family(k=v,...)`` into the family name and typed keyword arguments."""
    match = _SPEC.match(spec)
    if not match:
        raise ValueError(f"Expected a workload spec like 'matmul(m=64,n=64,k=64)' but got {spec!r}")
    family, body = match.group(1), match.group(2) or ""
    if family not in FAMILIES:
        raise ValueError(f"Unknown workload family {family!r}; expected one of {sorted(FAMILIES)}")
    kwargs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in _split_args(body))):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"Expected key=value in workload spec {spec!r} but got {part!r}")
        value = value.strip().strip('"')
        kwargs[key.strip()] = int(value) if re.fullmatch(r"-?\d+", value) else value
    return family, kwargs


def _split_args(body: str) -> list[str]:
    # Commas inside quotes belong to the value (``ops="add,relu"``).
    parts, depth, cur = [], False, []
    for ch in body:
        if ch == '"':
            depth = not depth
        if ch == "," and not depth:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def workload(spec: str) -> Workload:
    """Build the workload of a spec.

    >>> workload("matmul(m=16,n=16,k=16)").mod["main"].params[0].name
    'A'
    """
    import tvm
    from tvm import te

    family, kwargs = parse_spec(spec)
    layout_free = kwargs.pop("layout_free", None)
    try:
        made = FAMILIES[family](**kwargs)
    except TypeError as exc:
        raise ValueError(f"Bad arguments for workload family {family!r}: {exc}") from None
    func = made if isinstance(made, tvm.tirx.PrimFunc) else te.create_prim_func(made)
    if layout_free is not None:
        # Mark a parameter (a weight) as layout-free, as Relax does for constants: on llvm,
        # MetaSchedule's RewriteLayout postprocessor then rewrites its layout.
        func = func.with_attr("layout_free_buffers", [int(layout_free)])
    return Workload(spec, tvm.IRModule({"main": func}))
