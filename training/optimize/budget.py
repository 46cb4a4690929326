"""The measurement budget of ``optimize`` and ``optimize_model``: every kernel handed to the
evaluator counts, and this module is the one account of it.

An ``optimize`` call spends, whatever it samples, its start (``StartCost``): the available
baselines and the script to refine, timed first, and the final re-timing of the best script
beside the baselines, reserved from the start.  At least one sampled script must fit between
the two.  ``Account`` keeps what a call has spent and what it may still sample; a whole model's
budget is split over its tasks by ``split_budget``, each task's start first.

>>> StartCost(baselines=2).minimum       # 2 baselines, 1 sampled script, 1 + 2 re-timed
6
>>> split_budget(20, [4, 4, 4], [3.0, 1.0, 0.0])
[10, 6, 4]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from training.optimize.propose import ProposeError

__all__ = ["Account", "OptimizeError", "StartCost", "check_fits", "split_budget", "start_cost"]


class OptimizeError(ProposeError):
    """The optimization cannot run as asked (a budget too small for one sampled script)."""


@dataclass(frozen=True)
class StartCost:
    """What one ``optimize`` call spends whatever it samples."""

    baselines: int           # the available baselines
    refine: bool = False     # a script to refine is timed first too

    @property
    def first(self) -> int:
        """Timed before any sampling: the baselines and the script to refine."""
        return self.baselines + self.refine

    @property
    def retime(self) -> int:
        """Reserved from the start: the best script re-timed beside the baselines."""
        return 1 + self.baselines

    @property
    def minimum(self) -> int:
        """The fewest measurements a call can spend: its start, one sampled script, the
        re-timing."""
        return self.first + 1 + self.retime

    def check(self, budget: int | None) -> None:
        """Raises OptimizeError when ``budget`` leaves no measurement for a sampled script."""
        if budget is not None and budget < self.minimum:
            raise OptimizeError(
                f"Expected budget >= {self.minimum} but got budget={budget}: the baselines take "
                f"{self.baselines}{', the script to refine 1' if self.refine else ''}, the "
                f"final re-timing {self.retime}, and one sampled script 1")


def start_cost(available: int, refine: bool = False) -> int:
    """The fewest measurements an ``optimize`` call can spend with ``available`` baselines
    (``StartCost.minimum``)."""
    return StartCost(available, refine).minimum


@dataclass
class Account:
    """What one ``optimize`` call has spent of its ``budget`` (None: no limit)."""

    budget: int | None
    cost: StartCost
    spent: int               # kernels timed so far, the start's included

    def left(self) -> float:
        """What sampling may still measure, the re-timing kept aside; inf without a budget."""
        if self.budget is None:
            return math.inf
        return self.budget - self.spent - self.cost.retime

    def spend(self, kernels: int) -> None:
        self.spent += kernels


def check_fits(budget: int, minimums: list[int]) -> None:
    """Raises OptimizeError, naming what each task needs, when the tasks' ``minimums``
    (``start_cost`` each) do not fit in ``budget``."""
    need = sum(minimums)
    if budget < need:
        raise OptimizeError(
            f"Expected budget >= {need} but got budget={budget}: each of the "
            f"{len(minimums)} tasks needs its baselines, one sampled script and the final "
            f"re-timing ({'+'.join(map(str, minimums))})")


def split_budget(budget: int, minimums: list[int], shares: list[float]) -> list[int]:
    """``budget`` split over tasks: each gets its minimum, and what is left goes in proportion
    to ``shares`` (equally when they are all zero), largest remainders first, so the parts sum
    to ``budget``.  Raises OptimizeError when the minimums do not fit (``check_fits``).

    >>> split_budget(13, [4, 4], [1.0, 1.0])
    [7, 6]
    """
    if len(minimums) != len(shares):
        raise ValueError("Expected one share per minimum")
    check_fits(budget, minimums)
    extra = budget - sum(minimums)
    total = sum(shares)
    weights = [s / total for s in shares] if total > 0 else [1 / len(shares)] * len(shares)
    exact = [extra * w for w in weights]
    parts = [math.floor(x) for x in exact]
    order = sorted(range(len(parts)), key=lambda i: exact[i] - parts[i], reverse=True)
    for i in order[:extra - sum(parts)]:
        parts[i] += 1
    return [m + p for m, p in zip(minimums, parts, strict=True)]
