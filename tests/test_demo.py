"""``dragon demo`` (optimize.demo): the model's search and MetaSchedule's get the same number of
measured candidates, and the headline figures are the end-of-run re-timing of both winners
beside the baselines.  Uses the built-in model, on a small kernel so that it fits in a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dragon_dsl.cli import main

SPEC = "softmax(m=32,n=64)"       # DLight has a CPU rule for it: both baselines exist
MLP = Path(__file__).parent / "data" / "relax_mlp.py"


@pytest.mark.slow
def test_the_demo_gives_metaschedule_the_models_budget(capsys, tmp_path):
    code = main(["demo", "--kernel", SPEC, "--network", str(MLP), "--transfer", "2",
                 "-k", "2", "--rounds", "0", "--width", "4", "--cost-model", "auto",
                 "--search", "3", "--network-k", "1", "--network-search", "1",
                 "--out", str(tmp_path / "new"), "--json", "-q"])   # made
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    kernel = out["kernel"]
    assert kernel["trials"] == kernel["optimize"]["measurements"]
    # MetaSchedule as a user runs it: tune_tir with max_trials_global the model's count (its
    # database may hold fewer when the space runs out), each side's wall clock kept
    assert 0 < kernel["metaschedule_trials"] <= kernel["trials"]
    assert kernel["metaschedule_script"].rstrip().endswith("postproc auto llvm")
    assert set(kernel["seconds"]) == {"dragon", "metaschedule"}
    assert all(s > 0 for s in kernel["seconds"].values())
    # two scripts carried over from the kept corpus, the model's two kernels (ranked from 4
    # samples, refining the corpus' best), then the search seeded with them all
    sources = [c["source"] for c in kernel["optimize"]["candidates"]]
    assert sources[:2] == ["corpus", "corpus"]
    assert sources.count("sample") == 2 and 1 <= sources.count("search") <= 3
    assert [r["prompt"] for r in kernel["optimize"]["rounds"]][:2] == ["corpus", "refinement"]
    final = kernel["final"]
    assert set(final) >= {"dragon", "unscheduled", "default"}
    for name, outcome in final.items():
        assert outcome["status"] == "correct", name
        assert kernel["latency_s"][name] == pytest.approx(outcome["latency_s"])
    # the figures are the end-of-run re-timing, not the search's first timings
    assert kernel["latency_s"]["dragon"] != kernel["optimize"]["best"]["outcome"]["latency_s"]
    network = out["network"]
    assert network["database"].startswith(str(tmp_path))
    assert set(network["end_to_end"]) == {"before", "dragon", "metaschedule"}
    for task in network["tasks"]:  # MetaSchedule searched as many kernels as we timed
        assert task["metaschedule_trials"] == task["measurements"]


@pytest.mark.parametrize("argv,says", [
    (["demo", "--kernel", "nosuch(x=1)"], "nosuch"),
    (["demo", "--kernel", "", "--network", ""], "neither"),
    (["demo", "-k", "0"], "k >= 1"),
    (["demo", "--model", "/no/such/model"], "/no/such/model"),
    (["demo", "--network", "model(name=bert,preset=tiny,task=0)"], "without task="),
    (["demo", "--network", "model(name=nosuch,preset=tiny)"], "nosuch"),
    (["demo", "--cost-model", "/no/such/cost.tar"], "/no/such/cost.tar"),
    (["demo", "--cost-model", "none", "--width", "32"], "--width 32: no cost model"),
    (["demo", "--search", "-1"], "search=-1"),
    (["demo", "--transfer", "-1"], "transfer=-1"),
])
def test_bad_usage_is_refused_before_any_work(capsys, argv, says):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err


def test_an_out_that_cannot_be_a_directory_is_refused_before_any_work(capsys, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    for out, says in ((a_file, "exists and is not a directory"),
                      (a_file / "sub", "cannot make the directory")):
        code = main(["demo", "--kernel", "", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and f"--out {out}: {says}" in err and "Traceback" not in err
    assert a_file.read_text() == "x"


def test_the_headline_calls_a_ratio_within_the_spread_a_tie_and_warns_once():
    """Assembled from outcomes: dragon twice as fast as the unscheduled kernel, and within
    MetaSchedule's spread (3% apart, 5% + 5% of spread)."""
    from codegen.measure import Outcome, Status
    from training.cli.demo import format_headline, kernel_comparisons, kernel_row, wall_clock_line
    from training.optimize.demo import KernelShowdown

    def timed(latency_s):
        return Outcome(Status.CORRECT, latency_s=latency_s, spread_s=0.05 * latency_s)

    showdown = KernelShowdown(SPEC, None, 8, "postproc auto llvm\n", {
        "dragon": timed(1e-3), "metaschedule": timed(1.03e-3), "unscheduled": timed(2e-3),
        "default": timed(1.5e-3)}, 7, {"dragon": 41.2, "metaschedule": 63.7})
    row = kernel_row(showdown)
    assert row[1] == "8 / 7"  # tune_tir's database held 7 of the 8 it was allowed
    assert row[-2:] == ["2.00x", "1.03x (tie, spread 10%)"]
    text = format_headline([row], "dragon-tiny", "cpu", 60.0, kernel_comparisons(showdown),
                           [wall_clock_line(showdown)])
    assert "1.03x (tie, spread 10%)" in text and text.count("warning:") == 1
    assert f"wall clock, {SPEC}: dragon 41 s, MetaSchedule's tune_tir 64 s" in text
    assert "busy" in text.splitlines()[-1]
    assert showdown.comparison("dragon", "default").verdict == "faster"
