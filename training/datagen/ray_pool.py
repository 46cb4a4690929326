"""Tasks over a Ray cluster (``dragon datagen --ray-address``): one Ray task per workload.

Each Ray worker keeps a ``TaskRunner`` (its Evaluator and measurement workers) across the tasks
it runs, measuring on its own node's device, or through RPC when the settings name a tracker.
Ray retries a task whose worker died (``max_retries``) or that raised (``retry_exceptions``);
a task still failing, or running past its hard limit (it is cancelled), is recorded as failed.
Results come back to the driver, which alone writes the output directory, so the nodes need no
shared filesystem.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from dragon_dsl.errors import DragonError
from training.datagen.pool import failed_result, hard_limit
from training.datagen.runner import RunnerSettings, TaskResult, TaskRunner
from training.datagen.tasks import Task

__all__ = ["CONNECT_TIMEOUT_S", "RayPool", "RayUnreachable", "check_address"]

# How long a HOST:PORT address may take to accept a connection: Ray's own client retries an
# address nobody answers for ever, and does not hear Ctrl-C while it does.
CONNECT_TIMEOUT_S = 10.0


class RayUnreachable(DragonError, ConnectionError):
    """A Ray address that nobody answers."""


def check_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raises RayUnreachable, within ``timeout_s``, when the HOST:PORT of ``address`` (also
    ``ray://HOST:PORT``) does not accept a TCP connection; "auto" and "local" are Ray's to
    resolve.

    >>> try:
    ...     check_address("127.0.0.1:1", timeout_s=1)
    ... except RayUnreachable as exc:
    ...     print(exc)
    127.0.0.1:1: no Ray cluster answers there (Connection refused)
    """
    import socket

    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayUnreachable(f"{address}: Expected 'auto', 'local' or HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        why = f"no answer within {timeout_s:g} s" if isinstance(exc, TimeoutError) \
            else (exc.strerror or str(exc))
        raise RayUnreachable(f"{address}: no Ray cluster answers there ({why})") from None

_RUNNER: Any = None  # one TaskRunner per Ray worker process


def _run_on_worker(task: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    global _RUNNER

    if _RUNNER is None:
        _RUNNER = TaskRunner(RunnerSettings.from_dict(settings))
    return _RUNNER.run(Task.from_dict(task)).to_dict()


class RayPool:
    """Tasks on the Ray cluster at ``address`` (``"auto"``, ``"host:port"`` or ``"local"`` for
    a cluster started in this process), ``cpus_per_task`` CPUs each."""

    def __init__(self, address: str, settings: RunnerSettings, retries: int = 1,
                 cpus_per_task: float = 1.0) -> None:
        self.address = address
        self.settings = settings.to_dict()
        self.retries = retries
        self.cpus_per_task = cpus_per_task

    def run(self, tasks: Iterable[Task], on_result: Callable[[Task, TaskResult], None]) -> None:
        import ray

        started_here = not ray.is_initialized()
        if started_here:
            check_address(self.address)
            ray.init(address=None if self.address == "local" else self.address,
                     log_to_driver=False, include_dashboard=False)
        try:
            self._run(ray, list(tasks), on_result)
        finally:
            if started_here:
                ray.shutdown()

    def _run(self, ray, tasks: list[Task], on_result) -> None:
        remote = ray.remote(_run_on_worker).options(
            num_cpus=self.cpus_per_task, max_retries=self.retries, retry_exceptions=True)
        capacity = max(1, int(ray.cluster_resources().get("CPU", 1) // self.cpus_per_task))
        pending = list(reversed(tasks))
        running: dict[Any, tuple[Task, float]] = {}
        while pending or running:
            while pending and len(running) < capacity:
                task = pending.pop()
                running[remote.remote(task.to_dict(), self.settings)] = (task, time.monotonic())
            done, _ = ray.wait(list(running), num_returns=1, timeout=5.0)
            for ref in done:
                task, since = running.pop(ref)
                try:
                    result = TaskResult.from_dict(ray.get(ref))
                except Exception as exc:  # noqa: BLE001  Ray gave up after its retries
                    result = failed_result(task, f"{type(exc).__name__}: {exc}",
                                           self.retries + 1, time.monotonic() - since)
                on_result(task, result)
            now = time.monotonic()
            for ref, (task, since) in list(running.items()):
                # Ray's retries restart the clock only as far as we can see: the hard limit
                # covers every attempt of the task.
                if now - since > hard_limit(task) * (self.retries + 1):
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    on_result(task, failed_result(
                        task, f"cancelled after {now - since:.0f} s (time limit "
                              f"{task.time_limit_s:g} s)", self.retries + 1, now - since))
