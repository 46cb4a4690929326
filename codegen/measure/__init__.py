"""Measurement: build, verify and time candidates in isolated workers, with a cache.

- ``config.py``: ``MeasureConfig``; ``outcomes.py``: ``Outcome`` and ``Status``;
- ``evaluator.py``: ``Evaluator``, the pipeline (parallel builds, then one measuring process);
- ``devices.py``: where kernels run (local CPU, local CUDA, RPC), chosen once by ``create``;
- ``guards.py``: guard regions around every argument; ``locks.py``: cross-process device locks;
- ``protocol.py``: the typed messages to and from workers; ``worker.py``: a worker process;
  ``worker_main.py``: what runs inside one;
- ``build.py``, ``verify.py``, ``timing.py``: the stages; ``cache.py``: outcomes on disk;
  ``remote.py``: TVM's RPC tracker and servers; ``model_jobs.py``: whole models in a worker.

May import ``dragon_dsl``, ``codegen.targets``, ``codegen.workloads`` and ``codegen.apply``;
never ``codegen.search``, ``codegen.bench``, ``codegen.cli`` or ``training``.
"""

from .cache import Cache
from .config import MeasureConfig
from .devices import Device, create
from .evaluator import Evaluator, workload_identity
from .outcomes import Outcome, Status

__all__ = ["Cache", "Device", "Evaluator", "MeasureConfig", "Outcome", "Status", "create",
           "workload_identity"]
