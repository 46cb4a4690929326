"""The benchmark against MetaSchedule (``benchmarks/bench_vs_metaschedule.py``) and its tables:
the argument checks that run before anything is searched, and tables of runs at any budgets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_vs_metaschedule as bench  # noqa: E402
import vs_metaschedule_tables as tables  # noqa: E402


def _timed(ms: float | None, dragon: float | None, spread: float = 1e-7) -> dict:
    def side(s):
        return {"median_s": s, "spread_s": spread if s else None,
                "status": "correct" if s else "build_error"}
    return {"metaschedule": side(ms), "dragon": side(dragon), "unscheduled": side(3e-4)}


def test_off_llvm_the_llvm_corpus_and_cost_model_are_refused(capsys, monkeypatch):
    monkeypatch.setattr(bench, "TARGET", dict(bench.TARGET))
    assert bench.main(["--target", "cuda", "--workloads", "softmax(m=384,n=768)"]) == 2
    err = capsys.readouterr().err
    assert "--cost-model none --transfer 0" in err and "llvm measurements" in err


def test_tables_of_a_run_at_8_and_16_with_a_side_that_found_nothing():
    entries = [
        {"workload": "matmul(m=1024,n=1024,k=1024)",
         "curves": [{"budget": 8, "timed": _timed(1.7e-4, 1.72e-4, 2e-6)},
                    {"budget": 16, "timed": _timed(1.69e-4, None)}],
         "seconds": {"dragon": {"16": 95.3}, "metaschedule": {"16": 138.1}},
         "dragon": {"statuses": ["build_error", "correct", "timeout"]}},
        {"workload": "softmax(m=384,n=768)",
         "curves": [{"budget": 8, "timed": _timed(3.6e-5, 2.7e-5)}],
         "seconds": {"dragon": {"8": 45.3}, "metaschedule": {"8": 94.9}},
         "dragon": {"statuses": ["correct"]}},
    ]
    text = "\n".join(tables.table("H200", entries))
    assert "| matmul(m=1024,n=1024,k=1024) | 16 | 169.0 us | - | - |" in text
    # budget 8: the matmul a tie inside its 2 us spreads, the softmax 1.33x faster
    assert "| 8 | 1.148x | 1.16x | 1 of 2 | 1 / 1 / 0 |" in text
    assert "| 16 |" not in text.split("| budget |")[1].split("| workload |")[0]
    assert "| matmul(m=1024,n=1024,k=1024) | - / 95 | - / 138 | - / 1 |" in text
    assert "| softmax(m=384,n=768) | 45 / - | 95 / - | 0 / - |" in text
    assert "| all | 45 / 95 | 95 / 138 | |" in text


@pytest.mark.parametrize("timed", [_timed(None, 2e-5), {"unscheduled": _timed(1, 1)["dragon"]}])
def test_no_ratio_without_both_sides(timed):
    assert tables.ratio(timed) is None
    assert bench._ratio(timed) is None


def test_transfer_pool_mixes_the_ranked_with_the_nearest_and_counts_ties_by_the_spread():
    import transfer_pool as pool

    scripts = ["a", "b", "c", "d", "e"]      # the pool's order: the nearest workloads first
    scores = {"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.8, "e": 0.7}
    assert pool._top(scripts, scores, 3) == ["c", "d", "e"]
    assert pool._mixed(scripts, scores, 3, 1) == ["c", "d", "a"]
    assert pool._mixed(scripts, scores, 3, 0) == ["c", "d", "e"]

    def row(default, other, spread):
        return {"picks": {"4x4": {"size": 16, "ranked": "x"},
                          "8x8": {"size": 64, "ranked": "y"}},
                "timed": {"x": [default, spread * default], "y": [other, spread * other]}}

    # 2x faster beyond a 10% spread; 1.05x faster inside a 10% spread is a tie
    text = pool.table([row(2e-5, 1e-5, 0.1), row(1.05e-5, 1e-5, 0.1)], "4x4")
    assert "| 4x4 | 16 | ranked | 1.00x | 1.00x | 0 / 2 / 0 |" in text
    assert "| 8x8 | 64 | ranked | 1.45x | 1.52x | 1 / 1 / 0 |" in text


def test_the_mutants_take_their_share_of_the_searched_part(monkeypatch):
    """``--local SHARE``: after the carried-over scripts and the model's kernel, that share of
    what is left is timed as mutants, the rest searched (16: 8 carried over, 1 model, 7)."""
    from types import SimpleNamespace

    import training.optimize.kernel as kernel

    configs = []

    def optimize(model, tokenizer, wl, *, config, sampling, evaluator, cost_model, corpus):
        configs.append(config)
        return SimpleNamespace(candidates=[], spent={}, seconds={})

    monkeypatch.setattr(kernel, "optimize", optimize)
    for share in (0.0, 1.0, 0.4):
        bench.dragon("softmax(m=384,n=768)", 16, 0, None, None, None, None, 0.1, 16,
                     transfer=8, corpus=[], local=share)
    assert [(c.transfer, c.k, c.local, c.search) for c in configs] == \
        [(8, 1, 0, 7), (8, 1, 7, 0), (8, 1, 3, 4)]


def test_local_vs_search_tables_each_configuration_against_the_search_alone(
        monkeypatch, tmp_path, capsys):
    import contextlib

    import local_vs_search

    import codegen.measure
    import training.cli.common

    latency = {"search": 2e-4, "local 1": 1e-4, "local 0.5": 4e-4}   # us: 200, 100, 400

    def dragon(spec, budget, seed, *args):
        name = "search" if args[-1] == 0 else f"local {args[-1]:g}"
        return bench.Side("dragon", [(name, latency[name])], {"search": 30.0}.get(name, 10.0),
                          {"sources": ["search"], "latencies_s": [latency[name]]})

    def head_to_head(ev, spec, scripts, retimes):
        return {n: {"median_s": latency[n], "spread_s": 0.0, "status": "correct"}
                for n in scripts}

    monkeypatch.setattr(bench, "dragon", dragon)
    monkeypatch.setattr(bench, "head_to_head", head_to_head)
    monkeypatch.setattr(bench, "kept_records", lambda: [])
    monkeypatch.setattr(training.cli.common, "load_model", lambda path: (None, None))
    monkeypatch.setattr(codegen.measure, "Evaluator",
                        lambda *a, **k: contextlib.nullcontext())
    out = tmp_path / "local.json"
    assert local_vs_search.main(["--workloads", "softmax(m=384,n=768)", "matmul(m=64,n=64,k=64)",
                                 "--share", "1", "0.5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "softmax(m=384,n=768)" in text and "200.0      100.0      400.0" in text
    geomeans = next(line for line in text.splitlines() if line.startswith("search over each"))
    assert geomeans.split()[-3:] == ["1.000", "2.000", "0.500"]
    assert "2 / 0" in text and "0 / 2" in text
    assert text.rstrip().endswith("60         20         20")
    import json

    assert len(json.loads(out.read_text())["workloads"]) == 2
