"""MetaSchedule at an equal budget: the rival a model's search is compared with.

``rival_search(workload, target, evaluator, trials)`` runs MetaSchedule's evolutionary
search (``tune.search``) for ``trials`` candidates, each measured as a script by ``evaluator``:
the search is given as many measured kernels as the model's search was.  It keeps every attempt
in the order measured (``dragon eval`` measures them again as the rival's attempts) and derives
the best from them (``dragon demo`` and ``dragon optimize MODEL`` keep the winner).

>>> from codegen.measure import Evaluator                             # doctest: +SKIP
>>> with Evaluator("llvm", cache=False) as ev:                        # doctest: +SKIP
...     found = rival_search(workload("softmax()"), "llvm", ev, 8)
>>> found.best.script, len(found.attempts)                            # doctest: +SKIP
('block "T_softmax_maxelem" -> ...', 8)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..measure.outcomes import Outcome
from .tune import SearchConfig, cost_model_name, search

__all__ = ["Attempt", "RivalResult", "rival_search"]


@dataclass(frozen=True)
class Attempt:
    """One candidate MetaSchedule proposed, and what our measurement made of it."""

    script: str | None       # None: a trace the language cannot write
    round: int
    outcome: Outcome


@dataclass(frozen=True)
class RivalResult:
    """Every attempt of one search, in the order measured."""

    config: SearchConfig
    attempts: tuple[Attempt, ...]
    seconds: float           # wall time, search and measurement

    @property
    def best(self) -> Attempt | None:
        """The fastest correct attempt; None when none was correct."""
        correct = [a for a in self.attempts if a.script is not None and a.outcome.ok]
        return min(correct, key=lambda a: a.outcome.latency_s) if correct else None

    @property
    def cost_model(self) -> str:
        """The cost model the search used (``auto`` resolved)."""
        return cost_model_name(self.config.cost_model)


def rival_search(workload: Any, target: Any, evaluator: Any, trials: int, *, seed: int = 0,
                 population: int = 512, per_round: int | None = None, rules: str | None = None,
                 work_dir: str | None = None) -> RivalResult:
    """MetaSchedule at a budget: ``trials`` candidates searched and measured by ``evaluator``,
    ``per_round`` at a time (all at once by default).  What "MetaSchedule given the same number
    of measurements" means wherever a model's search is compared with it; ``work_dir`` keeps
    TVM's JSON database of the search."""
    config = SearchConfig(trials=trials, per_round=per_round or trials, seed=seed,
                          population=population)
    started = time.perf_counter()
    attempts = tuple(Attempt(script, round_.index, outcome)
                     for round_ in search(workload, target, evaluator, config, rules=rules,
                                          work_dir=work_dir)
                     for script, outcome in zip(round_.scripts, round_.outcomes, strict=True))
    return RivalResult(config, attempts, time.perf_counter() - started)
