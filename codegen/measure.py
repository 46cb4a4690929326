"""Timing a loaded kernel: warm-up, repeated runs, median and spread.

On CUDA, TVM's time evaluator times with device events; the L2 cache is flushed before each
repeat when the runtime offers it, and otherwise the inputs rotate through enough copies to
overflow L2.  On CPU the worker is pinned to the cores the target declares and TVM's thread
pool is sized to match (see ``Evaluator``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

__all__ = ["MeasureConfig", "median_and_spread", "time_kernel"]


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are verified and timed."""

    repeat: int = 9                 # timed repeats; the median and IQR are over these
    min_repeat_ms: float = 20.0     # each repeat runs the kernel enough times to last this long
    warmup: int = 1                 # untimed runs after verification
    seed: int = 0                   # inputs are drawn from this seed (same for every candidate)
    build_timeout_s: float = 120.0  # apply + build, per candidate
    run_timeout_s: float = 60.0     # load + verify + time, per candidate
    reference_timeout_s: float = 600.0  # the unscheduled reference, once per workload
    memory_limit_mb: int = 8192     # a worker above this is killed
    flush_l2: bool = True           # CUDA: keep L2 from flattering repeated runs

    def fingerprint(self) -> str:
        """What changes a measurement (timeouts and limits do not)."""
        d = asdict(self)
        return (f"r{d['repeat']}m{d['min_repeat_ms']:g}w{d['warmup']}s{d['seed']}"
                f"f{int(self.flush_l2)}")


def median_and_spread(values: list[float]) -> tuple[float, float]:
    """Median and interquartile range."""
    if len(values) < 2:
        return (values[0] if values else float("nan")), 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), q[2] - q[0]


def time_kernel(rt_mod, dev, arg_sets: list[list], config: MeasureConfig) -> list[float]:
    """Seconds per run, one value per repeat.  ``arg_sets`` are interchangeable argument lists
    (copies of the inputs); more than one means the repeats rotate through them."""
    import tvm

    preproc = ""
    if dev.dlpack_device_type() == 2 and config.flush_l2 and len(arg_sets) == 1 and \
            tvm.get_global_func("l2_cache_flush_cuda", allow_missing=True) is not None:
        preproc = "l2_cache_flush_cuda"
    entry = rt_mod.entry_name if getattr(rt_mod, "entry_name", "") else "main"
    evaluator = rt_mod.time_evaluator(entry, dev, number=1, repeat=1, min_repeat_ms=0)
    for _ in range(config.warmup):
        evaluator(*arg_sets[0])
    # Calibrate ``number`` so a repeat lasts min_repeat_ms, as TVM's evaluator would; done once
    # here so that every repeat uses the same count.
    single = max(evaluator(*arg_sets[0]).mean, 1e-7)
    number = max(1, int(config.min_repeat_ms / 1e3 / single)) if len(arg_sets) == 1 else 1
    evaluator = rt_mod.time_evaluator(entry, dev, number=number, repeat=1, min_repeat_ms=0,
                                      f_preproc=preproc)
    times = []
    for i in range(config.repeat):
        dev.sync()
        times.append(float(evaluator(*arg_sets[i % len(arg_sets)]).mean))
    return times
