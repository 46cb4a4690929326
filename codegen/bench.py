"""Scripts and baselines measured in one session: what ``dragon bench`` prints.

Every speedup is a ratio of two latencies measured by the same ``Evaluator`` on the same
device in the same run, and only correct kernels have a latency.

>>> from codegen.workloads import workload
>>> report = bench(workload("matmul(m=64,n=64,k=64)"), {"tiled": 'block "C" -> C'},
...                baselines=["unscheduled"], cache=False)             # doctest: +SKIP
>>> report.speedup("tiled", "unscheduled")                               # doctest: +SKIP
1.02
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .measure import Cache, Evaluator, MeasureConfig, Outcome
from .search.baselines import BASELINES, BaselineUnavailable
from .search.baselines import baselines as make_baselines
from .targets import as_target

__all__ = ["BASELINES", "BenchReport", "BenchRow", "bench"]


@dataclass(frozen=True)
class BenchRow:
    """One script or baseline: its outcome, or why the baseline does not exist here."""

    name: str
    outcome: Outcome | None
    baseline: bool = False
    unavailable: str = ""   # set when outcome is None

    def as_dict(self) -> dict[str, Any]:
        if self.outcome is None:
            return {"name": self.name, "status": "unavailable", "message": self.unavailable}
        return {"name": self.name, **self.outcome.as_dict()}


@dataclass(frozen=True)
class BenchReport:
    workload: str
    target: str          # the target's kind
    device: str          # where it was measured
    config: MeasureConfig
    rows: tuple[BenchRow, ...]

    @property
    def baselines(self) -> list[str]:
        """The names of the baselines that were measured."""
        return [r.name for r in self.rows if r.baseline and r.outcome is not None]

    @property
    def scripts(self) -> list[BenchRow]:
        return [r for r in self.rows if not r.baseline]

    def row(self, name: str) -> BenchRow:
        return next(r for r in self.rows if r.name == name)

    def speedup(self, name: str, baseline: str) -> float | None:
        """How many times faster ``name`` ran than ``baseline``; None unless both are correct."""
        mine, theirs = self.row(name).outcome, self.row(baseline).outcome
        if not (mine and theirs and mine.ok and theirs.ok and mine.latency_s):
            return None
        return theirs.latency_s / mine.latency_s

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "target": self.target, "device": self.device,
                "repeat": self.config.repeat, "rows": [r.as_dict() for r in self.rows]}


def bench(workload: Any, scripts: dict[str, str], target: Any = "llvm", *,
          baselines: tuple[str, ...] | list[str] = ("unscheduled", "default"),
          trials: int = 64, config: MeasureConfig | None = None,
          cache: Cache | str | bool | None = None, builders: int | None = None,
          rpc: dict[str, Any] | None = None,
          progress: Callable[[str], None] | None = None) -> BenchReport:
    """Build, verify and time ``scripts`` (name -> text) and the ``baselines`` (from
    ``BASELINES``; ``metaschedule`` tunes for ``trials``) on one device, in one session."""
    say = progress or (lambda message: None)
    tgt = as_target(target)
    config = config or MeasureConfig()
    with Evaluator(tgt, config=config, cache=cache, builders=builders, rpc=rpc) as ev:
        # tune_tir logs its task table to stdout, which belongs to the caller's output
        with contextlib.redirect_stdout(sys.stderr):
            made = _make_baselines(workload, tgt, list(baselines), trials, say)
        modules = {name: mod for name, mod in made.items()
                   if not isinstance(mod, BaselineUnavailable)}
        say(f"building and measuring {len(scripts)} script(s) and {len(modules)} baseline(s) "
            f"on {ev.device} ...")
        measured = ev.evaluate_modules(workload, modules) if modules else {}
        outcomes = ev.evaluate(workload, list(scripts.values())) if scripts else []
        device = ev.device
    rows = [BenchRow(name, measured.get(name), True,
                     "" if name in measured else str(made[name])) for name in made]
    rows += [BenchRow(name, outcome) for name, outcome in zip(scripts, outcomes, strict=True)]
    return BenchReport(str(getattr(workload, "spec", "")), tgt.kind.name, device, config,
                       tuple(rows))


def _make_baselines(workload, tgt, names: list[str], trials: int, say) -> dict[str, Any]:
    made = make_baselines(workload, tgt, trials=trials, names=names, progress=say)
    # The tuned baseline is labelled with its budget: metaschedule(64).
    return {(f"metaschedule({trials})" if name == "metaschedule" else name): value
            for name, value in made.items()}
