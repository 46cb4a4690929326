"""Tasks (one workload searched on one target) and the presets of ``dragon datagen``.

A task's key hashes everything that decides what its search measures (workload, target, rule
set, search settings), so a rerun with the same command finds the tasks it has already done and
a changed setting never passes for an old one.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from codegen.search.tune import SearchConfig
from codegen.workloads import canonical_spec, sample_workloads

__all__ = ["PRESETS", "Preset", "Task", "expand_models", "family_of", "preset", "tasks_for",
           "work_estimate"]


def family_of(spec: str) -> str:
    """The operator family of a spec (``model`` for model tasks, ``file`` for files)."""
    head = spec.split("(", 1)[0].strip()
    return head or "unknown"


@dataclass(frozen=True)
class Task:
    """Search one workload on one target; ``key`` names its files."""

    workload: str
    target: Any   # a target dict or tag
    rules: str
    search: SearchConfig
    time_limit_s: float

    @property
    def key(self) -> str:
        fields = {"workload": self.workload, "target": self.target, "rules": self.rules,
                  "search": asdict(self.search)}
        text = json.dumps(fields, sort_keys=True)
        return f"{family_of(self.workload)}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "target": self.target, "rules": self.rules,
                "search": asdict(self.search), "time_limit_s": self.time_limit_s}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return cls(data["workload"], data["target"], data["rules"],
                   SearchConfig(**data["search"]), float(data["time_limit_s"]))


# The tiny preset: small llvm kernels of every family the sampler draws, a few of each kind of
# loop nest; one family and one real model are held out whole for generalisation tests.
TINY_WORKLOADS: tuple[str, ...] = (
    "matmul(m=64,n=64,k=64)", "matmul(m=128,n=64,k=32)", "matmul(m=32,n=128,k=64)",
    "matmul(m=96,n=48,k=64)",
    "dense(m=64,n=64,k=64)", "dense(m=32,n=96,k=64,bias=1,act=relu)",
    "dense(m=16,n=128,k=128)",
    "batch_matmul(b=4,m=32,n=32,k=32)", "batch_matmul(b=2,m=64,n=32,k=16)",
    "gemv(m=256,k=256)", "gemv(m=128,k=512)",
    "conv2d(n=1,h=14,w=14,ci=16,co=16)", "conv2d(n=1,h=8,w=8,ci=8,co=16,stride=2)",
    "depthwise_conv2d(n=1,h=14,w=14,c=16)",
    "conv1d(n=1,l=32,ci=16,co=16)",
    "softmax(m=64,n=128)", "softmax(m=32,n=256)",
    "layer_norm(m=64,n=128)", "rms_norm(m=64,n=128)",
    "elementwise(m=64,n=128)", 'elementwise(m=128,n=64,ops="add,relu")',
    "reduce(m=64,n=256)", "reduce(m=32,n=512,op=max)",
    "transpose(m=64,n=128,k=8)",
    "pool2d(n=1,c=16,h=16,w=16)",
    "attention(b=1,heads=2,sq=32,skv=32,d=16)",
    # BERT's layer norm, dense + bias, attention matmul and softmax, held out whole.
    *(f"model(name=bert,preset=tiny,task={i})" for i in (3, 5, 8, 10)),
)


@dataclass(frozen=True)
class Preset:
    """A named datagen setting: which workloads, on which target, with how much search."""

    name: str
    description: str
    target: Any
    search: SearchConfig
    time_limit_s: float
    workloads: tuple[str, ...] = ()
    sample: int = 0                       # draw this many specs from real-model shapes instead
    holdout_families: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def specs(self, seed: int = 0) -> list[str]:
        if self.workloads:
            return list(self.workloads)

        return sample_workloads(self.sample, seed=seed)


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        "tiny", "30 small llvm kernels (15 operator families and 4 BERT tasks), 24 trials "
                "each in 3 rounds: about 10 minutes on 2 cores",
        {"kind": "llvm", "num-cores": 2},
        SearchConfig(trials=24, per_round=8, population=64), time_limit_s=300.0,
        workloads=TINY_WORKLOADS, holdout_families=("pool2d",),
        # MetaSchedule's own builder gives a candidate 30 s; a small kernel that takes longer
        # to build (an unrolled giant) or to run is a failed trial, and measured as one.
        extra={"measure": {"repeat": 5, "min_repeat_ms": 10.0, "build_timeout_s": 30.0,
                           "run_timeout_s": 10.0}}),
    "paper": Preset(
        "paper", "the reference scale: 54,116 workloads drawn from real-model shapes, on CUDA "
                 "(an H100 by default), 64 trials each in 4 rounds",
        "nvidia/nvidia-h100",
        SearchConfig(trials=64, per_round=16), time_limit_s=1800.0,
        sample=54_116, holdout_families=("conv2d_transpose",)),
}


def preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"Expected a preset from {', '.join(PRESETS)} but got {name!r}")
    return PRESETS[name]


def tasks_for(specs: list[str], target: dict[str, Any], rules: str, search: SearchConfig,
              time_limit_s: float) -> list[Task]:
    """One task per distinct workload (specs made canonical), in the given order."""
    seen: set[str] = set()
    out = []
    for spec in map(canonical_spec, specs):
        if spec not in seen:
            seen.add(spec)
            out.append(Task(spec, target, rules, search, time_limit_s))
    return out


def expand_models(specs: list[str]) -> list[str]:
    """The specs with each whole model (``model(name=bert,preset=base)``, no ``task=``) replaced
    by the specs of its distinct tasks, as MetaSchedule extracts them (importing the model: a few
    seconds each); other specs made canonical.

    >>> expand_models(["model(name=resnet,preset=tiny)"])[:1]  # doctest: +SKIP
    ['model(name=resnet,preset=tiny,task=0)']
    """
    from codegen.workloads.models import extract_tasks, parse_model_spec

    out: list[str] = []
    for spec in specs:
        if family_of(spec) == "model" and not re.search(r"[(,]\s*task\s*=", spec):
            out.extend(t.spec for t in extract_tasks(**parse_model_spec(spec, task=False)))
        else:
            out.append(canonical_spec(spec))
    return out


# How much more an unscheduled float16 kernel costs than a float32 one of the same FLOPs on a
# CPU, which has no half arithmetic (llvm converts each value): read off the kept corpus, where
# float32 and int8 workloads of up to about 2e10 FLOPs were measured within the tiny preset's
# limits and float16 ones above about 1e9 ran past them.
HALF_ON_CPU = 10.0


def work_estimate(spec: str, target: Any = None) -> float:
    """The estimated cost of one run of the workload's unscheduled kernel, in FLOPs (TVM's
    ``estimate_tir_flops``, scaled by ``HALF_ON_CPU`` for float16 on a CPU); ``inf`` for what
    it cannot estimate (a whole model).  An order, not a time: ``dragon datagen --grow N
    --cheapest-first`` searches the cheapest workloads first."""
    from tvm.s_tir.analysis import estimate_tir_flops

    from codegen.workloads import workload

    try:
        cost = float(estimate_tir_flops(workload(spec).mod))
    except Exception:  # noqa: BLE001 - a model task or anything TVM cannot estimate goes last
        return float("inf")
    kind = target.get("kind") if isinstance(target, dict) else str(target or "llvm")
    if "float16" in spec and kind == "llvm":
        cost *= HALF_ON_CPU
    return cost
