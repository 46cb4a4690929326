"""``training.evaluate.metrics`` on a small fixed table whose every figure was computed by hand
(not by ``summarize`` itself): the shares that parse, apply, build and are correct differ, and
the ratios over MetaSchedule and the start script point one way."""

from __future__ import annotations

import math

import pytest

from training.evaluate.metrics import (
    budget_curves,
    expected_best,
    head_to_head,
    permutation_test,
    self_duel,
    sign_test,
    summarize,
)


def _row(model, task, attempt, status, latency, unscheduled, metaschedule, start=None):
    return {"model": model, "task": task, "kind": "refinement", "attempt": attempt,
            "status": status, "latency_s": latency, "unscheduled_s": unscheduled,
            "metaschedule_s": metaschedule, "start_s": start}


ROWS = [
    # model a, task t1: unscheduled 4 s, MetaSchedule 2 s, start 8 s
    _row("a", "t1", 0, "correct", 1.0, 4.0, 2.0, 8.0),
    _row("a", "t1", 1, "incorrect", None, 4.0, 2.0, 8.0),
    _row("a", "t1", 2, "build_error", None, 4.0, 2.0, 8.0),
    # model a, task t2: unscheduled 3 s, MetaSchedule 1 s, start 1.5 s
    _row("a", "t2", 0, "apply_error", None, 3.0, 1.0, 1.5),
    _row("a", "t2", 1, "correct", 3.0, 3.0, 1.0, 1.5),
    _row("a", "t2", 2, "parse_error", None, 3.0, 1.0, 1.5),
    # model b: a tie on t1 (within 2%), a win on t2, and t3 that a never attempted
    _row("b", "t1", 0, "correct", 1.01, 4.0, 2.0, 8.0),
    _row("b", "t2", 0, "correct", 1.5, 3.0, 1.0, 1.5),
    _row("b", "t3", 0, "correct", 1.0, 1.0, 1.0, 1.0),
]


def test_shares_per_attempt_are_counted_by_stage():
    a = summarize(ROWS)["a"]["refinement"]
    assert (a["attempts"], a["tasks"]) == (6, 2)
    # 6 attempts: one parse error, one apply error, one build error, one incorrect, two correct.
    assert a["parses"] == pytest.approx(5 / 6)
    assert a["applies"] == pytest.approx(4 / 6)
    assert a["builds"] == pytest.approx(3 / 6)
    assert a["correct"] == pytest.approx(2 / 6)


def test_speedups_point_from_the_reference_to_the_kernel():
    a = summarize(ROWS)["a"]["refinement"]
    # Correct attempts: t1 4/1 = 4x, t2 3/3 = 1x over the unscheduled kernel.
    assert a["attempt_speedup_geomean"] == pytest.approx(2.0)
    assert a["attempt_speedup_median"] == pytest.approx(2.5)
    # Over MetaSchedule's best: t1 2/1 = 2x (faster), t2 1/3 (slower).
    assert a["attempt_over_metaschedule_geomean"] == pytest.approx(math.sqrt(2 / 3))
    assert a["best_over_metaschedule_geomean"] == pytest.approx(math.sqrt(2 / 3))
    assert a["best_over_metaschedule_median"] == pytest.approx((2 + 1 / 3) / 2)
    assert a["faster_than_metaschedule"] == 1
    # Over the start script: t1 8/1 = 8x, t2 1.5/3 = 0.5x.
    assert a["best_over_start_geomean"] == pytest.approx(2.0)
    assert a["faster_than_start"] == 1
    assert a["best_speedup_geomean"] == pytest.approx(2.0)
    assert a["fast_p"] == {"0": 1.0, "1": 1.0, "1.2": 0.5, "2": 0.5}


def test_head_to_head_counts_wins_and_ties_on_shared_tasks():
    assert head_to_head(ROWS, "a", "b", "refinement") == {
        "wins_a": 0, "wins_b": 1, "ties": 1, "tasks": 2}
    assert head_to_head(ROWS, "b", "a", "refinement") == {
        "wins_a": 1, "wins_b": 0, "ties": 1, "tasks": 2}


def test_budget_curves_take_the_best_of_the_first_n_attempts():
    curve = budget_curves(ROWS)["a"]["refinement"]
    # n=1: t1 4x, t2 nothing correct (1x kept); n=2: t2's 1x; n=3: unchanged.
    assert curve["measurements"] == [1, 2, 3]
    assert curve["geomean"] == pytest.approx([2.0, 2.0, 2.0])
    assert curve["fast_1"] == [0.5, 1.0, 1.0]


def test_head_to_head_ties_within_the_best_kernels_spread_when_it_is_larger_than_the_tie():
    # t2: b's 1.5 s beat a's 3 s by 2x: beyond any spread below 100%.  t1: 1.0 vs 1.01 s.
    rows = [dict(r, spread_s=0.1 * r["latency_s"]) if r["latency_s"] else r for r in ROWS]
    assert head_to_head(rows, "a", "b", "refinement") == {
        "wins_a": 0, "wins_b": 1, "ties": 1, "tasks": 2}
    # a 10% faster than b on t1, within their 10% + 10% of spread: still a tie; 30%: a win.
    close = [dict(r, latency_s=0.9) if (r["model"], r["task"], r["status"]) == ("a", "t1",
                                                                                "correct")
             else r for r in rows]
    assert head_to_head(close, "a", "b", "refinement")["ties"] == 1
    assert head_to_head([dict(r, latency_s=0.7) if r is close[0] else r for r in close],
                        "a", "b", "refinement")["wins_a"] == 1
    # Without spreads only the fixed tie counts: 10% is a win.
    plain = [dict(r, latency_s=0.9) if r is ROWS[0] else r for r in ROWS]
    assert head_to_head(plain, "a", "b", "refinement")["wins_a"] == 1


def test_a_model_against_itself_decides_only_where_its_attempts_differ():
    # t1: every attempt the same kernel time, never decided; t2: one fast attempt in four, so
    # two bootstrap draws disagree on the best whenever exactly one of them holds it.
    rows = [_row("a", "t1", i, "correct", 1.0, 4.0, 2.0) for i in range(4)]
    rows += [_row("a", "t2", i, "correct", 1.0 if i == 0 else 3.0, 4.0, 2.0) for i in range(4)]
    duel = self_duel(rows, "a", "refinement", rounds=2000, seed=1)
    held = 1 - (3 / 4) ** 4                     # a draw of four holds the fast attempt
    assert duel["tasks"] == 2
    assert duel["decided"] == pytest.approx(2 * held * (1 - held), abs=0.03)
    # An attempt that failed counts as no kernel: a draw without a correct one loses.
    failing = [dict(r, status="runtime_error", latency_s=None) if r["attempt"] else r
               for r in rows if r["task"] == "t1"]
    assert self_duel(failing, "a", "refinement", rounds=2000)["decided"] == pytest.approx(
        2 * held * (1 - held), abs=0.03)
    assert self_duel(rows, "b", "refinement")["tasks"] == 0


def test_the_sign_test_leaves_out_ties_and_is_two_sided():
    def p(a, b, ties=0):
        return sign_test({"wins_a": a, "wins_b": b, "ties": ties, "tasks": a + b + ties})
    assert p(7, 7, 19) == 1.0 and p(0, 0, 5) == 1.0
    assert p(10, 1) == pytest.approx(p(1, 10)) == pytest.approx(24 / 2 ** 11)
    assert p(10, 1, ties=50) == p(10, 1)
    assert p(88, 14) < 1e-12 and p(24, 17) > 0.3


def test_expected_best_of_k_matches_every_draw_enumerated():
    import itertools
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.0]
    for k in range(1, 7):
        draws = list(itertools.combinations(values, k))
        assert expected_best(values, k) == pytest.approx(sum(map(max, draws)) / len(draws))
    with pytest.raises(ValueError, match="k=7"):
        expected_best(values, 7)


def _sampler_rows(model, speedups_by_task, unscheduled=1.0):
    return [_row(model, task, i, "correct", unscheduled / s, unscheduled, None)
            for task, speedups in speedups_by_task.items() for i, s in enumerate(speedups)]


def test_the_permutation_test_tells_a_better_sampler_from_the_luck_of_the_draw():
    import random
    rng = random.Random(3)

    def draws(scale):          # 40 tasks, 4 attempts each: log-normal spread around a task
        return {f"t{t}": [scale * (1 + t % 5) * math.exp(rng.gauss(0, 0.5)) for _ in range(4)]
                for t in range(40)}

    same = _sampler_rows("a", draws(1.0)) + _sampler_rows("b", draws(1.0))
    better = _sampler_rows("a", draws(1.5)) + _sampler_rows("b", draws(1.0))
    tie = permutation_test(same, "a", "b", "refinement", rounds=400)
    won = permutation_test(better, "a", "b", "refinement", rounds=400)
    assert tie["tasks"] == won["tasks"] == 40 and won["k"] == 4
    assert tie["p"] > 0.05 and 0.85 < tie["ratio"] < 1.15
    assert won["p"] < 0.01 and won["ratio"] > 1.3
    # Symmetric: the other way round, the same p and the inverse ratio.
    lost = permutation_test(better, "b", "a", "refinement", rounds=400)
    assert lost["p"] == won["p"] and lost["ratio"] == pytest.approx(1 / won["ratio"])


def test_the_permutation_test_pools_runs_by_their_own_unscheduled_kernel():
    # Two runs of the same tasks on machines 2x apart: each attempt's speedup is over the
    # unscheduled kernel of its own run, so pooling the runs changes nothing.
    one = _sampler_rows("a", {"t": [2.0, 4.0]}) + _sampler_rows("b", {"t": [2.0, 2.0]})
    two = [dict(r, latency_s=2 * r["latency_s"], unscheduled_s=2 * r["unscheduled_s"])
           for r in one]
    assert permutation_test(one + two, "a", "b", "refinement", k=1)["ratio"] == pytest.approx(
        permutation_test(one, "a", "b", "refinement", k=1)["ratio"]) == pytest.approx(3 / 2)
    # A failed attempt keeps the unscheduled kernel (1x); k above the fewest attempts is refused.
    failed = [r for r in one if r["model"] == "a"] + [
        _row("b", "t", i, "timeout", None, 1.0, None) for i in range(2)]
    assert permutation_test(failed, "a", "b", "refinement")["ratio"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="k=3"):
        permutation_test(one, "a", "b", "refinement", k=3)
    assert permutation_test(one, "a", "c", "refinement")["tasks"] == 0
