"""``dragon apply`` and ``dragon bench`` through the installed command line."""

from __future__ import annotations

import json

import pytest

import dragon_dsl
from codegen.search import sample_traces
from codegen.workloads import workload
from dragon_dsl.cli import main

SPEC = "matmul(m=64,n=64,k=64)"


@pytest.fixture(scope="module")
def script_file(tmp_path_factory):
    wl = workload(SPEC)
    [trace] = sample_traces(wl.mod, "llvm", "llvm", 1, seed=2)
    path = tmp_path_factory.mktemp("scripts") / "sampled.dragon"
    path.write_text(dragon_dsl.from_trace(trace, postproc="auto", postproc_set="llvm",
                                          workload=wl))
    return path


def test_apply_prints_the_scheduled_module(script_file, capsys):
    assert main(["apply", str(script_file), "--workload", SPEC]) == 0
    out = capsys.readouterr().out
    assert "@I.ir_module" in out and ("T.parallel" in out or "T.vectorized" in out)


def test_apply_names_the_statement_that_does_not_fit(tmp_path, capsys):
    bad = tmp_path / "bad.dragon"
    bad.write_text('block "C" -> b0\nloops b0 -> i, j\n')
    assert main(["apply", str(bad), "--workload", SPEC]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:1: apply error" in err


def test_apply_rejects_an_unknown_workload_with_usage_error(script_file, capsys):
    assert main(["apply", str(script_file), "--workload", "matmull(m=1)"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dragon: ") and "matmull" in err and "Traceback" not in err


def test_bench_table_with_baseline_and_speedups(script_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DRAGON_CACHE_DIR", str(tmp_path))
    bad = tmp_path / "bad.dragon"
    bad.write_text("nonsense\n")
    code = main(["bench", str(script_file), str(bad), "--workload", SPEC,
                 "--baselines", "unscheduled,default", "--repeat", "3", "--builders", "1"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"{SPEC} on llvm")
    header = lines[1].split()
    assert header[:4] == ["outcome", "max", "abs", "err"] and "unscheduled" in lines[1]
    rows = {ln.split()[0]: ln for ln in lines[3:] if ln and not ln.startswith(" ")}
    assert "correct" in rows["unscheduled"] and "1.00x" in rows["unscheduled"]
    assert "unavailable" in rows["default"]  # DLight has no llvm rule for a matmul
    assert "correct" in rows[str(script_file)] and "parse_error" in rows[str(bad)]
    # The sampled script's speedup is the ratio of the two measured medians.
    assert "no DLight CPU rule" in out


def test_bench_json_and_cache(script_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DRAGON_CACHE_DIR", str(tmp_path))
    args = ["bench", str(script_file), "--workload", SPEC, "--baselines", "none",
            "--repeat", "3", "--builders", "1", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    [a], [b] = first["rows"], second["rows"]
    assert a["status"] == "correct" and not a["cached"]
    assert b["cached"] and b["latency_s"] == a["latency_s"]


def _bench_answers(monkeypatch, script, unscheduled, scripted):
    """``dragon bench`` answered by constructed outcomes: the unscheduled kernel's and the
    script's (latency, spread) in seconds, no kernel measured."""
    import codegen.bench
    from codegen.bench import BenchReport
    from codegen.measure import MeasureConfig, Outcome, Status
    from codegen.measured import Row

    def fake_bench(wl, scripts, target, **kwargs):
        rows = (Row("unscheduled", Outcome(Status.CORRECT, latency_s=unscheduled[0],
                                           spread_s=unscheduled[1])),
                Row(str(script), Outcome(Status.CORRECT, latency_s=scripted[0],
                                         spread_s=scripted[1]), baseline=False))
        return BenchReport(SPEC, "llvm", "cpu", MeasureConfig(repeat=2), rows)

    monkeypatch.setattr(codegen.bench, "bench", fake_bench)


def test_bench_says_faster_without_a_warning_beyond_the_spread(tmp_path, capsys, monkeypatch):
    """Constructed outcomes: a script twice as fast as the unscheduled kernel, 10% of spread."""
    script = tmp_path / "fast.dragon"
    script.write_text('block "C" -> b0\n')
    _bench_answers(monkeypatch, script, (2e-3, 1e-4), (1e-3, 5e-5))
    assert main(["bench", str(script), "--workload", SPEC, "--baselines", "unscheduled"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln for ln in out.splitlines()[3:] if ln and not ln.startswith(" ")}
    assert rows["unscheduled"].endswith("1.00x")  # itself: no verdict
    assert rows[str(script)].endswith("2.00x") and "tie" not in out and "warning" not in out


def test_bench_says_tie_when_a_script_is_within_the_spread_of_a_baseline(tmp_path, capsys,
                                                                         monkeypatch):
    script = tmp_path / "same.dragon"
    script.write_text('block "C" -> b0\n')
    _bench_answers(monkeypatch, script, (1.03e-3, 5e-5), (1e-3, 3e-5))
    assert main(["bench", str(script), "--workload", SPEC, "--baselines", "unscheduled"]) == 0
    out = capsys.readouterr().out
    assert f"{script}" in out and "1.03x (tie, spread 8%)" in out
    assert out.count("warning: 1 comparison is a tie") == 1 and "busy" in out
    assert main(["bench", str(script), "--workload", SPEC, "--baselines", "unscheduled",
                 "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["comparisons"][str(script)]["unscheduled"]["verdict"] == "tie"
    assert data["rows"][1]["spread_s"] == 3e-5 and "busy" in captured.err
