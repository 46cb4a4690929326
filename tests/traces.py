"""MetaSchedule traces for tests: a varied set of workloads, targets and rule sets, and a
Hypothesis strategy that draws real sampled traces (never hand-written ones)."""

from __future__ import annotations

import functools

from hypothesis import assume
from hypothesis import strategies as st

from codegen import sample_traces, search_space, workload

# The varied set the language must cover.  Small shapes keep search fast.
WORKLOADS = [
    "matmul(m=64,n=64,k=64)",
    "matmul(m=128,n=128,k=128,dtype=float16)",
    "batch_matmul(b=2,m=32,n=32,k=32)",
    "gemv(m=128,k=128)",
    "conv1d(l=32,ci=8,co=8,layout=NWC)",
    "conv1d(l=32,ci=8,co=8,layout=NCW)",
    "conv2d(h=14,w=14,ci=16,co=16,layout=NHWC)",
    "conv2d(h=14,w=14,ci=16,co=16,layout=NCHW,stride=2)",
    "conv2d(h=14,w=14,ci=16,co=16,layout_free=1)",
    "conv2d(h=14,w=14,ci=32,co=32,dtype=float16)",
    "conv2d(h=14,w=14,ci=16,co=16,groups=4)",
    "conv3d(d=4,h=8,w=8,ci=8,co=8)",
    "conv3d(d=4,h=8,w=8,ci=8,co=8,layout=NCDHW)",
    "depthwise_conv2d(h=14,w=14,c=16)",
    "conv2d_transpose(h=8,w=8,ci=8,co=8)",
    "pool2d(kind=max)",
    "pool2d(kind=avg)",
    "pool2d(kind=global)",
    "softmax(m=32,n=64)",
    "layer_norm(m=32,n=64)",
    "reduce(m=32,n=128,op=max)",
    "elementwise(m=32,n=64,ops=\"add,relu,exp\")",
    "transpose(m=16,n=32,k=8)",
    "tvm(name=C2D)",
    "tvm(name=GMM)",
    "tvm(name=SFM)",
    "tvm(name=T2D)",
    "tvm(name=NRM)",
]

# (target, rule set): plain CUDA rules, the tensor-core rules an sm_90 tag would select, and
# an mma-only rule list.
TARGETS = [("llvm", "llvm"), ("cuda", "cuda"), ("cuda", "cuda-tensorcore"), ("cuda", "mma")]


@functools.cache
def space_or_none(spec: str, target: str, rules: str):
    """The shared SearchSpace, or None when MetaSchedule itself cannot search the pair."""
    try:
        return search_space(workload(spec).mod, target, rules)
    except Exception:  # noqa: BLE001  (e.g. the mma rules raise ScheduleError on some convs)
        return None


@st.composite
def sampled_traces(draw, workloads=tuple(WORKLOADS), targets=tuple(TARGETS)):
    """(workload, target, rules, trace) with a trace sampled by MetaSchedule."""
    spec = draw(st.sampled_from(workloads))
    target, rules = draw(st.sampled_from(targets))
    space = space_or_none(spec, target, rules)
    assume(space is not None)
    seed = draw(st.integers(0, 2**20))
    trace = None
    for attempt in range(20):  # postprocessors reject some samples (e.g. VerifyGPUCode)
        trace = space.sample(seed * 31 + attempt)
        if trace is not None:
            break
    assume(trace is not None)
    return workload(spec), target, rules, trace


def fixed_traces(spec: str, target: str, rules: str, n: int, seed: int = 0):
    return sample_traces(workload(spec).mod, target, rules, n, seed=seed)
