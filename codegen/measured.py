"""Candidates measured beside the baselines: the one way a latency becomes a speedup.

``dragon bench``, ``dragon optimize`` (a kernel or a whole model), ``dragon demo`` and
``dragon eval`` all compare a candidate with the same yardsticks, measured the same way:

* ``make_baselines``: the baselines' scheduled modules by name, the ones that do not exist for
  the workload and target kept with the reason (``Baselines``);
* ``measure_beside``: candidate scripts and the available baselines timed by one ``Evaluator``,
  in one session, so a ratio compares timings of one moment: a ``Row`` each, a candidate's or a
  baseline's outcome, or why the baseline is unavailable (``outcomes``: by name);
* ``speedup(reference_s, latency_s)``: how many times faster, None unless both were measured.

>>> speedup(2e-3, 1e-3)
2.0
>>> speedup(None, 1e-3) is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .search.baselines import BASELINES, BaselineUnavailable, baselines

__all__ = ["BASELINES", "UNTUNED", "Baselines", "Row", "make_baselines", "measure_beside",
           "outcomes", "speedup"]

# The baselines that cost no search, named as `dragon bench` names them: the kernel as
# written, and TVM's rule-based default (DLight).  What `dragon optimize` measures beside its
# scripts, and `dragon bench`'s default.
UNTUNED: tuple[str, ...] = ("unscheduled", "default")


def speedup(reference_s: float | None, latency_s: float | None) -> float | None:
    """How many times faster ``latency_s`` is than ``reference_s``: their ratio, None unless
    both are measured latencies (a failed or unavailable kernel has none).

    >>> speedup(3.0, 1.5)
    2.0
    """
    if reference_s is None or latency_s is None or not (reference_s > 0 and latency_s > 0):
        return None
    return reference_s / latency_s


@dataclass(frozen=True)
class Row:
    """One candidate or baseline: its outcome, or why the baseline does not exist here."""

    name: str
    outcome: Any = None       # codegen.measure.Outcome; None when unavailable
    unavailable: str = ""     # set when outcome is None
    baseline: bool = True     # False: a candidate script

    @property
    def latency_s(self) -> float | None:
        """The latency when the kernel ran correctly, else None."""
        return self.outcome.latency_s if self.outcome is not None and self.outcome.ok else None

    def as_dict(self) -> dict[str, Any]:
        if self.outcome is None:
            return {"name": self.name, "status": "unavailable", "message": self.unavailable}
        return {"name": self.name, **self.outcome.as_dict()}


@dataclass(frozen=True)
class Baselines:
    """The baselines made for one workload and target, before any measuring: by name, a
    scheduled module or the ``BaselineUnavailable`` that says why it does not exist."""

    made: dict[str, Any] = field(default_factory=dict)

    @property
    def modules(self) -> dict[str, Any]:
        """The available baselines' modules, by name: what is measured."""
        return {n: m for n, m in self.made.items() if not isinstance(m, BaselineUnavailable)}

    @property
    def available(self) -> int:
        return len(self.modules)

    def rows(self, measured: Mapping[str, Any]) -> tuple[Row, ...]:
        """One row per baseline, in order: its outcome in ``measured``, else why it is
        unavailable."""
        return tuple(Row(n, measured.get(n), "" if n in measured else str(self.made[n]))
                     for n in self.made)


def make_baselines(workload: Any, target: Any, names: tuple[str, ...] | list[str] = UNTUNED,
                   *, trials: int = 64,
                   progress: Callable[[str], None] | None = None) -> Baselines:
    """The baselines ``names`` (from ``BASELINES``) of ``workload`` on ``target``; the tuned
    one, ``metaschedule``, searches for ``trials`` and is labelled with its budget
    (``metaschedule(64)``)."""
    made = baselines(workload, target, trials=trials, names=names, progress=progress)
    return Baselines({(f"metaschedule({trials})" if name == "metaschedule" else name): value
                      for name, value in made.items()})


def measure_beside(evaluator: Any, workload: Any, scripts: Mapping[str, str],
                   baselines: Baselines) -> tuple[Row, ...]:
    """``scripts`` (name -> text) and the available ``baselines`` measured by ``evaluator`` in
    one session: a row per baseline (the unavailable ones with their reason), then a row per
    script."""
    modules = baselines.modules
    measured = evaluator.evaluate_modules(workload, modules) if modules else {}
    outcomes = evaluator.evaluate(workload, list(scripts.values())) if scripts else []
    return baselines.rows(measured) + tuple(
        Row(name, outcome, baseline=False)
        for name, outcome in zip(scripts, outcomes, strict=True))


def outcomes(rows: tuple[Row, ...] | list[Row]) -> dict[str, Any]:
    """The measured rows' outcomes by name, the scripts' first, then the baselines'."""
    ordered = [r for r in rows if not r.baseline] + [r for r in rows if r.baseline]
    return {r.name: r.outcome for r in ordered if r.outcome is not None}
