"""Where built kernels run: one small interface, one implementation per place, chosen once.

Modelled on MetaSchedule's Builder/Runner split: building is always local (parallel build
workers); a ``Device`` is the runner side.  It says how the measuring worker is started (its
environment, cores and lock), what the device is called (part of every cache key), how a
kernel or a whole model is loaded, and how repeats are kept honest (L2 flushing, input
rotation).  ``create`` is the one factory, and ``KINDS`` its one table:

- ``LocalCPU`` (``"cpu"``): the llvm target on this machine, pinned to the target's ``num-cores``;
- ``LocalCUDA`` (``"cuda"``): a GPU on this machine, loading the cubins the builders compiled;
- ``RPCDevice`` (``"rpc"``): a device behind TVM's RPC tracker (``codegen.measure.remote``).

Nothing else in the project branches on where a kernel runs: it asks the device.

>>> create("llvm").ref
DeviceRef(kind='cpu', target_kind='llvm', rpc=None)
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import TYPE_CHECKING, Any, ClassVar

from ..targets import TargetError, as_target
from .build import Artifact, register_cubin
from .config import MeasureConfig
from .locks import device_lock
from .protocol import DeviceInfo, DeviceRef
from .remote import connect
from .worker import Worker

if TYPE_CHECKING:
    import tvm

__all__ = ["KINDS", "LOCAL", "Device", "LocalCPU", "LocalCUDA", "RPCDevice", "create"]


class Device:
    """The runner side of measurement.  Parent-side methods start and name the measuring worker;
    worker-side methods (``describe``, ``load``, ``load_library``, ``timing_args``) run inside
    it.  ``target`` is given in the parent (``create(target)``), None in the measuring worker
    (``create(ref)``)."""

    # Verification runs with guard regions around every argument (``guards.py``): the device's
    # memory must be addressable from the measuring process.
    guards: ClassVar[bool] = True
    # Whole Relax models (``codegen.model_build``) can be built for and run on this device.
    runs_models: ClassVar[bool] = True
    # Whether builds on this machine run on the cores this device measures on.
    builds_contend: ClassVar[bool] = False

    def __init__(self, ref: DeviceRef, target: tvm.target.Target | None = None) -> None:
        self.ref = ref

    # -- in the parent -------------------------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        """Environment variables of the measuring worker."""
        return {}

    def worker_cpus(self) -> list[int] | None:
        """Cores the measuring worker is pinned to (None: not pinned)."""
        return None

    def worker(self, memory_limit_mb: int | None = None) -> Worker:
        """A measuring worker for this device: its environment, pinned to its cores."""
        return Worker(env=self.worker_env(), cpus=self.worker_cpus(),
                      memory_limit_mb=memory_limit_mb)

    @property
    def lock_name(self) -> str:
        """The cross-process lock measurements on this device take ("" for none)."""
        return ""

    def measuring(self) -> contextlib.AbstractContextManager[Any]:
        """Exclusive use of the device while verifying and timing (other processes wait)."""
        return device_lock(self.lock_name) if self.lock_name else contextlib.nullcontext()

    def building(self) -> contextlib.AbstractContextManager[Any]:
        """Held while building: builds that share the cores this device times on hold its lock
        shared, so a measurement waits for them and they for it."""
        if not (self.lock_name and self.builds_contend):
            return contextlib.nullcontext()
        return device_lock(self.lock_name, shared=True)

    def known_info(self) -> DeviceInfo | None:
        """The device's name when it is known without asking the measuring worker."""
        return None

    # -- in the measuring worker (or wherever the device is local) ------------------------------

    def describe(self) -> DeviceInfo:
        raise NotImplementedError

    def tvm_device(self) -> tvm.runtime.Device:
        """The TVM device kernels run on."""
        raise NotImplementedError

    def load_library(self, library: str) -> tuple[tvm.runtime.Module, tvm.runtime.Device]:
        """A shared library (a kernel, or a whole model's executable) as a runtime module, and
        the TVM device to run it on."""
        import tvm

        return tvm.runtime.load_module(library), self.tvm_device()

    def load(self, artifact: Artifact) -> tuple[tvm.runtime.Module, tvm.runtime.Device]:
        """A built kernel as a runtime module, and the TVM device to run it on."""
        return self.load_library(artifact.library)

    def timing_args(self, tensors: list, inputs: list, config: MeasureConfig) -> tuple[list, str]:
        """Argument sets the timed repeats rotate through, and the name of a function TVM's
        time evaluator runs before each repeat ("" for none)."""
        return [tensors], ""


class LocalCPU(Device):
    builds_contend = True

    def __init__(self, ref: DeviceRef, target: tvm.target.Target | None = None) -> None:
        super().__init__(ref)
        available = len(os.sched_getaffinity(0))
        if target is None:  # in the measuring worker, which the parent started with its cores
            self.cores = int(os.environ.get("TVM_NUM_THREADS", "0") or 0) or available
            return
        cores = int(target.export().get("num-cores", available))
        if not 1 <= cores <= available:
            raise TargetError(f"Expected num-cores between 1 and {available} (the cores this "
                              f"process may use) but got num-cores={cores}")
        self.cores = cores

    @property
    def lock_name(self) -> str:
        # One lock for the machine's CPUs, whatever num-cores each process measures with:
        # pinned to overlapping cores, two measurements would contend.
        return "cpu"

    def worker_env(self) -> dict[str, str]:
        return {"TVM_NUM_THREADS": str(self.cores)}

    def worker_cpus(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))[:self.cores]

    def describe(self) -> DeviceInfo:
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
        except (OSError, StopIteration):
            pass
        threads = os.environ.get("TVM_NUM_THREADS", str(os.cpu_count()))
        return DeviceInfo(f"{name} x{threads} threads", True)

    def tvm_device(self) -> tvm.runtime.Device:
        import tvm

        return tvm.cpu()


class LocalCUDA(Device):
    @property
    def lock_name(self) -> str:
        return "cuda:0"

    def describe(self) -> DeviceInfo:
        dev = self.tvm_device()
        if not dev.exist:  # without a driver this is False rather than an error
            return DeviceInfo("cuda (no GPU)", False)
        return DeviceInfo(f"{dev.device_name} sm_{dev.compute_version.replace('.', '')}", True)

    def tvm_device(self) -> tvm.runtime.Device:
        import tvm

        return tvm.cuda(0)

    def load(self, artifact: Artifact) -> tuple[tvm.runtime.Module, tvm.runtime.Device]:
        register_cubin(artifact)
        return self.load_library(artifact.library)

    def timing_args(self, tensors: list, inputs: list, config: MeasureConfig) -> tuple[list, str]:
        import tvm

        if not config.flush_l2:
            return [tensors], ""
        if tvm.get_global_func("l2_cache_flush_cuda", allow_missing=True) is not None:
            return [tensors], "l2_cache_flush_cuda"
        return _rotations(inputs, tensors[0].device), ""


class RPCDevice(Device):
    """A device behind an RPC tracker or server; artifacts are uploaded and loaded there.
    Its memory is remote, so verification there runs without guard regions.  Whole models are
    measured on local devices only."""

    guards = False
    runs_models = False

    def __init__(self, ref: DeviceRef, target: tvm.target.Target | None = None) -> None:
        super().__init__(ref)
        self._session: Any = None  # kept open while the loaded module is in use

    def known_info(self) -> DeviceInfo:
        assert self.ref.rpc is not None
        return DeviceInfo(f"rpc:{self.ref.rpc.get('key', '')}", True)

    def describe(self) -> DeviceInfo:
        return self.known_info()

    def _connect(self) -> Any:
        if self._session is None:
            assert self.ref.rpc is not None
            self._session = connect(self.ref.rpc)
        return self._session

    def tvm_device(self) -> tvm.runtime.Device:
        import tvm

        # TVM's own map from a target's kind to the device type that runs it.
        device_type = tvm.target.Target({"kind": self.ref.target_kind}).get_target_device_type()
        return self._connect().device(device_type)

    def load_library(self, library: str) -> tuple[tvm.runtime.Module, tvm.runtime.Device]:
        # A fresh session per load: the remote module lives as long as the session that loaded it.
        self._session = None
        session = self._connect()
        session.upload(library)
        return session.load_module(os.path.basename(library)), self.tvm_device()

    def timing_args(self, tensors: list, inputs: list, config: MeasureConfig) -> tuple[list, str]:
        if self.ref.target_kind != "cuda" or not config.flush_l2:
            return [tensors], ""
        return _rotations(inputs, tensors[0].device), ""


def _rotations(inputs: list, dev, l2_bytes: int = 50 * 2**20) -> list[list]:
    """Enough copies of the arguments that cycling through them overflows the L2 cache."""
    import tvm

    size = sum(a.nbytes for a in inputs)
    copies = max(1, min(16, -(-2 * l2_bytes // max(size, 1))))
    return [[tvm.runtime.tensor(a, dev) for a in inputs] for _ in range(copies)]


# Where a kernel runs (``DeviceRef.kind``) -> the Device that runs it there.  A new device is a
# class and a row here.
KINDS: dict[str, type[Device]] = {"cpu": LocalCPU, "cuda": LocalCUDA, "rpc": RPCDevice}
# A target's kind -> where it runs on this machine (without ``rpc=``).
LOCAL: dict[str, str] = {"llvm": "cpu", "cuda": "cuda"}

_OPEN: dict[str, Device] = {}


def create(where: Any, rpc: dict[str, Any] | None = None) -> Device:
    """The Device for a target: over RPC when ``rpc`` is given (``{"tracker": "host:port",
    "key": K}`` or ``{"server": "host:port"}``), else this machine's CPU or GPU.  Given the
    ``DeviceRef`` a job carries (inside the measuring worker), the Device it names, kept per
    process so that what it loaded stays alive between jobs."""
    if isinstance(where, DeviceRef):
        key = repr(where)
        if key not in _OPEN:
            _OPEN[key] = KINDS[where.kind](where)
        return _OPEN[key]
    tgt = as_target(where)
    kind = tgt.kind.name
    if rpc:
        return KINDS["rpc"](DeviceRef("rpc", kind, dict(rpc)), tgt)
    if kind not in LOCAL:
        raise TargetError(f"Expected an llvm or cuda target (or rpc=) but got target kind "
                          f"{kind!r}")
    return KINDS[LOCAL[kind]](DeviceRef(LOCAL[kind], kind), tgt)
