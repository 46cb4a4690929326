"""What runs inside a worker process (``python -m codegen.jobs READ_FD WRITE_FD``).

Jobs arrive as JSON and answer as JSON:
- ``apply``: apply a script and answer with the scheduled TVMScript;
- ``build``: apply a script (or take a scheduled module) and build it into an artifact;
- ``reference``: compute and keep the unscheduled kernel's outputs on the seeded inputs;
- ``run``: load an artifact, verify it against the reference, and time it;
- ``device``: describe the device; ``ping``; ``exit``.
Before each stage the worker says which stage it enters, so the parent can attribute a crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["decode_workload", "encode_workload", "serve"]

_send = None  # set by serve(): reports progress to the parent


def _stage(name: str) -> None:
    if _send is not None:
        _send({"stage": name})


def encode_workload(wl) -> dict[str, str]:
    """A workload as JSON-safe data for crossing into a worker."""
    import tvm

    from dragon_dsl.replay import as_module

    return {"spec": str(getattr(wl, "spec", "")), "ir": tvm.ir.save_json(as_module(wl))}


_WORKLOADS: dict[str, Any] = {}


def decode_workload(data: dict[str, str]):
    import tvm

    key = data["ir"]
    if key not in _WORKLOADS:
        _WORKLOADS.clear()  # one workload at a time is the common case; keep memory flat
        _WORKLOADS[key] = tvm.ir.load_json(data["ir"])
    return _WORKLOADS[key]


def _failure(status: str, stage: str, exc: BaseException) -> dict[str, Any]:
    return {"status": status, "stage": stage, "message": getattr(exc, "reason", str(exc)),
            "line": getattr(exc, "line", None), "column": getattr(exc, "column", None)}


def build_job(job: dict[str, Any]) -> dict[str, Any]:
    import tvm

    from dragon_dsl.errors import DragonError, DslSyntaxError

    from .apply import apply
    from .build import BuildError, build

    start = time.perf_counter()
    mod = decode_workload(job["workload"])
    _stage("apply")
    if job.get("script") is not None:
        try:
            scheduled = apply(job["script"], mod, job["target"])
        except DslSyntaxError as exc:
            return _failure("parse_error", "parse", exc)
        except DragonError as exc:
            return _failure("apply_error", "apply", exc)
    else:
        scheduled = tvm.ir.load_json(job["module"])
    _stage("build")
    try:
        artifact = build(scheduled, job["target"], job["out_dir"])
    except BuildError as exc:
        return _failure("build_error", "build", exc)
    return {"status": "built", "artifact": artifact.__dict__,
            "build_s": time.perf_counter() - start}


def apply_job(job: dict[str, Any]) -> dict[str, Any]:
    from dragon_dsl.errors import DragonError, DslSyntaxError

    from .apply import apply

    _stage("apply")
    try:
        scheduled = apply(job["script"], decode_workload(job["workload"]), job["target"])
    except DslSyntaxError as exc:
        return _failure("parse_error", "parse", exc)
    except DragonError as exc:
        return _failure("apply_error", "apply", exc)
    return {"status": "applied", "tvmscript": scheduled.script()}


_REFERENCES: dict[tuple[str, int], Any] = {}


def _reference(workload: dict[str, str], seed: int):
    """Inputs and the unscheduled kernel's outputs, built for the CPU and kept per workload."""
    import numpy as np
    import tvm

    from .verify import make_inputs, params_of

    key = (workload["ir"], seed)
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


def reference_job(job: dict[str, Any]) -> dict[str, Any]:
    _stage("reference")
    params, _, outputs = _reference(job["workload"], job["config"]["seed"])
    return {"status": "ready", "outputs": len(outputs), "params": len(params)}


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    import tvm

    from .build import Artifact, register_cubin
    from .measure import MeasureConfig, median_and_spread, time_kernel
    from .verify import compare

    config = MeasureConfig(**job["config"])
    _stage("reference")
    params, inputs, references = _reference(job["workload"], config.seed)
    artifact = Artifact(**job["artifact"])
    _stage("load")
    session = None
    try:
        if job.get("rpc"):
            from .remote import connect

            session = connect(job["rpc"])
            session.upload(artifact.library)
            rt_mod = session.load_module(os.path.basename(artifact.library))
            dev = session.device("cpu" if artifact.target_kind == "llvm" else
                                 artifact.target_kind)
        else:
            if artifact.target_kind == "cuda":
                register_cubin(artifact)
            rt_mod = tvm.runtime.load_module(artifact.library)
            dev = tvm.device("cpu" if artifact.target_kind == "llvm" else artifact.target_kind)
        tensors = [tvm.runtime.tensor(a, dev) for a in inputs]
    except Exception as exc:  # noqa: BLE001  a corrupt or unloadable library
        from dragon_dsl.replay import tvm_message

        return {"status": "runtime_error", "stage": "load",
                "message": f"cannot load the built kernel: {tvm_message(exc)}"}
    _stage("verify")
    try:
        entry = rt_mod.entry_name if getattr(rt_mod, "entry_name", "") else "main"
        rt_mod[entry](*tensors)
        dev.sync()
    except Exception as exc:  # noqa: BLE001  a kernel that faults reports through TVM
        from dragon_dsl.replay import tvm_message

        return {"status": "runtime_error", "stage": "verify", "message": tvm_message(exc)}
    outputs = [t.numpy() for t, p in zip(tensors, params, strict=True) if p.output]
    result = compare(outputs, references)
    fields = {"max_abs_error": result.max_abs_error, "max_rel_error": result.max_rel_error,
              "unwritten": result.unwritten}
    if not result.ok:
        return {"status": "incorrect", "stage": "verify", "message": result.message, **fields}
    _stage("time")
    arg_sets = [tensors]
    if artifact.target_kind == "cuda" and config.flush_l2 and \
            tvm.get_global_func("l2_cache_flush_cuda", allow_missing=True) is None:
        arg_sets = _rotations(inputs, params, dev)
    times = time_kernel(rt_mod, dev, arg_sets, config)
    median, spread = median_and_spread(times)
    return {"status": "correct", "stage": "time", "latency_s": median, "spread_s": spread,
            "repeats": times, **fields}


def _rotations(inputs, params, dev, l2_bytes: int = 50 * 2**20) -> list[list]:
    """Enough copies of the arguments that cycling through them overflows the L2 cache."""
    import tvm

    size = sum(a.nbytes for a in inputs)
    copies = max(1, min(16, -(-2 * l2_bytes // max(size, 1))))
    return [[tvm.runtime.tensor(a, dev) for a in inputs] for _ in range(copies)]


def device_job(job: dict[str, Any]) -> dict[str, Any]:
    import platform

    kind = job["kind"]
    if kind == "cuda":
        import tvm

        dev = tvm.cuda(0)
        if not dev.exist:  # without a driver this is False rather than an error
            return {"status": "absent", "device": "cuda (no GPU)"}
        return {"status": "present",
                "device": f"{dev.device_name} sm_{dev.compute_version.replace('.', '')}"}
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    threads = os.environ.get("TVM_NUM_THREADS", str(os.cpu_count()))
    return {"status": "present", "device": f"{name} x{threads} threads"}


JOBS = {"apply": apply_job, "build": build_job, "reference": reference_job, "run": run_job,
        "device": device_job, "ping": lambda job: {"pid": os.getpid()}}


def serve(reader: Connection, writer: Connection) -> None:
    global _send

    def send(message: dict[str, Any]) -> None:
        writer.send_bytes(json.dumps(message).encode())

    _send = send
    while True:
        try:
            job = json.loads(reader.recv_bytes())
        except EOFError:
            return
        if job.get("job") == "exit":
            return
        try:
            send(JOBS[job["job"]](job))
        except Exception as exc:  # noqa: BLE001  reported to the parent, the worker lives on
            import traceback

            send({"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"})


def _exit_with_parent() -> None:
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    _exit_with_parent()
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]),
                                                                   readable=False))
