"""``MeasureConfig``: how candidates are verified and timed, and the limits on every stage.

Each field's ``help`` is also its command-line flag's help (``dragon bench``): the default
lives here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MeasureConfig"]

_RANGES = {"repeat": "at least one timed repeat", "min_repeat_ms": "a non-negative min_repeat_ms",
           "warmup": "a non-negative warmup", "build_timeout_s": "a positive build_timeout_s",
           "run_timeout_s": "a positive run_timeout_s",
           "reference_timeout_s": "a positive reference_timeout_s",
           "memory_limit_mb": "a memory_limit_mb of at least 64 (MiB)",
           "limit_factor": "a non-negative limit_factor",
           "build_limit_factor": "a non-negative build_limit_factor or None",
           "limit_floor_s": "a positive limit_floor_s",
           "cutoff_factor": "a non-negative cutoff_factor"}


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are verified and timed.

    >>> MeasureConfig(repeat=5).fingerprint()
    'r5m20w1s0f1'
    """

    repeat: int = field(default=9, metadata={
        "help": "Timed repeats per kernel; the median and IQR are over these."})
    min_repeat_ms: float = field(default=20.0, metadata={
        "help": "Each repeat runs the kernel enough times to last this long (ms)."})
    warmup: int = field(default=1, metadata={"help": "Untimed runs after verification."})
    seed: int = field(default=0, metadata={
        "help": "Seed of the random inputs (the same for every candidate)."})
    build_timeout_s: float = field(default=120.0, metadata={
        "help": "Seconds to apply and build one candidate."})
    run_timeout_s: float = field(default=60.0, metadata={
        "help": "Seconds to load, verify and time one candidate."})
    reference_timeout_s: float = field(default=600.0, metadata={
        "help": "Seconds to compute the unscheduled reference, once per workload."})
    limit_factor: float = field(default=0.0, metadata={
        "help": "Stop a candidate's build or run at this many times the slowest one of the "
                "same workload so far (0: the fixed limits only; never above them)."})
    build_limit_factor: float | None = field(default=None, metadata={
        "help": "Builds only: stop one at this many times the slowest build of the same "
                "workload so far (unset: --limit-factor)."})
    limit_floor_s: float = field(default=10.0, metadata={
        "help": "The shortest limit --limit-factor sets (seconds)."})
    cutoff_factor: float = field(default=0.0, metadata={
        "help": "Time a candidate once instead of --repeat times when its first timed repeat "
                "is this many times the fastest kernel of the same workload so far (0: every "
                "candidate gets every repeat)."})
    memory_limit_mb: int = field(default=8192, metadata={
        "help": "A worker above this resident memory (MiB) is killed."})
    flush_l2: bool = field(default=True, metadata={
        "help": "CUDA: flush L2 between repeats (or rotate input copies) so repeated runs "
                "are not flattered by a warm cache."})

    def __post_init__(self) -> None:
        checks = [("repeat", self.repeat >= 1), ("min_repeat_ms", self.min_repeat_ms >= 0),
                  ("warmup", self.warmup >= 0), ("build_timeout_s", self.build_timeout_s > 0),
                  ("run_timeout_s", self.run_timeout_s > 0),
                  ("reference_timeout_s", self.reference_timeout_s > 0),
                  ("memory_limit_mb", self.memory_limit_mb >= 64),
                  ("limit_factor", self.limit_factor >= 0),
                  ("build_limit_factor", self.build_limit_factor is None
                   or self.build_limit_factor >= 0),
                  ("limit_floor_s", self.limit_floor_s > 0),
                  ("cutoff_factor", self.cutoff_factor >= 0)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"Expected {_RANGES[name]} but got {name}={getattr(self, name)!r}")

    def fingerprint(self) -> str:
        """What changes a measurement (timeouts and limits do not); part of the cache key."""
        return (f"r{self.repeat}m{self.min_repeat_ms:g}w{self.warmup}s{self.seed}"
                f"f{int(self.flush_l2)}")
