"""Scripts carried over from the kept corpus (training.optimize.transfer): tile factors refitted
to a new workload's loops, the nearest workloads of the family first, and what comes out
applies, and is correct, on the new workload.  The scripts are the kept corpus' records
(MetaSchedule's search, measured by our stack)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from training.optimize.transfer import (
    fit_factors,
    fit_script,
    neighbours,
    shape_distance,
    transferred,
)

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "llvm"
NEW = "matmul(m=192,n=320,k=256)"  # a benchmark shape (held out: not in the corpus)


@pytest.fixture(scope="module")
def records():
    from training.datagen.records import RecordStore

    return list(RecordStore(str(CORPUS)).all_records())


@given(st.lists(st.integers(1, 64), min_size=2, max_size=5), st.integers(1, 4096))
def test_refitted_factors_multiply_to_the_extent_and_keep_their_count(factors, extent):
    fitted = fit_factors(factors, extent)
    assert len(fitted) == len(factors) and math.prod(fitted) == extent
    assert all(f >= 1 for f in fitted)


def test_factors_that_fit_are_kept_and_the_inner_ones_stay_near():
    assert fit_factors([3, 32, 1, 2], 192) == [3, 32, 1, 2]
    assert fit_factors([2, 1, 20, 8], 640) == [4, 1, 20, 8]   # only the outermost moves
    assert fit_factors([16, 16], 7) == [1, 7]


def test_the_nearest_workloads_of_the_family_come_first():
    specs = ["matmul(m=256,n=320,k=256)", "matmul(m=192,n=320,k=256,dtype=float16)",
             "matmul(m=4096,n=320,k=256)", "dense(m=192,n=320,k=256)", NEW]
    assert [s for _, s in neighbours(NEW, specs)] == specs[:3][::2] + [specs[1]]
    assert shape_distance(NEW, "dense(m=192,n=320,k=256)") == math.inf
    # A parameter of another kind is farther than any size: 16x in every dimension is nearer.
    assert shape_distance(NEW, "matmul(m=3072,n=5120,k=4096)") < \
        shape_distance(NEW, "matmul(m=192,n=320,k=256,dtype=float16)")


def test_a_corpus_script_refitted_applies_with_every_tile_the_loops_extent(records):
    import dragon_dsl
    from codegen.workloads import workload
    from dragon_dsl.live import LiveSchedule
    from dragon_dsl.parser import parse

    source = min((r for r in records if r.workload.startswith("matmul(") and r.correct
                  and "dtype" not in r.workload), key=lambda r: r.latency_s)
    wl = workload(NEW)
    fitted = fit_script(source.script, wl, "llvm")
    assert fitted is not None and fitted != source.script
    dragon_dsl.to_schedule(fitted, workload=wl, target="llvm")     # applies, postproc included
    live = LiveSchedule(wl, "llvm")
    tiles = 0
    for stmt in parse(fitted).statements:
        if stmt.op == "tile":
            assert math.prod(stmt.args[1]) == live.extent(stmt.args[0].name)
            tiles += 1
        live.step(stmt)
    assert tiles >= 2
    # Only tile factors changed: the same statements, in the same order.
    assert [s.op for s in parse(fitted).statements] == \
        [s.op for s in parse(source.script).statements]


def test_a_script_for_another_kernel_does_not_fit(records):
    from codegen.workloads import workload

    conv = next(r for r in records if r.workload.startswith("conv2d(") and r.correct)
    assert fit_script(conv.script, workload(NEW), "llvm") is None
    assert fit_script("not a script", workload(NEW), "llvm") is None


def test_transferred_scripts_are_distinct_from_the_nearest_and_correct(records, llvm_evaluator):
    from codegen.workloads import workload

    spec = "matmul(m=96,n=80,k=64)"
    carried = transferred(spec, records, llvm_evaluator.target, limit=3)
    assert len(carried) == 3 and len({t.script for t in carried}) == 3
    assert all(t.source.startswith("matmul(") and t.source != spec for t in carried)
    assert [t.distance for t in carried] == sorted(t.distance for t in carried)
    outcomes = llvm_evaluator.evaluate(workload(spec), [t.script for t in carried])
    assert all(o.ok for o in outcomes), [o.message for o in outcomes]


def test_a_module_files_tasks_take_the_scripts_of_corpus_kernels_with_their_blocks(
        records, llvm_evaluator):
    """A task of a model has no family: its neighbours are the corpus kernels whose scripts
    fetch only blocks it has (here the matmul of other models' tasks, the softmax family),
    ranked by what they leave out and how far their loops are."""
    from codegen.workloads.models import module_tasks
    from codegen.workloads.relax_files import load_module_file
    from dragon_dsl.live import LiveSchedule
    from training.optimize.transfer import structural_neighbours

    mod = load_module_file(str(Path(__file__).parent / "data" / "relax_mlp.py"))
    tasks = module_tasks(mod, spec_of=lambda i: f"module(path=relax_mlp.py,task={i})")
    assert [t.name for t in tasks] == ["fused_matmul_add_relu", "softmax"]
    scripts = {r.workload: r.script for r in records}
    for task in tasks:
        blocks = set(LiveSchedule(task.workload, "llvm").block_names())
        carried = transferred(task.spec, records, llvm_evaluator.target, workload=task.workload,
                              limit=3)
        assert len(carried) == 3 and len({t.script for t in carried}) == 3, task.name
        assert [t.distance for t in carried] == sorted(t.distance for t in carried)
        for t in carried:
            fetched = set(re.findall(r'^block "([^"]+)"', scripts[t.source], re.MULTILINE))
            assert fetched <= blocks and fetched - {"root"}, (t.source, fetched)
        outcomes = llvm_evaluator.evaluate(task.workload, [t.script for t in carried])
        assert all(o.ok for o in outcomes), [o.message for o in outcomes]
    # A task is not its own neighbour, as a family's workload is not.
    softmax = tasks[1]
    fitting = [r for r in records if r.workload.startswith("softmax(") and r.correct][:2]
    assert structural_neighbours(softmax.spec, softmax.workload, {softmax.spec: fitting},
                                 "llvm") == []
    [(distance, source)] = structural_neighbours(softmax.spec, softmax.workload,
                                                 {"other": fitting}, "llvm")
    # 20 for each block of the task its fastest script does not fetch, then how far the loops are.
    fastest = min(fitting, key=lambda r: r.latency_s)
    fetched = set(re.findall(r'^block "([^"]+)"', fastest.script, re.MULTILINE))
    missing = len(set(LiveSchedule(softmax.workload, "llvm").block_names()) - fetched)
    assert source == "other" and 20 * missing <= distance < 20 * (missing + 1)
