"""Workloads: the kernels scripts are written for.

- ``workload.py``: ``Workload`` (a spec and its IRModule) and its identity;
- ``families.py``: the operator families, written in TE;
- ``specs.py``: workload specs (``matmul(m=128,n=128,k=128)``), TVMScript files, ``workload()``;
- ``models.py``, ``model_zoo.py``: real models imported through Relax, split into tasks;
- ``shapes.py``: the sampler of realistic specs, from the layer shapes of real models;
- ``inspect.py``: the one walk over a kernel's blocks and loops.

May import ``dragon_dsl`` and ``codegen.targets``; nothing from ``codegen.search``,
``codegen.measure`` or ``training``.
"""

from .families import FAMILIES, WorkloadError
from .shapes import iter_workloads, sample_workloads, sampler_stats
from .specs import canonical_spec, format_spec, parse_spec, script_workload, workload
from .workload import Workload

__all__ = [
    "FAMILIES",
    "Workload",
    "WorkloadError",
    "canonical_spec",
    "format_spec",
    "iter_workloads",
    "parse_spec",
    "sample_workloads",
    "sampler_stats",
    "script_workload",
    "workload",
]
