"""``training.datagen.from_database``: records from a database MetaSchedule's own ``tune_tir``
wrote, taken as-is and re-measured, and the damaged databases that must be a DataError."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import dragon_dsl
from codegen.measure import MeasureConfig
from codegen.workloads import script_workload, workload
from training.datagen.from_database import database_records, find_databases
from training.datagen.records import DataError, Record, RecordStore

SPEC = "matmul(m=16,n=16,k=16)"
TARGET = {"kind": "llvm", "num-cores": 2}
FAILED_EVERY = 3          # the flaky builder fails candidates 2, 5, ... of each batch
FAST = MeasureConfig(repeat=3, min_repeat_ms=1.0)
WORKLOADS, RECORDS = "database_workload.json", "database_tuning_record.json"


def _flaky_builder():
    """MetaSchedule's LocalBuilder (without the slow intrinsics import), failing every
    FAILED_EVERY-th candidate, so the database holds failed records (run_secs 1e10)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from codegen.search.baselines import _build_candidate

    inner = ms.builder.LocalBuilder(f_build=_build_candidate, max_workers=1, timeout_sec=120)

    @derived_object
    class FlakyBuilder(ms.builder.PyBuilder):
        def build(self, build_inputs):
            results = inner.build(build_inputs)
            return [ms.builder.BuilderResult(None, "deliberately failed")
                    if i % FAILED_EVERY == FAILED_EVERY - 1 else r
                    for i, r in enumerate(results)]

    return FlakyBuilder()


def _tune(spec: str, work_dir: str, builder) -> None:
    """MetaSchedule's own tune_tir: 8 trials, a random cost model."""
    from tvm.s_tir import meta_schedule as ms

    from codegen.search.baselines import console_warnings_only, unnamed_handlers_aside
    from codegen.targets import as_target, import_tensor_intrinsics, schedule_rules

    import_tensor_intrinsics()   # TuneContext imports them; this way costs seconds, not minutes
    # tune_tir lists the handlers of its logger by name, and a second call in one process
    # meets pytest's unnamed capture handler there (str.format on None): keep them out.  And
    # it leaves its logger at DEBUG, which a later test in this process would read as a level
    # the user chose: put it back after.
    with unnamed_handlers_aside(), console_warnings_only():
        ms.tune_tir(workload(spec).mod, as_target(TARGET), work_dir, max_trials_global=8,
                    num_trials_per_iter=8, builder=builder,
                    runner=ms.runner.LocalRunner(timeout_sec=60), cost_model="random",
                    space=ms.space_generator.PostOrderApply(
                        sch_rules=schedule_rules("llvm"), postprocs="llvm",
                        mutator_probs="llvm"),
                    seed=0)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A tune_tir work directory: 8 trials of one matmul, some deliberately failed."""
    work_dir = str(tmp_path_factory.mktemp("tune"))
    _tune(SPEC, work_dir, _flaky_builder())
    return work_dir


@pytest.fixture(scope="module")
def as_is(tuned):
    return list(database_records(tuned))


def _lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _copy(tuned: str, dest) -> str:
    os.makedirs(dest, exist_ok=True)
    for name in (WORKLOADS, RECORDS):
        shutil.copy(os.path.join(tuned, name), os.path.join(dest, name))
    return str(dest)


def _rebuild(record: Record):
    return (script_workload(record.workload_script) if record.workload_script is not None
            else workload(record.workload))


# ---- as-is -----------------------------------------------------------------------------------

def test_as_is_gives_one_record_per_tuning_record_with_its_latency(tuned, as_is):
    lines = _lines(os.path.join(tuned, RECORDS))
    assert len(as_is) == 1
    group = as_is[0]
    assert [r.index for r in group.records] == list(range(len(lines))) and len(lines) == 8
    for record, line in zip(group.records, lines, strict=True):
        secs = line[1][1]
        assert (record.source, record.round, record.verified) == ("database", 0, False)
        assert (record.target, record.rules, record.device) == ("llvm", "llvm", "unknown")
        if secs == [1e10]:
            assert (record.status, record.latency_s) == ("runtime_error", None)
            assert "1e10" in record.message or "10000000000" in record.message
        else:
            assert record.status == "correct"
            assert record.latency_s == pytest.approx(sum(secs) / len(secs))
    failed = [r for r in group.records if r.status == "runtime_error"]
    assert len(failed) == 8 // FAILED_EVERY    # the deliberately failed builds, kept
    summary = group.summary()
    assert (summary.records, summary.correct) == (8, 8 - len(failed))
    assert summary.best_latency_s == min(r.latency_s for r in group.records if r.correct)


def test_as_is_latencies_agree_with_metaschedules_own_reader(tuned, as_is):
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.JSONDatabase(path_workload=os.path.join(tuned, WORKLOADS),
                                  path_tuning_record=os.path.join(tuned, RECORDS),
                                  allow_missing=False)
    theirs = sorted(sum(float(s) for s in r.run_secs) / len(r.run_secs)
                    for r in db.get_all_tuning_records())
    ours = sorted(r.latency_s if r.correct else 1e10 for r in as_is[0].records)
    assert ours == pytest.approx(theirs)


def test_every_imported_script_reapplies_to_its_workload(as_is):
    group = as_is[0]
    record = group.records[0]
    assert record.family == "database" and record.workload.startswith("database(name=main,")
    assert record.workload_script is not None
    wl = _rebuild(record)
    assert wl.identity == record.workload_id == workload(SPEC).identity
    for record in group.records:
        assert record.script is not None
        dragon_dsl.to_schedule(record.script, workload=wl, target=TARGET)
        assert Record.from_dict(json.loads(record.to_json())) == record


def test_a_matching_spec_names_the_workload(tuned, as_is):
    [group] = database_records(tuned, specs=[SPEC, "softmax(m=4,n=8)"])
    assert group.workload == SPEC and group.key.startswith("matmul-")
    assert {(r.workload, r.family, r.workload_script) for r in group.records} == \
        {(SPEC, "matmul", None)}
    assert [r.script for r in group.records] == [r.script for r in as_is[0].records]


def test_keys_are_stable_and_skip_leaves_groups_out(tuned, as_is, tmp_path):
    again = list(database_records(tuned))
    assert [g.key for g in again] == [g.key for g in as_is]
    assert list(database_records(tuned, skip={as_is[0].key})) == []
    # Subfolders: one group per database, each with its own key; committed as tasks.
    _copy(tuned, tmp_path / "runs" / "a")
    _copy(tuned, tmp_path / "runs" / "b" / "c")
    assert len(find_databases(str(tmp_path / "runs"))) == 2
    groups = list(database_records(str(tmp_path / "runs")))
    assert len({g.key for g in groups}) == 2 and as_is[0].key not in {g.key for g in groups}
    store = RecordStore(str(tmp_path / "out"))
    for g in groups:
        store.commit(g.summary(), g.records)
    assert len(list(store.all_records())) == 16


def test_a_trace_that_does_not_replay_is_an_apply_error_record(tuned, tmp_path):
    folder = _copy(tuned, tmp_path / "db")
    path = os.path.join(folder, RECORDS)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    lines[1] = lines[1].replace('["C","main"]', '["no_such_block","main"]', 1)
    assert "no_such_block" in lines[1]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    [group] = database_records(folder)
    bad = group.records[1]
    assert (bad.status, bad.stage, bad.script, bad.latency_s) == (
        "apply_error", "apply", None, None)
    assert "does not replay" in bad.message and "no_such_block" in bad.message
    assert sum(r.script is not None for r in group.records) == 7


# ---- re-measured -----------------------------------------------------------------------------

def test_remeasured_records_are_verified_outcomes(tuned, as_is, llvm2_evaluator):
    ev = llvm2_evaluator  # the session's Evaluator on TARGET with FAST's settings (conftest)
    assert ev.config == FAST
    [group] = database_records(tuned, measure=ev)
    device = ev.device
    assert group.key != as_is[0].key
    assert len(group.records) == 8
    for record, old in zip(group.records, as_is[0].records, strict=True):
        assert record.script == old.script
        assert (record.verified, record.device, record.source) == (True, device, "database")
        # Our own measurement decides: MetaSchedule's failed builds were deliberate, so those
        # scripts are fine; every candidate of a plain matmul is correct.
        assert record.status == "correct" and record.latency_s > 0, record.message


def test_an_evaluator_for_another_target_kind_is_refused(tuned):
    class CudaEvaluator:
        from codegen.targets import as_target

        target = as_target("cuda")
        target_json = '{"kind": "cuda"}'
        device = "none"

        def evaluate(self, workload, scripts):  # pragma: no cover - never reached
            raise AssertionError

    with pytest.raises(DataError, match="for llvm, the evaluator measures on cuda"):
        list(database_records(tuned, measure=CudaEvaluator()))


# ---- damaged databases -----------------------------------------------------------------------

def _damaged(tuned, tmp_path, name: str, edit) -> str:
    folder = _copy(tuned, tmp_path / "db")
    path = os.path.join(folder, name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(edit(text))
    return path


@pytest.mark.parametrize(("name", "edit", "line", "says"), [
    (RECORDS, lambda t: t[:-40], 8, "cut short"),
    (RECORDS, lambda t: t.replace("\n", "\n{oops\n", 1), 2, "not JSON"),
    (RECORDS, lambda t: t.replace("\n", "\n" + "[" * 100_000 + "\n", 1), 2, "nested too deep"),
    (WORKLOADS, lambda t: "[" * 100_000 + "\n", 1, "nested too deep"),
    (RECORDS, lambda t: '[0, "no trace"]\n' + t, 1, "not a MetaSchedule tuning record"),
    (RECORDS, lambda t: t.replace("[0,", "[7,", 1), 1, "workload 7, but"),
    (RECORDS, lambda t: t.replace('"num-cores":2', '"num-cores":"two"', 1), 1, "not a target"),
    (WORKLOADS, lambda t: t[:200], 1, "cut short"),
    (WORKLOADS, lambda t: '["1", "bm90IGEgbW9kdWxl"]\n', 1, "cannot decode"),
    (WORKLOADS, lambda t: "[1, 2, 3]\n", 1, "not a MetaSchedule workload"),
])
def test_a_damaged_file_is_a_data_error_naming_file_and_line(tuned, tmp_path, name, edit,
                                                             line, says):
    path = _damaged(tuned, tmp_path, name, edit)
    with pytest.raises(DataError, match=says) as info:
        list(database_records(os.path.dirname(path)))
    assert f"{path}:{line}:" in str(info.value)


def test_missing_or_unrelated_input_is_a_data_error(tuned, tmp_path):
    with pytest.raises(DataError, match="no such file or directory"):
        find_databases(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no MetaSchedule database"):
        find_databases(str(tmp_path / "empty"))
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(os.path.join(tuned, RECORDS), half / RECORDS)
    with pytest.raises(DataError, match=f"has no {WORKLOADS}"):
        list(database_records(str(half)))
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(DataError, match="not a MetaSchedule database file"):
        find_databases(str(tmp_path / "notes.txt"))
    # One file of a pair names its database.
    assert find_databases(os.path.join(tuned, RECORDS))[0].records == \
        os.path.join(tuned, RECORDS)


# ---- a database of several workloads ---------------------------------------------------------

@pytest.mark.slow
def test_a_database_of_two_workloads_gives_two_groups(tuned, tmp_path, llvm2_evaluator):
    """tune_tir run again in the same work directory appends a second workload to the pair."""
    from tvm.s_tir import meta_schedule as ms

    from codegen.search.baselines import _build_candidate

    folder = _copy(tuned, tmp_path / "db")
    other = "softmax(m=16,n=32)"
    _tune(other, folder, ms.builder.LocalBuilder(f_build=_build_candidate, max_workers=1,
                                                 timeout_sec=120))
    assert len(_lines(os.path.join(folder, WORKLOADS))) == 2
    groups = list(database_records(folder, specs=[SPEC, other]))
    assert [g.workload for g in groups] == [SPEC, other]
    assert len(groups[0].records) == 8 and len(groups[1].records) >= 1
    measured = list(database_records(folder, measure=llvm2_evaluator, specs=[SPEC, other]))
    for group in measured:
        for record in group.records:
            assert record.verified and record.status == "correct", record.message
            dragon_dsl.to_schedule(record.script, workload=workload(record.workload),
                                   target=TARGET)


def test_dragon_datagen_from_database_writes_datasets(tuned, tmp_path, dragon_cmd):
    """The command: a tune_tir database in, records and both datasets out; rerun does nothing
    new; --as-is records are marked unverified.  (In this process, ``dragon_cmd``: the installed
    command runs in a process of its own in test_datagen.py.)"""
    import datasets

    out = str(tmp_path / "out")
    cmd = ["datagen", "--from-database", tuned, "--out", out, "--quiet",
           "--repeat", "2", "--min-repeat-ms", "1", "--builders", "1",
           "--target", json.dumps(TARGET), "--workload", SPEC]
    done = dragon_cmd(cmd)
    assert done.returncode == 0, done.stderr
    assert "measured again" in done.stderr
    records = list(RecordStore(out).all_records())
    with open(os.path.join(tuned, RECORDS), encoding="utf-8") as f:
        assert len(records) == len(f.readlines())
    assert all(r.verified and r.source == "database" and r.workload == SPEC for r in records)
    construction = datasets.load_from_disk(os.path.join(out, "construction"))
    rows = [row for split in construction.values() for row in split]
    assert rows and all(row["workload"] == SPEC for row in rows)
    assert os.path.exists(os.path.join(out, "README.md"))
    again = dragon_cmd(cmd)
    assert again.returncode == 0 and "0 records imported" in again.stderr, again.stderr
    other = dragon_cmd(cmd + ["--as-is"])
    assert other.returncode == 2 and "other settings" in other.stderr
    # --as-is into a folder of its own: MetaSchedule's latencies taken, records unverified.
    as_is = str(tmp_path / "as-is")
    taken = dragon_cmd(["datagen", "--from-database", tuned, "--out", as_is, "--quiet",
                        "--as-is", "--workload", SPEC])
    assert taken.returncode == 0, taken.stderr
    unverified = list(RecordStore(as_is).all_records())
    assert len(unverified) == len(records)
    assert not any(r.verified for r in unverified)
    assert any(r.correct for r in unverified)
