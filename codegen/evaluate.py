"""Evaluating candidate scripts on a workload: parse, apply and build in parallel worker
processes, then verify and time one candidate at a time on the device, with every outcome cached.

>>> from codegen.workloads import workload
>>> with Evaluator("llvm", cache=False) as ev:                      # doctest: +SKIP
...     [o.status.value for o in ev.evaluate(workload("matmul(m=64,n=64,k=64)"),
...                                          ['block "C" -> b0', "not a script"])]
['correct', 'parse_error']
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dragon_dsl.replay import as_module, as_target

from .cache import Cache, cache_key
from .jobs import encode_workload
from .measure import MeasureConfig
from .outcomes import Outcome, Status
from .targets import target_spec
from .workers import JobCrashed, JobFailed, JobTimeout, Worker

__all__ = ["Evaluator", "workload_identity"]

_STAGE_STATUS = {"parse": Status.PARSE_ERROR, "apply": Status.APPLY_ERROR,
                 "build": Status.BUILD_ERROR}


def workload_identity(wl) -> str:
    """The workload's structural hash as 16 hex digits (``Workload.identity`` when present)."""
    identity = getattr(wl, "identity", None)
    if identity:
        return str(identity)
    import tvm_ffi

    return format(tvm_ffi.structural_hash(as_module(wl)) & (2**64 - 1), "016x")


class Evaluator:
    """Builds, verifies and times candidates for one target and device.

    ``builders`` worker processes build in parallel; one measuring process, pinned to the
    cores the target declares (llvm) or owning the GPU (cuda), then verifies and times each
    built candidate alone, so measurements never contend with builds.  ``rpc`` (see
    ``codegen.remote``) sends the artifacts to a device behind a TVM RPC tracker instead.
    ``cache`` is a ``Cache``, a path, None (the default cache file) or False (no cache).
    """

    def __init__(self, target: Any = "llvm", *, builders: int | None = None,
                 config: MeasureConfig | None = None, cache: Cache | str | bool | None = None,
                 rpc: dict[str, Any] | None = None, run: bool = True) -> None:
        self.target = as_target(target)
        self.target_spec = target_spec(self.target)
        self.target_json = json.dumps(self.target_spec, sort_keys=True)
        self.kind = self.target.kind.name
        self.config = config or MeasureConfig()
        self.rpc = rpc
        self.run = run
        if cache is False:
            self.cache = None
        else:
            self.cache = cache if isinstance(cache, Cache) else Cache(
                cache if isinstance(cache, str) else None)
        n = builders or max(1, os.cpu_count() or 1)
        self._builders: queue.Queue[Worker] = queue.Queue()
        self._all = [Worker(memory_limit_mb=self.config.memory_limit_mb) for _ in range(n)]
        for w in self._all:
            self._builders.put(w)
        env, cpus = {}, None
        if self.kind == "llvm":
            cores = int(self.target.export().get("num-cores", 0) or os.cpu_count() or 1)
            env["TVM_NUM_THREADS"] = str(cores)
            available = sorted(os.sched_getaffinity(0))
            cpus = available[:cores]
        self.runner = Worker(env=env, cpus=cpus, memory_limit_mb=self.config.memory_limit_mb)
        self._all.append(self.runner)
        self._device: str | None = None
        self._present = True

    # -- device ------------------------------------------------------------------------------

    @property
    def device(self) -> str:
        """The device outcomes are measured on (part of the cache key)."""
        if self._device is None:
            if self.rpc:
                self._device = f"rpc:{self.rpc.get('key', '')}"
            else:
                reply = self.runner.call({"job": "device", "kind": self.kind}, timeout=120)
                self._device = reply["device"]
                self._present = reply["status"] == "present"
        return self._device

    # -- the pipeline ------------------------------------------------------------------------

    def evaluate(self, workload, scripts: list[str]) -> list[Outcome]:
        """One outcome per script, in order."""
        from dragon_dsl.api import format as canonical
        from dragon_dsl.errors import DragonError

        items: list[dict[str, Any]] = []
        for script in scripts:
            try:
                items.append({"script": canonical(script)})
            except DragonError as exc:
                items.append({"outcome": Outcome(
                    Status.PARSE_ERROR, "parse", getattr(exc, "reason", str(exc)),
                    getattr(exc, "line", None), getattr(exc, "column", None))})
        for item in items:
            item.setdefault("key_text", item.get("script"))
        return self._run(workload, items)

    def evaluate_modules(self, workload, modules: dict[str, Any]) -> dict[str, Outcome]:
        """Outcomes of already scheduled modules (baselines), by name."""
        import tvm

        items = []
        for mod in modules.values():
            text = tvm.ir.save_json(as_module(mod))
            items.append({"module": text,
                          "key_text": "module:" + hashlib.sha256(text.encode()).hexdigest()})
        return dict(zip(modules, self._run(workload, items), strict=True))

    def _run(self, workload, items: list[dict[str, Any]]) -> list[Outcome]:
        wl = encode_workload(workload)
        identity = workload_identity(workload)
        settings = self.config.fingerprint()
        pending = [i for i in items if "outcome" not in i]
        if self.cache is not None and pending:
            for item in pending:
                item["key"] = cache_key(identity, item["key_text"], self.target_json,
                                        self.device, settings)
                hit = self.cache.get(item["key"])
                if hit is not None:
                    item["outcome"] = hit
        todo = [i for i in items if "outcome" not in i]
        if todo:
            work_dir = tempfile.mkdtemp(prefix="dragon-build-")
            try:
                with ThreadPoolExecutor(len(self._all) - 1) as pool:
                    built = list(pool.map(lambda pair: self._build(wl, pair[1], work_dir,
                                                                   pair[0]), enumerate(todo)))
                ready = [(item, art) for item, art in zip(todo, built, strict=True) if art]
                if not (self.run and self.device and self._present):
                    for item, _ in ready:
                        item["outcome"] = Outcome(
                            Status.BUILT, "build", f"built; not run ({self.device})",
                            build_s=item.get("build_s"))
                        item["transient"] = True
                    ready = []
                failed = self._prepare(wl) if ready else None
                for item, artifact in ready:
                    item["outcome"] = failed or self._measure(wl, artifact, item.get("build_s"))
                    item["transient"] = failed is not None
            finally:
                shutil.rmtree(work_dir, ignore_errors=True)
            if self.cache is not None:
                # A timeout says as much about the machine's load as about the kernel: it is
                # measured again next time rather than remembered.
                for item in (i for i in todo if not i.get("transient")
                             and i["outcome"].status is not Status.TIMEOUT):
                    self.cache.put(item["key"], item["outcome"], workload=identity,
                                   script=item["key_text"], target=self.target_json,
                                   device=self.device, settings=settings)
        return [i["outcome"] for i in items]

    def _build(self, wl, item: dict[str, Any], work_dir: str, index: int) -> dict | None:
        job = {"job": "build", "workload": wl, "target": self.target_spec,
               "out_dir": os.path.join(work_dir, str(index)),
               "script": item.get("script"), "module": item.get("module")}
        worker = self._builders.get()
        try:
            reply = worker.call(job, timeout=self.config.build_timeout_s)
        except (JobTimeout, JobCrashed, JobFailed) as exc:
            item["outcome"] = _from_exception(exc)
            return None
        finally:
            self._builders.put(worker)
        if reply["status"] != "built":
            item["outcome"] = Outcome(Status(reply["status"]), reply["stage"], reply["message"],
                                      reply.get("line"), reply.get("column"))
            return None
        item["build_s"] = reply["build_s"]
        return reply["artifact"]

    def _prepare(self, wl) -> Outcome | None:
        """Compute the reference outputs once, under their own (generous) time limit; an
        outcome for every candidate when the reference itself cannot be computed."""
        try:
            self.runner.call({"job": "reference", "workload": wl, "config": self._config_dict()},
                             timeout=self.config.reference_timeout_s)
        except (JobTimeout, JobCrashed, JobFailed) as exc:
            failed = _from_exception(exc)
            return Outcome(failed.status, "reference",
                           f"the unscheduled reference kernel failed: {exc}", signal=failed.signal)
        return None

    def _measure(self, wl, artifact: dict, build_s: float | None) -> Outcome:
        job = {"job": "run", "workload": wl, "artifact": artifact, "config": self._config_dict(),
               "rpc": self.rpc}
        try:
            reply = self.runner.call(job, timeout=self.config.run_timeout_s)
        except (JobTimeout, JobCrashed, JobFailed) as exc:
            outcome = _from_exception(exc)
            return Outcome(**{**outcome.__dict__, "build_s": build_s})
        status = Status(reply.pop("status"))
        return Outcome(status, **reply, build_s=build_s)

    def _config_dict(self) -> dict[str, Any]:
        return dict(self.config.__dict__)

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        for worker in self._all:
            worker.kill()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _from_exception(exc: Exception) -> Outcome:
    stage = getattr(exc, "stage", "")
    if isinstance(exc, JobTimeout):
        return Outcome(Status.TIMEOUT, stage, str(exc))
    status = _STAGE_STATUS.get(stage, Status.RUNTIME_ERROR)
    return Outcome(status, stage, str(exc), signal=getattr(exc, "signal", None))
