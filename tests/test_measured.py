"""The one home of each comparison: rows beside the baselines and ``speedup``
(``codegen.measured``), the rival's best derived from its attempts (``codegen.search.rival``),
the budget's account (``training.optimize.budget``), and optimize's one target."""

from __future__ import annotations

import pytest

from codegen.measure import Outcome, Status
from codegen.measured import (
    Baselines,
    Comparison,
    Row,
    busy_warning,
    compare,
    measure_beside,
    outcomes,
    speedup,
)
from codegen.search.baselines import BaselineUnavailable
from codegen.search.rival import Attempt, RivalResult
from codegen.search.tune import SearchConfig
from training.optimize.budget import Account, OptimizeError, StartCost, check_fits, start_cost

FAST = Outcome(Status.CORRECT, latency_s=1e-3)
SLOW = Outcome(Status.CORRECT, latency_s=4e-3)
WRONG = Outcome(Status.INCORRECT, "verify", "max err")


def test_speedup_is_a_ratio_of_two_measured_latencies_or_none():
    assert speedup(4e-3, 1e-3) == pytest.approx(4.0)
    assert speedup(None, 1e-3) is None and speedup(1e-3, None) is None
    assert speedup(0.0, 1e-3) is None and speedup(1e-3, 0.0) is None


def _timed(latency_s, spread_s=None):
    return Outcome(Status.CORRECT, latency_s=latency_s, spread_s=spread_s)


def test_compare_is_a_tie_within_the_two_timings_combined_relative_spread():
    # 10% + 5% of spread: a ratio within 1.15x either way is a tie, beyond it a verdict.
    ref = _timed(1.0e-3, 1.0e-4)
    assert compare(ref, _timed(0.9e-3, 0.45e-4)) == Comparison(
        pytest.approx(1.0 / 0.9), pytest.approx(0.15), "tie")
    assert compare(ref, _timed(1.1e-3, 0.55e-4)).verdict == "tie"
    assert compare(ref, _timed(0.8e-3, 0.4e-4)).verdict == "faster"
    assert compare(ref, _timed(1.2e-3, 0.6e-4)).verdict == "slower"
    # The boundary is symmetric in log space: 1.149x either way is a tie, 1.151x is not.
    for ratio, verdict in ((1.149, "tie"), (1.151, "faster")):
        assert compare(ref, _timed(1e-3 / ratio, 0.05e-3 / ratio)).verdict == verdict
        assert compare(_timed(1e-3 / ratio, 0.05e-3 / ratio), ref).verdict == \
            {"tie": "tie", "faster": "slower"}[verdict]


def test_compare_without_a_spread_ties_only_equal_medians_unless_a_floor_is_given():
    assert compare(_timed(1e-3), _timed(1e-3)).verdict == "tie"
    assert compare(_timed(1e-3), _timed(0.99e-3)).verdict == "faster"
    assert compare(_timed(1e-3), _timed(0.99e-3), floor=0.02).verdict == "tie"
    assert compare(_timed(1e-3, 1e-4), _timed(1e-3), floor=0.02).noise == pytest.approx(0.1)


def test_compare_needs_two_correct_timings_and_reads_as_people_read_it():
    assert compare(_timed(1e-3), WRONG) is None and compare(None, _timed(1e-3)) is None
    tie = compare(_timed(1.03e-3, 0.05e-3), _timed(1e-3, 0.03e-3))
    assert str(tie) == "1.03x (tie, spread 8%)" and tie.tie
    assert tie.as_dict() == {"speedup": pytest.approx(1.03), "noise": pytest.approx(0.0785, 1e-3),
                             "verdict": "tie"}
    assert str(compare(SLOW, FAST)) == "4.00x"


def test_the_busy_warning_is_one_line_naming_the_worst_spread():
    assert busy_warning([]) == "" and busy_warning([compare(SLOW, FAST), None]) == ""
    line = busy_warning([Comparison(1.0, 0.05, "tie"), Comparison(0.98, 0.12, "tie")])
    assert line.startswith("warning: 2 comparisons are ties within the measured spread "
                           "(up to 12%)") and "busy" in line and "\n" not in line


def test_a_row_has_a_latency_only_when_correct():
    assert Row("a", FAST).latency_s == 1e-3
    assert Row("b", WRONG).latency_s is None
    gone = Row("default", None, "no DLight CPU rule matches")
    assert gone.latency_s is None and gone.baseline
    assert gone.as_dict() == {"name": "default", "status": "unavailable",
                              "message": "no DLight CPU rule matches"}


class _Evaluator:
    """Measures modules and scripts by name, in the order asked; remembers the order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def evaluate_modules(self, workload, modules):
        self.calls.append("modules")
        return {name: SLOW for name in modules}

    def evaluate(self, workload, scripts):
        self.calls.append("scripts")
        return [FAST for _ in scripts]


def test_measure_beside_keeps_unavailable_baselines_with_their_reason():
    made = Baselines({"unscheduled": object(), "default": BaselineUnavailable("no rule")})
    assert made.available == 1 and list(made.modules) == ["unscheduled"]
    ev = _Evaluator()
    rows = measure_beside(ev, None, {"best": "postproc auto llvm\n"}, made)
    assert [(r.name, r.baseline) for r in rows] == [
        ("unscheduled", True), ("default", True), ("best", False)]
    assert rows[1].unavailable == "no rule" and rows[1].outcome is None
    assert list(outcomes(rows)) == ["best", "unscheduled"]  # scripts first, measured only
    assert ev.calls == ["modules", "scripts"]
    assert measure_beside(_Evaluator(), None, {}, Baselines({})) == ()


def test_the_rivals_best_is_derived_from_every_attempt():
    attempts = (Attempt("slow", 0, SLOW), Attempt(None, 0, FAST), Attempt("wrong", 1, WRONG),
                Attempt("fast", 1, FAST))
    found = RivalResult(SearchConfig(trials=4, per_round=2, cost_model="random"), attempts, 1.0)
    assert found.best is attempts[3] and found.cost_model == "random"
    assert RivalResult(SearchConfig(trials=1), (Attempt("w", 0, WRONG),), 0.1).best is None


def test_the_budget_account_counts_a_start_once():
    cost = StartCost(baselines=2, refine=True)
    assert (cost.first, cost.retime, cost.minimum) == (3, 3, 7) == \
        (cost.first, cost.retime, start_cost(2, True))
    cost.check(None)
    with pytest.raises(OptimizeError, match=r"Expected budget >= 7 but got budget=6: the "
                                            r"baselines take 2, the script to refine 1"):
        cost.check(6)
    account = Account(10, cost, cost.first)
    assert account.left() == 4
    account.spend(4)
    assert account.left() == 0 and account.spent == 7
    assert Account(None, cost, 3).left() == float("inf")
    with pytest.raises(OptimizeError, match=r"Expected budget >= 10 .*4\+6"):
        check_fits(9, [4, 6])


def test_optimize_refuses_a_target_other_than_its_evaluators():
    from codegen.targets import as_target
    from training.optimize.kernel import optimize

    class Llvm:
        target = as_target("llvm")

    with pytest.raises(ValueError, match=r"Expected the evaluator's target .* but got "
                                         r"target='cuda'"):
        optimize(None, None, None, "cuda", evaluator=Llvm())
