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
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dragon_dsl import format as canonical
from dragon_dsl.errors import DragonError

from ..targets import as_module, as_target, target_dict
from .build import Artifact
from .cache import Cache, cache_key
from .config import MeasureConfig
from .devices import Device, create
from .limits import AdaptiveLimits, configured
from .outcomes import Outcome, Status
from .protocol import BuildJob, Built, DescribeJob, ReferenceJob, RunJob, WorkloadData
from .worker import JobCrashed, JobTimeout, Worker, WorkerError

if TYPE_CHECKING:
    from ..targets import TargetLike
    from ..workloads.workload import WorkloadLike

__all__ = ["MEASURE_VERSION", "Evaluator", "workload_identity", "workload_text_hash"]

_STAGE_STATUS = {"parse": Status.PARSE_ERROR, "apply": Status.APPLY_ERROR,
                 "build": Status.BUILD_ERROR}


# Part of every cache key: raise it when verification or timing changes what an outcome means
# (2: guard regions around every argument, so out-of-bounds kernels are incorrect; 3: guards
# filled twice, poison then random bytes, and index inputs within their axis; 4: the repeats
# timed in one call of TVM's time evaluator, back to back, where each was a call of its own
# preceded by an untimed run).
MEASURE_VERSION = 4


def workload_text_hash(wl: WorkloadLike) -> str:
    """16 hex digits of the workload's printed TVMScript.  The identity (a structural hash)
    ignores block, buffer and loop names, which a script observes (``block "C"``), so the cache
    key needs both.  ``Workload.text_hash`` when present (printed once per workload)."""
    cached = getattr(wl, "text_hash", None)
    if cached:
        return str(cached)
    return hashlib.sha256(as_module(wl).script().encode()).hexdigest()[:16]


def workload_identity(wl: WorkloadLike) -> str:
    """The workload's structural hash as 16 hex digits (``Workload.identity`` when present)."""
    identity = getattr(wl, "identity", None)
    if identity:
        return str(identity)
    import tvm_ffi

    return format(tvm_ffi.structural_hash(as_module(wl)) & (2**64 - 1), "016x")


@dataclass
class _Item:
    """One candidate on its way through the pipeline."""

    key_text: str | None                 # what the cache key says about the candidate
    script: str | None = None            # canonical script, or
    module: str | None = None            # a scheduled module (TVM JSON), for baselines
    outcome: Outcome | None = None
    key: str = ""
    artifact: Artifact | None = None
    build_s: float | None = None
    transient: bool = field(default=False)  # not to be cached (not run, or a failed reference)


class Evaluator:
    """Builds, verifies and times candidates for one target and device.

    ``builders`` worker processes build in parallel; one measuring process then verifies and
    times each built candidate alone, so measurements never contend with builds.  Where the
    kernels run is a ``codegen.measure.devices.Device``, chosen once from the target and
    ``rpc`` (see ``codegen.measure.remote``), or given as ``device``.  ``cache`` is a
    ``Cache``, a path, None (the default cache file) or False (no cache).

    With ``config.limit_factor`` above 0, a script's build and run are stopped at that many
    times the slowest one of the same workload this evaluator has seen finish
    (``codegen.measure.limits``); baselines (``evaluate_modules``) always get the configured
    limits, and what they take counts.  With ``config.cutoff_factor`` above 0, a script's
    kernel whose first timed repeat is that many times the fastest verified kernel of the
    workload so far (baselines included) is timed once, not ``config.repeat`` times; such an
    outcome is not cached, for it depends on what was timed before it.
    """

    def __init__(self, target: TargetLike = "llvm", *, builders: int | None = None,
                 config: MeasureConfig | None = None, cache: Cache | str | bool | None = None,
                 rpc: dict[str, Any] | None = None, run: bool = True,
                 device: Device | None = None) -> None:
        self.target = as_target(target)
        self.target_dict = target_dict(self.target)
        self.target_json = json.dumps(self.target_dict, sort_keys=True)
        self.config = config or MeasureConfig()
        self.runtime = device or create(self.target, rpc=rpc)
        self.run = run
        self._owns_cache = not isinstance(cache, Cache)  # a Cache passed in stays open
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
        self.runner = self.runtime.worker(self.config.memory_limit_mb)
        self._all.append(self.runner)
        self._info = self.runtime.known_info()
        self.limits = AdaptiveLimits()

    @property
    def device(self) -> str:
        """The name of the device outcomes are measured on (part of the cache key)."""
        return self._device_info().name

    def _device_info(self):
        if self._info is None:
            self._info = self.runner.call(DescribeJob(self.runtime.ref), timeout=120)
        return self._info

    # -- the pipeline ------------------------------------------------------------------------

    def evaluate(self, workload: WorkloadLike, scripts: list[str]) -> list[Outcome]:
        """One outcome per script, in order."""
        items: list[_Item] = []
        for script in scripts:
            try:
                text = canonical(script)
                items.append(_Item(key_text=text, script=text))
            except DragonError as exc:
                items.append(_Item(None, outcome=Outcome(
                    Status.PARSE_ERROR, "parse", getattr(exc, "reason", str(exc)),
                    getattr(exc, "line", None), getattr(exc, "column", None))))
        return self._run(workload, items, adaptive=True)

    def evaluate_modules(self, workload: WorkloadLike,
                         modules: dict[str, Any]) -> dict[str, Outcome]:
        """Outcomes of already scheduled modules (baselines), by name."""
        import tvm

        items = []
        for mod in modules.values():
            text = tvm.ir.save_json(as_module(mod))
            items.append(_Item("module:" + hashlib.sha256(text.encode()).hexdigest(),
                               module=text))
        return dict(zip(modules, self._run(workload, items, adaptive=False), strict=True))

    def _run(self, workload: WorkloadLike, items: list[_Item], *,
             adaptive: bool) -> list[Outcome]:
        wl = WorkloadData.of(workload)
        identity = workload_identity(workload)
        observed = f"{identity}:{workload_text_hash(workload)}"
        settings = f"v{MEASURE_VERSION}:{self.config.fingerprint()}"
        pending = [i for i in items if i.outcome is None]
        if self.cache is not None and pending:
            for item in pending:
                assert item.key_text is not None
                item.key = cache_key(observed, item.key_text, self.target_json, self.device,
                                     settings)
                item.outcome = self.cache.get(item.key)
                if item.outcome is not None and item.outcome.ok and item.outcome.latency_s:
                    self.limits.observe_latency(identity, item.outcome.latency_s)
        todo = [i for i in items if i.outcome is None]
        if todo:
            work_dir = tempfile.mkdtemp(prefix="dragon-build-")
            try:
                with ThreadPoolExecutor(len(self._all) - 1) as pool:
                    list(pool.map(lambda pair: self._build(wl, pair[1], work_dir, pair[0],
                                                           identity, adaptive),
                                  enumerate(todo)))
                self._measure_all(wl, [i for i in todo if i.artifact is not None], identity,
                                  adaptive)
            finally:
                shutil.rmtree(work_dir, ignore_errors=True)
            if self.cache is not None:
                # A timeout says as much about the machine's load as about the kernel: it is
                # measured again next time rather than remembered.
                for item in todo:
                    assert item.outcome is not None
                    if not item.transient and item.outcome.status is not Status.TIMEOUT:
                        self.cache.put(item.key, item.outcome, workload=identity,
                                       script=item.key_text or "", target=self.target_json,
                                       device=self.device, settings=settings)
        return [i.outcome for i in items if i.outcome is not None]

    def _limit(self, identity: str, stage: str, adaptive: bool) -> tuple[float, str]:
        """The time limit for a ``stage`` of ``identity``, and why it is what it is."""
        if not adaptive:
            return configured(stage, self.config), ""
        return (self.limits.limit(identity, stage, self.config),
                self.limits.why(identity, stage, self.config))

    def _build(self, wl: WorkloadData, item: _Item, work_dir: str, index: int,
               identity: str = "", adaptive: bool = False) -> None:
        job = BuildJob(wl, self.target_dict, os.path.join(work_dir, str(index)),
                       script=item.script, module=item.module)
        limit, why = self._limit(identity, "build", adaptive)
        worker = self._builders.get()
        try:
            with self.runtime.building():
                began = time.monotonic()
                reply = worker.call(job, timeout=limit)
                self.limits.observe(identity, "build", time.monotonic() - began)
        except WorkerError as exc:
            item.outcome = _from_exception(exc, why)
            return
        finally:
            self._builders.put(worker)
        if isinstance(reply, Built):
            item.artifact, item.build_s = reply.artifact, reply.build_s
        else:
            item.outcome = Outcome(reply.status, reply.stage, reply.message, reply.line,
                                   reply.column)

    def _measure_all(self, wl: WorkloadData, ready: list[_Item], identity: str,
                     adaptive: bool) -> None:
        if not ready:
            return
        info = self._device_info()
        if not (self.run and info.present):
            for item in ready:
                item.outcome = Outcome(Status.BUILT, "build", f"built; not run ({info.name})",
                                       build_s=item.build_s)
                item.transient = True
            return
        with self.runtime.measuring():
            failed = self._prepare(wl)
            for item in ready:
                assert item.artifact is not None
                item.outcome = failed or self._measure(wl, item.artifact, item.build_s,
                                                       identity, adaptive)
                item.transient = failed is not None or (
                    item.outcome.ok and len(item.outcome.repeats) < self.config.repeat)

    def _prepare(self, wl: WorkloadData) -> Outcome | None:
        """Compute the reference outputs once, under their own (generous) time limit; an
        outcome for every candidate when the reference itself cannot be computed."""
        try:
            self.runner.call(ReferenceJob(wl, self.config),
                             timeout=self.config.reference_timeout_s)
        except WorkerError as exc:
            failed = _from_exception(exc)
            return Outcome(failed.status, "reference",
                           f"the unscheduled reference kernel failed: {exc}", signal=failed.signal)
        return None

    def _measure(self, wl: WorkloadData, artifact: Artifact, build_s: float | None,
                 identity: str = "", adaptive: bool = False) -> Outcome:
        cutoff = self.limits.cutoff(identity, self.config) if adaptive else 0.0
        job = RunJob(wl, artifact, self.config, self.runtime.ref, cutoff)
        limit, why = self._limit(identity, "run", adaptive)
        try:
            began = time.monotonic()
            reply = self.runner.call(job, timeout=limit)
            self.limits.observe(identity, "run", time.monotonic() - began)
        except WorkerError as exc:
            return replace(_from_exception(exc, why), build_s=build_s)
        assert isinstance(reply, Outcome)
        if reply.ok and reply.latency_s is not None:
            self.limits.observe_latency(identity, reply.latency_s)
        return replace(reply, build_s=build_s)

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        for worker in self._all:
            worker.kill()
        if self.cache is not None and self._owns_cache:
            self.cache.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _from_exception(exc: WorkerError, why: str = "") -> Outcome:
    stage = exc.stage
    if isinstance(exc, JobTimeout):
        return Outcome(Status.TIMEOUT, stage, str(exc) + why)
    status = _STAGE_STATUS.get(stage, Status.RUNTIME_ERROR)
    return Outcome(status, stage, str(exc),
                   signal=exc.signal if isinstance(exc, JobCrashed) else None)
