"""Time limits that adapt to what an ``Evaluator`` has measured: a candidate whose build or run
takes many times the slowest one of the same workload before it is stopped early, and one
whose kernel is many times slower than the fastest of the workload so far timed only once.

A run lasts about ``repeat`` times the longer of ``min_repeat_ms`` and one call of the kernel,
plus loading and verifying it: a run ten times the slowest completed run of the workload is a
kernel slower than any kernel seen on it, which a search has no use for (or a hung one).  It
is stopped at ``limit_factor`` times the slowest, never below ``limit_floor_s`` and never above
the configured limit (``build_timeout_s``, ``run_timeout_s``).  A workload with nothing
finished yet gets the configured limit.

>>> from codegen.measure.config import MeasureConfig
>>> config, limits = MeasureConfig(limit_factor=10, limit_floor_s=1.0), AdaptiveLimits()
>>> limits.limit("wl", "run", config)
60.0
>>> limits.observe("wl", "run", 0.5)
>>> limits.limit("wl", "run", config)
5.0
>>> limits.observe("wl", "run", 9.0)
>>> limits.limit("wl", "run", config)
60.0
>>> limits.limit("wl", "build", MeasureConfig(limit_factor=10, build_limit_factor=3))
120.0
>>> limits.observe("wl", "build", 5.0)
>>> limits.limit("wl", "build", MeasureConfig(limit_factor=10, build_limit_factor=3))
15.0
>>> limits.observe_latency("wl", 0.002); limits.observe_latency("wl", 0.001)
>>> limits.cutoff("wl", MeasureConfig(cutoff_factor=4))
0.004
"""

from __future__ import annotations

import threading

from .config import MeasureConfig

__all__ = ["AdaptiveLimits", "configured"]


def configured(stage: str, config: MeasureConfig) -> float:
    """The fixed limit of a ``stage`` ("build" or "run"): ``build_timeout_s`` or
    ``run_timeout_s``."""
    return float(config.build_timeout_s if stage == "build" else config.run_timeout_s)


class AdaptiveLimits:
    """The slowest finished build and run per workload, and the limits they imply."""

    def __init__(self) -> None:
        self._slowest: dict[tuple[str, str], float] = {}
        self._fastest: dict[str, float] = {}
        self._lock = threading.Lock()  # builds finish on several threads at once

    def observe_latency(self, workload: str, seconds: float) -> None:
        """A verified kernel of ``workload`` that ran in ``seconds`` (its median)."""
        with self._lock:
            self._fastest[workload] = min(seconds, self._fastest.get(workload, float("inf")))

    def fastest(self, workload: str) -> float | None:
        with self._lock:
            return self._fastest.get(workload)

    def cutoff(self, workload: str, config: MeasureConfig) -> float:
        """The latency past which the next kernel of ``workload`` is timed only once:
        ``config.cutoff_factor`` times the fastest so far; 0 (none) when the factor is 0 or
        nothing has been timed."""
        fastest = self.fastest(workload)
        if config.cutoff_factor <= 0 or fastest is None:
            return 0.0
        return config.cutoff_factor * fastest

    def observe(self, workload: str, stage: str, seconds: float) -> None:
        """A build or run of ``workload`` that finished (correct or not) in ``seconds``."""
        with self._lock:
            key = (workload, stage)
            self._slowest[key] = max(seconds, self._slowest.get(key, 0.0))

    def slowest(self, workload: str, stage: str) -> float | None:
        with self._lock:
            return self._slowest.get((workload, stage))

    def limit(self, workload: str, stage: str, config: MeasureConfig) -> float:
        """The limit for the next ``stage`` ("build" or "run") of ``workload``: the configured
        one when its factor (``factor``) is 0 or nothing finished yet."""
        fixed = configured(stage, config)
        slowest = self.slowest(workload, stage)
        factor = self.factor(stage, config)
        if factor <= 0 or slowest is None:
            return fixed
        return min(fixed, max(config.limit_floor_s, factor * slowest))

    @staticmethod
    def factor(stage: str, config: MeasureConfig) -> float:
        """A ``stage``'s multiple of its slowest: ``config.build_limit_factor`` for a build
        when it is set, else ``config.limit_factor``."""
        if stage == "build" and config.build_limit_factor is not None:
            return config.build_limit_factor
        return config.limit_factor

    def why(self, workload: str, stage: str, config: MeasureConfig) -> str:
        """Why the limit is below the configured one, for a timeout's message; "" if it is not."""
        fixed = configured(stage, config)
        slowest = self.slowest(workload, stage)
        if slowest is None or self.limit(workload, stage, config) >= fixed:
            return ""
        return (f" (adaptive: {self.factor(stage, config):g}x the slowest {stage} of this "
                f"workload so far, {slowest:.3g} s; at least {config.limit_floor_s:g} s, at most "
                f"{fixed:g} s)")
