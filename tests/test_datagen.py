"""``dragon datagen``: search measured by our Evaluator, records committed per task, a run that
is killed (``kill -9``) and rerun loses and repeats nothing, failed tasks are recorded, and the
same run fans out over a real local Ray cluster."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from training.datagen.records import DataError, Record, RecordStore, read_records

DRAGON = os.path.join(os.path.dirname(sys.executable), "dragon")
LLVM = '{"kind": "llvm", "num-cores": 2}'
# Small kernels of three families: a task takes a few seconds.
SPECS = ("matmul(m=32,n=32,k=16)", "reduce(m=32,n=128)", "softmax(m=16,n=64)")
FAST = ["--trials", "8", "--per-round", "8", "--population", "32", "--repeat", "2",
        "--min-repeat-ms", "1", "--builders", "1", "--records-only", "--quiet", "--target", LLVM]


def _command(out: str, *extra: str, specs=SPECS) -> list[str]:
    cmd = [DRAGON, "datagen", "--out", out, *FAST, *extra]
    for spec in specs:
        cmd += ["--workload", spec]
    return cmd


def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _committed(out: str) -> dict[str, str]:
    """Task key -> the text of its records file, for every committed task."""
    store = RecordStore(out)
    found = {}
    for key in store.done():
        with open(os.path.join(out, "records", f"{key}.jsonl"), encoding="utf-8") as f:
            found[key] = f.read()
    return found


def _in_process(cmd: list[str]) -> subprocess.CompletedProcess:
    """``dragon ARGS`` run in this process (as ``dragon_cmd`` runs it, for a module fixture):
    the installed command in a process of its own is the kill -9 test's."""
    import contextlib
    import io

    from dragon_dsl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(cmd[1:])
    return subprocess.CompletedProcess(cmd, code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """One uninterrupted run: the reference for the resumed one."""
    out = str(tmp_path_factory.mktemp("clean") / "out")
    done = _in_process(_command(out))
    assert done.returncode == 0, done.stderr
    return out


def test_every_candidate_becomes_a_record(clean_run):
    store = RecordStore(clean_run)
    summaries = store.done()
    assert len(summaries) == len(SPECS)
    for key, summary in summaries.items():
        records = store.read(key)
        assert summary.status == "done" and summary.records == len(records) == 8
        assert [r.index for r in records] == list(range(8))
        assert all(r.source == "search" and r.target == "llvm" for r in records)
        assert all(r.script and r.script.rstrip().endswith("postproc auto llvm")
                   for r in records), "MetaSchedule's postprocessing is regenerated, not spelled"
        correct = [r for r in records if r.correct]
        assert correct and summary.best_latency_s == min(r.latency_s for r in correct)
        # MetaSchedule's own JSON database sits beside the records: one tuning record each.
        with open(os.path.join(clean_run, "databases", key, "database_tuning_record.json"),
                  encoding="utf-8") as f:
            assert len(f.readlines()) == len(records)


def test_records_are_what_the_evaluator_measures(clean_run, llvm2_evaluator):
    """A record's status is the Evaluator's verdict on its script, measured again here (by the
    session's Evaluator on the run's target, conftest)."""
    from codegen.workloads import workload

    store = RecordStore(clean_run)
    key = sorted(store.done())[0]
    records = store.read(key)[:3]
    ev = llvm2_evaluator
    outcomes = ev.evaluate(workload(records[0].workload), [r.script for r in records])
    assert [o.status.value for o in outcomes] == [r.status for r in records]


def test_rerun_of_a_finished_run_does_nothing(clean_run, dragon_cmd):
    before = _committed(clean_run)
    again = dragon_cmd(_command(clean_run)[1:])
    assert again.returncode == 0, again.stderr
    assert "0 tasks run" in again.stderr and "3 already done" in again.stderr
    assert _committed(clean_run) == before


def test_pack_moves_a_finished_run_into_shards_and_a_rerun_reads_them(tmp_path, clean_run,
                                                                       dragon_cmd):
    out = str(tmp_path / "out")
    shutil.copytree(clean_run, out)
    before = {k: RecordStore(out).read(k) for k in RecordStore(out).done()}
    packed = dragon_cmd(_command(out, "--pack")[1:])
    assert packed.returncode == 0, packed.stderr
    assert "packed into" in packed.stderr and "00000.jsonl.gz" in packed.stderr
    assert os.listdir(os.path.join(out, "tasks")) == []
    assert {k: RecordStore(out).read(k) for k in RecordStore(out).done()} == before
    again = dragon_cmd(_command(out)[1:])                 # the packed tasks are done
    assert again.returncode == 0 and "3 already done" in again.stderr, again.stderr


# In the slow pass (CI runs it after the default one): a process of its own pays TVM's import
# and its first design space again, the default pass's longest test (70-85 s on 2 cores).  What
# a rerun does with a task cut short is the default pass's, in the partial-file test below.
@pytest.mark.slow
def test_kill_9_then_rerun_loses_and_repeats_nothing(tmp_path, clean_run, dragon_cmd):
    out = str(tmp_path / "out")
    # The clean run's measurement cache (OUT/cache.sqlite): the same candidates are not built
    # and timed again.  What is committed, and when, is the run's own.
    os.makedirs(out)
    shutil.copy(os.path.join(clean_run, "cache.sqlite"), os.path.join(out, "cache.sqlite"))
    proc = subprocess.Popen(_command(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    tasks_dir = os.path.join(out, "tasks")
    while time.monotonic() < deadline:  # kill it after its first commit, mid-run
        if os.path.isdir(tasks_dir) and any(n.endswith(".json") for n in os.listdir(tasks_dir)):
            break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = _committed(out)
    assert 1 <= len(first) < len(SPECS), "killed after the first task, before the last"
    # Without its summary a task is not committed, whatever its records file holds (here one
    # cut short, as a disk full or an edited file leaves it): the rerun runs it again and
    # writes the whole file.  (The same rerun as the resume's; see the partial-file test.)
    reference = _committed(clean_run)
    cut_key = sorted(set(reference) - set(first))[0]
    cut = os.path.join(out, "records", f"{cut_key}.jsonl")
    with open(cut, "w", encoding="utf-8") as f:
        f.write(_cut_short(reference[cut_key]))

    resumed = dragon_cmd(_command(out)[1:])  # the rerun: in this process
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(first)} already done" in resumed.stderr
    after = _committed(out)
    assert set(after) == set(_committed(clean_run))
    for key, text in first.items():
        assert after[key] == text, "a committed task was not run again"
    records = [r for key in after for r in RecordStore(out).read(key)]
    assert len(records) == 8 * len(SPECS)
    assert len({(r.workload, r.index) for r in records}) == len(records), "no duplicates"
    assert len(list(read_records(cut))) == 8, "the cut records file was written whole"
    leftovers = [n for d in ("records", "tasks") for n in os.listdir(os.path.join(out, d))
                 if n.startswith(".tmp")]
    assert not leftovers or all(not n.endswith((".json", ".jsonl")) for n in leftovers)


# How the kept corpus grows (corpus/README.md): a packed run, a workload appended to its list,
# `--grow 1 --pack`, killed in the middle of the appended task's search (the manifest already
# lists it).  The same command without --append, run again, ends it: what was packed before
# reads back as it was, the appended task is committed once, and everything ends up packed.
@pytest.mark.slow
def test_kill_9_while_growing_by_an_appended_workload_loses_nothing(tmp_path, clean_run,
                                                                   dragon_cmd):
    out = str(tmp_path / "out")
    shutil.copytree(clean_run, out)
    packed = dragon_cmd(_command(out, "--pack")[1:])
    assert packed.returncode == 0, packed.stderr
    before = {k: RecordStore(out).read(k) for k in RecordStore(out).done()}
    appended = "layer_norm(m=16,n=64)"
    proc = subprocess.Popen(_command(out, "--append", appended, "--grow", "1", "--pack"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    manifest = os.path.join(out, "datagen.json")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # the list took the append: its search is under way
        with open(manifest, encoding="utf-8") as f:
            if json.load(f).get("appended") == [appended]:
                break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    time.sleep(1.0)    # into the search (TVM's import and first design space take longer)
    assert proc.poll() is None, "killed mid-task, not after it"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = RecordStore(out)
    assert {k: store.read(k) for k in store.done()} == before, "nothing committed, nothing lost"

    resumed = dragon_cmd(_command(out, "--grow", "1", "--pack")[1:])
    assert resumed.returncode == 0, resumed.stderr
    store = RecordStore(out)
    done = store.done()
    assert len(done) == len(SPECS) + 1 and set(before) < set(done)
    assert {k: store.read(k) for k in before} == before
    (new,) = set(done) - set(before)
    records = store.read(new)
    assert records[0].workload == appended and [r.index for r in records] == list(range(8))
    assert os.listdir(os.path.join(out, "tasks")) == [], "the rerun packed the appended task"
    assert sorted(os.listdir(os.path.join(out, "shards"))) == ["00000.jsonl.gz"]


def _cut_short(text: str) -> str:
    """A records file's text cut inside a line (halfway may fall just after a newline, which
    is not a partial write)."""
    return text[:len(text) // 2].rstrip("\n")


def test_a_partial_records_file_is_never_read_as_complete(tmp_path, clean_run):
    out = str(tmp_path / "out")
    shutil.copytree(clean_run, out)
    store = RecordStore(out)
    key = sorted(store.done())[0]
    path = os.path.join(out, "records", f"{key}.jsonl")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # A records file cut short under its summary (a disk full, an edited file): named, not used.
    half = _cut_short(text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(half)
    with pytest.raises(DataError, match=rf"{key}\.jsonl:\d+: .*cut short"):
        store.read(key)
    # Forgotten, the task is no longer committed and its records are gone.  A records file
    # without its summary, cut short, is run again and written whole by the rerun: the kill -9
    # test plants one before its resume (one rerun for both).
    store.forget(key)
    assert key not in store.done()
    assert not os.path.exists(path)


def test_datasets_and_card_are_built_from_the_committed_records(tmp_path, clean_run,
                                                                dragon_cmd):
    import datasets

    out = str(tmp_path / "out")
    shutil.copytree(clean_run, out)
    cmd = [c for c in _command(out) if c != "--records-only"] + ["--json"]
    done = dragon_cmd(cmd[1:])
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    built = {task: datasets.load_from_disk(os.path.join(out, task))
             for task in ("construction", "refinement")}
    for task, data in built.items():
        assert set(data) == {"train", "validation", "test"}
        assert {s: len(d) for s, d in data.items()} == summary[task]
    assert sum(summary["construction"].values()) >= len(SPECS)
    correct: dict[tuple, float] = {}
    for r in RecordStore(out).all_records():
        if r.correct:
            key = (r.workload, r.script)
            correct[key] = min(r.latency_s, correct.get(key, r.latency_s))
    for split in built["construction"].values():
        for row in split:
            assert row["latency_s"] == correct[(row["workload"], row["script"])]
    with open(os.path.join(out, "README.md"), encoding="utf-8") as f:
        card = f.read()
    assert "## Token lengths" in card and "plots/token_lengths.png" in card
    assert os.path.exists(os.path.join(out, "plots", "token_lengths.png"))


def test_a_run_with_other_settings_is_refused(clean_run, dragon_cmd):
    other = dragon_cmd(_command(clean_run, "--seed", "7")[1:])
    assert other.returncode == 2
    assert "holds a datagen run with other settings" in other.stderr


def test_corrupt_record_lines_are_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"workload": "matmul()"}\n')
    with pytest.raises(DataError, match=r"r\.jsonl:1: not a record \(missing field"):
        list(read_records(str(path)))
    path.write_text("not json\n")
    with pytest.raises(DataError, match=r"r\.jsonl:1: not a record"):
        list(read_records(str(path)))


def test_a_failing_task_is_retried_then_recorded_as_failed(tmp_path, clean_run):
    """A workload file that is gone when its task runs: the task fails in its process, is
    retried, and is recorded as failed with the error; the other task's data is written.  (The
    other task is the clean run's first, measured with its settings and from its measurement
    cache: its candidates are not built and timed again.)"""
    from codegen.measure import MeasureConfig
    from codegen.search.tune import SearchConfig
    from codegen.workloads import workload
    from training.datagen.generate import generate
    from training.datagen.pool import LocalPool
    from training.datagen.runner import RunnerSettings
    from training.datagen.tasks import Task, tasks_for

    kernel = tmp_path / "k.py"
    kernel.write_text(workload("elementwise(m=16,n=16)").mod.script())
    search = SearchConfig(trials=8, per_round=8, population=32)
    # A limit no busy machine reaches: the task that runs must end "done", not "time_limit"
    # (120 s was passed on 2 cores shared with a corpus growth).
    tasks = tasks_for([SPECS[0]], json.loads(LLVM), "llvm", search, 900)
    tasks.append(Task(f"file(path={kernel})", json.loads(LLVM), "llvm", search, 900))
    kernel.unlink()
    shutil.copy(os.path.join(clean_run, "cache.sqlite"), tmp_path / "c.sqlite")
    pool = LocalPool(1, RunnerSettings(MeasureConfig(repeat=2, min_repeat_ms=1),
                                       cache=str(tmp_path / "c.sqlite")), retries=1)
    report = generate(tasks, str(tmp_path / "out"), pool, progress=False)
    assert (report.ran, report.failed) == (2, 1)
    done = RecordStore(str(tmp_path / "out")).done()
    assert done[tasks[0].key].status == "done" and done[tasks[0].key].records == 8
    failed = done[tasks[1].key]
    assert failed.status == "failed" and failed.attempts == 2
    assert "k.py" in failed.error


def test_record_round_trip():
    record = Record(workload="matmul()", workload_id="0" * 16, family="matmul", target="llvm",
                    target_json=LLVM, device="cpu", rules="llvm", source="search", round=0,
                    index=0, script=None, status="build_error", message="x")
    assert Record.from_dict(json.loads(record.to_json())) == record
    with pytest.raises(ValueError, match="positive latency"):
        Record.from_dict({**json.loads(record.to_json()), "status": "correct"})


@pytest.mark.slow
def test_ray_cluster_runs_the_tasks(tmp_path, clean_run):
    """A real local Ray cluster, started here: the same tasks, the same records."""
    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    port = "6391"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    started = subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2",
                              "--include-dashboard=false", "--disable-usage-stats"],
                             capture_output=True, text=True, timeout=180, env=env)
    assert started.returncode == 0, started.stderr
    try:
        out = str(tmp_path / "out")
        driver = subprocess.Popen(_command(out, "--ray-address", f"127.0.0.1:{port}"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env)
        _, stderr = driver.communicate(timeout=900)
        assert driver.returncode == 0, stderr
        store = RecordStore(out)
        summaries = store.done()
        assert set(summaries) == set(_committed(clean_run))
        assert all(s.status == "done" and s.records == 8 for s in summaries.values())
        # The tasks ran in Ray's worker processes, not in the driver.
        pids = {int(s.worker.rsplit(":", 1)[1]) for s in summaries.values()}
        assert driver.pid not in pids
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120, env=env)


def test_search_gives_metaschedule_our_verdicts(tmp_path, llvm2_evaluator):
    """What our measurement says is what MetaSchedule records: an outcome that is not correct
    is a failed trial (1e10 s in its database), a correct one carries our repeats.  Here the
    real Evaluator's verdicts are overridden for every other candidate, as if those kernels had
    computed the wrong thing, to see the verdict cross the seam."""
    from dataclasses import replace

    from codegen.measure import Status
    from codegen.search.tune import FAILED_RUN_SECS, SearchConfig, search
    from codegen.workloads import workload

    class Judged:
        def __init__(self, inner):
            self.inner = inner

        def evaluate(self, wl, scripts):
            outcomes = self.inner.evaluate(wl, scripts)
            return [replace(o, status=Status.INCORRECT, latency_s=None) if i % 2 else o
                    for i, o in enumerate(outcomes)]

    target = json.loads(LLVM)
    ev = llvm2_evaluator  # the session's Evaluator on this target (conftest)
    rounds = list(search(workload(SPECS[0]), target, Judged(ev),
                         SearchConfig(trials=8, per_round=4, population=32),
                         work_dir=str(tmp_path)))
    outcomes = [o for r in rounds for o in r.outcomes]
    assert [r.index for r in rounds] == [0, 1] and len(outcomes) == 8
    with open(tmp_path / "database_tuning_record.json", encoding="utf-8") as f:
        run_secs = [json.loads(line)[1][1] for line in f]
    assert len(run_secs) == 8
    for outcome, secs in zip(outcomes, run_secs, strict=True):
        if outcome.ok:
            assert secs == pytest.approx(outcome.repeats, rel=1e-6)
        else:
            assert secs == [FAILED_RUN_SECS]
