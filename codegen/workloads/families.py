"""Operator families: parametric tensor programs written in TE.

Each family is a plain function of keyword parameters (every parameter has a small default)
that returns TE tensors, inputs first and outputs last, so ``te.create_prim_func`` gives a
PrimFunc whose last parameters are the outputs. ``FAMILIES`` maps a name to its ``Family``:
the function plus the dtypes it supports and the values its string parameters may take, which
``codegen.workloads`` uses to check a spec before building anything.

Products and sums accumulate in float32 for float16 inputs and in int32 for int8 inputs: their
output (and any epilogue after it) has the accumulator dtype. Norms, softmax, pooling, max/min,
elementwise chains and transposes keep the input dtype. A family rejects dtypes it does not list.

``WorkloadError`` lives here because the builders raise it; ``codegen.workloads`` re-exports it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dragon_dsl.errors import DragonError

__all__ = ["ACTIVATIONS", "FAMILIES", "Family", "WorkloadError", "accumulator"]

F32, F16, I8 = "float32", "float16", "int8"
FLOATS = (F32, F16)
ALL = (F32, F16, I8)


class WorkloadError(DragonError, ValueError):
    """A workload spec (or file) that names no valid workload.

    ``family``, ``param``, ``value`` and ``expected`` say what was wrong, for tools.
    """

    def __init__(self, message: str, *, family: str | None = None, param: str | None = None,
                 value: Any = None, expected: list[str] | None = None) -> None:
        self.family, self.param, self.value = family, param, value
        self.expected = list(expected or [])
        super().__init__(message)


@dataclass(frozen=True)
class Family:
    """One operator family: its TE builder and what its parameters may be.

    >>> FAMILIES["matmul"].params
    {'m': 64, 'n': 64, 'k': 64, 'dtype': 'float32'}
    """

    name: str
    build: Callable[..., list] = field(repr=False)
    params: Mapping[str, Any] = field(default_factory=dict)  # name -> default, in order
    dtypes: tuple[str, ...] = FLOATS
    choices: Mapping[str, tuple] = field(default_factory=dict)
    nonneg: frozenset[str] = frozenset({"pad"})  # int parameters that may be 0
    lists: frozenset[str] = frozenset()  # string parameters holding a comma-separated list

    @property
    def doc(self) -> str:
        """The first line of the builder's docstring."""
        return (self.build.__doc__ or "").strip().splitlines()[0]

    def __call__(self, **kwargs: Any) -> list:
        return self.build(**kwargs)


FAMILIES: dict[str, Family] = {}


def _family(*, dtypes=FLOATS, choices=None, nonneg=("pad",), lists=()):
    def register(fn):
        params = {p.name: p.default for p in inspect.signature(fn).parameters.values()}
        FAMILIES[fn.__name__] = Family(fn.__name__, fn, params, tuple(dtypes),
                                       dict(choices or {}), frozenset(nonneg), frozenset(lists))
        return fn
    return register


def _require(ok: bool, family: str, message: str, **given: Any) -> None:
    if not ok:
        shown = ",".join(f"{k}={v!r}" for k, v in given.items())
        raise WorkloadError(f"Expected {message} for {family} but got {shown}", family=family,
                            param=next(iter(given), None), value=next(iter(given.values()), None))


def _te():
    from tvm import te, topi

    return te, topi


def accumulator(dtype: str) -> str:
    """The dtype a reduction over ``dtype`` accumulates in.

    >>> accumulator("float16")
    'float32'
    """
    return {F16: F32, I8: "int32"}.get(dtype, dtype)


def _out_size(family: str, size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    out = (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    _require(out > 0, family, "a window that fits the padded input", size=size, k=k, pad=pad,
             dilation=dilation)
    return out


def _check_groups(family: str, ci: int, co: int, groups: int) -> None:
    _require(ci % groups == 0 and co % groups == 0, family,
             "groups dividing both ci and co", groups=groups, ci=ci, co=co)


# ---- activations (shared by dense and elementwise) ----------------------------------------

def _gelu(t):
    # The exact (erf) form, PyTorch's default.
    te, _ = _te()
    from tvm import tirx

    half, one = te.const(0.5, t.dtype), te.const(1, t.dtype)
    inv_sqrt2 = te.const(1 / math.sqrt(2), t.dtype)
    return te.compute(t.shape, lambda *i: half * t(*i) * (one + tirx.erf(t(*i) * inv_sqrt2)),
                      name="T_gelu")


def _silu(t):
    te, _ = _te()
    from tvm import tirx

    return te.compute(t.shape, lambda *i: t(*i) * tirx.sigmoid(t(*i)), name="T_silu")


def _relu(t):
    _, topi = _te()
    return topi.nn.relu(t)


def _act(name: str) -> Callable:
    _, topi = _te()
    return {"relu": _relu, "gelu": _gelu, "silu": _silu, "exp": topi.exp, "tanh": topi.tanh,
            "sigmoid": topi.sigmoid}[name]


ACTIVATIONS = ("none", "relu", "gelu", "silu")


# ---- products ------------------------------------------------------------------------------

@_family(dtypes=ALL)
def matmul(m=64, n=64, k=64, dtype=F32):
    """C[m,n] = A[m,k] @ B[k,n]."""
    te, _ = _te()
    a = te.placeholder((m, k), dtype, name="A")
    b = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    acc = accumulator(dtype)
    c = te.compute(
        (m, n), lambda i, j: te.sum(a[i, r].astype(acc) * b[r, j].astype(acc), axis=r), name="C"
    )
    return [a, b, c]


@_family(dtypes=ALL)
def batch_matmul(b=4, m=32, n=32, k=32, dtype=F32):
    """C[b,m,n] = A[b,m,k] @ B[b,k,n]."""
    te, _ = _te()
    x = te.placeholder((b, m, k), dtype, name="A")
    y = te.placeholder((b, k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    acc = accumulator(dtype)
    z = te.compute(
        (b, m, n),
        lambda q, i, j: te.sum(x[q, i, r].astype(acc) * y[q, r, j].astype(acc), axis=r),
        name="C",
    )
    return [x, y, z]


@_family(dtypes=ALL, choices={"bias": (0, 1), "act": ACTIVATIONS}, nonneg=("bias",))
def dense(m=64, n=64, k=64, bias=0, act="none", dtype=F32):
    """Y[m,n] = act(X[m,k] @ W[n,k]^T (+ bias[n])), a linear layer.

    The bias and the epilogue are in the accumulator dtype.
    """
    te, _ = _te()
    _require(dtype != I8 or act in ("none", "relu"), "dense",
             "act none or relu with int8", act=act, dtype=dtype)
    acc = accumulator(dtype)
    x = te.placeholder((m, k), dtype, name="X")
    w = te.placeholder((n, k), dtype, name="W")
    r = te.reduce_axis((0, k), name="k")
    y = te.compute((m, n), lambda i, j: te.sum(x[i, r].astype(acc) * w[j, r].astype(acc), axis=r),
                   name="T_dense")
    inputs = [x, w]
    if bias:
        bvec = te.placeholder((n,), acc, name="bias")
        inputs.append(bvec)
        prev = y
        y = te.compute((m, n), lambda i, j: prev[i, j] + bvec[j], name="T_bias_add")
    if act != "none":
        y = _act(act)(y)
    return [*inputs, y]


@_family(dtypes=FLOATS)
def gemv(m=256, k=256, dtype=F32):
    """y[m] = A[m,k] @ x[k]."""
    te, _ = _te()
    acc = accumulator(dtype)
    a = te.placeholder((m, k), dtype, name="A")
    x = te.placeholder((k,), dtype, name="x")
    r = te.reduce_axis((0, k), name="k")
    y = te.compute((m,), lambda i: te.sum(a[i, r].astype(acc) * x[r].astype(acc), axis=r),
                   name="y")
    return [a, x, y]


@_family(dtypes=FLOATS, choices={"stage": ("scores", "context")})
def attention(b=1, heads=4, sq=64, skv=64, d=32, gqa=1, stage="scores", dtype=F32):
    """Attention products: scores S = Q @ K^T, or context O = P @ V, per batch and head.

    Q[b,heads,sq,d], K and V [b,heads/gqa,skv,d] (grouped-query attention shares a K/V head
    among ``gqa`` query heads), P[b,heads,sq,skv].
    """
    te, _ = _te()
    _require(heads % gqa == 0, "attention", "gqa dividing heads", gqa=gqa, heads=heads)
    acc = accumulator(dtype)
    kvh = heads // gqa

    def kv_head(h):
        return h if gqa == 1 else h // gqa

    if stage == "scores":
        q = te.placeholder((b, heads, sq, d), dtype, name="Q")
        kk = te.placeholder((b, kvh, skv, d), dtype, name="K")
        r = te.reduce_axis((0, d), name="k")
        s = te.compute((b, heads, sq, skv), lambda z, h, i, j: te.sum(
            q[z, h, i, r].astype(acc) * kk[z, kv_head(h), j, r].astype(acc), axis=r), name="S")
        return [q, kk, s]
    p = te.placeholder((b, heads, sq, skv), dtype, name="P")
    v = te.placeholder((b, kvh, skv, d), dtype, name="V")
    r = te.reduce_axis((0, skv), name="k")
    o = te.compute((b, heads, sq, d), lambda z, h, i, j: te.sum(
        p[z, h, i, r].astype(acc) * v[z, kv_head(h), r, j].astype(acc), axis=r), name="O")
    return [p, v, o]


# ---- convolutions --------------------------------------------------------------------------

@_family(dtypes=FLOATS, choices={"layout": ("NWC", "NCW")})
def conv1d(n=1, l=32,  # noqa: E741  (the spec key for the length)
           ci=16, co=16, k=3, stride=1, pad=1, dilation=1, layout="NWC", dtype=F32):
    """1-D convolution over a length-l signal."""
    te, topi = _te()
    _out_size("conv1d", l, k, stride, pad, dilation)
    acc = accumulator(dtype)
    if layout == "NWC":
        x = te.placeholder((n, l, ci), dtype, name="X")
        w = te.placeholder((k, ci, co), dtype, name="W")
        y = topi.nn.conv1d_nwc(x, w, stride, pad, dilation, out_dtype=acc)
    else:
        x = te.placeholder((n, ci, l), dtype, name="X")
        w = te.placeholder((co, ci, k), dtype, name="W")
        y = topi.nn.conv1d_ncw(x, w, stride, pad, dilation, out_dtype=acc)
    return [x, w, y]


@_family(dtypes=ALL, choices={"layout": ("NHWC", "NCHW")})
def conv2d(n=1, h=14, w=14, ci=16, co=16, kh=3, kw=3, stride=1, pad=1, dilation=1, groups=1,
           layout="NHWC", dtype=F32):
    """2-D convolution, optionally grouped (groups > 1) or dilated."""
    te, topi = _te()
    _check_groups("conv2d", ci, co, groups)
    _out_size("conv2d", h, kh, stride, pad, dilation)
    _out_size("conv2d", w, kw, stride, pad, dilation)
    acc = accumulator(dtype)
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


@_family(dtypes=FLOATS, choices={"layout": ("NHWC", "NCHW")})
def depthwise_conv2d(n=1, h=14, w=14, c=16, kh=3, kw=3, stride=1, pad=1, dilation=1,
                     layout="NHWC", dtype=F32):
    """Depthwise 2-D convolution (one filter per channel), as in MobileNet."""
    te, topi = _te()
    _out_size("depthwise_conv2d", h, kh, stride, pad, dilation)
    _out_size("depthwise_conv2d", w, kw, stride, pad, dilation)
    acc = accumulator(dtype)
    if layout == "NHWC":
        x = te.placeholder((n, h, w, c), dtype, name="X")
        k = te.placeholder((kh, kw, c, 1), dtype, name="W")
        y = topi.nn.depthwise_conv2d_nhwc(x, k, stride, pad, dilation, out_dtype=acc)
    else:
        x = te.placeholder((n, c, h, w), dtype, name="X")
        k = te.placeholder((c, 1, kh, kw), dtype, name="W")
        y = topi.nn.depthwise_conv2d_nchw(x, k, stride, pad, dilation, out_dtype=acc)
    return [x, k, y]


@_family(dtypes=FLOATS, choices={"layout": ("NDHWC", "NCDHW")})
def conv3d(n=1, d=8, h=8, w=8, ci=8, co=8, k=3, stride=1, pad=1, dilation=1, layout="NDHWC",
           dtype=F32):
    """3-D convolution over a d x h x w volume (video, medical images)."""
    te, topi = _te()
    for size in (d, h, w):
        _out_size("conv3d", size, k, stride, pad, dilation)
    acc = accumulator(dtype)
    if layout == "NDHWC":
        x = te.placeholder((n, d, h, w, ci), dtype, name="X")
        f = te.placeholder((k, k, k, ci, co), dtype, name="W")
        y = topi.nn.conv3d_ndhwc(x, f, stride, pad, dilation, 1, out_dtype=acc)
    else:
        x = te.placeholder((n, ci, d, h, w), dtype, name="X")
        f = te.placeholder((co, ci, k, k, k), dtype, name="W")
        y = topi.nn.conv3d_ncdhw(x, f, stride, pad, dilation, 1, out_dtype=acc)
    return [x, f, y]


@_family(dtypes=FLOATS)
def conv2d_transpose(n=1, h=8, w=8, ci=16, co=16, k=4, stride=2, pad=1, dtype=F32):
    """Transposed 2-D convolution (NCHW), the upsampling of U-Nets and GAN generators."""
    te, topi = _te()
    _require((h - 1) * stride - 2 * pad + k > 0, "conv2d_transpose",
             "a positive output size", h=h, k=k, stride=stride, pad=pad)
    x = te.placeholder((n, ci, h, w), dtype, name="X")
    f = te.placeholder((ci, co, k, k), dtype, name="W")
    y = topi.nn.conv2d_transpose_nchw(x, f, (stride, stride), (pad, pad), accumulator(dtype),
                                      (0, 0))
    return [x, f, y]


@_family(dtypes=FLOATS, choices={"kind": ("max", "avg", "global", "global_max"),
                                 "layout": ("NCHW", "NHWC")})
def pool2d(n=1, c=16, h=16, w=16, k=3, stride=2, pad=1, kind="max", layout="NCHW", dtype=F32):
    """Max or average pooling over k x k windows, or global pooling over h x w.

    ``avg`` counts padding in the average; ``global`` averages and ``global_max`` takes the
    maximum over the whole image (k, stride and pad are then unused).
    """
    te, topi = _te()
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    x = te.placeholder(shape, dtype, name="X")
    if kind.startswith("global"):
        y = topi.nn.global_pool(x, "avg" if kind == "global" else "max", layout)
    else:
        _out_size("pool2d", h, k, stride, pad, 1)
        _out_size("pool2d", w, k, stride, pad, 1)
        y = topi.nn.pool2d(x, (k, k), (stride, stride), (1, 1), (pad, pad, pad, pad), kind,
                           layout=layout)
    return [x, y]


# ---- normalisation and reductions ----------------------------------------------------------

@_family()
def softmax(m=64, n=128, dtype=F32):
    """Softmax over the rows of X[m,n]."""
    te, topi = _te()
    x = te.placeholder((m, n), dtype, name="X")
    return [x, topi.nn.softmax(x, axis=1)]


@_family()
def layer_norm(m=64, n=128, dtype=F32):
    """Layer normalisation over the rows of X[m,n], with gamma and beta (eps 1e-5)."""
    te, topi = _te()
    x = te.placeholder((m, n), dtype, name="X")
    g = te.placeholder((n,), dtype, name="gamma")
    b = te.placeholder((n,), dtype, name="beta")
    return [x, g, b, topi.nn.layer_norm(x, g, b, axis=[1], epsilon=1e-5)]


@_family()
def rms_norm(m=64, n=128, dtype=F32):
    """RMS normalisation over the rows of X[m,n] with a weight (eps 1e-5), as in Llama."""
    te, topi = _te()
    x = te.placeholder((m, n), dtype, name="X")
    g = te.placeholder((n,), dtype, name="weight")
    return [x, g, topi.nn.rms_norm(x, g, axis=[1], epsilon=1e-5)]


@_family(choices={"op": ("sum", "max", "min", "mean")})
def reduce(m=64, n=256, op="sum", dtype=F32):
    """A row reduction of X[m,n]: sum, max, min or mean (sums accumulate in float32)."""
    te, topi = _te()
    x = te.placeholder((m, n), dtype, name="X")
    if op in ("max", "min"):
        return [x, {"max": topi.max, "min": topi.min}[op](x, axis=1)]
    if dtype == F32:
        s = topi.sum(x, axis=1)
    else:
        r = te.reduce_axis((0, n), name="k")
        s = te.compute((m,), lambda i: te.sum(x[i, r].astype(F32), axis=r), name="X_red")
    if op == "mean":
        return [x, te.compute((m,), lambda i: s[i] / te.const(n, F32), name="T_mean")]
    return [x, s]


ELEMENTWISE_OPS = ("add", "sub", "mul", "relu", "gelu", "silu", "exp", "tanh", "sigmoid")


@_family(choices={"ops": ELEMENTWISE_OPS}, lists=("ops",))
def elementwise(m=64, n=128, ops="add,relu,exp", dtype=F32):
    """A chain of elementwise ops on X[m,n]; binary ops (add, sub, mul) take Y[m,n]."""
    te, topi = _te()
    x = te.placeholder((m, n), dtype, name="X")
    y = te.placeholder((m, n), dtype, name="Y")
    binary = {"add": topi.add, "sub": topi.subtract, "mul": topi.multiply}
    out = x
    for op in ops.split(","):
        out = binary[op](out, y) if op in binary else _act(op)(out)
    return [x, y, out]


@_family(dtypes=ALL, choices={"axes": ("0,1,2", "0,2,1", "1,0,2", "1,2,0", "2,0,1", "2,1,0")})
def transpose(m=64, n=128, k=8, axes="2,0,1", dtype=F32):
    """A permutation of the axes of X[m,n,k]."""
    te, topi = _te()
    x = te.placeholder((m, n, k), dtype, name="X")
    return [x, topi.transpose(x, [int(a) for a in axes.split(",")])]


@_family(dtypes=(F32,), nonneg=("index",))
def tvm(name="GMM", index=0):
    """One of TVM's own MetaSchedule test workloads (te_workload.CONFIGS[name][index])."""
    from tvm.s_tir.meta_schedule.testing import te_workload

    names = sorted(te_workload.CONFIGS)
    if name not in te_workload.CONFIGS:
        raise WorkloadError(f"Expected one of {', '.join(names)} for tvm but got name={name!r}",
                            family="tvm", param="name", value=name, expected=names)
    count = len(te_workload.CONFIGS[name][1])
    _require(index < count, "tvm", f"index in 0..{count - 1} for name={name}", index=index)
    return te_workload.create_te_workload(name, index)
