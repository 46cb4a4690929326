"""Where built kernels run: one small interface, one implementation per place, chosen once.

Modelled on MetaSchedule's Builder/Runner split: building is always local (parallel build
workers); a ``Device`` is the runner side.  It says how the measuring worker is started (its
environment and cores), what the device is called (part of every cache key), how an artifact is
loaded, and how repeats are kept honest (L2 flushing, input rotation).

- ``LocalCPU``: the llvm target on this machine, pinned to the target's ``num-cores``;
- ``LocalCUDA``: a GPU on this machine, loading the cubins the builders compiled;
- ``RPCDevice``: a device behind TVM's RPC tracker (``codegen.measure.remote``).

>>> create("llvm").ref
DeviceRef(kind='cpu', target_kind='llvm', rpc=None)
"""

from __future__ import annotations

import os
from typing import Any

from ..targets import TargetError, as_target
from .build import Artifact
from .config import MeasureConfig
from .protocol import DeviceInfo, DeviceRef

__all__ = ["Device", "LocalCPU", "LocalCUDA", "RPCDevice", "create", "from_ref"]


class Device:
    """The runner side of measurement.  Parent-side methods start and name the measuring worker;
    worker-side methods (``describe``, ``load``, ``timing_args``) run inside it."""

    # Verification runs with guard regions around every argument (``guards.py``): the device's
    # memory must be addressable from the measuring process.
    guards = True

    def __init__(self, ref: DeviceRef) -> None:
        self.ref = ref

    # -- in the parent -------------------------------------------------------------------------

    def worker_env(self) -> dict[str, str]:
        """Environment variables of the measuring worker."""
        return {}

    def worker_cpus(self) -> list[int] | None:
        """Cores the measuring worker is pinned to (None: not pinned)."""
        return None

    @property
    def lock_name(self) -> str:
        """The cross-process lock measurements on this device take ("" for none)."""
        return ""

    # Whether builds on this machine run on the cores this device measures on.
    builds_contend = False

    def known_info(self) -> DeviceInfo | None:
        """The device's name when it is known without asking the measuring worker."""
        return None

    # -- in the measuring worker -----------------------------------------------------------

    def describe(self) -> DeviceInfo:
        raise NotImplementedError

    def load(self, artifact: Artifact) -> tuple[Any, Any]:
        """The artifact as a runtime module, and the TVM device to run it on."""
        raise NotImplementedError

    def timing_args(self, tensors: list, inputs: list, config: MeasureConfig) -> tuple[list, str]:
        """Argument sets the timed repeats rotate through, and the name of a function TVM's
        time evaluator runs before each repeat ("" for none)."""
        return [tensors], ""


class LocalCPU(Device):
    builds_contend = True

    def __init__(self, ref: DeviceRef, cores: int) -> None:
        super().__init__(ref)
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
        import platform

        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
        except (OSError, StopIteration):
            pass
        threads = os.environ.get("TVM_NUM_THREADS", str(os.cpu_count()))
        return DeviceInfo(f"{name} x{threads} threads", True)

    def load(self, artifact: Artifact) -> tuple[Any, Any]:
        import tvm

        return tvm.runtime.load_module(artifact.library), tvm.cpu()


class LocalCUDA(Device):
    @property
    def lock_name(self) -> str:
        return "cuda:0"

    def describe(self) -> DeviceInfo:
        import tvm

        dev = tvm.cuda(0)
        if not dev.exist:  # without a driver this is False rather than an error
            return DeviceInfo("cuda (no GPU)", False)
        return DeviceInfo(f"{dev.device_name} sm_{dev.compute_version.replace('.', '')}", True)

    def load(self, artifact: Artifact) -> tuple[Any, Any]:
        import tvm

        from .build import register_cubin

        register_cubin(artifact)
        return tvm.runtime.load_module(artifact.library), tvm.cuda(0)

    def timing_args(self, tensors: list, inputs: list, config: MeasureConfig) -> tuple[list, str]:
        import tvm

        if not config.flush_l2:
            return [tensors], ""
        if tvm.get_global_func("l2_cache_flush_cuda", allow_missing=True) is not None:
            return [tensors], "l2_cache_flush_cuda"
        return _rotations(inputs, tensors[0].device), ""


class RPCDevice(Device):
    """A device behind an RPC tracker or server; artifacts are uploaded and loaded there.
    Its memory is remote, so verification there runs without guard regions."""

    guards = False

    def __init__(self, ref: DeviceRef) -> None:
        super().__init__(ref)
        self._session = None  # kept open while the loaded module is in use

    def known_info(self) -> DeviceInfo:
        assert self.ref.rpc is not None
        return DeviceInfo(f"rpc:{self.ref.rpc.get('key', '')}", True)

    def describe(self) -> DeviceInfo:
        return self.known_info()

    def load(self, artifact: Artifact) -> tuple[Any, Any]:
        from .remote import connect

        assert self.ref.rpc is not None
        self._session = session = connect(self.ref.rpc)
        session.upload(artifact.library)
        rt_mod = session.load_module(os.path.basename(artifact.library))
        return rt_mod, session.device("cpu" if self.ref.target_kind == "llvm" else
                                      self.ref.target_kind)

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


def create(target: Any, rpc: dict[str, Any] | None = None) -> Device:
    """The Device for a target: over RPC when ``rpc`` is given (``{"tracker": "host:port",
    "key": K}`` or ``{"server": "host:port"}``), else this machine's CPU or GPU."""
    tgt = as_target(target)
    kind = tgt.kind.name
    if rpc:
        return RPCDevice(DeviceRef("rpc", kind, dict(rpc)))
    if kind == "cuda":
        return LocalCUDA(DeviceRef("cuda", kind))
    if kind == "llvm":
        available = len(os.sched_getaffinity(0))
        cores = int(tgt.export().get("num-cores", available))
        if not 1 <= cores <= available:
            raise TargetError(f"Expected num-cores between 1 and {available} (the cores this "
                              f"process may use) but got num-cores={cores}")
        return LocalCPU(DeviceRef("cpu", kind), cores)
    raise TargetError(f"Expected an llvm or cuda target (or rpc=) but got target kind {kind!r}")


_BY_REF: dict[str, Device] = {}


def from_ref(ref: DeviceRef) -> Device:
    """The Device a ref names, kept per process (inside the measuring worker)."""
    key = repr(ref)
    if key not in _BY_REF:
        if ref.kind == "rpc":
            _BY_REF[key] = RPCDevice(ref)
        elif ref.kind == "cuda":
            _BY_REF[key] = LocalCUDA(ref)
        else:
            _BY_REF[key] = LocalCPU(ref, int(os.environ.get("TVM_NUM_THREADS", "0") or 0)
                                     or os.cpu_count() or 1)
    return _BY_REF[key]
