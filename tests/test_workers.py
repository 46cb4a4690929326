"""Worker processes, observed for real: the children a job starts die with the worker's process
group on a timeout, a build worker that dies of a signal is one outcome with that signal and the
next build works, and a worker whose parent is killed exits on its own.

A job's children come from TVM itself: ``export_library`` runs the C compiler named by ``CXX``
(``tvm.support.cc.get_cc``), and ``fake_cc`` below is such a compiler, which does what the
files beside it say (start a child and hang, or send its worker a signal) and otherwise runs the
real one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import dragon_dsl
from codegen.measure import MeasureConfig
from codegen.measure.evaluator import Evaluator
from codegen.measure.outcomes import Status
from codegen.measure.protocol import BuildJob, Built, PingJob, WorkloadData
from codegen.measure.worker import JobTimeout, Worker
from codegen.search import sample_traces
from codegen.targets import target_dict
from codegen.workloads import workload

FAST = MeasureConfig(repeat=3, min_repeat_ms=1.0)
SPEC = "matmul(m=32,n=32,k=32)"


@pytest.fixture
def fake_cc(tmp_path) -> Path:
    return _fake_cc(tmp_path)


def _fake_cc(directory: Path) -> Path:
    """A C compiler: with ``hang`` beside it, it starts ``sleep`` and waits, writing both pids
    to ``pids``; with ``signal`` beside it, it sends that signal (once) to its parent, the
    worker; otherwise it runs the real compiler."""
    from tvm.support.cc import get_cc

    real = get_cc()
    assert real, "no C compiler to export a library with"
    path = directory / "cc"
    path.write_text(f"""#!/bin/sh
dir=$(dirname "$0")
if [ -e "$dir/hang" ]; then
    sleep 300 &
    echo "$$ $!" > "$dir/pids.tmp" && mv "$dir/pids.tmp" "$dir/pids"
    wait
fi
if [ -e "$dir/signal" ]; then
    sig=$(cat "$dir/signal")
    rm -f "$dir/signal"
    kill -s "$sig" "$PPID"
    sleep 5
fi
exec "{real}" "$@"
""")
    path.chmod(0o755)
    return path


def _scripts(n: int) -> list[str]:
    traces = sample_traces(workload(SPEC).mod, "llvm", "llvm", n, seed=4)
    assert len(traces) == n
    return [dragon_dsl.from_trace(t, postproc="auto", postproc_set="llvm") for t in traces]


def _build_job(script: str, out_dir: Path) -> BuildJob:
    return BuildJob(WorkloadData.of(workload(SPEC)), target_dict("llvm"), str(out_dir),
                    script=script)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The pids still running after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return []
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def _read_pids(path: Path, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), "the job never started its compiler"
    return [int(p) for p in path.read_text().split()]


def _kill(pids: list[int]) -> None:
    """End what a failed test left behind (only the processes its own compiler started)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---- a timeout kills the job's children --------------------------------------------------------

def test_a_timeout_kills_the_children_the_job_started(fake_cc, tmp_path):
    [script] = _scripts(1)
    with Worker(env={"CXX": str(fake_cc)}) as w:
        assert isinstance(w.call(_build_job(script, tmp_path / "a"), timeout=300), Built)
        start = time.monotonic()
        assert isinstance(w.call(_build_job(script, tmp_path / "b"), timeout=300), Built)
        warm = time.monotonic() - start  # apply, compile and export the library
        worker = w.pid
        (fake_cc.parent / "hang").touch()
        with pytest.raises(JobTimeout) as info:
            w.call(_build_job(script, tmp_path / "c"), timeout=3 * warm + 1)
        assert info.value.stage == "build"
    pids = _read_pids(fake_cc.parent / "pids", 0)  # the compiler and its child
    left = _wait_gone([worker, *pids], 5)
    _kill(left)
    assert not left, "the worker's process group outlived its timeout"


# ---- a build worker that dies of a signal ------------------------------------------------------

@pytest.mark.parametrize("sig", ["SEGV", pytest.param("ABRT", marks=pytest.mark.slow)])
def test_a_build_worker_killed_by_a_signal_is_a_build_error_and_the_next_build_works(
        fake_cc, monkeypatch, sig):
    monkeypatch.setenv("CXX", str(fake_cc))
    (fake_cc.parent / "signal").write_text(sig)
    wl, scripts = workload(SPEC), _scripts(2)
    with Evaluator("llvm", cache=False, config=FAST, builders=1) as ev:
        crashed, fine = ev.evaluate(wl, scripts)
    assert crashed.status is Status.BUILD_ERROR, crashed.summary()
    assert (crashed.stage, crashed.signal) == ("build", f"SIG{sig}")
    assert fine.ok, fine.summary()  # built by a fresh worker, in the same call


def test_a_crashed_workers_children_do_not_outlive_it(fake_cc, tmp_path):
    [script] = _scripts(1)
    (fake_cc.parent / "signal").write_text("SEGV")
    with Worker(env={"CXX": str(fake_cc)}) as w:
        with pytest.raises(Exception, match="SIGSEGV"):
            w.call(_build_job(script, tmp_path / "a"), timeout=300)
    # The compiler sleeps 5 s after signalling; it must be gone well before then.
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if str(fake_cc) in " ".join(p.info["cmdline"] or [])]
    left = _wait_gone(left, 2)
    _kill(left)
    assert not left


# ---- a worker whose parent dies ----------------------------------------------------------------

_PARENT = """
import sys, time
from codegen.measure.protocol import BuildJob, PingJob, WorkloadData
from codegen.measure.worker import Worker
from codegen.targets import target_dict
from codegen.workloads import workload

cc, spec, script, out_dir = sys.argv[1:]
w = Worker(env={"CXX": cc} if cc else None)
w.start()
w.call(PingJob(), timeout=120)
print(w.pid, flush=True)
if script:  # a build that hangs in the compiler
    job = BuildJob(WorkloadData.of(workload(spec)), target_dict("llvm"), out_dir, script=script)
    w.call(job, timeout=600)
time.sleep(600)
"""


def _orphan_worker(cc: str = "", script: str = "", out_dir: str = ""):
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, cc, SPEC, script, out_dir],
                              stdout=subprocess.PIPE, text=True)
    line = parent.stdout.readline()
    assert line.strip().isdigit(), "the parent never reported its worker"
    return parent, int(line)


def test_an_idle_worker_exits_when_its_parent_is_killed():
    """An idle worker sees its pipe close; a busy one needs its watcher thread (below)."""
    parent, worker = _orphan_worker()
    try:
        assert not _gone(worker) and psutil.Process(worker).ppid() == parent.pid
    finally:
        parent.kill()
        parent.wait()
    left = _wait_gone([worker], 5)
    _kill(left)
    assert not left, "the worker outlived its parent"


@pytest.fixture(scope="module")
def parent_killed_mid_job(tmp_path_factory):
    """A worker whose parent is killed while the worker waits for its compiler (so the worker
    does not notice through its pipe): (worker left running, job children left running)."""
    directory = tmp_path_factory.mktemp("mid-job")
    cc = _fake_cc(directory)
    [script] = _scripts(1)
    (directory / "hang").touch()
    parent, worker = _orphan_worker(str(cc), script, str(directory / "out"))
    try:
        children = _read_pids(directory / "pids", 120)
        assert not _gone(worker)
    finally:
        parent.kill()
        parent.wait()
    worker_left = _wait_gone([worker], 5)  # the worker looks for its parent every 0.5 s
    children_left = _wait_gone(children, 1)
    _kill(worker_left + children_left)
    return worker_left, children_left


def test_a_busy_worker_exits_when_its_parent_is_killed(parent_killed_mid_job):
    worker_left, _ = parent_killed_mid_job
    assert not worker_left, "the worker outlived its parent"


def test_a_worker_whose_parent_dies_mid_job_takes_its_children_along(parent_killed_mid_job):
    _, children_left = parent_killed_mid_job
    assert not children_left, "the job's children outlived the worker"


def test_workers_are_started_in_their_own_process_group():
    with Worker() as w:
        w.call(PingJob(), timeout=60)
        assert os.getpgid(w.pid) == w.pid != os.getpgid(0)
