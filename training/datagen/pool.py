"""Tasks on a local pool of processes: each runs task after task with its own ``TaskRunner``.

A task that overruns its time limit by far (``hard_limit``), or whose process dies (a segfault
in TVM, the memory limit), is retried in a fresh process, up to ``retries`` times, then recorded
as failed; the other tasks go on.  Processes are started with ``spawn`` and exit when the driver
does, even mid-task.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from codegen.targets import as_target
from training.datagen.records import TaskSummary
from training.datagen.runner import RunnerSettings, TaskResult, TaskRunner
from training.datagen.tasks import Task
from training.prompts.templates import target_name

__all__ = ["LocalPool", "failed_result", "hard_limit"]


def hard_limit(task: Task) -> float:
    """When a task is killed: its own limit stops it after the round in progress; twice the
    limit and a margin is far past any round."""
    return 2 * task.time_limit_s + 120


def failed_result(task: Task, error: str, attempts: int, seconds: float) -> TaskResult:
    return TaskResult(TaskSummary(key=task.key, workload=task.workload,
                                  target=target_name(as_target(task.target)), status="failed",
                                  attempts=attempts, error=error[-4000:],
                                  seconds=round(seconds, 3)), [], {})


def _serve(conn, settings: dict[str, Any], parent: int) -> None:
    """A pool process: run tasks from ``conn`` until it closes or the driver is gone."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    runner = TaskRunner(RunnerSettings.from_dict(settings))
    try:
        while True:
            try:
                data = conn.recv()
            except EOFError:
                return
            try:
                result = runner.run(Task.from_dict(data))
                conn.send(("ok", result.to_dict()))
            except Exception:  # noqa: BLE001  reported to the driver, which retries
                conn.send(("error", traceback.format_exc()))
    finally:
        runner.close()


class _Process:
    def __init__(self, settings: dict[str, Any]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, settings, os.getpid()),
                                daemon=True)
        self.proc.start()
        child.close()

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.join(10)
        with contextlib.suppress(Exception):
            self.conn.close()


class LocalPool:
    """``workers`` processes running tasks; ``run`` calls ``on_result`` once per task (from
    the pool's threads, one at a time)."""

    def __init__(self, workers: int, settings: RunnerSettings, retries: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"Expected at least one worker but got workers={workers}")
        self.workers = workers
        self.settings = settings.to_dict()
        self.retries = retries

    def run(self, tasks: Iterable[Task], on_result: Callable[[Task, TaskResult], None]) -> None:
        todo: queue.Queue[Task] = queue.Queue()
        for task in tasks:
            todo.put(task)
        lock = threading.Lock()
        errors: list[BaseException] = []

        def slot() -> None:
            proc: _Process | None = None
            try:
                while not errors:
                    try:
                        task = todo.get_nowait()
                    except queue.Empty:
                        return
                    result, proc = self._one(task, proc)
                    with lock:
                        on_result(task, result)
            except BaseException as exc:  # noqa: BLE001  an error in on_result stops the run
                errors.append(exc)
            finally:
                if proc is not None:
                    proc.kill()

        threads = [threading.Thread(target=slot, daemon=True)
                   for _ in range(min(self.workers, todo.qsize()) or 1)]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
        if errors:
            raise errors[0]

    def _one(self, task: Task, proc: _Process | None) -> tuple[TaskResult, _Process | None]:
        start = time.perf_counter()
        last = ""
        for attempt in range(1, self.retries + 2):
            if proc is None or not proc.proc.is_alive():
                proc = _Process(self.settings)
            try:
                proc.conn.send(task.to_dict())
                if not proc.conn.poll(hard_limit(task)):
                    last = (f"killed after {hard_limit(task):g} s (time limit "
                            f"{task.time_limit_s:g} s)")
                    proc.kill()
                    proc = None
                    continue
                kind, payload = proc.conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                code = proc.proc.exitcode if proc is not None else None
                last = f"the task's process died (exit code {code})"
                if proc is not None:
                    proc.kill()
                proc = None
                continue
            if kind == "ok":
                result = TaskResult.from_dict(payload)
                result.summary = _with_attempts(result.summary, attempt)
                return result, proc
            last = payload
        return failed_result(task, last, self.retries + 1, time.perf_counter() - start), proc


def _with_attempts(summary: TaskSummary, attempts: int) -> TaskSummary:
    return replace(summary, attempts=attempts)
