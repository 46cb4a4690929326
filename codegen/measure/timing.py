"""Timing a loaded kernel: warm-up, repeated runs, median and spread.

On CUDA, TVM's time evaluator times with device events; the L2 cache is flushed before each
repeat when the runtime offers it, and otherwise the inputs rotate through enough copies to
overflow L2.  On CPU the worker is pinned to the cores the target declares and TVM's thread
pool is sized to match.  Which of these applies is the Device's choice (``devices.py``).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import MeasureConfig

__all__ = ["median_and_spread", "time_kernel"]


def median_and_spread(values: list[float]) -> tuple[float, float]:
    """Median and interquartile range."""
    if len(values) < 2:
        return (values[0] if values else float("nan")), 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), q[2] - q[0]


def time_kernel(rt_mod, dev, arg_sets: list[list], config: MeasureConfig,
                preproc: str = "", cutoff_s: float = 0.0) -> list[float]:
    """Seconds per run, one value per repeat.  ``arg_sets`` are interchangeable argument lists
    (copies of the inputs); more than one means the repeats rotate through them.  ``preproc``
    names a function TVM's time evaluator calls before each repeat (an L2 flush); the Device
    chooses both (``Device.timing_args``).  With ``cutoff_s`` above 0, a kernel whose first
    timed run already lasts a repeat (``min_repeat_ms``) and is slower than ``cutoff_s`` gets
    no more: one value comes back.

    Each call of TVM's time evaluator runs the kernel once, untimed, before it times anything,
    so the repeats are timed in one call where they can be (one argument list, no
    ``preproc``): nine calls of a 50 ms kernel would run it eighteen times.  That untimed run
    of the calibrating call is the first of ``config.warmup``.
    """
    entry = rt_mod.entry_name if getattr(rt_mod, "entry_name", "") else "main"
    evaluator = rt_mod.time_evaluator(entry, dev, number=1, repeat=1, min_repeat_ms=0)
    for _ in range(config.warmup - 1):
        evaluator(*arg_sets[0])
    # Calibrate ``number`` so a repeat lasts min_repeat_ms, as TVM's evaluator would; done once
    # here so that every repeat uses the same count.
    single = max(evaluator(*arg_sets[0]).mean, 1e-7)
    number = max(1, int(config.min_repeat_ms / 1e3 / single)) if len(arg_sets) == 1 else 1
    if cutoff_s > 0 and number == 1 and single > cutoff_s:
        return [float(single)]
    if len(arg_sets) == 1 and not preproc:
        timed = rt_mod.time_evaluator(entry, dev, number=number, repeat=config.repeat,
                                      min_repeat_ms=0)(*arg_sets[0])
        return [float(t) for t in timed.results]
    evaluator = rt_mod.time_evaluator(entry, dev, number=number, repeat=1, min_repeat_ms=0,
                                      f_preproc=preproc)
    times = []
    for i in range(config.repeat):
        dev.sync()
        times.append(float(evaluator(*arg_sets[i % len(arg_sets)]).mean))
    return times
