"""``dragon eval`` (training.evaluate): held-out tasks, models side by side, every attempt
measured beside its references, the field's figures, the report, resume and bad input.

The data comes from a real MetaSchedule search (softmax lands in the validation split, which
the tests evaluate on); the models are a few-second SFT run (``conftest.sft_model``) and its
first checkpoint, and MetaSchedule's own search at equal budgets (the model ``metaschedule``,
with a small population to keep it quick).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dragon_dsl.configs import from_flat
from training.evaluate import (
    EvalConfig,
    EvalError,
    TaskError,
    load_tasks,
    metaschedule,
    run_eval,
    summarize,
)
from training.evaluate.metrics import FAST_P, budget_curves, head_to_head

from .tiny_datagen import TARGET

DRAGON = os.path.join(os.path.dirname(sys.executable), "dragon")
CONFIG = from_flat(EvalConfig, split="validation", max_tasks=1, attempts=2, max_new_tokens=384,
                   repeat=2, min_repeat_ms=1.0, search_population=32, builders=1)
MS = metaschedule.NAME


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
    # --families keeps the tasks of those families only.
    assert load_tasks(data_dir, "validation", families=("softmax", "dense")) == tasks
    assert load_tasks(data_dir, "validation", families=("dense",)) == []


def test_every_attempt_is_measured_beside_its_references(evaluation, models):
    out, summary = evaluation
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    # 2 models and MetaSchedule x 2 kinds x attempts
    assert len(rows) == (len(models) + 1) * 2 * CONFIG.attempts
    assert len({r["session"] for r in rows}) == 1  # every row measured in one session
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
    for kind in ("construction", "refinement"):
        assert set(summary["head_to_head"][kind]) == {
            "early vs final", f"early vs {MS}", f"final vs {MS}"}
        for h in summary["head_to_head"][kind].values():
            assert h["wins_a"] + h["wins_b"] + h["ties"] == h["tasks"] == 1
        # per family, the same pairs, adding up to the whole
        families = summary["head_to_head_by_family"][kind]
        for pair, h in summary["head_to_head"][kind].items():
            for key in h:
                assert sum(f[pair][key] for f in families.values()) == h[key]
        # each model against itself: what sampling alone decides, at most every task
        for model, duel in summary["head_to_head_noise"][kind].items():
            assert duel["tasks"] == 1 and 0 <= duel["decided"] <= 1, model
        # the permutation test of each pair, over the one task, at best of every attempt
        assert set(summary["permutation"][kind]) == set(summary["head_to_head"][kind])
        for t in summary["permutation"][kind].values():
            assert t["tasks"] == 1 and t["k"] == CONFIG.attempts and 0 < t["p"] <= 1
            assert t["ratio"] > 0
    report = (out / "report.md").read_text()
    assert "| early vs final |" in report and "sign test p" in report
    assert "permutation p" in report
    assert "Sampling alone: each model against itself" in report


def test_the_scripts_of_every_model_are_counted_beside_metaschedules(evaluation):
    out, summary = evaluation
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    report = (out / "report.md").read_text()
    assert "## What the scripts do" in report
    for model, kinds in summary["by_model"].items():
        for kind, f in kinds.items():
            mine = [r for r in rows if (r["model"], r["kind"]) == (model, kind)
                    and r.get("script") and r["status"] != "parse_error"]
            shapes = f["scripts"]
            assert shapes["scripts"] == len(mine) > 0
            # Tiling counted here from the text: two tile or split lines with two factors
            # other than 1.
            tiling = sum(sum(1 for line in r["script"].splitlines()
                             if line.startswith(("tile ", "split ")) and sum(
                                 x.strip() != "1"
                                 for x in line[line.index("[") + 1:line.index("]")].split(","))
                             >= 2) >= 2 for r in mine)
            assert shapes["tile"] == tiling / len(mine)
            assert f"| {model} | {kind} | {len(mine)} | " in report


def test_metaschedule_searches_once_per_workload_and_is_measured_like_a_model(evaluation):
    out, summary = evaluation
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    mine = [r for r in rows if r["model"] == MS]
    assert {r["kind"] for r in mine} == {"construction", "refinement"}
    assert summary["models"][MS] == metaschedule.describe(CONFIG.search_population)
    [search] = (out / "generated" / MS / "searches").glob("*.json")
    trials = json.loads(search.read_text())
    assert trials["workload"] == mine[0]["workload"]
    assert trials["search"]["trials"] == trials["search"]["per_round"] == CONFIG.attempts
    # One search for both kinds: its trials, in the order measured, are the attempts of each.
    for kind in ("construction", "refinement"):
        attempts = sorted((r for r in mine if r["kind"] == kind), key=lambda r: r["attempt"])
        assert [r["script"] for r in attempts] == [t["script"] for t in trials["samples"]]
        # Re-measured in the task's batch; the search's own measurement rides along.
        assert all(r["search_status"] in {"correct", "incorrect", "build_error"}
                   for r in attempts)
        assert all(r["status"] in {"correct", "incorrect", "build_error"} for r in attempts)
    figures = summary["by_model"][MS]["construction"]
    assert figures["attempts"] == CONFIG.attempts and figures["applies"] == 1.0


def test_budget_curves_of_every_model_rise_with_measurements(evaluation, models):
    out, summary = evaluation
    curves = summary["curves"]
    assert set(curves) == {*models, MS}
    for model, kinds in curves.items():
        for kind in ("construction", "refinement"):
            c = kinds[kind]
            assert c["measurements"] == list(range(1, CONFIG.attempts + 1))
            assert c["tasks"] == 1
            assert all(g >= 1.0 for g in c["geomean"])
            assert all(a <= b for a, b in zip(c["geomean"], c["geomean"][1:], strict=False))
            assert all(a <= b for a, b in zip(c["fast_1"], c["fast_1"][1:], strict=False))
            # After every attempt the curve is the task's best, or 1x without a faster one.
            best = summary["by_model"][model][kind]["best_speedup_geomean"] or 1.0
            assert c["geomean"][-1] == pytest.approx(max(1.0, best))
            assert c["fast_1"][-1] == summary["by_model"][model][kind]["fast_p"]["1"]


def test_the_report_has_its_tables_and_plots(evaluation):
    out, _ = evaluation
    report = (out / "report.md").read_text()
    assert "| early |" in report and "| final |" in report and "fast_1.2" in report
    assert f"| {MS} |" in report and f"`{MS}` does not refine" in report
    assert report.count("| model | n=1 | n=2 |") == 2  # a budget table per kind
    for name in ("correctness.png", "speedups.png", "scatter.png", "budget_curves.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_rerun_measures_only_what_is_missing(evaluation, data_dir, models, monkeypatch):
    out, summary = evaluation
    files = sorted((out / "samples").rglob("*.jsonl"))
    scripts = sorted((out / "generated").rglob("*.json"))
    searches = sorted((out / "generated" / MS / "searches").glob("*.json"))
    assert len(files) == 2 * (len(models) + 1) and len(searches) == 1
    assert len(scripts) == len(files) + len(searches)
    stamps = {p: p.stat().st_mtime_ns for p in files + scripts}
    # A model's measured task; MetaSchedule's measured task, and another with its scripts.
    model_file = files[0]
    ms_file, ms_other = (p for p in files if p.parent.name == MS)
    ms_scripts = next(p for p in scripts if p.parent.name == MS and p.stem == ms_other.stem)
    held = json.loads(ms_scripts.read_text())
    for path in (model_file, ms_file, ms_other, ms_scripts):
        path.unlink()

    def no_search(*args, **kwargs):
        raise AssertionError("the search was run again")

    monkeypatch.setattr(metaschedule, "search_attempts", no_search)
    again = run_eval(models, data_dir, out, target=TARGET, config=CONFIG, progress=False)
    assert model_file.is_file() and ms_file.is_file() and ms_other.is_file()
    # MetaSchedule's scripts come back from its search of the workload, not a new search.
    assert json.loads(ms_scripts.read_text()) == held
    # Measured again from the scripts already generated; nothing else touched.
    untouched = [p for p in files + scripts
                 if p not in (model_file, ms_file, ms_other, ms_scripts)]
    assert all(p.stat().st_mtime_ns == stamps[p] for p in untouched)
    assert again["by_model"].keys() == summary["by_model"].keys()


def test_fast_kernels_are_left_out_of_the_figures_without_measuring_again(
        evaluation, data_dir, models, monkeypatch):
    out, _ = evaluation
    rows = [json.loads(line) for path in (out / "samples").rglob("*.jsonl")
            for line in path.read_text().splitlines() if line.strip()]
    times: dict[str, list[float]] = {}
    for r in rows:  # a task's rows measured again by the rerun above have their own
        times.setdefault(r["task"], []).append(r["unscheduled_s"])
    unscheduled = {t: statistics.median(v) for t, v in times.items()}
    slowest = max(unscheduled.values())
    kept = {t for t, u in unscheduled.items() if u >= slowest}

    def no_evaluator(*args, **kwargs):
        raise AssertionError("a kernel was measured again")

    monkeypatch.setattr("training.evaluate.runner.Evaluator", no_evaluator)
    config = replace(CONFIG, min_unscheduled_us=slowest * 1e6)
    summary = run_eval(models, data_dir, out, target=TARGET, config=config, progress=False)
    assert sum(summary["tasks"].values()) == len(kept)
    assert sum(summary["left_out"].values()) == len(unscheduled) - len(kept)
    families = {f: m for kind in summary["by_family"].values() for f, m in kind.items()}
    assert sum(m["final"]["tasks"] for m in families.values()) == len(kept)
    report = (out / "report.md").read_text()
    assert f"at least {slowest * 1e6:g} us" in report and "| family | tasks |" in report
    # Every row is still written; only the figures leave tasks out.
    assert len((out / "samples.jsonl").read_text().splitlines()) == len(rows)

    nothing = run_eval(models, data_dir, out, target=TARGET, progress=False,
                       config=replace(CONFIG, min_unscheduled_us=slowest * 1e6 * 10))
    assert sum(nothing["tasks"].values()) == 0 and nothing["by_model"] == {}
    again = run_eval(models, data_dir, out, target=TARGET, config=CONFIG, progress=False)
    assert "left_out" not in again and sum(again["tasks"].values()) == len(unscheduled)


def test_an_out_directory_of_another_evaluation_is_refused(evaluation, data_dir, models):
    out, _ = evaluation
    changed = "another settings: it was .*attempts.: 2.*now .*attempts.: 3"
    with pytest.raises(EvalError, match=changed):
        run_eval(models, data_dir, out, target=TARGET,
                 config=replace(CONFIG, attempts=3), progress=False)


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
    with pytest.raises(EvalError, match=f"the model name '{MS}' stands for MetaSchedule"):
        run_eval({MS: models["final"]}, data_dir, tmp_path / "o", target=TARGET, config=CONFIG)
    with pytest.raises(EvalError, match="holds no tasks of the families dense"):
        run_eval(models, data_dir, tmp_path / "o", target=TARGET,
                 config=replace(CONFIG, families=("dense",)))


def test_cli_prints_the_summary_of_a_finished_evaluation(evaluation, data_dir, models,
                                                         tmp_path, dragon_cmd):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(evaluation[0], out)
    summary = json.loads((out / "summary.json").read_text())  # the latest run's
    args = [DRAGON, "eval", "--data", str(data_dir), "--out", str(out), "--split", "validation",
            "--max-tasks", "1", "-k", "2", "--max-new-tokens", "384", "--repeat", "2",
            "--min-repeat-ms", "1", "--target", json.dumps(TARGET), "--json", "-q",
            "--no-metaschedule"]
    for name, path in models.items():
        args += ["--model", f"{name}={path}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    # Without MetaSchedule: the models' figures as before, MetaSchedule's left out.
    assert printed["by_model"] == {m: f for m, f in summary["by_model"].items() if m != MS}
    assert set(printed["curves"]) == set(models)
    # A model that is not there: refused (in this process; the installed command's own process
    # is the one above).
    bad = dragon_cmd(["eval", "--model", "a=/nonexistent", "--data", data_dir, "--out", out])
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


def test_budget_curves_take_attempts_in_order_and_keep_the_unscheduled_kernel():
    def row(model, task, attempt, status, latency, kind="construction"):
        return {"model": model, "task": task, "kind": kind, "attempt": attempt,
                "status": status, "latency_s": latency, "unscheduled_s": 4.0}

    rows = [row("a", "t1", 0, "incorrect", None), row("a", "t1", 1, "correct", 8.0),
            row("a", "t1", 2, "correct", 1.0), row("a", "t2", 0, "correct", 2.0),
            row("a", "t2", 1, "build_error", None), row("a", "t2", 2, "correct", 0.5),
            row("a", "t3", 0, "skipped", None),
            # b stopped after one measurement (a search that ran out of candidates)
            row("b", "t1", 0, "correct", 4.0), row("b", "t2", 0, "timeout", None),
            row("b", "t9", 0, "correct", 1.0, kind="refinement")]
    curves = budget_curves(rows)
    a = curves["a"]["construction"]
    assert a["measurements"] == [1, 2, 3] and a["tasks"] == 2  # the skipped task left out
    # t1: none, then 0.5x (slower: the unscheduled kernel stays, 1x), then 4x; t2: 2x, 2x, 8x.
    assert a["geomean"] == pytest.approx([2 ** 0.5, 2 ** 0.5, (4 * 8) ** 0.5])
    assert a["fast_1"] == [0.5, 0.5, 1.0]
    b = curves["b"]["construction"]
    assert b["measurements"] == [1] and b["geomean"] == [1.0] and b["fast_1"] == [0.5]
    assert curves["b"]["refinement"]["geomean"] == [pytest.approx(4.0)]
