"""The cost model that has already seen search (``codegen.search.cost_model``): MetaSchedule's
XGBModel trained on the records of a real search (the shared ``datagen_dir``), its file, its
online learning, the ranking metrics (``codegen.search.ranking``) and ``dragon cost-model``."""

from __future__ import annotations

import json
import math
import os
import shutil
import tarfile

import numpy as np
import pytest

from codegen.search import ranking
from codegen.search.cost_model import CostModel, CostModelError, Group, featurize
from codegen.search.tune import FAILED_RUN_SECS
from training.datagen.cost_model import read_workloads
from training.datagen.examples import default_resolver


@pytest.fixture(scope="module")
def workloads(datagen_dir):
    """The fixture's workloads (matmul, softmax) with their records, all candidates."""
    items = read_workloads([str(datagen_dir)])
    assert [w.family for w in items if w.correct >= 4], "a real search with correct kernels"
    return items


@pytest.fixture(scope="module")
def groups(workloads):
    resolve = default_resolver()
    return [item.group(resolve) for item in workloads]


@pytest.fixture(scope="module")
def featurized(groups):
    return [featurize(g) for g in groups]


@pytest.fixture(scope="module")
def trained(featurized):
    return CostModel.train(featurized)


def _matmul(groups) -> Group:
    return next(g for g in groups if "matmul" in g.workload.spec)


def _scripts(group: Group) -> list[str]:
    return [s for s, _ in group.candidates]


# ---- training --------------------------------------------------------------------------------

def test_training_ranks_the_records_it_learned_from(trained, featurized):
    """A sanity check, not a generalization claim: the model orders its own training
    candidates better than chance."""
    for f in featurized:
        if f.correct >= 4:
            assert ranking.kendall_tau(trained.predict_features(f.features), f.latencies()) > 0


def test_failed_candidates_are_the_slowest_of_their_group(groups):
    group = _matmul(groups)
    correct = [(s, t) for s, t in group.candidates if t is not None]
    # The same real scripts, three of them recorded as failed.
    failing = {s for s, _ in correct[:3]}
    marked = Group(group.workload, group.target,
                   [(s, None if s in failing else t) for s, t in correct])
    f = featurize(marked)
    failed = [i for i, (s, _) in enumerate(marked.candidates) if s in failing]
    assert [f.costs[f.indices.index(i)] for i in failed] == [np.float32(FAILED_RUN_SECS)] * 3
    assert f.latencies().count(None) == 3
    model = CostModel.train([f], keep=None)
    (data,) = model.model.data.values()
    labels = data.min_cost / data.costs   # what XGBModel trains on: higher is faster
    slowest = np.argsort(labels, kind="stable")[:3]
    assert sorted(f.indices[i] for i in slowest) == sorted(failed)
    assert data.min_cost == min(t for _, t in correct[3:])


def test_scripts_that_no_longer_apply_are_skipped_and_counted(groups):
    matmul = _matmul(groups)
    softmax = next(g for g in groups if "softmax" in g.workload.spec)
    mixed = Group(softmax.workload, softmax.target,
                  [*softmax.candidates, (_scripts(matmul)[0], 1e-3), (None, None)])
    f = featurize(mixed)
    assert f.skipped == 2 and len(f.indices) == len(softmax.candidates)
    scores = CostModel.untrained().score(softmax.workload, softmax.target,
                                         [_scripts(matmul)[0], _scripts(softmax)[0]])
    assert scores[0] == -math.inf and 0 <= scores[1] < 1


def test_nothing_to_learn_without_a_correct_candidate(featurized):
    f = featurized[0]
    failed = type(f)(f.key, f.features, np.full_like(f.costs, FAILED_RUN_SECS), f.indices,
                     f.total)
    with pytest.raises(ValueError, match="correct candidate"):
        CostModel.train([failed])


def test_a_trained_model_keeps_the_fastest_of_each_group(featurized):
    model = CostModel.train(featurized, keep=4)
    assert model.data_size == 2 * len(featurized) < sum(len(f.costs) for f in featurized)
    for f in featurized:
        kept = model.model.data[f.key]
        assert kept.min_cost == f.costs.min() and len(kept.costs) == 2


# ---- scores, files, online learning ----------------------------------------------------------

def test_untrained_is_metaschedules_random_start(groups):
    group = _matmul(groups)
    model = CostModel.untrained()
    assert not model.trained and model.model.num_warmup_samples == 100
    first, second = (model.score(group.workload, group.target, _scripts(group)[:6])
                     for _ in range(2))
    assert first != second and all(0 <= s < 1 for s in first + second)
    with pytest.raises(CostModelError, match="nothing to save"):
        model.save("/tmp/never-written.tar")


def test_score_is_metaschedules_predict_on_the_same_features(trained, groups, featurized):
    group, f = next((g, f) for g, f in zip(groups, featurized, strict=True)
                    if "matmul" in g.workload.spec)
    scores = trained.score(group.workload, group.target, _scripts(group))
    assert np.allclose([scores[i] for i in f.indices], trained.predict_features(f.features))


def test_save_load_round_trip_gives_identical_scores(trained, groups, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    path = tmp_path / "cm.tar"
    trained.save(path)
    loaded = CostModel.load(path)
    assert isinstance(loaded.model, ms.cost_model.XGBModel)   # what tune.search can be given
    assert loaded.data_size == trained.data_size
    for group in groups:
        scripts = _scripts(group)
        assert loaded.score(group.workload, group.target, scripts) == \
            trained.score(group.workload, group.target, scripts)
    assert {"model.bin", "data.npy"} <= set(tarfile.open(path).getnames())  # MetaSchedule's


@pytest.mark.parametrize("damage", ["missing", "truncated", "not a tar", "no booster",
                                    "empty"])
def test_a_file_that_is_not_a_cost_model_is_one_error_naming_it(damage, trained, tmp_path):
    good, bad = tmp_path / "good.tar", tmp_path / "bad.tar"
    trained.save(good)
    if damage == "truncated":
        bad.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
    elif damage == "not a tar":
        bad.write_text('{"not": "a tar"}\n')
    elif damage == "empty":
        bad.write_bytes(b"")
    elif damage == "no booster":
        with tarfile.open(bad, "w") as tar:
            tar.add(good, arcname="data.npy")
    with pytest.raises(CostModelError) as info:
        CostModel.load(bad)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_update_changes_the_scores(trained, groups, tmp_path):
    group = _matmul(groups)
    scripts = _scripts(group)
    trained.save(tmp_path / "cm.tar")
    model = CostModel.load(tmp_path / "cm.tar")
    before = model.score(group.workload, group.target, scripts)
    # A run measures them backwards: the predicted-fastest comes out slowest.
    order = np.argsort(before)[::-1][:8]
    used = model.update(group.workload, group.target, [scripts[i] for i in order],
                        [1e-3 * (n + 1) ** 2 for n in range(len(order))])
    assert used == len(order)
    assert model.data_size == trained.data_size + len(order)
    assert model.score(group.workload, group.target, scripts) != before


def test_a_loaded_model_retrains_at_every_round_of_a_run(trained, groups, tmp_path):
    """MetaSchedule's adaptive training would skip retraining until the data grew by 20%: a
    64-trial run on top of a trained model's data would then learn nothing from itself."""
    group = _matmul(groups)
    scripts = [s for s, t in group.candidates if t is not None]
    trained.save(tmp_path / "cm.tar")
    model = CostModel.load(tmp_path / "cm.tar")
    xgb = model.model
    for round_ in range(4):   # rounds of 2 candidates, each < 20% of the data
        booster = xgb.booster
        chosen = scripts[2 * round_:2 * round_ + 2]
        model.update(group.workload, group.target, chosen, [5e-2, 1e-1])
        assert xgb.booster is not booster and xgb.last_train_size == xgb.data_size


# ---- ranking metrics -------------------------------------------------------------------------

LATENCIES = [1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3, None]


def test_metrics_of_known_permutations():
    perfect = [7, 6, 5, 4, 3, 2, 1]
    backwards = perfect[::-1]
    assert ranking.kendall_tau(perfect, LATENCIES) == 1.0
    assert ranking.kendall_tau(backwards, LATENCIES) == -1.0
    assert ranking.top_k_recall(perfect, LATENCIES, 1) == 1.0
    assert ranking.top_k_recall(backwards, LATENCIES, 1) == 0.0
    assert ranking.top_k_recall(backwards, LATENCIES, 6) == 0.0
    assert ranking.top_k_recall(backwards, LATENCIES, 7) == 1.0
    assert ranking.best_of_top_k(perfect, LATENCIES, 5) == 1.0
    # backwards: the top 5 are the failure (as slow as 6 ms) and 6, 5, 4, 3 ms
    assert ranking.best_of_top_k(backwards, LATENCIES, 5) == pytest.approx(3.0)
    assert ranking.best_of_top_k(backwards, LATENCIES, 7) == 1.0
    # one swap of neighbours in 7 candidates: 20 of 21 pairs agree
    swapped = [6, 7, 5, 4, 3, 2, 1]
    assert ranking.kendall_tau(swapped, LATENCIES) == pytest.approx(19 / 21)
    assert math.isnan(ranking.kendall_tau([1, 1, 1], [1e-3, 2e-3, 3e-3]))
    assert math.isnan(ranking.top_k_recall([1, 2], [None, None], 1))


def test_failures_count_as_slowest_and_tie_with_each_other():
    # The failures predicted last, in either order: the best tau-b with a tie (5 of 6 pairs
    # ordered, all agreeing).
    best = 5 / math.sqrt(6 * 5)
    assert ranking.kendall_tau([4, 3, 2, 1], [1e-3, 2e-3, None, None]) == pytest.approx(best)
    assert ranking.kendall_tau([4, 3, 1, 2], [1e-3, 2e-3, None, float("inf")]) == \
        pytest.approx(best)
    assert ranking.kendall_tau([1, 2, 3, 4], [1e-3, 2e-3, None, 0.0]) == pytest.approx(-best)
    # A failure predicted fastest is worse than a failure predicted slowest.
    assert ranking.kendall_tau([4, 3, 2, 1], [None, 1e-3, 2e-3, 3e-3]) < \
        ranking.kendall_tau([1, 4, 3, 2], [None, 1e-3, 2e-3, 3e-3])
    assert ranking.top_k_recall([2, 1], [None, 1e-3], 1) == 0.0


def test_aggregates_are_geometric_means_and_medians():
    assert ranking.geometric_mean([1.0, 2.0, 8.0]) == pytest.approx(2.5198, abs=1e-4)
    assert ranking.median([-1.0, 0.5, 0.25, float("nan")]) == 0.25
    assert math.isnan(ranking.geometric_mean([]))


# ---- dragon cost-model -----------------------------------------------------------------------

@pytest.fixture
def dragon(dragon_cmd, monkeypatch):
    """``dragon_cmd`` with this checkout's ``cost-model`` entry point (an editable install
    made before the command existed does not list it)."""
    from importlib import metadata

    import dragon_dsl.cli as cli

    real = metadata.entry_points
    mine = metadata.EntryPoint("cost-model", "training.cli.cost_model:register",
                               "dragon.commands")

    def entry_points(group):
        found = [e for e in real(group=group) if e.name != "cost-model"]
        return [*found, mine] if group == "dragon.commands" else found

    monkeypatch.setattr(cli.metadata, "entry_points", entry_points)
    return dragon_cmd


def test_dragon_cost_model_end_to_end(dragon, datagen_dir, groups, tmp_path):
    out = tmp_path / "models" / "cm.tar"
    done = dragon(["cost-model", "--records", datagen_dir, "--out", out,
                   "--holdout-fraction", "0.5", "--untrained-seeds", "3", "--quiet"])
    assert done.returncode == 0, done.stderr
    assert "pretrained" in done.stdout and "untrained   1 x3 seeds" in done.stdout
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["model_bytes"] == os.path.getsize(out) and len(report["heldout"]) == 1
    assert report["summaries"]["pretrained"]["workloads"] == 1
    assert report["summaries"]["untrained"]["evaluations"] == 3
    assert report["trained_on"] == sum(len(g.candidates) for g in groups)  # all, at the end
    held = [r for r in report["rows"] if r["model"] == "pretrained"]
    assert held[0]["workload"] == report["heldout"][0]
    group = _matmul(groups)
    assert len(CostModel.load(out).score(group.workload, group.target, _scripts(group)[:3])) == 3


def test_dragon_cost_model_cross_validation_and_json(dragon, datagen_dir, tmp_path):
    out = tmp_path / "cm.tar"
    done = dragon(["cost-model", "--records", datagen_dir, "--out", out, "--folds", "2",
                   "--json", "--quiet"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["summaries"]["pretrained"]["workloads"] == 2 == len(report["heldout"])


def _one_line(err: str, name: str) -> None:
    assert err.count("\n") == 1 and name in err and "Traceback" not in err, err


def test_dragon_cost_model_bad_input_is_one_line(dragon, datagen_dir, tmp_path):
    # no records: an empty folder, and one that does not exist
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (empty, tmp_path / "absent"):
        done = dragon(["cost-model", "--records", folder, "--out", tmp_path / "cm.tar"])
        assert done.returncode == 2
        _one_line(done.stderr, str(folder))
    # a damaged line in a records file
    copy = tmp_path / "copy"
    shutil.copytree(datagen_dir / "records", copy / "records")
    shutil.copytree(datagen_dir / "tasks", copy / "tasks")
    damaged = sorted((copy / "records").iterdir())[0]
    with damaged.open("a") as f:
        f.write('{"workload": "matmul(m=4,n=4,k=4)", "status": \n')
    done = dragon(["cost-model", "--records", copy, "--out", tmp_path / "cm.tar"])
    assert done.returncode == 2
    _one_line(done.stderr, f"{damaged}:")
    # an --out that cannot be written, before any work
    done = dragon(["cost-model", "--records", datagen_dir, "--out", "/proc/dragon/cm.tar"])
    assert done.returncode == 2
    _one_line(done.stderr, "/proc/dragon/cm.tar")
    # a family that is not in the records; flags out of range
    done = dragon(["cost-model", "--records", datagen_dir, "--out", tmp_path / "cm.tar",
                   "--holdout-families", "conv2d", "--quiet"])
    assert done.returncode == 2
    _one_line(done.stderr, "conv2d")
    done = dragon(["cost-model", "--records", datagen_dir, "--out", tmp_path / "cm.tar",
                   "--holdout-fraction", "1.5"])
    assert done.returncode == 2
    _one_line(done.stderr, "holdout_fraction=1.5")
    assert not (tmp_path / "cm.tar").exists()


def test_dragon_cost_model_without_a_correct_candidate_exits_1(dragon, datagen_dir, tmp_path):
    failed = tmp_path / "failed"
    shutil.copytree(datagen_dir / "tasks", failed / "tasks")
    (failed / "records").mkdir()
    for path in (datagen_dir / "records").iterdir():
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            line.update(status="timeout", latency_s=None)
        (failed / "records" / path.name).write_text(
            "".join(json.dumps(line) + "\n" for line in lines))
    done = dragon(["cost-model", "--records", failed, "--out", tmp_path / "cm.tar", "--quiet"])
    assert done.returncode == 1
    _one_line(done.stderr, "correct candidate")


def test_the_shipped_cost_model_loads_and_matches_its_report():
    """``make cost-model``'s output beside the built-in model: MetaSchedule's file, small, and
    what its report says."""
    from training.models.builtin import DEFAULT_MODEL

    path = DEFAULT_MODEL / "cost_model.tar"
    report = json.loads((DEFAULT_MODEL / "cost_model.json").read_text())
    model = CostModel.load(path)
    assert model.trained and model.data_size == report["kept"] <= report["trained_on"]
    assert report["model_bytes"] == path.stat().st_size < 2_000_000
    assert {"pretrained", "untrained"} <= set(report["summaries"])
