"""What runs inside a worker process (``python -m codegen.measure.worker_main READ_FD WRITE_FD``).

Jobs and replies are the typed messages of ``codegen.measure.protocol``:
- ``ApplyJob``: apply a script; ``Applied`` with the scheduled TVMScript;
- ``BuildJob``: apply a script (or take a scheduled module) and build it; ``Built``;
- ``ReferenceJob``: compute and keep the unscheduled kernel's outputs on the seeded inputs;
- ``RunJob``: load an artifact on the Device, verify it against the reference, time it; an
  ``Outcome``;
- ``DescribeJob``: the Device's ``DeviceInfo``; ``PingJob``; ``b"exit"`` ends the worker;
- ``ModelBuildJob``, ``ModelRunJob``: a whole Relax model built and run (``model_jobs``);
- ``LiveOpen``, ``LiveStep``, ``LiveClose``: a schedule-aware sampler's live schedules, held
  here and stepped one statement at a time; ``LiveState`` (``dragon_dsl.live_view``).
A candidate that does not parse, apply or build answers ``Failed``.  Before each stage the
worker sends ``Progress``, so the parent can attribute a crash.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from dragon_dsl.errors import DragonError, DslSyntaxError
from dragon_dsl.live import LiveSchedule, apply_script
from dragon_dsl.live_view import LiveView

from ..apply import apply
from ..targets import as_target, tvm_message
from .build import BuildError, build
from .devices import create
from .guards import FILLS, GuardedArgs
from .model_jobs import model_build_job, model_run_job
from .outcomes import Outcome, Status
from .protocol import (
    Applied,
    ApplyJob,
    BuildJob,
    Built,
    DescribeJob,
    DeviceInfo,
    Error,
    Failed,
    LiveClose,
    LiveOpen,
    LiveState,
    LiveStep,
    Message,
    ModelBuildJob,
    ModelRunJob,
    PingJob,
    Pong,
    Progress,
    Ready,
    ReferenceJob,
    RunJob,
    WorkloadData,
    decode,
    encode,
)
from .timing import median_and_spread, time_kernel
from .verify import compare, make_inputs, params_of

__all__ = ["decode_workload", "serve"]

_send = None  # set by serve(): reports progress to the parent


def _stage(name: str) -> None:
    if _send is not None:
        _send(Progress(name))


_WORKLOADS: dict[str, Any] = {}


def decode_workload(data: WorkloadData):
    import tvm

    if data.ir not in _WORKLOADS:
        _WORKLOADS.clear()  # one workload at a time is the common case; keep memory flat
        _WORKLOADS[data.ir] = tvm.ir.load_json(data.ir)
    return _WORKLOADS[data.ir]


def _forget_workloads() -> None:
    """After a script fails to apply: a schedule primitive TVM refuses halfway (an
    InternalError inside ``compute_at``, say) can leave the module it was given changed in
    place, and every later script of the workload would then be applied to that changed
    kernel, so the next job decodes the workload again."""
    _WORKLOADS.clear()


def _failure(status: Status, stage: str, exc: BaseException) -> Failed:
    return Failed(status, stage, getattr(exc, "reason", str(exc)), getattr(exc, "line", None),
                  getattr(exc, "column", None))


def _apply(job: ApplyJob | BuildJob, mod):
    """The scheduled module, or the Failed that says why the script does not give one."""
    return _applying(lambda: apply(job.script, mod, job.target))


def _apply_stepwise(job: ApplyJob, mod) -> Applied | Failed:
    return _applying(lambda: Applied(apply_script(job.script, mod, as_target(job.target))
                                     .sch.mod.script()))


def _applying(step):
    """``step()``, with a script's errors as the Failed they stand for; the cached workloads
    are forgotten after any failure to apply (see ``_forget_workloads``)."""
    try:
        return step()
    except DslSyntaxError as exc:
        return _failure(Status.PARSE_ERROR, "parse", exc)
    except DragonError as exc:
        _forget_workloads()
        return _failure(Status.APPLY_ERROR, "apply", exc)
    except BaseException:
        _forget_workloads()
        raise


def build_job(job: BuildJob) -> Built | Failed:
    import tvm

    start = time.perf_counter()
    mod = decode_workload(job.workload)
    _stage("apply")
    scheduled = _apply(job, mod) if job.script is not None else tvm.ir.load_json(job.module)
    if isinstance(scheduled, Failed):
        return scheduled
    _stage("build")
    try:
        artifact = build(scheduled, job.target, job.out_dir)
    except BuildError as exc:
        return _failure(Status.BUILD_ERROR, "build", exc)
    return Built(artifact, time.perf_counter() - start)


def apply_job(job: ApplyJob) -> Applied | Failed:
    _stage("apply")
    if job.stepwise:
        return _apply_stepwise(job, decode_workload(job.workload))
    scheduled = _apply(job, decode_workload(job.workload))
    return scheduled if isinstance(scheduled, Failed) else Applied(scheduled.script())


_LIVE: dict[int, LiveSchedule] = {}  # a sampler's live schedules, by its key

# A test hook: the worker exits with status 255 (as TVM's native crashes do) when asked to apply
# exactly this statement, so that tests can show a crash costs one sample.
CRASH_ON = "DRAGON_LIVE_CRASH_ON"


def _live_step(live: LiveSchedule, statement: str) -> None:
    if statement == os.environ.get(CRASH_ON):  # as TVM's native crashes end: text, no traceback
        os.write(2, b"[12:00:00] planted crash\nInternalError: Check failed: (planted) is false: "
                    b"Cannot find type info for type_index=999\n")
        os._exit(255)
    live.step(statement)


def _refused(exc: DragonError) -> Failed:
    # The whole message (line, caret), as the in-process sampler records it.
    return Failed(Status.APPLY_ERROR, "apply", str(exc), getattr(exc, "line", None),
                  getattr(exc, "column", None))


def live_open(job: LiveOpen) -> LiveState | Failed:
    import tvm

    # A module of its own (not decode_workload's cached one): a primitive TVM refuses halfway
    # must not change another row's kernel.  The sampler's rule on reorders holds (a piece of
    # a tiled loop never above an outer one), as in its in-process schedules.
    live = LiveSchedule(tvm.ir.load_json(job.workload.ir), job.target, keep_tile_order=True)
    try:
        for statement in job.statements:
            _live_step(live, statement)
    except DragonError as exc:
        return _refused(exc)
    _LIVE[job.key] = live
    return LiveState(LiveView.of(live).as_data())


def live_step(job: LiveStep) -> LiveState | Failed:
    live = _LIVE[job.key]
    try:
        _live_step(live, job.statement)
    except DragonError as exc:  # refused: the schedule is as it was
        return _refused(exc)
    return LiveState(LiveView.of(live).as_data())


def live_close(job: LiveClose) -> Pong:
    for key in job.keys:
        _LIVE.pop(key, None)
    return Pong(os.getpid())


_REFERENCES: dict[tuple[str, int], Any] = {}


def _reference(workload: WorkloadData, seed: int):
    """Inputs and the unscheduled kernel's outputs, built for the CPU and kept per workload."""
    import numpy as np
    import tvm

    key = (workload.ir, seed)
    if key not in _REFERENCES:
        _REFERENCES.clear()
        mod = decode_workload(workload)
        params = params_of(mod)
        arrays = make_inputs(params, seed)
        lib = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
        dev = tvm.cpu()
        tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
        lib["main"](*tensors)
        outputs = [t.numpy() for t, p in zip(tensors, params, strict=True) if p.output]
        _REFERENCES[key] = (params, arrays, [np.array(o) for o in outputs])
    return _REFERENCES[key]


def reference_job(job: ReferenceJob) -> Ready:
    _stage("reference")
    params, _, outputs = _reference(job.workload, job.config.seed)
    return Ready(len(params), len(outputs))


def run_job(job: RunJob) -> Outcome:
    import tvm

    config = job.config
    _stage("reference")
    params, inputs, references = _reference(job.workload, config.seed)
    device = create(job.device)
    _stage("load")
    try:
        rt_mod, dev = device.load(job.artifact)
    except Exception as exc:  # noqa: BLE001  a corrupt or unloadable library
        return Outcome(Status.RUNTIME_ERROR, "load",
                       f"cannot load the built kernel: {tvm_message(exc)}")
    _stage("verify")
    # With guards, once per fill (poison, then random bytes): a write out of bounds that
    # arithmetic turns back into the first fill's bytes cannot do so for the second.
    fields: dict = {}
    for fill in FILLS if device.guards else (None,):
        failed = _verify(rt_mod, dev, device.guards, fill, params, inputs, references, fields)
        if failed is not None:
            return failed
    _stage("time")
    # Fresh, unguarded tensors: the timed run is the kernel alone.
    tensors = [tvm.runtime.tensor(a, dev) for a in inputs]
    arg_sets, preproc = device.timing_args(tensors, inputs, config)
    times = time_kernel(rt_mod, dev, arg_sets, config, preproc, job.cutoff_s)
    median, spread = median_and_spread(times)
    if not times or not math.isfinite(median) or median <= 0:
        return Outcome(Status.RUNTIME_ERROR, "time",
                       f"the timer gave no usable measurement ({times})", **fields)
    cut = (f"timed once, not {config.repeat} times: past the cutoff of {job.cutoff_s:.3g} s"
           if len(times) < config.repeat else "")
    return Outcome(Status.CORRECT, "time", cut, latency_s=median, spread_s=spread,
                   repeats=times, **fields)


def _verify(rt_mod, dev, guards: bool, fill, params, inputs, references,
            fields: dict) -> Outcome | None:
    """One verification run (in guard regions filled with ``fill`` when ``guards``): None if the
    outputs match the references and nothing outside them changed, else the failed outcome.
    ``fields`` receives the errors measured (the worst over the runs)."""
    import tvm

    try:
        guarded = GuardedArgs(inputs, dev, fill) if guards else None
        tensors = guarded.tensors if guarded else [tvm.runtime.tensor(a, dev) for a in inputs]
    except Exception as exc:  # noqa: BLE001  no memory for the arguments on the device
        return Outcome(Status.RUNTIME_ERROR, "load", f"cannot place the arguments: "
                       f"{tvm_message(exc)}")
    try:
        entry = rt_mod.entry_name if getattr(rt_mod, "entry_name", "") else "main"
        rt_mod[entry](*tensors)
        dev.sync()
    except Exception as exc:  # noqa: BLE001  a kernel that faults reports through TVM
        return Outcome(Status.RUNTIME_ERROR, "verify", tvm_message(exc))
    written = [i for i, p in enumerate(params) if p.output]
    results = guarded.results() if guarded else [t.numpy() for t in tensors]
    result = compare([results[i] for i in written], references)
    fields["max_abs_error"] = max(fields.get("max_abs_error", 0.0), result.max_abs_error)
    fields["max_rel_error"] = max(fields.get("max_rel_error", 0.0), result.max_rel_error)
    fields["unwritten"] = max(fields.get("unwritten", 0), result.unwritten)
    if guarded is not None:
        report = guarded.check(outputs=written)
        fields["out_of_bounds"] = max(fields.get("out_of_bounds", 0), report.bytes_changed)
        if not report.clean:  # whatever the outputs say, such a kernel is never timed
            return Outcome(Status.INCORRECT, "verify",
                           report.message([p.name for p in params]), **fields)
    if not result.ok:
        return Outcome(Status.INCORRECT, "verify", result.message, **fields)
    return None


def describe_job(job: DescribeJob) -> DeviceInfo:
    return create(job.device).describe()


def _model_job(job):
    return (model_build_job if isinstance(job, ModelBuildJob) else model_run_job)(job, _stage)


JOBS = {ApplyJob: apply_job, BuildJob: build_job, ReferenceJob: reference_job, RunJob: run_job,
        DescribeJob: describe_job, PingJob: lambda job: Pong(os.getpid()),
        ModelBuildJob: _model_job, ModelRunJob: _model_job, LiveOpen: live_open,
        LiveStep: live_step, LiveClose: live_close}


def serve(reader: Connection, writer: Connection) -> None:
    global _send

    def send(message: Message) -> None:
        writer.send_bytes(encode(message))

    _send = send
    while True:
        try:
            raw = reader.recv_bytes()
        except EOFError:
            return
        if raw == b"exit":
            return
        try:
            job = decode(raw)
            send(JOBS[type(job)](job))
        except Exception as exc:  # noqa: BLE001  reported to the parent, the worker lives on
            send(Error(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))


def _exit_with_parent() -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        # The worker leads its own process group: the job's children (a C compiler, nvcc) and
        # the worker itself go together.
        os.killpg(0, signal.SIGKILL)
        os._exit(3)  # not reached

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    _exit_with_parent()
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]),
                                                                   readable=False))
