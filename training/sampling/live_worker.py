"""Schedule-aware decoding's live schedules, held in a worker process: a native TVM crash (an
abort, a segfault, "Cannot find type info for type_index") ends that process and one sample,
never the sampler.

``LiveWorker`` keeps each row's live schedule in a ``codegen.measure.worker.Worker`` (the
measuring machinery's worker: typed messages over a private pipe, a time limit per request, an
optional memory limit) and answers with a ``dragon_dsl.live_view.LiveView``, the plain data the
statement grammar reads.  Requests are ``LiveOpen`` (a workload, and the statements to replay),
``LiveStep`` (one statement) and ``LiveClose`` (``codegen.measure.protocol``).  When the worker
dies during a request, that request's row ends with ``HolderCrashed``; the worker is started
again and every other row is re-created there, lazily, by replaying its statements so far.

>>> holder = LiveWorker("llvm")                                                 # doctest: +SKIP
>>> key, view = holder.open(workload("matmul(m=16,n=16,k=16)"))                 # doctest: +SKIP
>>> holder.step(key, 'block "C" -> C').names("block")                          # doctest: +SKIP
['C']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codegen.measure.protocol import (
    Failed,
    LiveClose,
    LiveOpen,
    LiveState,
    LiveStep,
    Message,
    WorkloadData,
)
from codegen.measure.worker import JobFailed, Worker, WorkerError
from codegen.targets import target_dict
from dragon_dsl.errors import DragonError
from dragon_dsl.live_view import LiveView

__all__ = ["HolderCrashed", "LiveWorker", "shared"]


class HolderCrashed(DragonError):
    """The process holding a row's live schedule died (or failed) applying ``statement``: the
    row's schedule is gone and the sample ends there."""

    def __init__(self, statement: str, cause: WorkerError) -> None:
        super().__init__(f"the schedule holder crashed applying `{statement}`: {cause}")
        self.statement, self.cause = statement, cause


@dataclass
class _Held:
    workload: WorkloadData
    statements: list[str] = field(default_factory=list)  # applied so far, to replay
    generation: int = -1                                 # the worker start that holds it


class LiveWorker:
    """Live schedules for ``target``, held in one worker process."""

    def __init__(self, target: Any, *, timeout: float = 300.0,
                 memory_limit_mb: int | None = None) -> None:
        self.target = target_dict(target) if target is not None else None
        self.timeout = timeout
        self.worker = Worker(memory_limit_mb=memory_limit_mb)
        self.rows: dict[int, _Held] = {}
        self.generation = 0   # bumped each time the worker dies
        self.crashes = 0
        self._next_key = 0
        self._workloads: dict[int, tuple[Any, WorkloadData]] = {}

    def open(self, workload: Any) -> tuple[int, LiveView]:
        """A new live schedule of ``workload``: its key and its state."""
        try:
            return self._open(workload)
        except HolderCrashed:  # a worker that dies as a row opens: not the row's fault, again
            return self._open(workload)

    def step(self, key: int, statement: str) -> LiveView | Failed:
        """Apply one statement: the state after it, or ``Failed`` (the language or TVM refuses
        it; the schedule is as it was).  Raises ``HolderCrashed`` when the worker died."""
        self._ensure(key, statement)
        reply = self._call(key, statement, LiveStep(key, statement))
        if isinstance(reply, Failed):
            return reply
        self.rows[key].statements.append(statement)
        return LiveView.from_data(reply.view)

    def close(self, keys: list[int]) -> None:
        """Let go of rows (finished samples)."""
        held = [k for k in keys if self.rows.pop(k, None) is not None]
        if held and self.worker.alive():
            try:
                self.worker.call(LiveClose(held), timeout=self.timeout)
            except WorkerError:
                self.generation += 1

    def kill(self) -> None:
        self.worker.kill()
        self.generation += 1

    # ---- internals ------------------------------------------------------------------------

    def _open(self, workload: Any) -> tuple[int, LiveView]:
        key, self._next_key = self._next_key, self._next_key + 1
        self.rows[key] = _Held(self._data(workload))
        view = self._ensure(key, "(opening the kernel)")
        assert view is not None  # a new row is never held yet
        return key, view

    def _data(self, workload: Any) -> WorkloadData:
        known = self._workloads.get(id(workload))
        if known is None or known[0] is not workload:
            if len(self._workloads) > 64:
                self._workloads.clear()
            known = self._workloads[id(workload)] = (workload, WorkloadData.of(workload))
        return known[1]

    def _ensure(self, key: int, statement: str) -> LiveView | None:
        """Hold row ``key`` in the current worker, replaying its statements if it was held by
        one that died; its state, or None when it was already held."""
        held = self.rows[key]
        if held.generation == self.generation and self.worker.alive():
            return None
        if not self.worker.alive():
            self.generation += 1
        reply = self._call(key, statement, LiveOpen(key, held.workload, self.target,
                                                    list(held.statements)))
        if isinstance(reply, Failed):  # it applied before: TVM is not deterministic here
            raise HolderCrashed(statement, JobFailed("apply", f"replaying the script so far "
                                                              f"failed: {reply.message}"))
        held.generation = self.generation
        return LiveView.from_data(reply.view)

    def _call(self, key: int, statement: str, job: Message) -> LiveState | Failed:
        try:
            reply = self.worker.call(job, timeout=self.timeout)
        except WorkerError as exc:
            self.rows.pop(key, None)
            if not isinstance(exc, JobFailed):  # the worker is gone: so is every row in it
                self.generation += 1
            self.crashes += 1
            raise HolderCrashed(statement, exc) from None
        assert isinstance(reply, LiveState | Failed), reply
        return reply


_SHARED: dict[tuple, LiveWorker] = {}


def shared(target: Any, *, timeout: float = 300.0,
           memory_limit_mb: int | None = None) -> LiveWorker:
    """One ``LiveWorker`` per target and limits for the whole process (a worker's start costs
    about a second; an RL run samples many batches)."""
    import json

    key = (json.dumps(target_dict(target), sort_keys=True), timeout, memory_limit_mb)
    if key not in _SHARED:
        _SHARED[key] = LiveWorker(target, timeout=timeout, memory_limit_mb=memory_limit_mb)
    return _SHARED[key]
