"""Targets and the MetaSchedule rule sets searched on them.

A target is given as a ``tvm.target.Target``, a tag (``"nvidia/nvidia-h100"``), a JSON dict
(``{"kind": "llvm", "num-cores": 2}``) or one of the short names below.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RULE_SETS", "TARGETS", "as_target", "default_rules", "postproc_set"]

# Short names for the targets the project searches on.  Both CUDA names use the H100 tag; which
# rules run is chosen explicitly (see RULE_SETS), never silently from the arch.
TARGETS: dict[str, Any] = {
    "llvm": {"kind": "llvm", "num-cores": 2},
    "cuda": "nvidia/nvidia-h100",
}

# Rule set name -> postprocessor set name (Postproc.create kind).
RULE_SETS: dict[str, str] = {
    "llvm": "llvm",
    "cuda": "cuda",
    "cuda-tensorcore": "cuda-tensorcore",
    "mma": "cuda-tensorcore",  # the tensor-core rules with the wmma tiling rule removed
}


def as_target(target: Any):
    """Return a ``tvm.target.Target`` for a Target, tag, JSON dict or short name.

    >>> as_target("llvm").kind.name
    'llvm'
    """
    import tvm

    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, str) and target in TARGETS:
        target = TARGETS[target]
    if isinstance(target, str | dict):
        return tvm.target.Target(target)
    raise TypeError(f"Expected a Target, tag or JSON dict but got target={target!r}")


def default_rules(target: Any) -> str:
    """The rule set MetaSchedule would use by default, without the silent tensor-core switch."""
    return "llvm" if as_target(target).kind.name == "llvm" else "cuda"


def postproc_set(rules: str) -> str:
    """The postprocessor set that belongs to a rule set."""
    try:
        return RULE_SETS[rules]
    except KeyError:
        raise ValueError(
            f"Expected one of {sorted(RULE_SETS)} but got rules={rules!r}"
        ) from None


def schedule_rules(rules: str) -> list:
    """The MetaSchedule schedule rules of a rule set."""
    from tvm.s_tir import meta_schedule as ms

    postproc_set(rules)  # validates the name
    if rules.startswith("cuda-tensorcore") or rules == "mma":
        import tvm.s_tir.tensor_intrin.cuda  # noqa: F401  (registers the intrinsics)
    if rules == "mma":
        base = list(ms.ScheduleRule.create("cuda-tensorcore"))
        # Index 1 is the wmma MultiLevelTilingTensorCore; index 2 the mma one.
        return [r for i, r in enumerate(base) if i != 1]
    return list(ms.ScheduleRule.create(rules))
