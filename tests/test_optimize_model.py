"""Whole-model ``dragon optimize`` (training.optimize.model, codegen.model_build,
codegen.search.database): the budget split, the MetaSchedule database written from
MetaSchedule-derived scripts of bert tiny's tasks and picked up by TVM's
``MetaScheduleApplyDatabase`` + ``relax.build`` with outputs equal to the default build's,
hostile inputs refused with exit code 2, and the whole command on a Relax module file
with the built-in model: database, budget split and three measured end-to-end rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import dragon_dsl
from codegen.measure.model_jobs import apply_database, scheduled_functions
from codegen.measure.verify import compare
from codegen.model_build import build_model, model_inputs
from codegen.search import sample_traces
from codegen.search.database import DatabaseRecord, read_database, write_database
from codegen.targets import postproc_set
from codegen.workloads.models import (
    extract_tasks,
    import_model,
    module_tasks,
)
from codegen.workloads.relax_files import load_module_file
from dragon_dsl.cli import main
from training.optimize.budget import OptimizeError, split_budget

MLP = str(Path(__file__).parent / "data" / "relax_mlp.py")
TARGET = {"kind": "llvm", "num-cores": 2}
SEQ = 4  # bert tiny with 4 tokens: the cheapest real model of the zoo


def _run_vm(executable, inputs):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return [o.numpy() for o in (out if not isinstance(out, tvm.runtime.Tensor) else [out])]


# -- the budget split --------------------------------------------------------------------------

def test_split_budget_sums_to_the_budget_and_follows_the_shares():
    parts = split_budget(100, [4, 6, 4, 4], [3.0, 1.0, 0.0, 1.0])
    assert sum(parts) == 100
    assert all(p >= m for p, m in zip(parts, [4, 6, 4, 4], strict=True))
    extra = [p - m for p, m in zip(parts, [4, 6, 4, 4], strict=True)]
    assert extra[2] == 0  # the 82 left above the minimums go 3:1:0:1
    assert extra == pytest.approx([82 * 3 / 5, 82 / 5, 0, 82 / 5], abs=1)
    assert split_budget(13, [4, 4], [0.0, 0.0]) in ([7, 6], [6, 7])  # no shares: equal
    assert split_budget(8, [4, 4], [5.0, 1.0]) == [4, 4]


def test_split_budget_too_small_names_what_each_task_needs():
    with pytest.raises(OptimizeError, match=r"Expected budget >= 10 but got budget=9.*4\+6"):
        split_budget(9, [4, 6], [1.0, 1.0])


# -- the database, from MetaSchedule's scripts, picked up by TVM's own flow --------------------

def _database_round_trip(mod, tasks, names, work_dir):
    """MetaSchedule-sampled scripts of the tasks ``names`` written as a database, read back by
    MetaSchedule, applied by TVM's flow; the build's outputs against the default build's."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    chosen = [t for t in tasks if t.name in names]
    assert len(chosen) == len(names)
    records = []
    for task in chosen:
        [trace] = sample_traces(task.mod, TARGET, "llvm", 1)
        script = dragon_dsl.from_trace(trace, postproc="auto", postproc_set=postproc_set("llvm"),
                                       workload=task.workload, target=TARGET)
        records.append(DatabaseRecord(task.workload, script, [1e-6, 2e-6]))
    assert write_database(work_dir, records, TARGET) == len(names)
    database = ms.database.JSONDatabase(work_dir=work_dir)
    assert len(database.get_all_tuning_records()) == len(names)
    assert [s for _, s in read_database(work_dir)] == [1.5e-6] * len(names)
    target = tvm.target.Target(TARGET)
    for task in chosen:  # each task finds its schedule, as MetaScheduleApplyDatabase asks
        assert database.query_schedule(task.mod, target, workload_name="main") is not None
    assert sorted(scheduled_functions(apply_database(mod, target, work_dir))) == sorted(names)
    inputs = model_inputs(mod)
    before = _run_vm(build_model(mod, TARGET), inputs)
    after = _run_vm(build_model(mod, TARGET, work_dir), inputs)
    result = compare(after, before)
    assert result.ok, result.message
    assert all(np.isfinite(o).all() for o in after)


def test_database_of_a_module_file_is_picked_up_by_tvm(tmp_path):
    mod = load_module_file(MLP)
    _database_round_trip(mod, module_tasks(mod), ["fused_matmul_add_relu", "softmax"],
                         str(tmp_path / "db"))


@pytest.mark.slow
def test_database_of_bert_tiny_is_picked_up_by_tvm(tmp_path):
    mod = import_model("bert", "tiny", seq=SEQ)
    _database_round_trip(mod, extract_tasks("bert", "tiny", TARGET, seq=SEQ),
                         ["fused_matmul_add2", "layer_norm"], str(tmp_path / "db"))


# -- hostile inputs ----------------------------------------------------------------------------

def _usage(capsys, *argv) -> str:
    assert main(["optimize", *argv, "-q"]) == 2
    return capsys.readouterr().err


def test_unknown_model_is_a_usage_error(capsys):
    err = _usage(capsys, "model(name=bort,preset=tiny)")
    assert "name='bort'" in err and "bert" in err
    assert "preset='huge'" in _usage(capsys, "model(name=bert,preset=huge)")


def test_missing_or_corrupt_module_file_is_a_usage_error(capsys, tmp_path):
    assert "no such file" in _usage(capsys, str(tmp_path / "gone.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"root": 1, "nodes": [')
    assert f"{bad}: not a Relax module in TVM's JSON" in _usage(capsys, str(bad))
    broken = tmp_path / "broken.py"
    broken.write_text(Path(MLP).read_text().replace("R.matmul(x, w)", "R.matmul(x, w, q)"))
    assert f"{broken}: not a Relax module in TVMScript" in _usage(capsys, str(broken))


def test_budget_too_small_is_a_usage_error_before_measuring(capsys, tmp_path):
    err = _usage(capsys, MLP, "--budget", "5", "--out", str(tmp_path / "r.json"))
    assert "--budget: Expected budget >= " in err and "each of the 2 tasks" in err
    assert not (tmp_path / "r.database").exists()


def test_module_files_load_as_prepared_relax_modules(tmp_path):
    import tvm

    mod = load_module_file(MLP)
    names = [t.name for t in module_tasks(mod)]
    assert names == ["fused_matmul_add_relu", "softmax"]
    saved = tmp_path / "mlp.json"
    saved.write_text(tvm.ir.save_json(mod))
    assert [t.name for t in module_tasks(load_module_file(str(saved)))] == names


# -- the whole command -------------------------------------------------------------------------

@pytest.mark.slow  # 20 s alone, minutes on busy cores; the database test above stays default
def test_optimize_a_module_file_end_to_end(tmp_path, capsys):
    from tvm.s_tir import meta_schedule as ms

    out = tmp_path / "mlp.optimize.json"
    code = main(["optimize", MLP, "-k", "2", "--rounds", "0", "--budget", "24",
                 "--population", "16", "--e2e-rounds", "2", "--repeat", "2",
                 "--min-repeat-ms", "1", "--max-new-tokens", "128", "--no-only-faster",
                 "--out", str(out), "--json", "-q"])
    printed = json.loads(capsys.readouterr().out)
    written = json.loads(out.read_text())
    assert printed["tasks"] == written["tasks"]
    assert code == (0 if written["records"] else 1)
    tasks = written["tasks"]
    assert [t["name"] for t in tasks] == ["fused_matmul_add_relu", "softmax"]
    assert sum(t["budget"] for t in tasks) == 24
    assert all(t["measurements"] <= t["budget"] for t in tasks)
    assert written["measurements"] == sum(t["measurements"] for t in tasks)
    # MetaSchedule was given as many measurements as dragon spent, task by task.
    assert [t["metaschedule_trials"] for t in tasks] == [t["measurements"] for t in tasks]
    database = written["database"]
    assert database == str(tmp_path / "mlp.optimize.database")
    assert written["records"] == sum(t["ok"] for t in tasks) >= 1
    assert len(ms.database.JSONDatabase(work_dir=database).get_all_tuning_records()) == \
        written["records"]
    rows = written["end_to_end"]
    assert list(rows) == ["before", "dragon", "metaschedule"]
    for row in rows.values():
        assert row["status"] == "correct", row
        assert row["latency_s"] > 0 and len(row["times"]) == 2 * 2
        assert row["speedup"] == pytest.approx(rows["before"]["latency_s"] / row["latency_s"])
    assert rows["dragon"]["scheduled"] == written["records"]
    assert rows["before"]["scheduled"] == 0
