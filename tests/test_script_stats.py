"""``dragon_dsl.stats``: the counts the card and the evaluation compare scripts by, on scripts
of a real MetaSchedule search (the kept corpus, ``corpus/llvm``) and on edits of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dragon_dsl.errors import DragonError
from dragon_dsl.stats import script_stats
from training.datagen.records import RecordStore

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "llvm"


@pytest.fixture(scope="module")
def dense_script() -> str:
    """A correct MetaSchedule script of a dense layer that tiles its three loops."""
    def cuts(line: str) -> bool:  # a tile with at least two factors above 1
        factors = line[line.index("[") + 1:line.index("]")].split(",")
        return sum(int(f) > 1 for f in factors) >= 2

    store = RecordStore(str(CORPUS))
    for record in store.all_records():
        if record.family == "dense" and record.correct and sum(
                line.startswith("tile ") and cuts(line)
                for line in record.script.splitlines()) >= 3:
            return record.script
    raise AssertionError("the corpus holds no dense script tiling three loops")


def test_a_metaschedule_dense_script_tiles_and_fetches_nothing_twice(dense_script):
    stats = script_stats(dense_script)
    assert stats.statements == len([ln for ln in dense_script.splitlines() if ln.strip()])
    assert stats.tiled_loops >= 3 and stats.tiles and stats.rebinds == 0


def test_untiled_loops_and_rebinds_are_counted(dense_script):
    lines = dense_script.splitlines()
    # Every tile made trivial: the loops stay whole (a factor list of ones and one extent).
    flat = []
    for line in lines:
        if line.startswith("tile "):
            head, rest = line.split("[", 1)
            factors, tail = rest.split("]", 1)
            n = len(factors.split(","))
            line = f"{head}[{', '.join(['1'] * (n - 1) + ['-1'])}]{tail}"
        flat.append(line)
    assert script_stats("\n".join(flat)).tiled_loops == 0
    # A block fetched again right after it was fetched, and again after an annotation (which
    # keeps its name valid): two rebinds.  After an inlining it may be another block: none.
    fetch = lines[0][:lines[0].index("->") + 2]           # block "T_dense" ->
    again = [f"{fetch} a1", f"{fetch} a2", "annotate a2 x=1", f"{fetch} a3"]
    assert script_stats("\n".join(again)).rebinds == 2
    inlined = [f"{fetch} a1", "compute_inline a1", f"{fetch} a2"]
    assert script_stats("\n".join(inlined)).rebinds == 0


def test_a_malformed_script_is_a_dragon_error():
    with pytest.raises(DragonError):
        script_stats("tile [")
