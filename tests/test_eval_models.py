"""``dragon eval`` (training.evaluate): held-out tasks, models side by side, every attempt
measured beside its references, the field's figures, the report, resume and bad input.

The data comes from a real MetaSchedule search (softmax lands in the validation split, which
the tests evaluate on); the models are a few-second SFT run (``conftest.sft_model``) and its
first checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.evaluate import EvalConfig, EvalError, TaskError, load_tasks, run_eval, summarize
from training.evaluate.metrics import FAST_P, head_to_head

from .tiny_datagen import TARGET

DRAGON = os.path.join(os.path.dirname(sys.executable), "dragon")
CONFIG = EvalConfig(split="validation", max_tasks=1, attempts=2, max_new_tokens=384,
                    repeat=2, min_repeat_ms=1.0)


@pytest.fixture(scope="module")
def data_dir(datagen_dir) -> Path:
    return datagen_dir


@pytest.fixture(scope="module")
def models(sft_model) -> dict[str, str]:
    return {"early": str(sft_model / "checkpoints" / "checkpoint-4"), "final": str(sft_model)}


@pytest.fixture(scope="module")
def evaluation(data_dir, models, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "out"
    summary = run_eval(models, data_dir, out, target=TARGET, config=CONFIG, progress=False)
    return out, summary


def test_tasks_are_the_distinct_prompts_of_the_split(data_dir):
    tasks = load_tasks(data_dir, "validation")
    kinds = {t.kind for t in tasks}
    assert kinds == {"construction", "refinement"}
    assert all(t.workload.startswith("softmax") for t in tasks)
    assert len({t.id for t in tasks}) == len(tasks)
    assert all(t.start_script for t in tasks if t.kind == "refinement")
    # MetaSchedule's best script for the workload rides along, to be re-measured.
    assert all(t.metaschedule_script for t in tasks)


def test_every_attempt_is_measured_beside_its_references(evaluation, models):
    out, summary = evaluation
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == len(models) * 2 * CONFIG.attempts  # 2 models x 2 kinds x attempts
    for row in rows:
        assert row["status"] in {"correct", "incorrect", "build_error", "runtime_error",
                                 "timeout", "apply_error", "parse_error"}
        assert row["unscheduled_s"] > 0 and row["metaschedule_s"] > 0
        assert (row["latency_s"] is not None) == (row["status"] == "correct")
        if row["kind"] == "refinement":
            assert row["start_s"] > 0
    # Schedule-aware decoding: every attempt applies, and the figures say so.
    for figures in summary["by_model"].values():
        for kind in ("construction", "refinement"):
            f = figures[kind]
            assert f["attempts"] == CONFIG.attempts and f["applies"] == 1.0
            assert set(f["fast_p"]) == {f"{p:g}" for p in FAST_P}
            assert f["fast_p"]["0"] == (1.0 if f["correct"] > 0 else 0.0)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary == {**summary, "by_model": summarize(rows)}
    h = summary["head_to_head"]["construction"]["early vs final"]
    assert h["wins_a"] + h["wins_b"] + h["ties"] == h["tasks"] == 1


def test_the_report_has_its_tables_and_plots(evaluation):
    out, _ = evaluation
    report = (out / "report.md").read_text()
    assert "| early |" in report and "| final |" in report and "fast_1.2" in report
    for name in ("correctness.png", "speedups.png", "scatter.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_rerun_measures_only_what_is_missing(evaluation, data_dir, models):
    out, summary = evaluation
    files = sorted((out / "samples").rglob("*.jsonl"))
    scripts = sorted((out / "generated").rglob("*.json"))
    assert len(scripts) == len(files) == 2 * len(models)
    stamps = {p: p.stat().st_mtime_ns for p in files + scripts}
    files[0].unlink()
    again = run_eval(models, data_dir, out, target=TARGET, config=CONFIG, progress=False)
    assert files[0].is_file()
    # Measured again from the scripts already generated; nothing else touched.
    assert all(p.stat().st_mtime_ns == stamps[p] for p in files[1:] + scripts)
    assert again["by_model"].keys() == summary["by_model"].keys()


def test_an_out_directory_of_another_evaluation_is_refused(evaluation, data_dir, models):
    out, _ = evaluation
    changed = "another settings: it was .*attempts.: 2.*now .*attempts.: 3"
    with pytest.raises(EvalError, match=changed):
        run_eval(models, data_dir, out, target=TARGET,
                 config=EvalConfig(**{**CONFIG.__dict__, "attempts": 3}), progress=False)


def test_a_corrupt_sample_file_is_named(evaluation, data_dir, models, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(evaluation[0], out)
    victim = sorted((out / "samples").rglob("*.jsonl"))[0]
    victim.write_text('{"model": "x"\n')
    with pytest.raises(EvalError, match=f"{victim.name}:1: not a sample row"):
        run_eval(models, data_dir, out, target=TARGET, config=CONFIG, progress=False)


def test_missing_data_and_models_are_clear_errors(data_dir, models, tmp_path):
    from training.train.run_dir import RunError

    with pytest.raises(TaskError, match="no construction dataset"):
        load_tasks(tmp_path)
    with pytest.raises(TaskError, match="no 'nope' split"):
        load_tasks(data_dir, "nope")
    with pytest.raises(RunError, match="no model in"):
        run_eval({"x": str(tmp_path)}, data_dir, tmp_path / "o", target=TARGET, config=CONFIG)


def test_cli_prints_the_summary_of_a_finished_evaluation(evaluation, data_dir, models):
    out, _ = evaluation
    summary = json.loads((out / "summary.json").read_text())  # the latest run's
    args = [DRAGON, "eval", "--data", str(data_dir), "--out", str(out), "--split", "validation",
            "--max-tasks", "1", "-k", "2", "--max-new-tokens", "384", "--repeat", "2",
            "--min-repeat-ms", "1", "--target", json.dumps(TARGET), "--json", "-q"]
    for name, path in models.items():
        args += ["--model", f"{name}={path}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["by_model"] == summary["by_model"]
    bad = subprocess.run([DRAGON, "eval", "--model", "a=/nonexistent", "--data", str(data_dir),
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no model in /nonexistent" in bad.stderr


def test_head_to_head_counts_ties_within_the_tolerance():
    rows = [{"model": m, "task": t, "kind": "k", "status": "correct", "latency_s": s}
            for m, t, s in (("a", "t1", 1.00), ("b", "t1", 1.01), ("a", "t2", 1.0),
                            ("b", "t2", 2.0))]
    rows.append({"model": "b", "task": "t3", "kind": "k", "status": "incorrect",
                 "latency_s": None})
    rows.append({"model": "a", "task": "t3", "kind": "k", "status": "skipped"})
    assert head_to_head(rows, "a", "b", "k") == {"wins_a": 1, "wins_b": 0, "ties": 1,
                                                 "tasks": 2}
