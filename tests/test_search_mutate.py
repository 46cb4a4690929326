"""Mutants of measured scripts (``codegen.search.mutate``): MetaSchedule's mutators applied to
a MetaSchedule trace give distinct scripts of the same design space, each a change of its
decisions only, reproducible from the seed; parents the mutators cannot take are skipped."""

from __future__ import annotations

import pytest

import dragon_dsl
from codegen.search.mutate import mutants
from codegen.search.tune import _shape
from codegen.workloads import workload

from .traces import applies_in_tvm, fixed_traces

SPEC = "matmul(m=64,n=96,k=128)"
TARGET = {"kind": "llvm", "num-cores": 2}


@pytest.fixture(scope="module")
def parents():
    wl = workload(SPEC)
    return [dragon_dsl.from_trace(t, workload=wl, target=TARGET, postproc="auto")
            for t in fixed_traces(SPEC, TARGET, "llvm", 2, seed=3)]


def test_mutants_change_the_decisions_of_a_parent_only(parents):
    wl = workload(SPEC)
    made = mutants(wl, TARGET, parents, 12, seed=0)
    assert len(made) == 12 and len(set(made)) == 12
    assert not set(made) & {dragon_dsl.format(p) for p in parents}
    shapes = {_shape(dragon_dsl.to_schedule(p, workload=wl, target=TARGET).trace)
              for p in parents}
    for script in made:
        assert dragon_dsl.format(script) == script            # canonical
        assert applies_in_tvm(script, wl, TARGET)              # TVM replays it on its own
        trace = dragon_dsl.to_schedule(script, workload=wl, target=TARGET).trace
        assert _shape(trace) in shapes                         # a parent's instructions


def test_mutants_are_reproducible_and_leave_out_what_is_excluded(parents):
    wl = workload(SPEC)
    first = mutants(wl, TARGET, parents, 8, seed=5)
    assert mutants(wl, TARGET, parents, 8, seed=5) == first
    assert mutants(wl, TARGET, parents, 8, seed=6) != first
    again = mutants(wl, TARGET, parents, 8, seed=5, exclude=[*first[:4], "not a script"])
    assert not set(again) & set(first[:4])                     # a text that does not parse
    assert mutants(wl, TARGET, [*parents, "not a script"], 4, seed=5) == first[:4]  # is skipped


def test_parents_the_mutators_cannot_take_give_no_mutants(parents):
    # A script written for another kernel does not replay here; one that only fetches a
    # block is not a design space's (MetaSchedule's mutators assume its rules' traces).
    wl = workload(SPEC)
    assert mutants(workload("softmax(m=64,n=128)"), TARGET, parents, 4) == []
    assert mutants(wl, TARGET, ['block "C" -> b0\n'], 4) == []
    assert mutants(wl, TARGET, [], 4) == [] and mutants(wl, TARGET, parents, 0) == []
