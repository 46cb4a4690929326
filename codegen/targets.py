"""Targets and the MetaSchedule rule sets searched on them.

A target is given as a ``tvm.target.Target``, a tag (``"nvidia/nvidia-h100"``), a JSON dict
(``{"kind": "llvm", "num-cores": 2}``) or one of the short names of ``TARGETS``.  The helpers
the language itself needs (``as_target``, ``as_module``, ``tvm_message``,
``import_tensor_intrinsics``) live in ``dragon_dsl.tvm_support``; codegen takes them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dragon_dsl.tvm_support import (
    TARGETS,
    TargetError,
    as_module,
    as_target,
    import_tensor_intrinsics,
    native_log,
    schedule_of,
    tvm_message,
)

if TYPE_CHECKING:
    from typing import TypeAlias

    import tvm

    # What a ``target`` parameter takes: a Target, a tag, a JSON dict or a short name.
    TargetLike: TypeAlias = tvm.target.Target | str | dict[str, Any]

__all__ = ["RULE_SETS", "TARGETS", "TargetError", "as_module", "as_target", "default_rules",
           "import_tensor_intrinsics", "native_log", "postproc_set", "schedule_of",
           "schedule_rules", "target_dict", "tvm_message"]

# Rule set name -> postprocessor set name (Postproc.create kind).
RULE_SETS: dict[str, str] = {
    "llvm": "llvm",
    "cuda": "cuda",
    "cuda-tensorcore": "cuda-tensorcore",
    "mma": "cuda-tensorcore",  # the tensor-core rules with the wmma tiling rule removed
}


def default_rules(target: TargetLike) -> str:
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


def target_dict(target: TargetLike) -> dict[str, Any]:
    """A target as a plain JSON dict that ``as_target`` turns back into the same target (for
    crossing into worker processes and for cache keys).

    >>> target_dict("llvm")["num-cores"]
    2
    """
    import tvm

    def plain(value):
        if isinstance(value, tvm.target.Target):
            return plain(value.export())
        if isinstance(value, str | int | float | bool) or value is None:
            return value
        if hasattr(value, "items"):
            return {str(k): plain(v) for k, v in value.items() if not (k == "tag" and v == "")}
        if hasattr(value, "__iter__"):
            return [plain(v) for v in value]
        return str(value)

    return plain(as_target(target))
