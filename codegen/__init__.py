"""TVM-facing work, in layers (``ARCHITECTURE.md`` has the map):

- ``codegen.targets``: targets and MetaSchedule rule sets;
- ``codegen.workloads``: the kernels (operator families, specs, real models, realistic shapes,
  the one walk over blocks and loops);
- ``codegen.apply``: a script applied to a kernel;
- ``codegen.measure``: build, verify and time candidates in isolated workers, on a Device;
- ``codegen.search``: MetaSchedule design spaces, sampled traces, baselines, the rival search;
- ``codegen.measured``: candidates measured beside the baselines, ``speedup``;
- ``codegen.bench``: scripts and baselines measured in one session (``dragon bench``);
- ``codegen.cli``: the ``dragon`` subcommands ``workloads``, ``apply``, ``bench``, ``demo``.
"""

from .apply import apply
from .measure import Cache, Evaluator, MeasureConfig, Outcome, Status
from .search import SearchSpace, sample_traces, search_space
from .targets import RULE_SETS, TARGETS, as_target, postproc_set
from .workloads import (
    FAMILIES,
    Workload,
    WorkloadError,
    canonical_spec,
    format_spec,
    iter_workloads,
    parse_spec,
    sample_workloads,
    sampler_stats,
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
