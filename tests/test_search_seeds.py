"""A MetaSchedule search that starts from scripts measured before it (``codegen.search.tune``
with ``seeds``): the seeds go into its database and its cost model first, and are not timed
again; a script the workload refuses is skipped.  The seeds are the records of the session's
real search (``conftest.datagen_dir``); the seeded search is real too (slow pass)."""

from __future__ import annotations

import pytest

from codegen.search.tune import SearchConfig, search
from codegen.workloads import workload

pytestmark = pytest.mark.slow

SPEC = "matmul(m=32,n=32,k=32)"


class _Recording:
    """A MetaSchedule cost model (random scores) that records what it is taught; the modules
    of ``favoured`` (a list it reads when asked, so it may grow) score above every other."""

    def __new__(cls, favoured=()):
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        @derived_object
        class Recording(ms.cost_model.PyCostModel):
            def __init__(self):
                super().__init__()
                self.taught = []

            def update(self, context, candidates, results):
                self.taught.append([r.run_secs for r in results])

            def predict(self, context, candidates):
                import numpy as np
                import tvm_ffi

                return np.random.uniform(size=len(candidates)) + np.array(
                    [any(tvm_ffi.structural_equal(c.sch.mod, m) for m in favoured)
                     for c in candidates], dtype=float)

        return Recording()


def test_seeds_go_to_the_database_and_the_cost_model_and_are_not_timed_again(
        datagen_dir, llvm2_evaluator, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from codegen.measure import Outcome, Status
    from training.datagen.records import RecordStore

    wl = workload(SPEC)
    first = [(r.script, Outcome(Status(r.status), latency_s=r.latency_s))
             for r in RecordStore(str(datagen_dir)).all_records() if r.workload == SPEC]
    assert len(first) > 4 and any(o.ok for _, o in first)
    # A seed that failed (its script is real, its outcome a timeout) goes in as MetaSchedule's
    # failed trial, with no run time.
    first[-1] = (first[-1][0], Outcome(Status.TIMEOUT, "run", "past its time limit"))
    refused = ('block "no_such_block" -> b0\n', first[0][1])
    cost = _Recording()
    rounds = list(search(wl, llvm2_evaluator.target, llvm2_evaluator,
                         SearchConfig(trials=4, per_round=4, population=32, seed=1),
                         work_dir=str(tmp_path), cost_model=cost, seeds=first + [refused]))
    again = [s for r in rounds for s in r.scripts]
    assert len(again) == 4
    assert not {s for s, _ in first} & set(again)        # a seed is never timed again
    # The cost model was taught the seeds first (the refused one skipped), then each round.
    assert len(cost.taught[0]) == len(first) and len(cost.taught) == 1 + len(rounds)
    seeded = [secs for secs in cost.taught[0] if secs is not None]
    assert len(seeded) == sum(o.ok for _, o in first)
    # TVM's own database holds the seeds beside the search's records.
    db = ms.database.JSONDatabase(work_dir=str(tmp_path), module_equality="structural")
    assert len(db) == len(first) + 4
    # A cost model that learned the seeds as they were timed (optimize's) is not taught them
    # again: only the search's own rounds.
    cost = _Recording()
    rounds = list(search(wl, llvm2_evaluator.target, llvm2_evaluator,
                         SearchConfig(trials=2, per_round=2, population=32, seed=1),
                         cost_model=cost, seeds=first, taught=True))
    assert len(cost.taught) == len(rounds) >= 1
    assert [len(t) for t in cost.taught] == [len(r.scripts) for r in rounds]


class _FavouringSeeds:
    """A MetaSchedule cost model that scores the seeds' kernels highest, so that evolution hands
    them back to be measured (MetaSchedule only remembers what it picked itself)."""

    def __new__(cls, seeds, wl, target):
        import tvm_ffi
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        import dragon_dsl

        mods = [dragon_dsl.to_schedule(s, workload=wl, target=target).mod for s, _ in seeds]

        @derived_object
        class Favouring(ms.cost_model.PyCostModel):
            def update(self, context, candidates, results):
                pass

            def predict(self, context, candidates):
                import numpy as np

                return np.array([float(any(tvm_ffi.structural_equal(c.sch.mod, m)
                                           for m in mods)) for c in candidates])

        return Favouring()


def test_a_seed_proposed_again_is_answered_from_its_record_not_timed(llvm2_evaluator,
                                                                     monkeypatch):
    """A search seeded with an earlier search's kernels, under a cost model that favours them,
    proposes them again; they are answered from their records, not timed, and the search still
    times as many new kernels as asked."""
    from codegen.search import tune

    wl = workload(SPEC)
    config = SearchConfig(trials=8, per_round=8, population=32, seed=1)
    first = [(s, o) for r in search(wl, llvm2_evaluator.target, llvm2_evaluator, config)
             for s, o in zip(r.scripts, r.outcomes, strict=True)]
    assert len(first) == 8 and all(s is not None for s, _ in first)
    answered = []
    get = tune._Measured.get

    def spying(self, mod):
        result = get(self, mod)
        if result is not None:
            answered.append(result)
        return result

    monkeypatch.setattr(tune._Measured, "get", spying)
    timed = []
    evaluate = llvm2_evaluator.evaluate

    def recording(wl, scripts, *args, **kwargs):
        timed.extend(scripts)
        return evaluate(wl, scripts, *args, **kwargs)

    monkeypatch.setattr(llvm2_evaluator, "evaluate", recording)
    favouring = _FavouringSeeds(first, wl, llvm2_evaluator.target)
    again = [s for r in search(wl, llvm2_evaluator.target, llvm2_evaluator, config,
                               cost_model=favouring, seeds=first)
             for s in r.scripts]
    assert not {s for s, _ in first} & set(timed)
    assert len(again) == len(timed) == 8
    assert answered, "the search proposed no seed again: this test proves nothing"


def test_a_seed_that_would_crash_metaschedule_s_mutators_stays_out_of_its_database(
        datagen_dir, llvm2_evaluator, tmp_path):
    """A script may put MetaSchedule's parallel annotation on a loop; MetaSchedule never does,
    and its MutateParallel crashes the whole search on such a trace (seen in a benchmark run:
    "Cannot treat type LoopRV as SBlockRV").  Planted in a real record of the session's
    search, such a seed is taught and remembered but never committed, and the search runs."""
    import re

    from tvm.s_tir import meta_schedule as ms

    import dragon_dsl
    from codegen.search import tune
    from codegen.targets import as_module, default_rules, postproc_set, schedule_rules
    from training.datagen.records import RecordStore

    wl = workload(SPEC)
    good = next(r for r in RecordStore(str(datagen_dir)).all_records()
                if r.workload == SPEC and r.correct and "annotate root parallel=" in r.script)
    planted = re.sub(r"annotate root parallel=(\d+)", r"annotate i0 parallel=\1", good.script)
    assert planted != good.script and "-> i0" in planted
    [timed] = llvm2_evaluator.evaluate(wl, [planted])
    assert timed.ok                                        # a correct kernel, for us
    # The hazard, shown with MetaSchedule's own mutator: it raises on every try.
    tgt = llvm2_evaluator.target
    pp = postproc_set(default_rules(tgt))
    ctx = ms.TuneContext(mod=as_module(wl), target=tgt, task_name="main", num_threads=1,
                         space_generator=ms.space_generator.PostOrderApply(
                             sch_rules=schedule_rules(default_rules(tgt)), postprocs=pp,
                             mutator_probs=pp),
                         search_strategy=ms.search_strategy.EvolutionarySearch())
    trace = dragon_dsl.to_schedule(planted, workload=wl, target=tgt).trace
    [parallel] = [m for m in ctx.space_generator.mutator_probs
                  if type(m).__name__ == "MutateParallel"]
    with pytest.raises(Exception, match="LoopRV"):
        parallel.apply(trace)
    assert tune._unsearchable(ctx, trace)                 # says why
    good_trace = dragon_dsl.to_schedule(good.script, workload=wl, target=tgt).trace
    assert tune._unsearchable(ctx, good_trace) is None
    # With the design spaces' shapes, a script MetaSchedule's rules would not write (here its
    # vectorize annotation left out) is refused too; MetaSchedule's own record is not.
    shapes = {tune._shape(space.trace) for space in ctx.generate_design_space()}
    assert tune._unsearchable(ctx, good_trace, shapes) is None
    trimmed = re.sub(r"annotate root vectorize=\d+\n", "", good.script)
    assert trimmed != good.script
    trimmed_trace = dragon_dsl.to_schedule(trimmed, workload=wl, target=tgt).trace
    assert tune._unsearchable(ctx, trimmed_trace) is None           # its mutators cope...
    assert "design space" in tune._unsearchable(ctx, trimmed_trace, shapes)  # ...not its rules
    # The search runs with it (seeds 0 to 2: MetaSchedule crashed on one of three before).
    for seed in range(3):
        work = tmp_path / str(seed)
        work.mkdir()
        rounds = list(search(wl, tgt, llvm2_evaluator,
                             SearchConfig(trials=16, per_round=16, population=64, seed=seed),
                             work_dir=str(work),
                             seeds=[(planted, timed), (good.script, timed)]))
        found = [s for r in rounds for s in r.scripts]
        assert len(found) == 16 and planted not in found and good.script not in found
        db = ms.database.JSONDatabase(work_dir=str(work), module_equality="structural")
        assert len(db) == 1 + 16                           # the good seed and the search's


def test_scripts_handed_in_between_rounds_join_the_database_and_count_as_trials(
        datagen_dir, llvm2_evaluator, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    import dragon_dsl
    from codegen.measure import Outcome, Status
    from training.datagen.records import RecordStore

    wl = workload(SPEC)
    kept = [r.script for r in RecordStore(str(datagen_dir)).all_records()
            if r.workload == SPEC and r.status == "correct"]
    handed, asked, timed_before = [], [], []
    rounds = []

    def between(left):
        # A kept script the search has not timed yet: the search can propose one of the
        # corpus' scripts itself (same design space), which is then not a re-proposal.
        asked.append(left)
        timed = {s for r in rounds for s in r.scripts}
        fresh = [s for s in kept if s not in timed and s not in {h for h, _ in handed}]
        if len(handed) == 2 or not fresh:
            return []
        [outcome] = llvm2_evaluator.evaluate(wl, [fresh[0]])
        handed.append((fresh[0], outcome))
        timed_before.append(len(rounds))
        favoured.append(dragon_dsl.to_schedule(fresh[0], workload=wl,
                                               target=llvm2_evaluator.target).mod)
        return [(fresh[0], outcome)]

    # The cost model rates what was handed in above all else: the search proposes it again,
    # and it must be answered from what is known, not timed.
    favoured = []
    cost = _Recording(favoured)
    for found in search(wl, llvm2_evaluator.target, llvm2_evaluator,
                        SearchConfig(trials=8, per_round=3, population=32, seed=1),
                        work_dir=str(tmp_path), cost_model=cost, between=between):
        rounds.append(found)
    timed = sum(len(r.outcomes) for r in rounds)
    assert len(handed) == 2 and all(o.status is Status.CORRECT for _, o in handed)
    assert timed + len(handed) == 8                      # what was handed in counts
    assert asked[0] == 8 - len(rounds[0].outcomes)       # told the trials left
    # Never timed again by the search once handed in.
    for (script, _), after in zip(handed, timed_before, strict=True):
        assert script not in {s for r in rounds[after:] for s in r.scripts}
    # Taught to the cost model and committed to TVM's database beside the search's records.
    assert [len(t) for t in cost.taught].count(1) >= 2
    db = ms.database.JSONDatabase(work_dir=str(tmp_path), module_equality="structural")
    assert len(db) == 8
    assert isinstance(handed[0][1], Outcome)


def test_a_search_on_every_core_measures_its_trials_and_threads_are_checked(llvm2_evaluator):
    """``threads=0`` (every core, ``dragon optimize``'s default) runs MetaSchedule's parallel
    candidate generation and feature extraction; a negative count is refused before any work."""
    wl = workload(SPEC)
    rounds = list(search(wl, llvm2_evaluator.target, llvm2_evaluator,
                         SearchConfig(trials=3, per_round=3, population=16, seed=2), threads=0))
    assert sum(len(r.scripts) for r in rounds) == 3
    assert any(o.ok for r in rounds for o in r.outcomes)
    with pytest.raises(ValueError, match="threads=-1"):
        next(search(wl, llvm2_evaluator.target, llvm2_evaluator, SearchConfig(trials=1),
                    threads=-1))
