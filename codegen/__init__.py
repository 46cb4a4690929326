"""TVM-facing work: workloads, targets, MetaSchedule search, and (later) apply/build/verify."""

from .search import SearchSpace, sample_traces, search_space
from .targets import RULE_SETS, TARGETS, as_target, postproc_set
from .workloads import FAMILIES, Workload, parse_spec, workload

__all__ = [
    "FAMILIES",
    "RULE_SETS",
    "TARGETS",
    "SearchSpace",
    "Workload",
    "as_target",
    "parse_spec",
    "postproc_set",
    "sample_traces",
    "search_space",
    "workload",
]
