"""MetaSchedule's evolutionary search, with every candidate measured by our own ``Evaluator``.

``tune_tir`` hands candidates to a builder and a runner that see a scheduled module, not the
schedule; ``search`` drives the same parts itself (a ``TuneContext`` with ``EvolutionarySearch``,
the cost model, a database), so that each candidate is encoded as a canonical Dragon script and
measured as a script: parsed, applied, built, verified against the unscheduled kernel and timed
in isolated workers, with the cache.  Search and the rewards of training then agree on what
"correct" and "fast" mean: an incorrect kernel is a failed trial for MetaSchedule too.

Each round yields a ``Round``: the candidates' scripts and outcomes.  The tuning records go to a
MetaSchedule database (``work_dir`` gives TVM's own JSON database, failed candidates with
MetaSchedule's 1e10 s latency), so a search leaves the logs users already know.

A search can start from what was measured before it (``seeds``: scripts and their outcomes,
say a model's): they are committed to the database first, so that the evolutionary search's
initial population begins with the best of them (MetaSchedule's ``init_measured_ratio``), and
the cost model learns from them before it ranks anything.  A seed the search proposes again is
answered with its recorded result, never timed again (``trials`` counts kernels timed).
``cost_model`` replaces the model ``SearchConfig.cost_model`` names, for a cost model that has
already seen search (``codegen.search.cost_model``).

Between rounds, ``between(left)`` may measure scripts of its own (say a model's refinements of
the best kernel so far) and hand them in: they are committed to the database as seeds are, so
the next round's population starts from the best of them and MetaSchedule's mutators vary
them, the cost model learns from them, and they count against ``trials``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..measure.outcomes import Outcome, Status
from ..targets import as_module, as_target, default_rules, postproc_set, schedule_rules

__all__ = ["FAILED_RUN_SECS", "Round", "SearchConfig", "cost_model_name", "search"]

_log = logging.getLogger(__name__)

# MetaSchedule's latency for a candidate that did not run (AddToDatabase's kMaxMeanTime).
FAILED_RUN_SECS = 1e10
# Rounds in a row that bring nothing new before a search stops (MetaSchedule's own
# num_empty_iters_before_early_stop).
_EMPTY_ROUNDS_BEFORE_STOP = 5


@dataclass(frozen=True)
class SearchConfig:
    """One MetaSchedule search of one workload."""

    trials: int = field(default=64, metadata={
        "help": "Candidates measured per workload (MetaSchedule's max_trials)."})
    per_round: int = field(default=16, metadata={
        "help": "Candidates measured per search round (num_trials_per_iter)."})
    seed: int = field(default=0, metadata={"help": "Seed of the search."})
    population: int = field(default=512, metadata={
        "help": "Population of the evolutionary search (EvolutionarySearch.population_size)."})
    cost_model: str = field(default="auto", metadata={
        "help": "'xgb' (MetaSchedule's XGBoost model), 'random', or 'auto' (xgb when the "
                "xgboost package is installed)."})

    def __post_init__(self) -> None:
        if self.trials < 1 or self.per_round < 1:
            raise ValueError(f"Expected trials >= 1 and per_round >= 1 but got "
                             f"trials={self.trials}, per_round={self.per_round}")
        if self.cost_model not in ("auto", "xgb", "random"):
            raise ValueError(f"Expected cost_model 'auto', 'xgb' or 'random' but got "
                             f"{self.cost_model!r}")


@dataclass
class Round:
    """One round of search: what was proposed and what our measurement made of it."""

    index: int
    scripts: list[str | None]        # None: MetaSchedule's trace could not be encoded
    outcomes: list[Outcome]
    seconds: float                   # wall time of the round, search and measurement


def cost_model_name(requested: str = "auto") -> str:
    if requested != "auto":
        return requested
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return "random"
    return "xgb"


def _runner_result(outcome: Outcome):
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    if outcome.ok:
        secs = [float(s) for s in outcome.repeats] or [float(outcome.latency_s or 0.0)]
        return RunnerResult(run_secs=secs, error_msg=None)
    return RunnerResult(run_secs=None, error_msg=f"{outcome.status.value}: {outcome.message}"[:500])


def tune_context(mod, tgt, rules: str, *, seed: int, threads: int = 1, strategy: Any = None):
    """A MetaSchedule ``TuneContext`` for ``mod`` under the rule set ``rules``: its schedule
    rules, its postprocessors, its mutators with their probabilities, and ``strategy`` (a
    search strategy, or none)."""
    from tvm.s_tir import meta_schedule as ms

    pp_set = postproc_set(rules)
    return ms.TuneContext(
        mod=mod, target=tgt,
        space_generator=ms.space_generator.PostOrderApply(
            sch_rules=schedule_rules(rules), postprocs=pp_set, mutator_probs=pp_set),
        search_strategy=strategy, task_name="main", rand_state=seed, num_threads=threads)


def _encode(trace, workload, tgt, pp_set: str) -> str | None:
    import dragon_dsl
    from dragon_dsl.errors import DragonError

    try:
        return dragon_dsl.from_trace(trace, postproc="auto", postproc_set=pp_set,
                                     workload=workload, target=tgt)
    except DragonError:
        return None


class _Measured:
    """The modules already measured in a search (the seeds and every kernel it timed), compared
    as MetaSchedule's database compares them (structural equality), with their results.

    MetaSchedule's evolutionary search only avoids re-measuring what it picked itself (its
    ``measured_workloads_``); a seed from the database can come back unchanged from evolution or
    from random sampling, and is then answered from here, not timed again."""

    def __init__(self) -> None:
        self._by_hash: dict[int, list[tuple[Any, Any]]] = {}

    def add(self, mod, result) -> None:
        import tvm_ffi

        self._by_hash.setdefault(tvm_ffi.structural_hash(mod), []).append((mod, result))

    def get(self, mod):
        import tvm_ffi

        for known, result in self._by_hash.get(tvm_ffi.structural_hash(mod), ()):
            if tvm_ffi.structural_equal(known, mod):
                return result
        return None


# Mutations tried on each seed before the search may take it (MetaSchedule's mutators pick
# what they change at random).
_MUTATION_TRIES = 8
_PARALLEL_KEY = "meta_schedule.parallel"


def _shape(trace) -> tuple:
    """A trace's instructions before postprocessing, without their decisions: each kind, its
    attributes and the kinds of its inputs (a block, a loop, a number ...)."""
    return tuple((inst.kind.name, tuple(str(a) for a in inst.attrs),
                  tuple(type(x).__name__ for x in inst.inputs))
                 for inst in trace.simplified(remove_postproc=True).insts)


def _unsearchable(ctx, trace, spaces: Sequence[tuple] | None = None) -> str | None:
    """Why MetaSchedule's evolutionary search cannot take ``trace`` as a seed, None when it
    can.  Its search replays a database record with its postprocessors (a failure is fatal:
    "Cannot postprocess the trace") and its mutators assume the shapes of the traces its own
    rules write: ``MutateParallel`` takes the block of a ``meta_schedule.parallel`` annotation
    to be one fetched by ``GetSBlock`` and crashes the search otherwise.  A script may annotate
    a loop, or a block a cache made, with that key; MetaSchedule never does.  Other traces its
    rules would not write crash its mutators too (a compute location mutated under a
    ``meta_schedule.random_compute_producer`` the trace had removed), so with ``spaces`` (the
    ``_shape`` of each design space) a seed must have the shape of one: the same instructions,
    decisions aside, as MetaSchedule's own records."""
    from tvm.s_tir.schedule import Schedule

    if spaces is not None and _shape(trace) not in spaces:
        return "its instructions are not those of a design space of MetaSchedule's rules"

    fetched = [out for inst in trace.insts if inst.kind.name == "GetSBlock"
                   for out in inst.outputs]
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and list(inst.attrs) == [_PARALLEL_KEY] and not any(
                inst.inputs[0].same_as(rv) for rv in fetched):
            return f"its {_PARALLEL_KEY} annotation is not on a block fetched by name"
    try:
        sch = Schedule(ctx.mod)
        trace.apply_to_schedule(sch, remove_postproc=True)
        for postproc in ctx.space_generator.postprocs:
            if not postproc.apply(sch):
                return f"{type(postproc).__name__} refuses it"
        for mutator in ctx.space_generator.mutator_probs:
            for _ in range(_MUTATION_TRIES):
                mutator.apply(trace)
    except Exception as exc:  # noqa: BLE001  TVM raises what its checks raise
        return f"{str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else exc!r}"
    return None


def _seed(ctx, database, entry, args_info, cost_model, workload, tgt,
          seeds: Sequence[tuple[str, Outcome]], measured: _Measured,
          spaces: Sequence[tuple] | None = None, *, teach: bool = True) -> int:
    """Commits the measured ``seeds`` to ``database``, teaches ``cost_model`` their results
    (unless ``teach`` is false: it holds them already) and adds them to ``measured``; returns
    how many it replayed.  A script the workload
    refuses is skipped; one the search could not take (``_unsearchable``) is taught and
    remembered, not committed, so that the search never starts from it."""
    from tvm.s_tir import meta_schedule as ms

    import dragon_dsl
    from dragon_dsl.errors import DragonError

    candidates, results = [], []
    for script, outcome in seeds:
        try:
            sch = dragon_dsl.to_schedule(script, workload=workload, target=tgt)
        except DragonError:
            continue
        except Exception as exc:  # noqa: BLE001  a seed never ends the search
            _log.info("a seed does not replay: %s", str(exc).strip().splitlines()[-1:])
            continue
        result = _runner_result(outcome)
        why = _unsearchable(ctx, sch.trace, spaces)
        if why is None:
            secs = result.run_secs if result.run_secs is not None else [FAILED_RUN_SECS]
            database.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, entry, [float(s) for s in secs], tgt, args_info))
        else:
            _log.info("a seed is kept out of the search's database: %s", why)
        candidates.append(ms.MeasureCandidate(sch, args_info))
        results.append(result)
        measured.add(sch.mod, result)
    if candidates and teach:
        cost_model.update(ctx, candidates, results)
    return len(candidates)


def search(workload: Any, target: Any, evaluator: Any, config: SearchConfig | None = None, *,
           rules: str | None = None, work_dir: str | None = None, cost_model: Any = None,
           seeds: Sequence[tuple[str, Outcome]] = (),
           between: Callable[[int], Sequence[tuple[str, Outcome]]] | None = None,
           threads: int = 1, taught: bool = False) -> Iterator[Round]:
    """Run MetaSchedule's evolutionary search on ``workload``, measuring with ``evaluator``
    (a ``codegen.measure.Evaluator`` for ``target``); yields each round as it is measured.

    ``seeds`` are scripts measured before the search (not counted in ``config.trials``), and
    ``cost_model`` a MetaSchedule cost model to use instead of a new one (it is updated in
    place: it keeps learning from every kernel the search times).  ``between(left)``, called
    after each round with the trials left, returns scripts it measured itself (at most
    ``left``): committed like seeds, and counted as trials.  ``taught``: ``cost_model`` has
    learned the seeds' and ``between``'s results already (``optimize`` teaches its model every
    kernel it times), so they are not taught twice: XGBModel keeps every update's rows, and a
    second copy would weigh them double and cost a retraining.

    ``threads`` generate and score the candidates (MetaSchedule's mutations and the cost
    model's features: ``TuneContext.num_threads``; 0: every core, as ``tune_tir``).  One is
    reproducible from ``config.seed``; more are faster and are not (MetaSchedule hands its
    per-thread random states out dynamically).  Not part of ``config``, which names a search
    (datagen's task keys hash it), not the machine that runs it.

    >>> from codegen.measure import Evaluator
    >>> from codegen.workloads import workload
    >>> with Evaluator("llvm") as ev:                                  # doctest: +SKIP
    ...     rounds = list(search(workload("matmul(m=64,n=64,k=64)"), "llvm", ev,
    ...                          SearchConfig(trials=8, per_round=8)))
    """
    from tvm.s_tir import meta_schedule as ms

    from ..targets import import_tensor_intrinsics

    config = config or SearchConfig()
    if threads < 0:
        raise ValueError(f"Expected threads >= 0 but got threads={threads}")
    import_tensor_intrinsics()
    mod = as_module(workload)
    tgt = as_target(target)
    rules = rules or default_rules(tgt)
    pp_set = postproc_set(rules)
    ctx = tune_context(mod, tgt, rules, seed=config.seed, threads=threads or os.cpu_count() or 1,
                       strategy=ms.search_strategy.EvolutionarySearch(
                           population_size=config.population))
    if work_dir is not None:
        database = ms.database.JSONDatabase(work_dir=work_dir, module_equality="structural")
    else:
        database = ms.database.MemoryDatabase()
    teach = not taught or cost_model is None   # a model of our own has learned none of them
    if cost_model is None:
        cost_model = ms.cost_model.CostModel.create(cost_model_name(config.cost_model),
                                                    num_tuning_cores=1)
    entry = database.commit_workload(ctx.mod)
    args_info = ms.arg_info.ArgInfo.from_prim_func(ctx.mod["main"])
    known = _Measured()
    design_spaces = ctx.generate_design_space()
    shapes = {_shape(space.trace) for space in design_spaces}
    # MetaSchedule counts a seed it proposes again as a trial; each is proposed at most once.
    replayed = _seed(ctx, database, entry, args_info, cost_model, workload, tgt, seeds, known,
                     shapes, teach=teach)
    # What ``between`` hands in may be proposed again too: room for as many re-proposals.
    headroom = config.trials if between is not None else 0
    ctx.pre_tuning(max_trials=config.trials + replayed + headroom,
                   num_trials_per_iter=config.per_round,
                   design_spaces=design_spaces, database=database,
                   cost_model=cost_model)
    measured, index, empty = 0, 0, 0
    try:
        while measured < config.trials and empty < _EMPTY_ROUNDS_BEFORE_STOP:
            start = time.perf_counter()
            candidates = ctx.generate_measure_candidates()
            if not candidates:
                break
            candidates = list(candidates)[:config.trials - measured]
            answers = [known.get(c.sch.mod) for c in candidates]
            new = [i for i, a in enumerate(answers) if a is None]
            traces = [candidates[i].sch.trace for i in new]
            scripts = [_encode(t, workload, tgt, pp_set) for t in traces]
            texts = [s for s in scripts if s is not None]
            measured_texts = iter(evaluator.evaluate(workload, texts) if texts else [])
            outcomes = [next(measured_texts) if s is not None else
                        Outcome(Status.APPLY_ERROR, "encode",
                                "MetaSchedule's trace could not be written as a script")
                        for s in scripts]
            fresh = [_runner_result(o) for o in outcomes]
            for i, result in zip(new, fresh, strict=True):
                answers[i] = result
            ctx.notify_runner_results(candidates, answers)
            if new:
                cost_model.update(ctx, [candidates[i] for i in new], fresh)
            for i, trace, result in zip(new, traces, fresh, strict=True):
                known.add(candidates[i].sch.mod, result)
                secs = result.run_secs if result.run_secs is not None else [FAILED_RUN_SECS]
                database.commit_tuning_record(ms.database.TuningRecord(
                    trace, entry, [float(s) for s in secs], tgt, args_info))
            measured += len(new)
            empty = 0 if new else empty + 1
            if new:
                yield Round(index, scripts, outcomes, time.perf_counter() - start)
                index += 1
            if between is not None and measured < config.trials:
                given = list(between(config.trials - measured))[:config.trials - measured]
                _seed(ctx, database, entry, args_info, cost_model, workload, tgt, given, known,
                      shapes, teach=teach)
                measured += len(given)
    finally:
        ctx.post_tuning()

