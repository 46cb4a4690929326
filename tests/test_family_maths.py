"""Every family's unscheduled kernel computes what the family says, against references written
here in NumPy (float64, from the definitions, not from TOPI).

The evaluator's reference is the unscheduled kernel itself, so a wrong family definition would
pass every measurement: this file is what checks the definitions.  Each kernel is built for
llvm and run on the evaluator's own seeded, non-zero inputs (``codegen.measure.verify``), with
poisoned outputs, so an output the kernel never writes fails too.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from codegen.measure.verify import make_inputs, params_of
from codegen.workloads import FAMILIES, parse_spec, workload
from codegen.workloads.families import accumulator

# ---- references ------------------------------------------------------------------------------

def _erf(x):
    return np.vectorize(math.erf)(x)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACT = {"none": lambda x: x, "relu": lambda x: np.maximum(x, 0),
       "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
       "silu": lambda x: x * _sigmoid(x), "exp": np.exp, "tanh": np.tanh, "sigmoid": _sigmoid}


def conv(x, w, stride=1, pad=0, dilation=1, groups=1):
    """An N-d grouped, strided, dilated, zero-padded convolution (cross-correlation), channels
    first: x[n, ci, *size], w[co, ci/groups, *kernel] -> y[n, co, *out]."""
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pad, pad)] * nd)
    kernel = w.shape[2:]
    out = [(s + 2 * pad - dilation * (k - 1) - 1) // stride + 1
           for s, k in zip(x.shape[2:], kernel, strict=True)]
    n, ci, co = x.shape[0], x.shape[1], w.shape[0]
    cig, cog = ci // groups, co // groups
    y = np.zeros((n, co, *out))
    for g in range(groups):
        for offset in itertools.product(*map(range, kernel)):
            window = tuple(slice(o * dilation, o * dilation + stride * (m - 1) + 1, stride)
                           for o, m in zip(offset, out, strict=True))
            patch = xp[(slice(None), slice(g * cig, (g + 1) * cig), *window)]
            tap = w[(slice(g * cog, (g + 1) * cog), slice(None), *offset)]
            y[:, g * cog:(g + 1) * cog] += np.einsum("nc...,oc->no...", patch, tap)
    return y


def conv_transpose2d(x, w, stride, pad):
    """The transposed convolution as a scatter: every input pixel adds its value times the
    kernel into the output window it maps to; x[n, ci, h, w], w[ci, co, k, k]."""
    n, _, h, wd = x.shape
    co, k = w.shape[1], w.shape[2]
    full = np.zeros((n, co, (h - 1) * stride + k, (wd - 1) * stride + k))
    for i, j in itertools.product(range(h), range(wd)):
        full[:, :, i * stride:i * stride + k, j * stride:j * stride + k] += np.einsum(
            "nc,cokl->nokl", x[:, :, i, j], w)
    oh, ow = (h - 1) * stride - 2 * pad + k, (wd - 1) * stride - 2 * pad + k
    return full[:, :, pad:pad + oh, pad:pad + ow]


def pool(x, k, stride, pad, kind):
    """Max, or average counting the padding, over k x k windows; x[n, c, h, w]."""
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    oh = (x.shape[2] + 2 * pad - k) // stride + 1
    ow = (x.shape[3] + 2 * pad - k) // stride + 1
    y = np.empty((*x.shape[:2], oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        window = xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
        y[:, :, i, j] = window.max((2, 3)) if kind == "max" else window.sum((2, 3)) / (k * k)
    return y


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def first(x, layout):
    """Channels-last data as channels-first (the layouts ending in C)."""
    return np.moveaxis(x, -1, 1) if layout.endswith("C") else x


def last(y, layout):
    return np.moveaxis(y, 1, -1) if layout.endswith("C") else y


def reference(family: str, p: dict, xs: list):
    """The family's outputs, from float64 inputs."""
    if family in ("matmul", "batch_matmul", "gemv"):
        return xs[0] @ xs[1]
    if family == "dense":
        return ACT[p["act"]](xs[0] @ xs[1].T + (xs[2] if p["bias"] else 0))
    if family == "attention":
        kv = np.repeat(xs[1], p["gqa"], axis=1)  # query head h reads K/V head h // gqa
        if p["stage"] == "scores":
            return np.einsum("bhid,bhjd->bhij", xs[0], kv)
        return np.einsum("bhij,bhjd->bhid", xs[0], kv)
    if family in ("conv1d", "conv2d", "conv3d", "depthwise_conv2d"):
        x, w, layout = xs[0], xs[1], p["layout"]
        nd = x.ndim - 2
        if layout.endswith("C"):  # weights [*kernel, ci/groups, co] -> [co, ci/groups, *kernel]
            # (depthwise: [kh, kw, c, multiplier 1] -> [c, 1, kh, kw])
            to = (0, 1) if family == "depthwise_conv2d" else (1, 0)
            w = np.moveaxis(w, (nd, nd + 1), to)
        groups = p["c"] if family == "depthwise_conv2d" else p.get("groups", 1)
        y = conv(first(x, layout), w, p["stride"], p["pad"], p["dilation"], groups)
        return last(y, layout)
    if family == "conv2d_transpose":
        return conv_transpose2d(xs[0], xs[1], p["stride"], p["pad"])
    if family == "pool2d":
        x = first(xs[0], p["layout"])
        if p["kind"] == "global":
            y = x.mean(axis=(2, 3), keepdims=True)
        elif p["kind"] == "global_max":
            y = x.max(axis=(2, 3), keepdims=True)
        else:
            y = pool(x, p["k"], p["stride"], p["pad"], p["kind"])
        return last(y, p["layout"])
    if family == "softmax":
        return softmax(xs[0])
    if family == "layer_norm":
        x = xs[0]
        mu, var = x.mean(1, keepdims=True), ((x - x.mean(1, keepdims=True)) ** 2).mean(1)
        return (x - mu) / np.sqrt(var[:, None] + 1e-5) * xs[1] + xs[2]
    if family == "rms_norm":
        return xs[0] / np.sqrt((xs[0] ** 2).mean(1, keepdims=True) + 1e-5) * xs[1]
    if family == "reduce":
        return {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[p["op"]](xs[0], 1)
    if family == "elementwise":
        out = xs[0]
        for op in p["ops"].split(","):
            binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply}.get(op)
            out = binary(out, xs[1]) if binary else ACT[op](out)
        return out
    if family == "transpose":
        return xs[0].transpose([int(a) for a in p["axes"].split(",")])
    if family == "tvm":
        return TVM_REFERENCES[p["name"]](xs)
    raise AssertionError(f"no reference for {family}")


# TVM's own te_workloads (index 0), where their size allows a NumPy reference.
TVM_REFERENCES = {
    "GMM": lambda xs: xs[0] @ xs[1],
    "SFM": lambda xs: softmax(xs[0]),
    "NRM": lambda xs: np.sqrt((xs[0] ** 2).sum(axis=(1, 2))),
    # inputs [n, h, w, ci], weight [k, k, ci, co], stride 2, padding 1
    "T2D": lambda xs: last(conv_transpose2d(first(xs[0], "NHWC"),
                                            xs[1].transpose(2, 3, 0, 1), 2, 1), "NHWC"),
    # query and value [b, l, h, d] -> C[b, h, i, j] = sum_d query[b, i, h, d] value[b, j, h, d]
    "TBG": lambda xs: np.einsum("bihd,bjhd->bhij", xs[0], xs[1]),
}


# ---- the cases ---------------------------------------------------------------------------------

def _defaults() -> list[str]:
    """Every family at its defaults, in every dtype it takes."""
    specs = []
    for name, family in FAMILIES.items():
        if name != "tvm":
            specs += [f"{name}(dtype={dtype})" for dtype in family.dtypes]
    return specs


CASES = _defaults() + [
    # products and their epilogues
    "matmul(m=24,n=40,k=56)", "batch_matmul(b=3,m=8,n=12,k=20,dtype=int8)",
    *(f"dense(m=8,n=12,k=16,bias={b},act={a})" for b in (0, 1)
      for a in ("none", "relu", "gelu", "silu")),
    "dense(m=8,n=12,k=16,bias=1,act=gelu,dtype=float16)",
    "dense(m=8,n=12,k=16,bias=1,act=relu,dtype=int8)", "gemv(m=48,k=40,dtype=float16)",
    "attention(gqa=2,stage=context)", "attention(heads=4,gqa=4,sq=1,skv=24,d=8)",
    "attention(heads=6,gqa=3,sq=5,skv=7,d=4,stage=context,dtype=float16)",
    # convolutions: both layouts, stride, dilation, padding, groups
    *(f"conv1d(l=21,ci=6,co=10,k={k},stride={s},pad={p},dilation={d},layout={lay})"
      for lay in ("NWC", "NCW") for k, s, p, d in ((3, 2, 2, 2), (2, 1, 0, 1), (5, 3, 1, 1))),
    *(f"conv2d(h=9,w=11,ci=8,co=12,kh={kh},kw={kw},stride={s},pad={p},dilation={d},"
      f"groups={g},layout={lay})"
      for lay in ("NHWC", "NCHW")
      for kh, kw, s, p, d, g in ((3, 3, 2, 1, 1, 1), (3, 2, 1, 2, 2, 4), (1, 3, 1, 0, 1, 2))),
    "conv2d(h=9,w=9,ci=8,co=8,groups=2,dtype=int8,layout=NCHW)",
    "conv2d(h=9,w=9,ci=8,co=8,stride=2,dtype=int8)",
    *(f"conv3d(d=5,h=6,w=7,ci=4,co=6,k={k},stride={s},pad={p},dilation={dl},layout={lay})"
      for lay in ("NDHWC", "NCDHW") for k, s, p, dl in ((3, 2, 1, 1), (2, 1, 2, 2))),
    "conv3d(d=4,h=4,w=4,ci=4,co=4,layout=NCDHW,dtype=float16)",
    *(f"depthwise_conv2d(h=9,w=10,c=6,kh={kh},kw={kw},stride={s},pad={p},dilation={d},"
      f"layout={lay})"
      for lay in ("NHWC", "NCHW") for kh, kw, s, p, d in ((3, 3, 2, 1, 1), (3, 2, 1, 2, 2))),
    *(f"conv2d_transpose(h=5,w=6,ci=4,co=6,k={k},stride={s},pad={p})"
      for k, s, p in ((4, 2, 1), (3, 1, 0), (3, 3, 1), (2, 2, 0))),
    # pooling
    *(f"pool2d(c=4,h=9,w=10,k={k},stride={s},pad={p},kind={kind},layout={lay})"
      for lay in ("NCHW", "NHWC") for kind in ("max", "avg") for k, s, p in ((3, 2, 1), (2, 2, 0))),
    *(f"pool2d(c=4,h=7,w=5,kind={kind},layout={lay})"
      for lay in ("NCHW", "NHWC") for kind in ("global", "global_max")),
    # normalisation, reductions, elementwise chains, transposes
    "softmax(m=5,n=33)", "layer_norm(m=5,n=33)", "rms_norm(m=5,n=33)",
    *(f"reduce(m=6,n=40,op={op},dtype={dt})" for op in ("sum", "max", "min", "mean")
      for dt in ("float32", "float16")),
    'elementwise(m=6,n=10,ops="add,gelu,silu,sub,mul,tanh,sigmoid")',
    'elementwise(m=6,n=10,ops="mul,exp,relu",dtype=float16)',
    *(f'transpose(m=3,n=4,k=5,axes="{axes}")' for axes in FAMILIES["transpose"].choices["axes"]),
    'transpose(m=3,n=4,k=5,axes="1,2,0",dtype=int8)',
    # TVM's own workloads
    *(f"tvm(name={name})" for name in TVM_REFERENCES),
]

# Products and sums accumulate wider: their outputs have the accumulator dtype.
WIDENING = ("matmul", "batch_matmul", "dense", "gemv", "attention", "conv1d", "conv2d", "conv3d",
            "depthwise_conv2d", "conv2d_transpose")


@functools.cache
def _llvm():
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": 2})


def run(spec: str, seed: int = 0):
    """The workload's parameters, its inputs and its outputs on the evaluator's inputs."""
    import tvm

    wl = workload(spec)
    params = params_of(wl)
    arrays = make_inputs(params, seed)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    tvm.compile(wl.mod, target=_llvm())["main"](*tensors)
    inputs = [a for a, p in zip(arrays, params, strict=True) if not p.output]
    outputs = [t.numpy() for t, p in zip(tensors, params, strict=True) if p.output]
    return inputs, outputs


def expected_dtype(family: str, p: dict) -> str:
    dtype = p.get("dtype", "float32")
    sums = family == "reduce" and p["op"] in ("sum", "mean")
    return accumulator(dtype) if family in WIDENING or sums else dtype


@pytest.mark.parametrize("spec", CASES)
def test_the_unscheduled_kernel_computes_the_family(spec):
    family, kwargs = parse_spec(spec)
    p = {**FAMILIES[family].params, **kwargs}
    inputs, [got] = run(spec)
    want = reference(family, p, [x.astype("int64" if x.dtype.kind == "i" else "float64")
                                 for x in inputs])
    assert got.shape == want.shape
    if family != "tvm":
        assert str(got.dtype) == expected_dtype(family, p)
    if got.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
        return
    # float16 results carry float16 rounding (and, for norms and softmax, float16 arithmetic).
    tol = 1e-5 if got.dtype == np.float32 else 2e-3 if family in WIDENING else 1e-2
    scale = max(1.0, float(np.abs(want).mean()))
    np.testing.assert_allclose(got.astype("float64"), want, rtol=tol, atol=tol * scale)


def test_every_family_has_cases():
    covered = {parse_spec(spec)[0] for spec in CASES}
    assert covered == set(FAMILIES)
    for name, family in FAMILIES.items():
        for key, choices in family.choices.items():
            used = {str(parse_spec(s)[1].get(key, family.params[key])) for s in CASES
                    if parse_spec(s)[0] == name}
            if key in family.lists:
                used = {v for u in used for v in u.split(",")}
            assert {str(c) for c in choices} <= used, (name, key)


def test_the_references_are_the_textbook_ones():
    """A few values worked by hand, so that a reference cannot drift with the kernels."""
    x = np.arange(1.0, 5.0).reshape(1, 1, 2, 2)  # [[1, 2], [3, 4]]
    # a 2x2 transposed convolution, stride 2: every input pixel becomes a 2x2 block
    w = np.array([[[[1.0, 10.0], [100.0, 1000.0]]]])
    assert conv_transpose2d(x, w, 2, 0)[0, 0].tolist() == [
        [1, 10, 2, 20], [100, 1000, 200, 2000], [3, 30, 4, 40], [300, 3000, 400, 4000]]
    # a 2x2 kernel of ones, padding 1: sums of each window, zeros outside
    assert conv(x, np.ones((1, 1, 2, 2)), pad=1)[0, 0].tolist() == [
        [1, 3, 2], [4, 10, 6], [3, 7, 4]]
    # dilation 2 on a 1-D signal: y[i] = x[i] + x[i + 2]
    assert conv(np.arange(5.0).reshape(1, 1, 5), np.ones((1, 1, 2)), dilation=2)[0, 0].tolist() \
        == [2, 4, 6]
    assert pool(x, 2, 2, 1, "avg")[0, 0].tolist() == [[0.25, 0.5], [0.75, 1.0]]
