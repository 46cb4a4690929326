"""What a script does, counted: its statements, the loops it tiles, the blocks it fetches again.

The dataset card, the evaluation and the RL diagnostics compare scripts by these counts (a
model's beside MetaSchedule's).  A loop is *tiled* when a ``tile`` or ``split`` cuts it into at
least two parts that are not 1 (``tile i [1, 1, 1, 1]`` leaves the loop as it was); a script
*tiles* when it tiles at least two loops.  A *rebind* fetches a block (``block "C" -> c2``)
that the script already holds under a name, with no statement between that could replace it
(loop transformations and annotations keep a block's name valid; inlining, caching,
rfactor, blockize and the like may not).

>>> s = script_stats('block "C" -> C\\nloops C -> i, j, k\\ntile i [4, 16] -> i0, i1\\n'
...                  'tile j [1, 64] -> j0, j1\\nblock "C" -> C2\\n')
>>> (s.statements, s.tiled_loops, s.tiles, s.rebinds)
(5, 1, False, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

from .ast import Ref
from .parser import parse

__all__ = ["MIN_TILED_LOOPS", "ScriptStats", "script_stats"]

# A script tiles when it cuts at least this many loops (issue 26's measure of "it tiles").
MIN_TILED_LOOPS = 2
_CUTS = ("tile", "partitioned_tile", "split")
# Statements after which a block held may be another (or gone); the general form ``@Kind``
# and ``postproc`` count as such too.
_REPLACE_BLOCKS = frozenset((
    "compute_at", "reverse_compute_at", "compute_inline", "reverse_compute_inline",
    "cache_read", "cache_write", "reindex", "read_at", "write_at", "decompose_reduction",
    "rfactor", "blockize", "tensorize", "transform_block_layout"))


@dataclass(frozen=True)
class ScriptStats:
    statements: int        # every statement, the closing ``postproc`` included
    tiled_loops: int       # loops cut into two or more parts other than 1
    rebinds: int           # blocks fetched again with nothing changed since they were held

    @property
    def tiles(self) -> bool:
        return self.tiled_loops >= MIN_TILED_LOOPS


def _cuts(factors) -> bool:
    if not isinstance(factors, tuple):
        return True  # a factor list held in a variable: decided when it runs
    return sum(not (isinstance(f, int) and f == 1) for f in factors) >= 2


def script_stats(script: str) -> ScriptStats:
    """The counts of ``script`` (parsed: a DragonError names a malformed one)."""
    program = parse(script)
    tiled = rebinds = 0
    held: set[str] = set()  # blocks fetched since a statement last replaced blocks
    for stmt in program.statements:
        if stmt.op in _CUTS and len(stmt.args) >= 2 and _cuts(stmt.args[1]):
            tiled += 1
        if stmt.op == "block":
            first = stmt.args[0] if stmt.args else ""
            name = first.name if isinstance(first, Ref) else str(first)
            if name in held:
                rebinds += 1
            held.add(name)
        elif stmt.op in _REPLACE_BLOCKS or stmt.op.startswith("@") or stmt.op == "postproc":
            held.clear()
    return ScriptStats(len(program.statements), tiled, rebinds)
