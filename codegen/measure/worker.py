"""Isolated worker processes: every build and every kernel run happens in one of these, so that
a hang, an abort, a segfault or runaway memory ends one job, never the caller.

A worker runs ``codegen.measure.worker_main`` (without torch), exchanging the typed messages of
``codegen.measure.protocol`` over a private pipe.  It runs in its own
process group (a job's children, such as nvcc, die with it), exits when its parent dies (a
watcher thread: PR_SET_PDEATHSIG would tie it to the thread that started it), and reports which
stage a job has reached, so a crash is attributed to the stage (apply, build, load, run) where
it happened.  What a worker writes to stderr during a job (TVM's native crash text, which has no
Python traceback) goes to an unnamed temporary file emptied as each job starts, and the last
lines of it are part of the crash's message.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from multiprocessing.connection import Connection

from dragon_dsl.errors import DragonError

from .protocol import Error, Message, Progress, decode, encode

__all__ = ["JobCrashed", "JobFailed", "JobTimeout", "Worker", "WorkerError"]


# tvm_ffi imports torch whenever it is installed (3 s, and a sys.modules twice as large, which
# slows TVMScript parsing); workers never need torch, so they start without it.
_BOOT = ("import sys; sys.modules.setdefault('torch', None); import runpy; "
         "runpy.run_module('codegen.measure.worker_main', run_name='__main__')")


class WorkerError(DragonError):
    """A job did not finish: ``stage`` says where it was.  The evaluator turns these into
    outcomes (timeout, runtime_error, ...); callers of ``Worker.call`` catch this class."""

    stage: str = ""


class JobTimeout(WorkerError):
    """The job ran past its time limit; the worker was killed."""

    def __init__(self, stage: str, seconds: float) -> None:
        super().__init__(f"{stage} ran past its limit of {seconds:g} s")
        self.stage = stage


class JobCrashed(WorkerError):
    """The worker died during the job (a signal, an abort, or the memory limit)."""

    def __init__(self, stage: str, reason: str, signal_name: str | None = None) -> None:
        super().__init__(f"the worker died during {stage}: {reason}")
        self.stage, self.reason, self.signal = stage, reason, signal_name


class JobFailed(WorkerError):
    """The job raised an unexpected Python exception inside the worker."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


# The stage a job starts in, before the worker reports its first Progress.
_JOB_STAGES = {"ApplyJob": "apply", "BuildJob": "build", "ReferenceJob": "reference",
               "RunJob": "run", "DescribeJob": "device", "PingJob": "ping",
               "ModelBuildJob": "build", "ModelRunJob": "run", "LiveOpen": "apply",
               "LiveStep": "apply", "LiveClose": "apply"}


class Worker:
    """One worker process.  ``call`` runs a job and returns its reply; ``send`` queues jobs and
    ``receive`` gives their replies in order (the caller works while the worker does).

    >>> from codegen.measure.protocol import PingJob
    >>> with Worker() as w:
    ...     w.call(PingJob(), timeout=60).pid == w.pid
    True
    """

    def __init__(self, env: dict[str, str] | None = None, cpus: list[int] | None = None,
                 memory_limit_mb: int | None = None) -> None:
        self.env = env or {}
        self.cpus = cpus
        self.memory_limit_mb = memory_limit_mb
        self.proc: subprocess.Popen | None = None
        self.stage: str | None = None  # the stage the current job has reached
        self._waiting: deque[str] = deque()  # the stage of each job sent and not answered
        self._stderr = None  # the worker's stderr: a temporary file, emptied at each job

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        if not os.environ.get("DRAGON_WORKER_STDERR"):  # set: the worker writes to ours
            self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(child_r), str(child_w)],
            pass_fds=(child_r, child_w), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self._stderr,
            start_new_session=True, close_fds=True)
        os.close(child_r)
        os.close(child_w)
        if self.cpus:
            try:
                os.sched_setaffinity(self.proc.pid, self.cpus)
            except OSError:
                pass
        self._reader = Connection(parent_r, writable=False)
        self._writer = Connection(parent_w, readable=False)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, job: Message, timeout: float) -> Message:
        """Run one job.  Raises JobTimeout, JobCrashed or JobFailed; restarts lazily."""
        self.send(job)
        return self.receive(timeout)

    def send(self, job: Message) -> None:
        """Queue one job without waiting: the worker runs its jobs in the order sent, and
        ``receive`` gives their replies in that order.  A worker that died is started again
        only when nothing sent to it is waiting (those jobs' ``receive`` reports the death)."""
        if not self.alive() and not self._waiting:
            self.close()
            self.start()
        assert self.proc is not None
        self._waiting.append(_JOB_STAGES.get(type(job).__name__, "job"))
        if len(self._waiting) == 1:
            self.stage = self._waiting[0]
            if self._stderr is not None:  # the worker shares the offset: it writes from 0 again
                self._stderr.seek(0)
                self._stderr.truncate()
        try:
            self._writer.send_bytes(encode(job))
        except OSError:  # the worker is gone: receive says how
            pass

    def receive(self, timeout: float) -> Message:
        """The reply to the oldest job sent and not yet answered, waiting at most ``timeout``
        seconds.  Raises JobTimeout, JobCrashed (every job still waiting is lost with the
        worker) or JobFailed (the job raised; the worker goes on)."""
        assert self._waiting, "nothing was sent"
        stage = self.stage = self._waiting[0]
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise JobTimeout(stage, timeout)
            if self._reader.poll(min(left, 0.05)):
                try:
                    message = decode(self._reader.recv_bytes())
                except (EOFError, OSError):
                    raise self._crashed(stage) from None
                if isinstance(message, Progress):
                    stage = self.stage = message.stage
                    continue
                self._waiting.popleft()
                self.stage = self._waiting[0] if self._waiting else None
                if isinstance(message, Error):
                    raise JobFailed(stage, message.message)
                return message
            if self.proc.poll() is not None:
                raise self._crashed(stage)
            if self.memory_limit_mb and self._rss_mb() > self.memory_limit_mb:
                self.kill()
                raise JobCrashed(stage, f"it used more than {self.memory_limit_mb} MiB of memory")

    def _rss_mb(self) -> float:
        try:
            import psutil

            proc = psutil.Process(self.pid)
            return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20
        except Exception:  # noqa: BLE001  the process may be gone already
            return 0.0

    def _crashed(self, stage: str) -> JobCrashed:
        assert self.proc is not None
        code = self.proc.wait()
        # The job's children (a C compiler, nvcc) are still in the dead worker's group.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        said = self._last_words()
        self.close()
        if code < 0:
            name = signal.Signals(-code).name
            return JobCrashed(stage, f"killed by {name}{said}", name)
        return JobCrashed(stage, f"exited with status {code}{said}")

    def _last_words(self, lines: int = 3, chars: int = 400) -> str:
        """The last non-blank lines the worker wrote to stderr during this job, as ``": ..."``
        (at most ``chars`` characters), or ""."""
        if self._stderr is None:
            return ""
        size = os.fstat(self._stderr.fileno()).st_size
        tail = os.pread(self._stderr.fileno(), 4096, max(0, size - 4096))
        kept = [ln.strip() for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
        text = " | ".join(kept[-lines:])
        return f": {text[-chars:]}" if text else ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and anything it started
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.close()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self._writer.send_bytes(b"exit")
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
                return
        for conn in (getattr(self, "_reader", None), getattr(self, "_writer", None)):
            if conn is not None:
                conn.close()
        self._reader = self._writer = None  # type: ignore[assignment]
        self.proc = None
        self._waiting.clear()  # whatever was sent is lost with the process
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
