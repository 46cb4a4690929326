"""The typed messages between the evaluator and its worker processes.

Every message is a frozen dataclass; on the pipe it is JSON with a ``"type"`` field naming the
class.  Requests say what to do (``ApplyJob``, ``BuildJob``, ``ReferenceJob``, ``RunJob``,
``DescribeJob``, ``PingJob``, and for whole models ``ModelBuildJob`` and ``ModelRunJob``);
replies say what happened (``Applied``, ``Built``, ``Ready``, ``DeviceInfo``, ``Pong``,
``ModelBuilt``, ``ModelRan``, and for a candidate that ran, an ``Outcome``).  A
schedule-aware sampler keeps its live schedules in a worker: ``LiveOpen``, ``LiveStep`` and
``LiveClose``, answered by ``LiveState``.  A candidate that
fails (it does not parse, apply or build) is data, ``Failed`` with its ``Status``, not an
exception, as in MetaSchedule's ``RunnerResult``.  While a job runs the worker sends
``Progress`` before each stage, so a crash is attributed to the stage it happened in.

>>> decode(encode(Failed(Status.APPLY_ERROR, "apply", "no block C", 1, 7))).status
<Status.APPLY_ERROR: 'apply_error'>
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..targets import as_module
from .build import Artifact
from .config import MeasureConfig
from .outcomes import Outcome, Status

if TYPE_CHECKING:
    from ..workloads.workload import WorkloadLike

__all__ = ["Applied", "ApplyJob", "Built", "BuildJob", "DescribeJob", "DeviceInfo", "DeviceRef",
           "Error", "Failed", "LiveClose", "LiveOpen", "LiveState", "LiveStep", "Message",
           "ModelBuildJob", "ModelBuilt", "ModelRan", "ModelRunJob", "PingJob", "Pong",
           "Progress", "Ready", "ReferenceJob", "RunJob", "WorkloadData", "decode", "encode"]


@dataclass(frozen=True)
class WorkloadData:
    """A workload as JSON-safe data: its spec and its IRModule in TVM's JSON."""

    spec: str
    ir: str

    @classmethod
    def of(cls, workload: WorkloadLike) -> WorkloadData:
        import tvm

        return cls(str(getattr(workload, "spec", "")), tvm.ir.save_json(as_module(workload)))


@dataclass(frozen=True)
class DeviceRef:
    """Where built kernels run (``codegen.measure.devices.create`` makes the Device)."""

    kind: str                       # a key of ``devices.KINDS``: "cpu", "cuda" or "rpc"
    target_kind: str                # the target's kind: "llvm" or "cuda"
    rpc: dict[str, Any] | None = None


# ---- requests --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ApplyJob:
    workload: WorkloadData
    script: str
    target: dict[str, Any]
    # Statement by statement on a live schedule (dragon_dsl.live.apply_script), as the
    # schedule-aware sampler applies them: `dragon check --workload` reports this way.
    stepwise: bool = False


@dataclass(frozen=True)
class BuildJob:
    """Apply ``script`` (or take the scheduled ``module``, TVM JSON) and build it in ``out_dir``."""

    workload: WorkloadData
    target: dict[str, Any]
    out_dir: str
    script: str | None = None
    module: str | None = None


@dataclass(frozen=True)
class ReferenceJob:
    workload: WorkloadData
    config: MeasureConfig


@dataclass(frozen=True)
class RunJob:
    """Load, verify and time a built kernel on the device; with ``cutoff_s`` above 0, only
    once when its first timed repeat takes longer than that (``time_kernel``)."""

    workload: WorkloadData
    artifact: Artifact
    config: MeasureConfig
    device: DeviceRef
    cutoff_s: float = 0.0


@dataclass(frozen=True)
class ModelBuildJob:
    """Build a whole Relax model (TVM JSON in the file ``module``) into the shared library
    ``out``, with the MetaSchedule database directory ``database`` applied when given."""

    module: str
    target: dict[str, Any]
    out: str
    database: str | None = None


@dataclass(frozen=True)
class ModelRunJob:
    """Run a built model's ``main`` on the arrays of ``inputs`` (an ``.npz`` file): once,
    writing its outputs to ``outputs`` when given, then ``repeat`` timed runs of at least
    ``min_repeat_ms`` each."""

    library: str
    inputs: str
    device: DeviceRef
    outputs: str | None = None
    repeat: int = 0
    min_repeat_ms: int = 0


@dataclass(frozen=True)
class DescribeJob:
    device: DeviceRef


@dataclass(frozen=True)
class PingJob:
    pass


# A schedule-aware sampler's live schedules (``training.sampling.live_worker``), held here so
# that a TVM crash ends this process, not the sampler.  Each answers ``LiveState`` or, for a
# statement TVM or the language refuses (the schedule is then as it was), ``Failed``.

@dataclass(frozen=True)
class LiveOpen:
    """Hold a new live schedule ``key`` of ``workload`` and apply ``statements`` to it (a row
    re-created in a new worker replays its script so far)."""

    key: int
    workload: WorkloadData
    target: dict[str, Any] | None
    statements: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LiveStep:
    """Apply one statement (a line of text) to live schedule ``key``."""

    key: int
    statement: str


@dataclass(frozen=True)
class LiveClose:
    """Drop the live schedules ``keys`` (answers ``Pong``)."""

    keys: list[int]


# ---- replies ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Applied:
    tvmscript: str


@dataclass(frozen=True)
class Built:
    artifact: Artifact
    build_s: float


@dataclass(frozen=True)
class Ready:
    params: int
    outputs: int


@dataclass(frozen=True)
class ModelBuilt:
    build_s: float
    scheduled: int      # PrimFuncs the database gave a schedule


@dataclass(frozen=True)
class ModelRan:
    times: list[float]  # seconds per timed run; empty when none was asked


@dataclass(frozen=True)
class DeviceInfo:
    name: str       # part of the cache key: "Intel(R) Xeon(R) ... x2 threads", "NVIDIA H100 sm_90"
    present: bool   # False: kernels are built but cannot run here


@dataclass(frozen=True)
class LiveState:
    """A live schedule after a statement: ``dragon_dsl.live_view.LiveView.as_data()``."""

    view: dict[str, Any]


@dataclass(frozen=True)
class Pong:
    pid: int


@dataclass(frozen=True)
class Failed:
    """The candidate failed before it could run: it does not parse, apply or build."""

    status: Status
    stage: str
    message: str
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class Progress:
    stage: str


@dataclass(frozen=True)
class Error:
    """The job raised an unexpected Python exception (a bug, not a verdict on the kernel)."""

    message: str = field(default="")


Message = typing.Union[ApplyJob, BuildJob, ReferenceJob, RunJob, DescribeJob, PingJob,  # noqa: UP007
                       ModelBuildJob, ModelRunJob, LiveOpen, LiveStep, LiveClose, Applied,
                       Built, Ready, DeviceInfo, Pong, ModelBuilt, ModelRan, LiveState, Failed,
                       Progress, Error, Outcome]
_TYPES: dict[str, type] = {cls.__name__: cls for cls in typing.get_args(Message)}


def encode(message: Message) -> bytes:
    """A message as JSON bytes."""
    if type(message).__name__ not in _TYPES:
        raise TypeError(f"Expected a protocol message but got {type(message).__name__}")
    data = {f.name: _plain(getattr(message, f.name)) for f in dataclasses.fields(message)}
    return json.dumps({"type": type(message).__name__, **data}).encode()


def decode(raw: bytes) -> Message:
    """The message ``encode`` wrote."""
    data = json.loads(raw)
    cls = _TYPES[data.pop("type")]
    return _revive(cls, data)


def _plain(value: Any) -> Any:
    if isinstance(value, Status):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _revive(cls: type, data: dict[str, Any]):
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value, hint = data[f.name], hints[f.name]
        target = next((t for t in (hint, *typing.get_args(hint))
                       if isinstance(t, type) and (dataclasses.is_dataclass(t) or t is Status)),
                      None)
        if value is not None and target is Status:
            value = Status(value)
        elif value is not None and target is not None:
            value = _revive(target, value)
        values[f.name] = value
    return cls(**values)
