"""Whole models inside a worker process: a Relax module built (with a MetaSchedule database
applied, as users build theirs), then run and timed on the device.

The parent (``codegen.model_build``) sends ``ModelBuildJob`` and ``ModelRunJob`` messages to a
``Worker``, which loads the model through the ``Device`` the job names (``devices.create``); a
model that crashes or hangs while building or running ends the job, never the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..targets import as_target, native_log, tvm_message
from .devices import Device, create
from .outcomes import Status
from .protocol import Failed, ModelBuildJob, ModelBuilt, ModelRan, ModelRunJob

if TYPE_CHECKING:
    import tvm

__all__ = ["apply_database", "model_build_job", "model_run_job", "scheduled_functions"]


def apply_database(mod, target: tvm.target.Target, database: str):
    """``mod`` with the schedules of the MetaSchedule JSON database in directory ``database``
    applied to its PrimFuncs, as TVM's ``MetaScheduleApplyDatabase`` does in a user's flow."""
    from tvm import relax

    with target:
        return relax.transform.MetaScheduleApplyDatabase(database)(mod)


def scheduled_functions(mod) -> list[str]:
    """The PrimFuncs of ``mod`` a database (or DLight) has scheduled."""
    import tvm

    return [gv.name_hint for gv, f in mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None
            and "tirx.is_scheduled" in f.attrs]


def model_build_job(job: ModelBuildJob, stage: Callable[[str], None]) -> ModelBuilt | Failed:
    import tvm
    from tvm import relax

    start = time.perf_counter()
    stage("build")
    target = as_target(job.target)
    with open(job.module, encoding="utf-8") as f:
        mod = tvm.ir.load_json(f.read())
    try:
        if job.database is not None:
            mod = apply_database(mod, target, job.database)
        with native_log():
            relax.build(mod, target).export_library(job.out)
    except Exception as exc:  # noqa: BLE001  TVM reports build failures in many classes
        return Failed(Status.BUILD_ERROR, "build", tvm_message(exc))
    return ModelBuilt(time.perf_counter() - start, len(scheduled_functions(mod)))


_LOADED: dict[str, tuple] = {}


def _load(library: str, device: Device):
    """The model's virtual machine on ``device``, and the TVM device it runs on."""
    from tvm import relax

    if library not in _LOADED:
        if len(_LOADED) >= 4:  # a session times a few variants in turn; keep memory flat
            _LOADED.clear()
        executable, dev = device.load_library(library)
        _LOADED[library] = (relax.VirtualMachine(executable, dev), dev)
    return _LOADED[library]


def _flatten(value) -> list:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [a for v in value for a in _flatten(v)]


def model_run_job(job: ModelRunJob, stage: Callable[[str], None]) -> ModelRan | Failed:
    import numpy as np
    import tvm

    stage("load")
    try:
        vm, dev = _load(job.library, create(job.device))
    except Exception as exc:  # noqa: BLE001  a corrupt or unloadable library
        return Failed(Status.RUNTIME_ERROR, "load", f"cannot load the model: {tvm_message(exc)}")
    with np.load(job.inputs) as data:
        inputs = [tvm.runtime.tensor(data[f"arr_{i}"], dev) for i in range(len(data.files))]
    stage("run")
    try:
        outputs = _flatten(vm["main"](*inputs))
        dev.sync()
    except Exception as exc:  # noqa: BLE001  a model that faults reports through TVM
        return Failed(Status.RUNTIME_ERROR, "run", tvm_message(exc))
    if job.outputs is not None:
        np.savez(job.outputs, *outputs)  # arr_0, arr_1, ...
    if not job.repeat:
        return ModelRan([])
    stage("time")
    timer = vm.time_evaluator("main", dev, number=1, repeat=job.repeat,
                              min_repeat_ms=job.min_repeat_ms)
    return ModelRan([float(t) for t in timer(*inputs).results])
