"""MetaSchedule traces for tests: a varied set of workloads, targets and rule sets, one small
instance of every workload family under every rule set, and a Hypothesis strategy that draws
real sampled traces (never hand-written ones)."""

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
    "gemv(m=1024,k=128)",  # with m=128 the CUDA rules cannot give a thread block a full warp
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
RULES = tuple(rules for _, rules in TARGETS)
TENSOR_CORE_RULES = ("cuda-tensorcore", "mma")

# What MetaSchedule itself cannot search: (spec, rules) -> why.  `test_roundtrip.py` checks
# each reason still holds, so an entry cannot hide a pair that has become searchable.
# "space" entries raise while the design space is generated; "samples" entries give a space
# whose every sample a postprocessor rejects.
UNSEARCHABLE: dict[tuple[str, str], tuple[str, str]] = {
    # TVM's mma rule raises "All the constant factors are required to be positive" on these
    # shapes, though not on others of the same families (conv2d with h=w=16, ci=co=32).
    ("conv2d(h=14,w=14,ci=32,co=32,dtype=float16)", "mma"): ("space", "the mma rule fails"),
    ("conv3d(d=4,h=8,w=8,ci=16,co=16,dtype=float16)", "mma"): ("space", "the mma rule fails"),
    ("conv2d_transpose(h=8,w=8,ci=16,co=16,dtype=float16)", "mma"): (
        "space", "the mma rule fails"),
    ("dense(m=32,n=48,k=64,bias=1,act=relu,dtype=float16)", "mma"): (
        "space", "the mma rule fails on X @ W^T with an epilogue"),
    ("dense(m=32,n=32,k=32,dtype=float16)", "mma"): (
        "samples", "VerifyGPUCode rejects every mma sample of X @ W^T"),
    ("conv2d_transpose(h=8,w=8,ci=32,co=32,dtype=float16)", "mma"): (
        "samples", "VerifyGPUCode rejects every mma sample"),
}

# Every (workload, target, rule set) the Hypothesis strategy draws from.
PAIRS = [(spec, target, rules) for spec in WORKLOADS for target, rules in TARGETS
         if (spec, rules) not in UNSEARCHABLE]

# Tries per drawn example.  The CUDA postprocessors reject most random decisions: on the small
# convolutions VerifyGPUCode (a thread block of at least a warp) keeps 5 to 10%, on T2D it and
# DisallowDynamicLoop keep 1.7%, which 300 tries miss 0.6% of the time.
STRATEGY_TRIES = 300


def target_of(rules: str) -> str:
    return "llvm" if rules == "llvm" else "cuda"


# One small instance of every family under every rule set, in the order of RULES: llvm and
# cuda take float32 (the layouts split between them), the tensor-core rule sets float16
# wherever the family takes it.  Under mma the transposed convolution is 1x1 and dense is
# float32: see UNSEARCHABLE for why.
FAMILY_MATRIX: dict[str, tuple[str, str, str, str]] = {
    "matmul": ("matmul(m=64,n=64,k=64)", "matmul(m=64,n=64,k=64)",
               "matmul(m=64,n=64,k=64,dtype=float16)", "matmul(m=64,n=64,k=64,dtype=float16)"),
    "batch_matmul": ("batch_matmul(b=2,m=32,n=32,k=32)", "batch_matmul(b=2,m=32,n=32,k=32)",
                     "batch_matmul(b=2,m=32,n=32,k=32,dtype=float16)",
                     "batch_matmul(b=2,m=32,n=32,k=32,dtype=float16)"),
    "dense": ("dense(m=32,n=48,k=64,bias=1,act=gelu)", "dense(m=32,n=48,k=64,bias=1,act=relu)",
              "dense(m=32,n=48,k=64,bias=1,act=relu,dtype=float16)",
              "dense(m=32,n=48,k=64,bias=1,act=relu)"),
    "gemv": ("gemv(m=128,k=128)", "gemv(m=1024,k=128)", "gemv(m=1024,k=128,dtype=float16)",
             "gemv(m=1024,k=128,dtype=float16)"),
    "attention": ("attention(heads=4,sq=32,skv=32,d=16,gqa=2)",
                  "attention(heads=2,sq=32,skv=32,d=16,stage=context)",
                  "attention(heads=4,sq=32,skv=32,d=16,gqa=2,dtype=float16)",
                  "attention(heads=2,sq=32,skv=32,d=16,dtype=float16)"),
    "conv1d": ("conv1d(l=32,ci=8,co=8,stride=2,dilation=2)", "conv1d(l=32,ci=8,co=8,layout=NCW)",
               "conv1d(l=32,ci=16,co=16,layout=NCW,dtype=float16)",
               "conv1d(l=64,ci=32,co=32,dtype=float16)"),
    "conv2d": ("conv2d(h=14,w=14,ci=16,co=16)", "conv2d(h=14,w=14,ci=16,co=64,layout=NCHW)",
               "conv2d(h=14,w=14,ci=32,co=32,dtype=float16)",
               "conv2d(h=16,w=16,ci=32,co=32,dtype=float16)"),
    "depthwise_conv2d": ("depthwise_conv2d(h=14,w=14,c=16)",
                         "depthwise_conv2d(h=14,w=14,c=16,layout=NCHW)",
                         "depthwise_conv2d(h=16,w=16,c=32,dtype=float16)",
                         "depthwise_conv2d(h=16,w=16,c=32,dtype=float16)"),
    "conv3d": ("conv3d(d=4,h=8,w=8,ci=8,co=8)", "conv3d(d=4,h=8,w=8,ci=8,co=8,layout=NCDHW)",
               "conv3d(d=4,h=8,w=8,ci=16,co=16,layout=NCDHW,dtype=float16)",
               "conv3d(d=4,h=8,w=8,ci=32,co=32,dtype=float16)"),
    "conv2d_transpose": ("conv2d_transpose(h=8,w=8,ci=8,co=8)",
                         "conv2d_transpose(h=8,w=8,ci=16,co=32)",
                         "conv2d_transpose(h=8,w=8,ci=16,co=16,dtype=float16)",
                         "conv2d_transpose(h=8,w=8,ci=16,co=16,k=1,stride=1,pad=0,"
                         "dtype=float16)"),
    "pool2d": ("pool2d(kind=max)", "pool2d(kind=avg,layout=NHWC)",
               "pool2d(kind=global,dtype=float16)", "pool2d(kind=global_max,dtype=float16)"),
    "softmax": ("softmax(m=32,n=64)", "softmax(m=32,n=64)", "softmax(m=32,n=64,dtype=float16)",
                "softmax(m=32,n=64,dtype=float16)"),
    "layer_norm": ("layer_norm(m=32,n=64)", "layer_norm(m=32,n=64)",
                   "layer_norm(m=32,n=64,dtype=float16)", "layer_norm(m=32,n=64,dtype=float16)"),
    "rms_norm": ("rms_norm(m=32,n=64)", "rms_norm(m=32,n=64)", "rms_norm(m=32,n=64,dtype=float16)",
                 "rms_norm(m=32,n=64,dtype=float16)"),
    "reduce": ("reduce(m=32,n=128,op=max)", "reduce(m=32,n=128,op=mean)",
               "reduce(m=32,n=128,dtype=float16)", "reduce(m=32,n=128,op=min,dtype=float16)"),
    "elementwise": ('elementwise(m=32,n=64,ops="add,relu,exp")',
                    'elementwise(m=32,n=64,ops="mul,gelu,silu")',
                    'elementwise(m=32,n=64,ops="sub,tanh",dtype=float16)',
                    'elementwise(m=32,n=64,ops="add,sigmoid",dtype=float16)'),
    "transpose": ("transpose(m=16,n=32,k=8)", 'transpose(m=16,n=32,k=8,axes="1,0,2")',
                  "transpose(m=16,n=32,k=8,dtype=float16)",
                  'transpose(m=16,n=32,k=8,axes="0,2,1",dtype=float16)'),
    "tvm": ("tvm(name=T2D)", "tvm(name=C2D)", "tvm(name=GMM)", "tvm(name=SFM)"),
}

# The pairs whose trace must take the tensor-core path (a Tensorize instruction): where the
# rule set tensorizes the family's float16 instance.
TENSORIZED = {
    *((family, "cuda-tensorcore") for family in (
        "matmul", "batch_matmul", "dense", "attention", "conv1d", "conv2d", "conv3d",
        "conv2d_transpose")),
    *((family, "mma") for family in ("matmul", "conv1d", "conv2d", "conv3d")),
}


@functools.cache
def space_or_none(spec: str, target: str, rules: str):
    """The shared SearchSpace, or None when MetaSchedule itself cannot search the pair."""
    try:
        return search_space(workload(spec).mod, target, rules)
    except Exception:  # noqa: BLE001  (e.g. the mma rules raise ScheduleError on some convs)
        return None


def draw_trace(space, seed: int, tries: int = STRATEGY_TRIES):
    """The first sample a postprocessor accepts among ``tries`` seeded ones, or None."""
    for attempt in range(tries):
        trace = space.sample(seed * 1009 + attempt)
        if trace is not None:
            return trace
    return None


@st.composite
def sampled_traces(draw, pairs=tuple(PAIRS)):
    """(workload, target, rules, trace) with a trace sampled by MetaSchedule."""
    spec, target, rules = draw(st.sampled_from(pairs))
    space = space_or_none(spec, target, rules)
    assume(space is not None)
    trace = draw_trace(space, draw(st.integers(0, 2**20)))
    assume(trace is not None)
    return workload(spec), target, rules, trace


def is_tensorized(trace) -> bool:
    return any(inst.kind.name == "Tensorize" for inst in trace.insts)


def matrix_trace(family: str, rules: str):
    """The one trace of the family-by-rule-set matrix: the first that MetaSchedule's
    postprocessors accept (and that uses tensor cores where TENSORIZED says so)."""
    spec = FAMILY_MATRIX[family][RULES.index(rules)]
    wl = workload(spec)
    tensorized = (family, rules) in TENSORIZED
    traces = sample_traces(wl.mod, target_of(rules), rules, 3 if tensorized else 1, seed=0,
                           max_tries=300)
    if tensorized:
        traces = [t for t in traces if is_tensorized(t)]
    return wl, (traces[0] if traces else None)


def fixed_traces(spec: str, target: str, rules: str, n: int, seed: int = 0):
    return sample_traces(workload(spec).mod, target, rules, n, seed=seed)


def applies_in_tvm(script: str, spec_or_workload, target="llvm") -> bool:
    """Whether ``script`` applies to its kernel by TVM alone: the script decoded to its trace
    (``dragon_dsl.to_trace``) and replayed by ``Trace.apply_to_schedule`` on a fresh schedule.
    An independent check of the sampler's own ``applies`` flag (no ``LiveSchedule`` code)."""
    from tvm.s_tir.schedule import Schedule

    import dragon_dsl
    from codegen.workloads import workload

    wl = workload(spec_or_workload) if isinstance(spec_or_workload, str) else spec_or_workload
    try:
        trace = dragon_dsl.to_trace(script, workload=wl, target=target)
        trace.apply_to_schedule(Schedule(wl.mod), remove_postproc=False)
    except Exception:  # noqa: BLE001  any refusal, the language's or TVM's
        return False
    return True
