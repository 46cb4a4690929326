"""Candidates measured beside the baselines: the one way a latency becomes a speedup.

``dragon bench``, ``dragon optimize`` (a kernel or a whole model), ``dragon demo`` and
``dragon eval`` all compare a candidate with the same yardsticks, measured the same way:

* ``make_baselines``: the baselines' scheduled modules by name, the ones that do not exist for
  the workload and target kept with the reason (``Baselines``);
* ``measure_beside``: candidate scripts and the available baselines timed by one ``Evaluator``,
  in one session, so a ratio compares timings of one moment: a ``Row`` each, a candidate's or a
  baseline's outcome, or why the baseline is unavailable (``outcomes``: by name);
* ``speedup(reference_s, latency_s)``: how many times faster, None unless both were measured;
* ``compare(reference, candidate)``: that speedup with the two timings' spread, and whether it
  is beyond that spread (``Comparison``: faster, slower or a tie), what every report says;
  ``busy_warning``: the one line a command prints when a comparison it reports is a tie.

>>> speedup(2e-3, 1e-3)
2.0
>>> speedup(None, 1e-3) is None
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .search.baselines import BASELINES, BaselineUnavailable, baselines

__all__ = ["BASELINES", "UNTUNED", "Baselines", "Comparison", "Row", "busy_warning", "compare",
           "make_baselines", "measure_beside", "outcomes", "speedup"]

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
class Comparison:
    """A candidate's timing beside a reference's: ``speedup`` (reference / candidate), the
    ``noise`` the two timings carry (their combined relative spread) and the ``verdict``:
    "faster" or "slower" when the speedup is beyond the noise, else "tie"."""

    speedup: float
    noise: float
    verdict: str

    @property
    def tie(self) -> bool:
        return self.verdict == "tie"

    def __str__(self) -> str:
        """``2.10x``; a tie says so, with the spread it is within: ``1.03x (tie, spread 8%)``."""
        ratio = f"{self.speedup:.2f}x"
        return f"{ratio} (tie, spread {self.noise:.0%})" if self.tie else ratio

    def as_dict(self) -> dict[str, Any]:
        return {"speedup": self.speedup, "noise": self.noise, "verdict": self.verdict}


def _relative_spread(outcome: Any) -> float:
    """The timing's interquartile range over its median; 0 when it has none (one repeat)."""
    spread = getattr(outcome, "spread_s", None)
    return spread / outcome.latency_s if spread and math.isfinite(spread) else 0.0


def compare(reference: Any, candidate: Any, *, floor: float = 0.0) -> Comparison | None:
    """How ``candidate`` (a ``codegen.measure.Outcome``) compares with ``reference``, timed in
    the same session; None unless both are correct.

    The noise is the sum of the two timings' relative spreads (each one's interquartile range
    over its median, ``codegen.measure.timing.median_and_spread``), or ``floor`` when that is
    larger (a fixed tolerance).  The verdict is a tie when the ratio is within that noise,
    ``|ln speedup| <= ln(1 + noise)``: two timings whose spreads overlap do not say which
    kernel is faster.  Without a spread (one repeat) and no floor, only equal medians tie.

    >>> from codegen.measure import Outcome, Status
    >>> def timed(latency_s, spread_s):
    ...     return Outcome(Status.CORRECT, latency_s=latency_s, spread_s=spread_s)
    >>> str(compare(timed(2.0, 0.02), timed(1.0, 0.01)))       # 1% + 1% of noise
    '2.00x'
    >>> c = compare(timed(1.03, 0.05), timed(1.0, 0.03))        # ~4.9% + 3%: within
    >>> c.verdict, str(c)
    ('tie', '1.03x (tie, spread 8%)')
    >>> compare(timed(1.0, 0.0), timed(1.5, 0.0)).verdict
    'slower'
    >>> compare(timed(1.0, 0.0), timed(1.01, 0.0), floor=0.02).verdict
    'tie'
    """
    ratio = speedup(getattr(reference, "latency_s", None) if getattr(reference, "ok", False)
                    else None,
                    getattr(candidate, "latency_s", None) if getattr(candidate, "ok", False)
                    else None)
    if ratio is None:
        return None
    noise = max(_relative_spread(reference) + _relative_spread(candidate), floor)
    if abs(math.log(ratio)) <= math.log1p(noise):
        verdict = "tie"
    else:
        verdict = "faster" if ratio > 1 else "slower"
    return Comparison(ratio, noise, verdict)


def busy_warning(comparisons: Iterable[Comparison | None]) -> str:
    """One line when any comparison is a tie: the timings were too noisy to tell the kernels
    apart (a busy machine); "" otherwise.

    >>> print(busy_warning([Comparison(1.03, 0.08, "tie"), Comparison(2.0, 0.01, "faster")]))
    ... # doctest: +ELLIPSIS
    warning: 1 comparison is a tie within the measured spread (up to 8%): the machine was busy...
    >>> busy_warning([Comparison(2.0, 0.01, "faster"), None])
    ''
    """
    ties = [c for c in comparisons if c is not None and c.tie]
    if not ties:
        return ""
    worst = max(c.noise for c in ties)
    many = f"{len(ties)} comparisons are ties" if len(ties) > 1 else "1 comparison is a tie"
    return (f"warning: {many} within the measured spread (up to {worst:.0%}): the machine was "
            "busy or the kernels are as fast; measure again on an idle machine or with more "
            "--repeat")


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
