"""How much input the language's tools accept: a script's size, how far name ranges expand, how
long one list may be and how deeply values nest.  Real scripts and traces stay far below every
default (the largest MetaSchedule trace in the tests is 32 KB of JSON, 300 statements of
script); the limits are there so that no input can make ``parse``, ``check``, ``fmt``,
``encode`` or ``decode`` run for minutes or take gigabytes.

Each field is a ``dragon`` flag (``--max-bytes``, ...) through
``dragon_dsl.cli_kit.add_config_arguments``; in the API, pass ``limits=Limits(...)``.

>>> Limits().max_list
1024
>>> Limits(max_depth=0)
Traceback (most recent call last):
...
ValueError: Expected max_depth >= 1 but got max_depth=0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["DEFAULT_LIMITS", "Limits"]


@dataclass(frozen=True)
class Limits:
    """Bounds on the input of the language's tools; exceeding one is a clean error."""

    max_bytes: int = field(default=256 * 1024, metadata={
        "help": "Largest script or trace JSON read, in bytes (a file, or standard input)."})
    max_names: int = field(default=65536, metadata={
        "help": "Names that the ranges (l0..l9) of one script may stand for, all together."})
    max_list: int = field(default=1024, metadata={
        "help": "Items in one list, argument list or result list (tile factors, reordered "
                "loops, names after '->'), ranges counted by the names they stand for."})
    max_depth: int = field(default=64, metadata={
        "help": "How deeply expressions, lists and maps may nest (in a script or a trace)."})
    workload_timeout_s: float = field(default=300.0, metadata={
        "help": "Seconds that checking one script against --workload may take (in a worker "
                "process, which is killed after that)."})
    workload_memory_mb: int = field(default=4096, metadata={
        "help": "Resident memory (MiB) above which that worker is killed."})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            number = int | float if f.name == "workload_timeout_s" else int
            if isinstance(value, bool) or not isinstance(value, number) or not value >= 1:
                raise ValueError(f"Expected {f.name} >= 1 but got {f.name}={value!r}")


DEFAULT_LIMITS = Limits()
