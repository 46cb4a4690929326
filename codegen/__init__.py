"""TVM-facing work: workloads, targets, MetaSchedule search, applying scripts, building,
verifying and timing candidates in isolated workers, and baselines."""

from .apply import apply
from .cache import Cache
from .evaluate import Evaluator
from .measure import MeasureConfig
from .outcomes import Outcome, Status
from .sampler import iter_workloads, sample_workloads, sampler_stats
from .search import SearchSpace, sample_traces, search_space
from .targets import RULE_SETS, TARGETS, as_target, postproc_set
from .workloads import (
    FAMILIES,
    Workload,
    WorkloadError,
    canonical_spec,
    format_spec,
    parse_spec,
    script_workload,
    workload,
)

__all__ = [
    "Cache",
    "Evaluator",
    "MeasureConfig",
    "Outcome",
    "Status",
    "apply",
    "FAMILIES",
    "RULE_SETS",
    "TARGETS",
    "SearchSpace",
    "Workload",
    "WorkloadError",
    "as_target",
    "canonical_spec",
    "format_spec",
    "iter_workloads",
    "parse_spec",
    "postproc_set",
    "sample_traces",
    "sample_workloads",
    "sampler_stats",
    "script_workload",
    "search_space",
    "workload",
]
