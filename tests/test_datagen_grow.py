"""A kept corpus grows by N workloads a run (``generate(grow=N)``, ``dragon datagen --grow``):
each run commits the next N of its task list not yet done, the list itself (the manifest) never
changes, and the same command continues where the last one stopped.  The pool is a stand-in
that records what it is asked to run; what a real search commits is tested in test_datagen."""

from __future__ import annotations

import json

from codegen.search.tune import SearchConfig
from training.datagen.generate import generate
from training.datagen.pool import failed_result
from training.datagen.records import RecordStore
from training.datagen.tasks import tasks_for

SPECS = ["matmul(m=16,n=16,k=16)", "softmax(m=16,n=32)", "reduce(m=16,n=32,op=sum)"]
LLVM = {"kind": "llvm", "num-cores": 1}


class _Pool:
    """Commits each task it is given at once (as a failed task: no search runs)."""

    def __init__(self):
        self.asked: list[list[str]] = []

    def run(self, tasks, on_result):
        tasks = list(tasks)
        self.asked.append([t.workload for t in tasks])
        for task in tasks:
            on_result(task, failed_result(task, "not searched here", 1, 0.0))


def test_each_run_grows_the_corpus_by_n_and_the_task_list_stays_whole(tmp_path):
    tasks = tasks_for(SPECS, LLVM, "llvm", SearchConfig(trials=8, per_round=8), 60)
    out, pool = str(tmp_path / "corpus"), _Pool()
    first = generate(tasks, out, pool, progress=False, grow=2)
    manifest = json.loads((tmp_path / "corpus" / "datagen.json").read_text())
    names = [t.workload for t in tasks]                  # as canonical specs
    assert pool.asked == [names[:2]] and (first.ran, first.skipped) == (2, 0)
    second = generate(tasks, out, pool, progress=False, grow=2)
    assert pool.asked[1] == names[2:] and (second.ran, second.skipped) == (1, 2)
    assert json.loads((tmp_path / "corpus" / "datagen.json").read_text()) == manifest
    assert sorted(s.workload for s in RecordStore(out).done().values()) == sorted(names)
    generate(tasks, out, pool, progress=False, grow=2)
    assert len(pool.asked) == 2                          # nothing left: the pool is not called


def test_grow_zero_searches_nothing_and_a_negative_one_is_refused(tmp_path, dragon_cmd):
    tasks = tasks_for(SPECS, LLVM, "llvm", SearchConfig(trials=8, per_round=8), 60)
    pool = _Pool()
    report = generate(tasks, str(tmp_path / "corpus"), pool, progress=False, grow=0)
    assert pool.asked == [] and report.ran == 0
    done = dragon_cmd(["datagen", "--workload", SPECS[0], "--out", str(tmp_path / "o"),
                       "--grow", "-1"])
    code, err = done.returncode, done.stderr
    assert code == 2 and "Expected --grow >= 0 but got --grow -1" in err
    assert not (tmp_path / "o").exists()


def test_cheapest_first_runs_the_least_work_first_and_keeps_the_list(tmp_path):
    from training.datagen.tasks import work_estimate

    specs = ["matmul(m=64,n=64,k=64)", "reduce(m=16,n=32,op=sum)", "softmax(m=16,n=32)",
             "matmul(m=64,n=64,k=64,dtype=float16)"]
    tasks = tasks_for(specs, LLVM, "llvm", SearchConfig(trials=8, per_round=8), 60)
    work = {t.workload: work_estimate(t.workload, LLVM) for t in tasks}
    # matmul 2*64^3 FLOPs; the half one costs more on a CPU, though its FLOPs are the same.
    assert work[tasks[0].workload] == 2 * 64 ** 3
    assert work[tasks[3].workload] > work[tasks[0].workload]
    assert work_estimate("model(name=bert)") == float("inf")
    out, pool = str(tmp_path / "corpus"), _Pool()
    order = lambda t: work[t.workload]  # noqa: E731
    generate(tasks, out, pool, progress=False, grow=2, order=order)
    generate(tasks, out, pool, progress=False, grow=2, order=order)
    cheapest = sorted(work, key=work.get)
    assert pool.asked == [cheapest[:2], cheapest[2:]]
    assert cheapest[-1] == tasks[3].workload
    manifest = json.loads((tmp_path / "corpus" / "datagen.json").read_text())
    assert manifest["tasks"] == [t.key for t in tasks]   # the list itself is not reordered


def test_grow_families_runs_only_those_and_keeps_the_list(tmp_path, dragon_cmd):
    tasks = tasks_for(SPECS, LLVM, "llvm", SearchConfig(trials=8, per_round=8), 60)
    out, pool = str(tmp_path / "corpus"), _Pool()
    generate(tasks, out, pool, progress=False, grow=5, families=["softmax", "reduce"])
    assert pool.asked == [[t.workload for t in tasks[1:]]]       # the matmul waits
    generate(tasks, out, pool, progress=False, grow=5)
    assert pool.asked[1] == [tasks[0].workload]
    manifest = json.loads((tmp_path / "corpus" / "datagen.json").read_text())
    assert manifest["tasks"] == [t.key for t in tasks]
    done = dragon_cmd(["datagen", "--workload", SPECS[0], "--out", str(tmp_path / "o"),
                       "--grow", "1", "--grow-families", "matmull"])
    assert done.returncode == 2 and "--grow-families: no family 'matmull'" in done.stderr
    assert not (tmp_path / "o").exists()
