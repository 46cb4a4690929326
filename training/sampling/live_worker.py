"""Schedule-aware decoding's live schedules, held in a worker process: a native TVM crash (an
abort, a segfault, "Cannot find type info for type_index") ends that process and one sample,
never the sampler.

``LiveWorker`` keeps each row's live schedule in a ``codegen.measure.worker.Worker`` (the
measuring machinery's worker: typed messages over a private pipe, a time limit per request, an
optional memory limit) and answers with a ``dragon_dsl.live_view.LiveView``, the plain data the
statement grammar reads.  Requests are ``LiveOpen`` (a workload, and the statements to replay),
``LiveStep`` (one statement) and ``LiveClose`` (``codegen.measure.protocol``).  When the worker
dies during a request, that request's row ends with ``HolderCrashed``; the worker is started
again and every other row is re-created there, lazily, by replaying its statements so far
(a statement of another row sent after the one it died on is sent again).  ``submit`` sends a
statement and ``result`` waits for it, so that the sampler works while the worker does;
``LivePool`` spreads the rows over several workers (statements of rows completed at one
decoding step are applied at the same time: ``benchmarks/bench_holders.py``, 32 samples of a
28x28 conv2d in 16.9 s with one worker and 14.5 s with two, on 2 cores).

>>> holder = LiveWorker("llvm")                                                 # doctest: +SKIP
>>> key, view = holder.open(workload("matmul(m=16,n=16,k=16)"))                 # doctest: +SKIP
>>> holder.step(key, 'block "C" -> C').names("block")                          # doctest: +SKIP
['C']
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from codegen.measure.protocol import (
    Failed,
    LiveClose,
    LiveOpen,
    LiveState,
    LiveStep,
    WorkloadData,
)
from codegen.measure.worker import JobFailed, Worker, WorkerError
from codegen.targets import target_dict
from dragon_dsl.errors import DragonError
from dragon_dsl.live_view import LiveView

__all__ = ["HolderCrashed", "LivePool", "LiveWorker", "shared"]


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


class _Lost:
    """A request that was waiting in a worker that died of another row's statement: sent
    again (after the row's replay) when its result is asked for."""

    def __init__(self, key: int, statement: str) -> None:
        self.key, self.statement = key, statement


class LiveWorker:
    """Live schedules for ``target``, held in one worker process.  ``step`` applies a statement
    and waits; ``submit`` sends one and ``result`` waits for it, so that the sampler goes on
    with other rows (and the model) while the worker applies it."""

    def __init__(self, target: Any, *, timeout: float = 300.0,
                 memory_limit_mb: int | None = None) -> None:
        self.target = target_dict(target) if target is not None else None
        self.timeout = timeout
        self.worker = Worker(memory_limit_mb=memory_limit_mb)
        self.rows: dict[int, _Held] = {}
        self.generation = 0   # bumped each time the worker dies
        self.crashes = 0
        self._next_key = 0
        self._next_ticket = 0
        self._workloads: dict[int, tuple[Any, WorkloadData]] = {}
        self._sent: deque[tuple[int, int, str]] = deque()  # (ticket, key, statement), in order
        self._done: dict[int, LiveState | Failed | HolderCrashed | _Lost] = {}

    def open(self, workload: Any) -> tuple[int, LiveView]:
        """A new live schedule of ``workload``: its key and its state."""
        try:
            return self._open(workload)
        except HolderCrashed:  # a worker that dies as a row opens: not the row's fault, again
            return self._open(workload)

    def step(self, key: int, statement: str) -> LiveView | Failed:
        """Apply one statement: the state after it, or ``Failed`` (the language or TVM refuses
        it; the schedule is as it was).  Raises ``HolderCrashed`` when the worker died."""
        return self.result(self.submit(key, statement))

    def submit(self, key: int, statement: str) -> int:
        """Send one statement for row ``key`` to apply (one at a time per row) without waiting:
        a ticket for ``result``.  Raises ``HolderCrashed`` when replaying the row (its worker
        died since its last statement) fails."""
        if not self._sent and not self.worker.alive():
            self.generation += 1  # gone between requests (a memory limit, a person)
        if self.rows[key].generation != self.generation:
            self._ensure(key, statement)
        ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
        self.worker.send(LiveStep(key, statement))
        self._sent.append((ticket, key, statement))
        return ticket

    def result(self, ticket: int) -> LiveView | Failed:
        """The state after the statement ``ticket`` stands for, or ``Failed``; raises
        ``HolderCrashed`` when the worker died (or failed) applying it."""
        while ticket not in self._done:
            self._receive()
        outcome = self._done.pop(ticket)
        if isinstance(outcome, _Lost):
            return self.result(self.submit(outcome.key, outcome.statement))
        if isinstance(outcome, HolderCrashed):
            raise outcome
        if isinstance(outcome, Failed):
            return outcome
        return LiveView.from_data(outcome.view)

    def close(self, keys: list[int]) -> None:
        """Let go of rows (finished samples)."""
        self._drain()
        held = [k for k in keys if self.rows.pop(k, None) is not None]
        if held and self.worker.alive():
            try:
                self.worker.call(LiveClose(held), timeout=self.timeout)
            except WorkerError:
                self.generation += 1

    def kill(self) -> None:
        self.worker.kill()
        self.generation += 1
        for ticket, key, statement in self._sent:
            self._done[ticket] = _Lost(key, statement)
        self._sent.clear()

    # ---- internals ------------------------------------------------------------------------

    def _receive(self) -> None:
        """The oldest reply: kept for its ticket.  A worker that died takes every request
        sent after the one it died on with it; those are sent again when asked for."""
        ticket, key, statement = self._sent.popleft()
        try:
            reply = self.worker.receive(self.timeout)
        except WorkerError as exc:
            self.rows.pop(key, None)
            self.crashes += 1
            self._done[ticket] = HolderCrashed(statement, exc)
            if not isinstance(exc, JobFailed):  # the worker is gone: so is every row in it
                self.generation += 1
                for t, k, s in self._sent:
                    self._done[t] = _Lost(k, s)
                self._sent.clear()
            return
        assert isinstance(reply, LiveState | Failed), reply
        if isinstance(reply, LiveState):
            self.rows[key].statements.append(statement)
        self._done[ticket] = reply

    def _drain(self) -> None:
        while self._sent:
            self._receive()

    def _open(self, workload: Any) -> tuple[int, LiveView]:
        key, self._next_key = self._next_key, self._next_key + 1
        self.rows[key] = _Held(self._data(workload))
        view = self._ensure(key, "(opening the kernel)")
        return key, view

    def _data(self, workload: Any) -> WorkloadData:
        known = self._workloads.get(id(workload))
        if known is None or known[0] is not workload:
            if len(self._workloads) > 64:
                self._workloads.clear()
            known = self._workloads[id(workload)] = (workload, WorkloadData.of(workload))
        return known[1]

    def _ensure(self, key: int, statement: str) -> LiveView:
        """Hold row ``key`` in the current worker, replaying its statements so far (a new row:
        none); its state.  Waits for every request sent before."""
        self._drain()
        if not self.worker.alive():
            self.generation += 1
        held = self.rows[key]
        try:
            reply = self.worker.call(LiveOpen(key, held.workload, self.target,
                                              list(held.statements)), timeout=self.timeout)
        except WorkerError as exc:
            self.rows.pop(key, None)
            if not isinstance(exc, JobFailed):  # the worker is gone: so is every row in it
                self.generation += 1
            self.crashes += 1
            raise HolderCrashed(statement, exc) from None
        assert isinstance(reply, LiveState | Failed), reply
        if isinstance(reply, Failed):  # it applied before: TVM is not deterministic here
            self.rows.pop(key, None)
            raise HolderCrashed(statement, JobFailed("apply", f"replaying the script so far "
                                                              f"failed: {reply.message}"))
        held.generation = self.generation
        return LiveView.from_data(reply.view)


class LivePool:
    """Live schedules for ``target`` spread over ``workers`` ``LiveWorker``s, each row held by
    one of them: statements of different rows submitted together are applied at the same time
    (one process each, the machine's cores permitting)."""

    def __init__(self, target: Any, *, workers: int = 1, timeout: float = 300.0,
                 memory_limit_mb: int | None = None) -> None:
        if workers < 1:
            raise ValueError(f"Expected workers >= 1 but got {workers}")
        self.holders = [LiveWorker(target, timeout=timeout, memory_limit_mb=memory_limit_mb)
                        for _ in range(workers)]
        self._where: dict[int, tuple[LiveWorker, int]] = {}
        self._next_key = 0

    @property
    def crashes(self) -> int:
        return sum(h.crashes for h in self.holders)

    def open(self, workload: Any) -> tuple[int, LiveView]:
        """A new live schedule of ``workload``, held by the worker holding fewest rows."""
        holder = min(self.holders, key=lambda h: len(h.rows))
        inner, view = holder.open(workload)
        key, self._next_key = self._next_key, self._next_key + 1
        self._where[key] = (holder, inner)
        return key, view

    def submit(self, key: int, statement: str) -> tuple[LiveWorker, int]:
        holder, inner = self._where[key]
        return holder, holder.submit(inner, statement)

    def result(self, ticket: tuple[LiveWorker, int]) -> LiveView | Failed:
        holder, inner = ticket
        return holder.result(inner)

    def step(self, key: int, statement: str) -> LiveView | Failed:
        return self.result(self.submit(key, statement))

    def close(self, keys: list[int]) -> None:
        by_holder: dict[int, list[int]] = {}
        for key in keys:
            if key in self._where:
                holder, inner = self._where.pop(key)
                by_holder.setdefault(id(holder), []).append(inner)
        for holder in self.holders:
            if id(holder) in by_holder:
                holder.close(by_holder[id(holder)])

    def kill(self) -> None:
        for holder in self.holders:
            holder.kill()


_SHARED: dict[tuple, LivePool] = {}


def shared(target: Any, *, timeout: float = 300.0, memory_limit_mb: int | None = None,
           workers: int = 1) -> LivePool:
    """One ``LivePool`` per target, limits and size for the whole process (a worker's start
    costs about a second; an RL run samples many batches)."""
    import json

    key = (json.dumps(target_dict(target), sort_keys=True), timeout, memory_limit_mb, workers)
    if key not in _SHARED:
        _SHARED[key] = LivePool(target, workers=workers, timeout=timeout,
                                memory_limit_mb=memory_limit_mb)
    return _SHARED[key]
