"""Figures of an evaluation, from its per-sample rows: pure functions, no measuring.

Each row is one attempt of one model at one task: its ``status`` (``codegen.measure.Status``
values) and, when correct, its ``latency_s`` and ``spread_s`` (rows written before spreads were
kept have none); the references of its task (the unscheduled
kernel, the start script of a refinement, MetaSchedule's best) were measured in the same
session.  What is reported, per model and task kind, follows the field's conventions:

* per attempt: the shares that parse, apply, build, and compute the right result;
* per attempt, over correct attempts: speedup over the unscheduled kernel, geometric mean and
  median (never a lone mean);
* per task, the best correct attempt: speedup over the unscheduled kernel, over MetaSchedule's
  best and (refinement) over the start script, geometric mean and median over the tasks that
  have a correct attempt, and ``fast_p``, KernelBench's share of *all* tasks whose best kernel
  is correct and at least ``p`` times faster than the unscheduled kernel (``fast_0`` is the
  share of tasks solved at all);
* head to head: per task, which of two models found the faster best kernel, a tie within the
  larger of a fixed tolerance and the two timings' spread; and a paired permutation test of
  the two models' best-of-k speedups, whose p says whether the sampler's draw alone would give
  a difference that large (``permutation_test``);
* budget curves: per model and kind, the best speedup over the unscheduled kernel among the
  first ``n`` attempts (``n`` measurements spent, in sampling order), over the tasks;
* what the scripts do (``dragon_dsl.stats``), over the attempts that parse: the share that
  tile, per family too, their statements (median) and rebinds (mean);
* per family: the same figures, per model (``by_family``), and the head to head
  (``head_to_head_by_family``).

Kernels so fast that timing noise decides their speedups can be left out of every figure
(``slow_tasks``: the tasks whose unscheduled kernel, measured in the same session, takes at
least a given time).

>>> rows = [{"model": "a", "task": "t", "kind": "construction", "status": "correct",
...          "latency_s": 1.0, "unscheduled_s": 2.0},
...         {"model": "a", "task": "t", "kind": "construction", "status": "incorrect",
...          "latency_s": None, "unscheduled_s": 2.0}]
>>> s = summarize(rows)["a"]["construction"]
>>> s["attempts"], s["correct"], s["best_speedup_geomean"], s["fast_p"]["2"]
(2, 0.5, 2.0, 1.0)
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from codegen.measured import compare, speedup
from dragon_dsl.errors import DragonError
from dragon_dsl.stats import script_stats

__all__ = ["FAST_P", "best_by_task", "budget_curves", "by_family", "expected_best", "fast_p",
           "geomean", "head_to_head", "head_to_head_by_family", "permutation_test", "self_duel",
           "sign_test", "slow_tasks", "summarize"]

FAST_P = (0.0, 1.0, 1.2, 2.0)
_NOT_PARSED = {"parse_error"}
_NOT_APPLIED = _NOT_PARSED | {"apply_error"}
_NOT_BUILT = _NOT_APPLIED | {"build_error"}


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean of positive values; None when there are none.

    >>> geomean([1.0, 4.0])
    2.0
    """
    logs = [math.log(v) for v in values if v and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _speedups(rows: list[dict[str, Any]], reference: str) -> list[float]:
    """Each correct row's speedup over its task's ``reference`` latency, where there is one."""
    ratios = (speedup(r.get(reference), r["latency_s"]) for r in rows)
    return [s for s in ratios if s is not None]


def best_by_task(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """``(model, task)`` -> that model's fastest correct row for the task (None when none)."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["model"], row["task"])
        held = best.setdefault(key, None)
        if row["status"] == "correct" and row.get("latency_s") and (
                held is None or row["latency_s"] < held["latency_s"]):
            best[key] = row
    return best


def fast_p(speedups: list[float | None], p: float) -> float:
    """The share of tasks (None: no correct kernel) at least ``p`` times faster; ``p = 0``:
    the share with a correct kernel.

    >>> fast_p([2.5, 1.1, None, 0.5], 1.0)
    0.5
    """
    if not speedups:
        return 0.0
    return sum(s is not None and s >= p for s in speedups) / len(speedups)


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{model: {kind: figures}}`` for every model and task kind in ``rows``."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["status"] == "skipped":  # a refinement whose start script did not run here
            continue
        groups[(row["model"], row["kind"])].append(row)
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (model, kind), group in sorted(groups.items()):
        out[model][kind] = _figures(group)
    return dict(out)


def _figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    statuses = [r["status"] for r in rows]
    correct = [r for r in rows if r["status"] == "correct" and r.get("latency_s")]
    attempt = _speedups(correct, "unscheduled_s")
    attempt_ms = _speedups(correct, "metaschedule_s")
    best = best_by_task(rows)
    tasks = sorted({r["task"] for r in rows})
    reference = {r["task"]: r for r in rows}
    over = {"unscheduled": [], "metaschedule": [], "start": []}
    for task in tasks:
        row = best[(rows[0]["model"], task)]
        ref = reference[task]
        for name in over:
            over[name].append(speedup(ref.get(f"{name}_s"), row["latency_s"]) if row else None)
    solved = [s for s in over["unscheduled"] if s is not None]
    figures: dict[str, Any] = {
        "attempts": n, "tasks": len(tasks),
        "parses": sum(s not in _NOT_PARSED for s in statuses) / n,
        "applies": sum(s not in _NOT_APPLIED for s in statuses) / n,
        "builds": sum(s not in _NOT_BUILT for s in statuses) / n,
        "correct": len(correct) / n,
        "attempt_speedup_geomean": geomean(attempt), "attempt_speedup_median": _median(attempt),
        "best_speedup_geomean": geomean(solved), "best_speedup_median": _median(solved),
        "fast_p": {f"{p:g}": fast_p(over["unscheduled"], p) for p in FAST_P},
    }
    if attempt_ms:
        figures["attempt_over_metaschedule_geomean"] = geomean(attempt_ms)
        figures["attempt_over_metaschedule_median"] = _median(attempt_ms)
    for name in ("metaschedule", "start"):
        values = [s for s in over[name] if s is not None]
        if values:
            figures[f"best_over_{name}_geomean"] = geomean(values)
            figures[f"best_over_{name}_median"] = _median(values)
            figures[f"faster_than_{name}"] = sum(s > 1 for s in values)
    shapes = script_figures(rows)
    if shapes:
        figures["scripts"] = shapes
    return figures


def slow_tasks(rows: list[dict[str, Any]], min_unscheduled_s: float) -> set[str]:
    """The tasks whose unscheduled kernel took at least ``min_unscheduled_s`` when measured
    in this session (the median of its rows' references: a resumed run measured some again);
    a task whose unscheduled kernel did not run is not among them (its speedups have no
    reference).

    >>> rows = [{"task": "a", "unscheduled_s": 2e-4}, {"task": "b", "unscheduled_s": 1e-5},
    ...         {"task": "c", "unscheduled_s": None}]
    >>> sorted(slow_tasks(rows, 5e-5)), sorted(slow_tasks(rows, 0.0))
    (['a'], ['a', 'b', 'c'])
    """
    if min_unscheduled_s <= 0:
        return {r["task"] for r in rows}
    times: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("unscheduled_s") is not None:
            times[row["task"]].append(row["unscheduled_s"])
    return {task for task, values in times.items()
            if statistics.median(values) >= min_unscheduled_s}


def by_family(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``{kind: {family: {model: figures}}}``: ``summarize``'s figures of each model over
    each operator family's tasks (correct per attempt, best-of-attempts speedups, ...).

    >>> rows = [{"model": "a", "task": t, "kind": "k", "family": f, "status": "correct",
    ...          "latency_s": 1.0, "unscheduled_s": u}
    ...         for t, f, u in (("t1", "dense", 4.0), ("t2", "dense", 1.0), ("t3", "gemv", 2.0))]
    >>> f = by_family(rows)["k"]
    >>> f["dense"]["a"]["tasks"], f["dense"]["a"]["best_speedup_geomean"], sorted(f)
    (2, 2.0, ['dense', 'gemv'])
    """
    families: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        families[row.get("family") or ""].append(row)
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(dict)
    for family, group in sorted(families.items()):
        for model, kinds in summarize(group).items():
            for kind, figures in kinds.items():
                out[kind].setdefault(family, {})[model] = figures
    return dict(out)


def script_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the parsed scripts of ``rows`` do: how many, the share that tile (overall and per
    family), their statements (median) and rebinds (mean); empty when none parses.

    >>> rows = [{"family": "dense", "status": "correct",
    ...          "script": 'block "C" -> C\\nloops C -> i, j\\ntile i [4, 8] -> i0, i1\\n'
    ...                    'tile j [2, 16] -> j0, j1\\n'},
    ...         {"family": "dense", "status": "correct", "script": 'block "C" -> C\\n'}]
    >>> f = script_figures(rows)
    >>> f["scripts"], f["tile"], f["tile_by_family"], f["statements_median"]
    (2, 0.5, {'dense': 0.5}, 2.5)
    """
    stats: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        if row.get("script") and row.get("status") not in _NOT_PARSED:
            try:
                stats[row.get("family", "")].append(script_stats(row["script"]))
            except DragonError:
                continue
    every = [s for family in stats.values() for s in family]
    if not every:
        return {}
    return {"scripts": len(every), "tile": sum(s.tiles for s in every) / len(every),
            "tile_by_family": {f: sum(s.tiles for s in v) / len(v)
                               for f, v in sorted(stats.items())},
            "statements_median": statistics.median(s.statements for s in every),
            "rebinds_mean": statistics.fmean(s.rebinds for s in every)}


def _timed(row: dict[str, Any]) -> Any:
    """A correct row's timing as an ``Outcome``, its spread when the row carries one."""
    from codegen.measure import Outcome, Status

    return Outcome(Status.CORRECT, latency_s=row["latency_s"], spread_s=row.get("spread_s"))


def head_to_head(rows: list[dict[str, Any]], a: str, b: str, kind: str, *,
                 tie: float = 0.02) -> dict[str, int]:
    """Per task of ``kind`` that both models attempted: ``a`` wins when its best correct kernel
    is faster than ``b``'s beyond the larger of ``tie`` (relative) and the two timings'
    combined spread (rows' ``spread_s``: ``codegen.measured.compare``), or when only ``a`` has
    one; else it is a tie.

    >>> rows = [{"model": m, "task": "t", "kind": "k", "status": "correct", "latency_s": s}
    ...         for m, s in (("a", 1.0), ("b", 2.0))]
    >>> head_to_head(rows, "a", "b", "k")
    {'wins_a': 1, 'wins_b': 0, 'ties': 0, 'tasks': 1}
    >>> rows[1].update(latency_s=1.1, spread_s=0.22)  # 20% of spread: 1.1x is within it
    >>> head_to_head(rows, "a", "b", "k")
    {'wins_a': 0, 'wins_b': 0, 'ties': 1, 'tasks': 1}
    """
    rows = [r for r in rows if r["kind"] == kind and r["status"] != "skipped"]
    best = best_by_task(rows)
    tasks = sorted({r["task"] for r in rows if r["model"] == a}
                   & {r["task"] for r in rows if r["model"] == b})
    out = {"wins_a": 0, "wins_b": 0, "ties": 0, "tasks": len(tasks)}
    for task in tasks:
        verdict = _verdict(best[(a, task)], best[(b, task)], tie)
        out[{"faster": "wins_a", "slower": "wins_b", "tie": "ties"}[verdict]] += 1
    return out


def _verdict(x: dict[str, Any] | None, y: dict[str, Any] | None, tie: float) -> str:
    """Whether best row ``x`` is "faster" or "slower" than ``y``, or a "tie" (None: no
    correct kernel, which loses to any)."""
    if x is None and y is None:
        return "tie"
    if x is None or y is None:
        return "slower" if x is None else "faster"
    return compare(_timed(y), _timed(x), floor=tie).verdict


def sign_test(h: dict[str, int]) -> float:
    """The two-sided exact sign test of a head to head (``head_to_head``'s counts): the chance
    of a split of its decided tasks (ties left out) at least this uneven if each were a coin
    toss between the two models; 1.0 when none was decided.

    >>> sign_test({"wins_a": 88, "wins_b": 14, "ties": 0, "tasks": 102}) < 1e-12
    True
    >>> sign_test({"wins_a": 7, "wins_b": 7, "ties": 19, "tasks": 33})
    1.0
    >>> round(sign_test({"wins_a": 10, "wins_b": 1, "ties": 0, "tasks": 11}), 4)
    0.0117
    """
    from scipy.stats import binomtest

    decided = h["wins_a"] + h["wins_b"]
    return 1.0 if decided == 0 else float(binomtest(h["wins_a"], decided, 0.5).pvalue)


def self_duel(rows: list[dict[str, Any]], model: str, kind: str, *, tie: float = 0.02,
              rounds: int = 200, seed: int = 0) -> dict[str, float]:
    """``model`` against itself, its attempts drawn again: each round draws every task's
    attempts twice with replacement (a bootstrap, as many as it made) and compares the two
    best kernels as ``head_to_head`` compares two models'.  ``decided``: the mean number of
    tasks a round decided (either way), what sampling alone gives; a head to head between two
    models that decides not many more tasks than this says nothing about which is better.

    >>> rows = [{"model": "a", "task": t, "kind": "k", "status": "correct", "latency_s": s}
    ...         for t, s in (("same", 1.0), ("same", 1.0), ("apart", 1.0), ("apart", 3.0))]
    >>> d = self_duel(rows, "a", "k", rounds=400)
    >>> d["tasks"], 0.3 < d["decided"] < 0.6       # "apart": 3 of 8 pairs of draws differ
    (2, True)
    """
    import random

    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["model"] == model and row["kind"] == kind and row["status"] != "skipped":
            attempts[row["task"]].append(row)
    rng = random.Random(seed)
    decided = 0
    for _ in range(rounds):
        for task, task_rows in attempts.items():
            x, y = (best_by_task(rng.choices(task_rows, k=len(task_rows)))[(model, task)]
                    for _ in range(2))
            decided += _verdict(x, y, tie) != "tie"
    return {"decided": decided / rounds if rounds else 0.0, "tasks": len(attempts),
            "rounds": rounds}


def expected_best(values: list[float], k: int) -> float:
    """The expected largest of ``k`` of ``values`` drawn without replacement (the unbiased
    estimate of a best of ``k`` from ``n >= k`` samples, as pass@k is estimated): with the
    values sorted ascending, the i-th (0-based) is the largest of C(i, k-1) of the C(n, k)
    draws.

    >>> expected_best([1.0, 2.0, 3.0, 4.0], 4), expected_best([1.0, 2.0, 3.0, 4.0], 1)
    (4.0, 2.5)
    >>> expected_best([1.0, 3.0, 2.0], 2)  # draws {1,3} {1,2} {3,2}: best 3, 2, 3
    2.6666666666666665
    """
    n = len(values)
    if not 1 <= k <= n:
        raise ValueError(f"Expected 1 <= k <= {n} (the values) but got k={k}")
    ranked = sorted(values)
    return sum(v * math.comb(i, k - 1) for i, v in enumerate(ranked)) / math.comb(n, k)


def _attempt_speedups(rows: list[dict[str, Any]], model: str, kind: str
                      ) -> dict[str, list[float]]:
    """``{task: [speedup of each attempt]}`` of ``model``'s rows of ``kind``: over the task's
    unscheduled kernel as timed beside it, at least 1.0 (the unscheduled kernel is always at
    hand; an attempt that fails counts as keeping it, as ``budget_curves`` counts it)."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row["model"] == model and row["kind"] == kind and row["status"] != "skipped":
            s = (speedup(row.get("unscheduled_s"), row["latency_s"])
                 if row["status"] == "correct" else None)
            out[row["task"]].append(max(s or 1.0, 1.0))
    return out


def permutation_test(rows: list[dict[str, Any]], a: str, b: str, kind: str, *,
                     k: int | None = None, rounds: int = 2000, seed: int = 0
                     ) -> dict[str, Any]:
    """Whether ``a``'s best of ``k`` attempts beats ``b``'s by more than which attempts the
    sampler happened to draw: a paired permutation test over the tasks both attempted.

    The statistic is the geometric mean over tasks of ``a``'s expected best of ``k`` speedup
    (``expected_best`` over its attempts; ``k``: the fewest attempts either model made at a
    task when None) over ``b``'s.  Under the null hypothesis that the two models sample from
    the same distribution at each task, the labels of a task's pooled attempts are
    exchangeable, so each round deals every task's attempts out again, as many to each model
    as it made, and ``p`` is the share of rounds (the observed one counted, so never 0) whose
    statistic is at least as far from 1 as the observed.  Unlike the head to head it weighs
    by how much faster, uses every attempt (runs with different seeds can be pooled: each
    speedup is over its own run's unscheduled kernel) and needs no tie threshold; like it,
    a task counts once however many attempts it has.

    >>> rows = [{"model": m, "task": f"t{t}", "kind": "k", "status": "correct",
    ...          "latency_s": l, "unscheduled_s": 8.0}
    ...         for t in range(12) for m, ls in (("a", (1.0, 2.0)), ("b", (2.0, 4.0)))
    ...         for l in ls]
    >>> p = permutation_test(rows, "a", "b", "k", rounds=500)
    >>> p["ratio"], p["tasks"], p["k"], p["p"] < 0.01
    (2.0, 12, 2, True)
    >>> permutation_test(rows, "a", "a", "k", rounds=50)["p"]
    1.0
    """
    import random

    xs, ys = _attempt_speedups(rows, a, kind), _attempt_speedups(rows, b, kind)
    tasks = sorted(set(xs) & set(ys))
    if not tasks:
        return {"ratio": None, "p": 1.0, "tasks": 0, "k": k, "rounds": rounds}
    fewest = min(min(len(xs[t]), len(ys[t])) for t in tasks)
    k = fewest if k is None else k
    if not 1 <= k <= fewest:
        raise ValueError(f"Expected 1 <= k <= {fewest} (the fewest attempts a model made at "
                         f"a task) but got k={k}")

    def statistic(pairs: list[tuple[list[float], list[float]]]) -> float:
        return sum(math.log(expected_best(x, k) / expected_best(y, k))
                   for x, y in pairs) / len(pairs)

    observed = statistic([(xs[t], ys[t]) for t in tasks])
    rng = random.Random(seed)
    extreme = 1                                   # the observed dealing is one of them
    for _ in range(rounds):
        dealt = []
        for t in tasks:
            pooled = xs[t] + ys[t]
            rng.shuffle(pooled)
            dealt.append((pooled[:len(xs[t])], pooled[len(xs[t]):]))
        extreme += abs(statistic(dealt)) >= abs(observed) - 1e-12
    return {"ratio": math.exp(observed), "p": min(1.0, extreme / (rounds + 1)),
            "tasks": len(tasks), "k": k, "rounds": rounds}


def head_to_head_by_family(rows: list[dict[str, Any]], names: list[str], kind: str, *,
                           tie: float = 0.02) -> dict[str, dict[str, dict[str, int]]]:
    """``{family: {"a vs b": head_to_head(...)}}`` over each operator family's tasks of
    ``kind``, for every pair of ``names`` in order (a family held out of training shows
    apart from those trained on).

    >>> rows = [{"model": m, "task": t, "kind": "k", "family": f, "status": "correct",
    ...          "latency_s": s}
    ...         for m, t, f, s in (("a", "t1", "dense", 1.0), ("b", "t1", "dense", 2.0),
    ...                            ("a", "t2", "pool2d", 3.0), ("b", "t2", "pool2d", 1.0))]
    >>> f = head_to_head_by_family(rows, ["a", "b"], "k")
    >>> f["dense"]["a vs b"]["wins_a"], f["pool2d"]["a vs b"]["wins_b"]
    (1, 1)
    """
    families: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["kind"] == kind:
            families[row.get("family") or ""].append(row)
    return {family: {f"{a} vs {b}": head_to_head(group, a, b, kind, tie=tie)
                     for i, a in enumerate(names) for b in names[i + 1:]}
            for family, group in sorted(families.items())}


def budget_curves(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{model: {kind: curve}}``: for ``n`` = 1 .. the model's attempts per task (in
    sampling order, ``attempt``), over the tasks of the kind, the geometric mean of each task's
    best speedup over the unscheduled kernel among its first ``n`` attempts, and the share of
    tasks whose best is correct and at least 1x faster (``fast_1``).  The unscheduled kernel
    is always at hand: a task whose first ``n`` attempts hold no correct kernel faster than it
    counts 1.0x (the user keeps the unscheduled kernel), so a curve never falls.

    >>> rows = [{"model": "a", "task": t, "kind": "k", "attempt": i, "status": s,
    ...          "latency_s": l, "unscheduled_s": 4.0}
    ...         for t, i, s, l in (("t1", 0, "incorrect", None), ("t1", 1, "correct", 1.0),
    ...                            ("t2", 0, "correct", 2.0), ("t2", 1, "correct", 8.0))]
    >>> curve = budget_curves(rows)["a"]["k"]
    >>> curve["measurements"], [round(g, 3) for g in curve["geomean"]], curve["fast_1"]
    ([1, 2], [1.414, 2.828], [0.5, 1.0])
    """
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list))
    for row in rows:
        if row["status"] != "skipped":
            groups[(row["model"], row["kind"])][row["task"]].append(row)
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (model, kind), tasks in sorted(groups.items()):
        budget = max(r["attempt"] for group in tasks.values() for r in group) + 1
        best = dict.fromkeys(tasks, 1.0)
        fast = dict.fromkeys(tasks, False)
        curve: dict[str, Any] = {"measurements": [], "geomean": [], "fast_1": []}
        for n in range(1, budget + 1):
            for task, group in tasks.items():
                for row in group:
                    if row["attempt"] != n - 1 or row["status"] != "correct":
                        continue
                    gain = speedup(row.get("unscheduled_s"), row.get("latency_s"))
                    if gain is not None:
                        best[task] = max(best[task], gain)
                        fast[task] = fast[task] or gain >= 1.0
            curve["measurements"].append(n)
            curve["geomean"].append(geomean(best.values()))
            curve["fast_1"].append(sum(fast.values()) / len(tasks))
        out[model][kind] = {**curve, "tasks": len(tasks)}
    return dict(out)
