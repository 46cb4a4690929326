"""How well a cost model ranks one workload's measured candidates, and the aggregates over
workloads.  Pure functions over numbers (numpy only), so that a report says exactly what it
measured.

Per workload, ``scores`` are a model's predictions (higher: predicted faster, MetaSchedule's
``predict`` semantics) and ``latencies`` the measured seconds, ``None`` (or ``inf``, ``nan``)
for a candidate that failed: **a failed candidate counts as slowest**, tied with the other
failures.  A workload without a correct candidate has no best to find: its metrics are ``nan``
and the aggregates leave it out (they say how many they used).  Across workloads, ratios
aggregate as geometric means and taus as medians, never as a lone mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["best_of_top_k", "geometric_mean", "kendall_tau", "median", "top_k_recall"]

Latencies = Sequence[float | None]


def _latencies(latencies: Latencies) -> np.ndarray:
    """Seconds as floats, every failure as ``inf``."""
    out = np.array([math.inf if v is None else float(v) for v in latencies], dtype=float)
    out[~np.isfinite(out) | (out <= 0)] = math.inf
    return out


def _order(scores: Sequence[float]) -> np.ndarray:
    """Indices from the highest score down; ties keep the candidates' order (stable)."""
    values = np.asarray(scores, dtype=float)
    return np.argsort(-values, kind="stable")


def _check(scores: Sequence[float], latencies: Latencies) -> None:
    if len(scores) != len(latencies):
        raise ValueError(f"Expected as many scores as latencies but got {len(scores)} scores "
                         f"and {len(latencies)} latencies")


def kendall_tau(scores: Sequence[float], latencies: Latencies) -> float:
    """Kendall's tau-b between predicted scores and measured speed (1 / latency): 1 when the
    model orders the candidates exactly as measured, -1 when exactly backwards, about 0 for a
    random order.  Ties (equal scores, or two failures) count as tau-b counts them; ``nan``
    when one side is all ties (fewer than two candidates included).

    >>> kendall_tau([3, 2, 1], [1e-3, 2e-3, 3e-3])
    1.0
    >>> kendall_tau([1, 2, 3], [1e-3, 2e-3, 3e-3])
    -1.0
    >>> round(kendall_tau([3, 1, 2, 0], [1e-3, 2e-3, None, None]), 3)  # a failure ranked 2nd
    0.548
    """
    _check(scores, latencies)
    speed = -_latencies(latencies)
    predicted = np.asarray(scores, dtype=float)
    i, j = np.triu_indices(len(predicted), k=1)
    a = np.sign(predicted[i] - predicted[j])
    with np.errstate(invalid="ignore"):  # inf - inf: two failures, a tie
        b = np.nan_to_num(np.sign(speed[i] - speed[j]), nan=0.0)
    untied_a, untied_b = np.count_nonzero(a), np.count_nonzero(b)
    if not untied_a or not untied_b:
        return math.nan
    return float(np.sum(a * b) / math.sqrt(untied_a * untied_b))


def top_k_recall(scores: Sequence[float], latencies: Latencies, k: int) -> float:
    """1.0 when a measured-fastest candidate is among the ``k`` the model scores highest, else
    0.0; ``nan`` when no candidate is correct.

    >>> top_k_recall([0.9, 0.5, 0.1], [3e-3, 1e-3, 2e-3], 1)
    0.0
    >>> top_k_recall([0.9, 0.5, 0.1], [3e-3, 1e-3, 2e-3], 2)
    1.0
    >>> top_k_recall([0.9, 0.5], [None, None], 1)
    nan
    """
    _check(scores, latencies)
    seconds = _latencies(latencies)
    if not np.isfinite(seconds).any():
        return math.nan
    picked = seconds[_order(scores)[:k]]
    return float(np.min(picked) == np.min(seconds))


def best_of_top_k(scores: Sequence[float], latencies: Latencies, k: int) -> float:
    """The latency of the fastest of the model's top ``k`` over the fastest of all: 1.0 when
    measuring only the top ``k`` finds the best, 2.0 when it finds a kernel twice as slow.  A
    failed pick counts as slow as the slowest correct candidate (a bounded penalty, so that a
    geometric mean stays finite); ``nan`` when no candidate is correct.

    >>> best_of_top_k([0.9, 0.5, 0.1], [3e-3, 1e-3, 2e-3], 1)
    3.0
    >>> best_of_top_k([0.9, 0.5, 0.1], [None, 1e-3, 2e-3], 1)  # a failure, as slow as 2 ms
    2.0
    """
    _check(scores, latencies)
    seconds = _latencies(latencies)
    finite = np.isfinite(seconds)
    if not finite.any():
        return math.nan
    seconds = np.where(finite, seconds, np.max(seconds[finite]))
    return float(np.min(seconds[_order(scores)[:k]]) / np.min(seconds))


def geometric_mean(values: Sequence[float]) -> float:
    """The geometric mean of the positive finite values (``nan`` when there is none).

    >>> geometric_mean([1.0, 4.0, float("nan")])
    2.0
    """
    kept = np.asarray([v for v in values if math.isfinite(v) and v > 0], dtype=float)
    return float(np.exp(np.mean(np.log(kept)))) if kept.size else math.nan


def median(values: Sequence[float]) -> float:
    """The median of the finite values (``nan`` when there is none).

    >>> median([0.5, -1.0, 0.25, float("nan")])
    0.25
    """
    kept = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    return float(np.median(kept)) if kept.size else math.nan
