"""Scripts and baselines measured in one session: what ``dragon bench`` prints.

Every speedup is a ratio of two latencies measured by the same ``Evaluator`` on the same
device in the same run, and only correct kernels have a latency; ``comparison`` adds the two
timings' spread and says when the ratio is within it, a tie (``codegen.measured.compare``).

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

from .measure import Cache, Evaluator, MeasureConfig
from .measured import (
    BASELINES,
    UNTUNED,
    Comparison,
    Row,
    compare,
    make_baselines,
    measure_beside,
    speedup,
)
from .targets import as_target

__all__ = ["BASELINES", "BenchReport", "BenchRow", "bench"]

# A bench row is the row every comparison with the baselines uses.
BenchRow = Row


@dataclass(frozen=True)
class BenchReport:
    workload: str
    target: str          # the target's kind
    device: str          # where it was measured
    config: MeasureConfig
    rows: tuple[Row, ...]

    @property
    def baselines(self) -> list[str]:
        """The names of the baselines that were measured."""
        return [r.name for r in self.rows if r.baseline and r.outcome is not None]

    @property
    def scripts(self) -> list[Row]:
        return [r for r in self.rows if not r.baseline]

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def speedup(self, name: str, baseline: str) -> float | None:
        """How many times faster ``name`` ran than ``baseline``; None unless both are correct."""
        return speedup(self.row(baseline).latency_s, self.row(name).latency_s)

    def comparison(self, name: str, baseline: str) -> Comparison | None:
        """``name`` beside ``baseline`` with both timings' spread: faster, slower or a tie;
        None unless both are correct."""
        return compare(self.row(baseline).outcome, self.row(name).outcome)

    @property
    def comparisons(self) -> list[Comparison]:
        """Every row's comparison with each baseline but itself, where both ran correctly."""
        found = (self.comparison(r.name, b) for r in self.rows for b in self.baselines
                 if b != r.name)
        return [c for c in found if c is not None]

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "target": self.target, "device": self.device,
                "repeat": self.config.repeat, "rows": [r.as_dict() for r in self.rows],
                "comparisons": {r.name: {b: c.as_dict() for b in self.baselines if b != r.name
                                         for c in [self.comparison(r.name, b)] if c}
                                for r in self.rows}}


def bench(workload: Any, scripts: dict[str, str], target: Any = "llvm", *,
          baselines: tuple[str, ...] | list[str] = UNTUNED,
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
            made = make_baselines(workload, tgt, list(baselines), trials=trials, progress=say)
        say(f"building and measuring {len(scripts)} script(s) and {made.available} "
            f"baseline(s) on {ev.device} ...")
        rows = measure_beside(ev, workload, scripts, made)
        device = ev.device
    return BenchReport(str(getattr(workload, "spec", "")), tgt.kind.name, device, config, rows)
