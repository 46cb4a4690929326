"""What happened to one candidate script: a structured outcome that rewards, datasets and tables
read field by field, never by parsing messages."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

__all__ = ["Outcome", "Status"]


class Status(str, Enum):
    """The stage a candidate reached.  Only ``CORRECT`` carries a latency."""

    PARSE_ERROR = "parse_error"      # the text is not a valid script
    APPLY_ERROR = "apply_error"      # the script does not fit the kernel (names, loops, factors)
    BUILD_ERROR = "build_error"      # lowering, code generation or nvcc failed
    RUNTIME_ERROR = "runtime_error"  # loading or running crashed (including signals, memory)
    TIMEOUT = "timeout"              # a stage ran past its time limit
    BUILT = "built"                  # built (a CUDA cubin, say) but not run: no device to run on
    INCORRECT = "incorrect"          # it ran, and the output differs from the reference
    CORRECT = "correct"              # it ran, the output matches, and it was timed

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Outcome:
    """The result of evaluating one script on one workload, target and device.

    >>> Outcome(Status.TIMEOUT, stage="run", message="ran past 2.0 s").ok
    False
    """

    status: Status
    stage: str = ""                       # parse, apply, build, load, verify, time
    message: str = ""                     # for people; code reads the other fields
    line: int | None = None               # where a parse or apply error points
    column: int | None = None
    max_abs_error: float | None = None    # over all outputs, against the reference
    max_rel_error: float | None = None
    unwritten: int | None = None          # output elements still holding the poison value
    out_of_bounds: int | None = None      # bytes written outside the outputs (guards, inputs)
    latency_s: float | None = None        # median over repeats
    spread_s: float | None = None         # interquartile range over repeats
    repeats: list[float] = field(default_factory=list)
    build_s: float | None = None          # wall time of apply + build in the worker
    signal: str | None = None             # e.g. "SIGSEGV" when a worker died of a signal
    cached: bool = False                  # served from the measurement cache

    def __post_init__(self) -> None:
        # A measurement that did not happen is never "correct".
        if self.status is Status.CORRECT and not (
                isinstance(self.latency_s, int | float) and math.isfinite(self.latency_s)
                and self.latency_s > 0):
            raise ValueError(f"Expected a finite positive latency_s for a correct outcome but "
                             f"got latency_s={self.latency_s!r}")

    @property
    def ok(self) -> bool:
        return self.status is Status.CORRECT

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON-safe values: a non-finite error (an output of the wrong shape has
        an infinite one) becomes None, so the JSON is valid everywhere."""
        data = asdict(self)
        data["status"] = self.status.value
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        return data

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = Status(values["status"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        return cls.from_dict(json.loads(text))

    def summary(self) -> str:
        """One line for tables and logs."""
        if self.ok:
            return f"correct {self.latency_s * 1e6:.1f} us"
        where = f" at {self.line}:{self.column}" if self.line is not None else ""
        return f"{self.status.value}{where}: {self.message}"
