"""``optimize()``: the fastest script a model can write for one kernel, measured.

Round 0 samples ``k`` scripts by schedule-aware decoding from the construction prompt (or, given
a script to refine, from its refinement prompt with its latency, measured first).  Each of
rounds 1..R samples ``k`` more from the refinement prompt of the fastest correct script so far
and its measured latency: the model refines its own best.  Every distinct script is built,
verified and timed by one ``Evaluator``; a script written twice (in canonical form) is measured
once.  The baselines, the unscheduled kernel and TVM's rule-based default (DLight, which has
no rule for some kernels on llvm), are measured by the same evaluator first, and at the end the
best script is timed again beside them, so its speedups compare timings of one moment.  What
the re-timing measured fastest is the answer (``OptimizeResult.winner``): the best script only
when it beat every baseline then, else the baseline, and no script is handed back
(``best_script`` is None) - a script measured slower than a baseline is never the answer.

The budget counts every kernel handed to the evaluator: the baselines, the script to refine,
each distinct sampled script, and the final re-timing of the best beside the baselines, which
is reserved from the start.  Duplicates are free.  When it runs out, the search stops early.

With a cost model (``codegen.search.cost_model``, one that has seen search), each round samples
``width`` scripts, more than it times: the cost model ranks the distinct new ones and only the
``k`` it ranks first are timed (sampling is cheap, timing is not), and it learns from every
kernel timed.  After the model's rounds, ``search`` more kernels go to MetaSchedule's
evolutionary search, which starts from every script the model timed (its initial population
holds the best of them) and ranks with the same cost model: the model proposes, the cost
model ranks, the search refines.  With ``refine_search`` r, the model also writes r
refinements of the fastest kernel so far after each of the search's rounds, which join the
search's database: one more mutator of the population's best.

>>> with Evaluator("llvm", cache=False) as ev:                                 # doctest: +SKIP
...     result = optimize(model, tokenizer, workload("softmax(m=32,n=64)"),
...                       config=OptimizeConfig(k=4, rounds=2, budget=20), evaluator=ev)
>>> result.best.script, result.speedup("unscheduled"), result.measurements  # doctest: +SKIP
('block "T_softmax_maxelem" -> ...', 1.8, 14)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from codegen.measure.config import MeasureConfig
from codegen.measured import (
    UNTUNED,
    Baselines,
    Comparison,
    Row,
    compare,
    make_baselines,
    measure_beside,
    outcomes,
    speedup,
)
from training.optimize.budget import Account, OptimizeError, StartCost
from training.optimize.propose import ProposeError
from training.sampling.config import SamplingConfig

__all__ = ["MEASURE", "Candidate", "OptimizeConfig", "OptimizeError", "OptimizeResult",
           "RefineError", "Round", "Start", "measure_start", "optimize", "ranked_picks"]

# How ``optimize`` measures unless told otherwise (``dragon optimize``'s flags, the demo and the
# benchmark against MetaSchedule): ``MeasureConfig``'s defaults, but a script's build or run
# that takes ten times the slowest one of the workload before it is stopped (at least 10 s):
# a search has no use for such a kernel, and the fixed limits (120 s, 60 s) cost a run of 16
# kernels up to 230 s of its 264 in the seventeenth session's benchmark; and a kernel whose
# first timed repeat is 4x the fastest of the workload so far timed once, not nine times (the
# model's two samples of the demo's dense layer ran 12x and 52x slower than the best carried
# over and took 17 s of its 94 to time in the twenty-fifth session's profile).  A build is
# stopped sooner, at three times the slowest build so far (the baselines' included; still at
# least 10 s): a script carried over to the demo's dense layer from a 4x larger one, its
# 64x64 register tile kept, built for 31 s (every other candidate in under 1.3 s) and ran 13x
# slower than the others, and at ten times the baselines' 3 s build its build held the
# transfer round 30 s in the thirtieth session's profile.
MEASURE = MeasureConfig(limit_factor=10.0, build_limit_factor=3.0, cutoff_factor=4.0)


class RefineError(ProposeError):
    """The script to refine does not work on the workload; ``line`` and ``column`` say where
    when the outcome points at a statement, ``outcome`` says what happened."""

    def __init__(self, reason: str, outcome: Any = None) -> None:
        self.reason, self.outcome = reason, outcome
        self.line = getattr(outcome, "line", None)
        self.column = getattr(outcome, "column", None)
        where = f"{self.line}:{self.column or 1}: " if self.line is not None else ""
        super().__init__(where + reason)


@dataclass(frozen=True)
class OptimizeConfig:
    """How many scripts are sampled, for how many rounds, within how many measurements."""

    k: int = field(default=8, metadata={"help": "Scripts sampled per round."})
    rounds: int = field(default=3, metadata={
        "help": "Refinement rounds after the first: each samples k scripts from the "
                "refinement prompt of the fastest correct script so far."})
    width: int | None = field(default=None, metadata={
        "help": "Scripts sampled per round for the cost model to rank; the k it ranks first "
                "are timed.  None: k (all timed, no ranking).  Needs a cost model."})
    search: int = field(default=0, metadata={
        "help": "Kernels timed by MetaSchedule's evolutionary search after the model's "
                "rounds, starting from every script the model timed and ranking with the "
                "cost model, plus what the scripts carried over and the model's rounds left "
                "untimed (samples that do not apply, duplicates); 0: no search."})
    local: int = field(default=0, metadata={
        "help": "Kernels timed last, from mutants of the fastest kernels so far (after the "
                "search, which explores; these exploit): rounds of local_round, each "
                "MetaSchedule's mutators applied to the three fastest correct scripts "
                "(codegen.search.mutate), the cost model ranking width of them; what no mutant "
                "can take (no script the mutators take) goes to the search (0: none)."})
    local_round: int = field(default=4, metadata={
        "help": "Kernels timed per round of mutants (the next round mutates the fastest "
                "kernels again, its own included)."})
    refine_search: int = field(default=0, metadata={
        "help": "Scripts the model writes between the search's rounds, from the refinement "
                "prompt of the fastest kernel so far: the model as one more mutator of the "
                "population's best (they join the search's database, so its next population "
                "starts from them); counted in search (0: none)."})
    seed_search: bool = field(default=True, metadata={
        "help": "Start the search from every script the model timed (committed to its "
                "database and taught to its cost model first); off: from random samples, as "
                "MetaSchedule alone starts (the ablation of seeding)."})
    search_threads: int = field(default=0, metadata={
        "help": "Threads that generate and score the search's candidates (codegen.search."
                "tune.search's threads); 0: every core, as tune_tir; 1: the search is "
                "reproducible from the seed."})
    transfer: int = field(default=0, metadata={
        "help": "Scripts carried over from a corpus (the fastest of the nearest workloads of "
                "the same family, fitted to this one's loops: training.optimize.transfer) "
                "timed before the model's first round, which then refines the best of them; "
                "needs a corpus (0: none)."})
    transfer_nearest: int = field(default=1, metadata={
        "help": "Of the transfer scripts timed, this many are the nearest workloads' fastest "
                "that the cost model did not rank among the first (a hedge against a cost "
                "model wrong on a workload unlike those it learned: on a held-out sum "
                "reduction it ranked last the scripts 1.4x faster than those it picked); 0: "
                "every one the cost model's pick."})
    budget: int | None = field(default=None, metadata={
        "help": "Kernels timed at most, all counted: the baselines, the script to refine, each "
                "distinct sampled script and the final re-timing of the best beside the "
                "baselines (reserved from the start); duplicates are free.  None: no limit, "
                "k x (rounds + 1) scripts at most."})

    def __post_init__(self) -> None:
        if not self.k >= 1:
            raise ValueError(f"Expected k >= 1 but got k={self.k}")
        if not self.rounds >= 0:
            raise ValueError(f"Expected rounds >= 0 but got rounds={self.rounds}")
        if self.width is not None and not self.width >= self.k:
            raise ValueError(f"Expected width >= k ({self.k}) but got width={self.width}")
        if not self.search >= 0:
            raise ValueError(f"Expected search >= 0 but got search={self.search}")
        if not self.refine_search >= 0:
            raise ValueError(f"Expected refine_search >= 0 but got "
                             f"refine_search={self.refine_search}")
        if not self.search_threads >= 0:
            raise ValueError(f"Expected search_threads >= 0 but got "
                             f"search_threads={self.search_threads}")
        if not self.local >= 0 or not self.local_round >= 1:
            raise ValueError(f"Expected local >= 0 and local_round >= 1 but got "
                             f"local={self.local}, local_round={self.local_round}")
        if not self.transfer >= 0:
            raise ValueError(f"Expected transfer >= 0 but got transfer={self.transfer}")
        if not self.transfer_nearest >= 0:
            raise ValueError(f"Expected transfer_nearest >= 0 but got "
                             f"transfer_nearest={self.transfer_nearest}")
        if self.budget is not None and not self.budget >= 1:
            raise ValueError(f"Expected budget >= 1 but got budget={self.budget}")


@dataclass(frozen=True)
class Candidate:
    """A distinct script (canonical text) and its first measurement."""

    script: str
    outcome: Any               # codegen.measure.Outcome
    round: int                 # the round that first wrote it (0 for the script to refine)
    source: str = "sample"     # "sample", "given" (the script to refine), "corpus", "local"
                               # (a mutant of the fastest), "search" or "refine" (the
                               # model's, between the search's rounds)

    @property
    def latency_s(self) -> float | None:
        return self.outcome.latency_s if self.outcome.ok else None

    def as_dict(self) -> dict[str, Any]:
        return {"script": self.script, "round": self.round, "source": self.source,
                "outcome": self.outcome.as_dict()}


@dataclass(frozen=True)
class Round:
    """What one round sampled and measured."""

    index: int
    prompt: str                    # "construction", "refinement", "corpus" (scripts carried
                                   # over), "local" (mutants of the fastest), "search"
                                   # (MetaSchedule's) or "refine" (the model's refinements
                                   # between the search's rounds)
    prompt_latency_s: float | None  # the latency the refinement prompt gave
    attempts: int                  # scripts sampled
    measured: int                  # distinct scripts measured for the first time
    correct: int                   # attempts whose script is correct
    round_best_s: float | None     # the fastest correct attempt of this round
    best_s: float | None           # the fastest correct script so far

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class Start:
    """The baselines and the script to refine, measured before any sampling."""

    baselines: tuple[Row, ...]       # codegen.measured rows, the unavailable ones included
    given: Candidate | None
    measurements: int
    modules: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def baseline(self, name: str) -> Row:
        return next(b for b in self.baselines if b.name == name)

    @property
    def cost(self) -> StartCost:
        """What the call spends whatever it samples (``training.optimize.budget``)."""
        return StartCost(len(self.modules), self.given is not None)


@dataclass(frozen=True)
class OptimizeResult:
    """The search's rounds and candidates, and its best script re-timed beside the baselines."""

    workload: str
    target: str
    device: str
    config: OptimizeConfig
    start: Start
    rounds: tuple[Round, ...]
    candidates: tuple[Candidate, ...]
    best: Candidate | None           # the fastest correct candidate, by its first timing
    final: dict[str, Any]            # re-timed together: "best" and each available baseline
    measurements: int                # kernels handed to the evaluator, all counted
    stopped: str                     # "rounds" (all ran), "budget", or "search failed: WHY"
                                     # (MetaSchedule's search raised; what it timed is kept)
    seconds: dict[str, float] = field(default_factory=dict)  # wall clock by phase: "start"
    # (the baselines, when measured here), "transfer", "model", "search", "retime"

    @property
    def ok(self) -> bool:
        """A correct script was found, and it was correct again when re-timed."""
        again = self.final.get("best")
        return self.best is not None and again is not None and again.ok

    @property
    def winner(self) -> str | None:
        """The fastest kernel of the final re-timing: "best" (the best script) or a baseline's
        name ("unscheduled", "default") when no script beat it; None when nothing was re-timed
        correctly.  The best script wins only when strictly faster than every baseline."""
        timed = {n: o.latency_s for n, o in self.final.items() if o is not None and o.ok}
        if not timed:
            return None
        fastest = min(timed.values())
        if timed.get("best") == fastest and all(
                lat > fastest for n, lat in timed.items() if n != "best"):
            return "best"
        return min((n for n in timed if n != "best"), key=lambda n: timed[n])

    @property
    def best_script(self) -> str | None:
        """The answer as a script: the best script when it won the final re-timing, else None
        (a baseline won: keep it)."""
        return self.best.script if self.winner == "best" and self.best is not None else None

    @property
    def improved(self) -> bool:
        """The best script is one the model or the search wrote, not the script it was given,
        and it beat the baselines."""
        return self.best_script is not None and self.best is not None and \
            self.best.source != "given"

    @property
    def latency_s(self) -> float | None:
        """The best script's latency, re-timed beside the baselines."""
        return self.final["best"].latency_s if self.ok else None

    @property
    def spent(self) -> dict[str, int]:
        """The kernels timed, by what they were: they add up to ``measurements``."""
        given = self.start.given is not None
        return {"baselines": self.start.measurements - given, "given": int(given),
                "sampled": sum(r.measured for r in self.rounds), "retimed": len(self.final)}

    def speedup(self, baseline: str) -> float | None:
        """How many times faster the best script ran than ``baseline`` ("unscheduled" or
        "default") when both were timed together at the end; None unless both are correct."""
        theirs = self.final.get(baseline)
        return speedup(theirs.latency_s if theirs is not None and theirs.ok else None,
                       self.latency_s)

    def comparison(self, baseline: str) -> Comparison | None:
        """The best script beside ``baseline`` in the final re-timing, with the two timings'
        spread (``codegen.measured.compare``); None unless both are correct."""
        return compare(self.final.get(baseline), self.final.get("best"))

    def as_dict(self) -> dict[str, Any]:
        comparisons = {name: self.comparison(name) for name in UNTUNED}
        return {"workload": self.workload, "target": self.target, "device": self.device,
                "k": self.config.k, "rounds_asked": self.config.rounds,
                "budget": self.config.budget, "measurements": self.measurements,
                "spent": self.spent,
                "stopped": self.stopped, "ok": self.ok, "improved": self.improved,
                "best": self.best.as_dict() if self.best else None,
                "latency_s": self.latency_s,
                "speedup": {name: self.speedup(name) for name in UNTUNED},
                "comparison": {n: c.as_dict() if c else None for n, c in comparisons.items()},
                "winner": self.winner, "best_script": self.best_script,
                "final": {name: o.as_dict() for name, o in self.final.items()},
                "baselines": [b.as_dict() for b in self.start.baselines],
                "seconds": {name: round(t, 3) for name, t in self.seconds.items()},
                "rounds": [r.as_dict() for r in self.rounds],
                "candidates": [c.as_dict() for c in self.candidates]}


def _canonical(text: str) -> str:
    """The script's canonical text (the dedupe key); the text itself when it does not parse
    (the evaluator reports it as a parse error)."""
    from dragon_dsl import format as canonical
    from dragon_dsl.errors import DragonError

    try:
        return canonical(text)
    except DragonError:
        return text


def measure_start(workload: Any, evaluator: Any, *, refine: str | None = None,
                  config: OptimizeConfig | None = None,
                  made: Baselines | None = None) -> Start:
    """The baselines (``codegen.measured.UNTUNED``) and the script to refine (when given),
    measured by ``evaluator``; ``made`` is ``codegen.measured.make_baselines``' result when the
    caller has it.

    Raises OptimizeError, before measuring anything, when ``config.budget`` leaves no
    measurement for a sampled script, and RefineError when ``refine`` is not correct on the
    workload."""
    made = made if made is not None else make_baselines(workload, evaluator.target)
    config = config or OptimizeConfig()
    cost = StartCost(made.available, refine is not None)
    cost.check(config.budget)
    given = None
    if refine is not None:
        text = _canonical(refine)
        [outcome] = evaluator.evaluate(workload, [text])
        if not outcome.ok:
            raise RefineError(f"{outcome.status.value.replace('_', ' ')}: "
                              f"{outcome.message or 'not correct'} (the script to refine must "
                              f"be correct on {getattr(workload, 'spec', 'the workload')})",
                              outcome)
        given = Candidate(text, outcome, 0, "given")
    return Start(measure_beside(evaluator, workload, {}, made), given, cost.first, made.modules)


def optimize(model, tokenizer, workload: Any, target: Any = None, *,
             config: OptimizeConfig | None = None, sampling: SamplingConfig | None = None,
             refine: str | None = None, evaluator: Any = None, start: Start | None = None,
             cost_model: Any = None, corpus: Any = None, progress: bool = False,
             label: str = "") -> OptimizeResult:
    """Sample, measure and refine scripts for ``workload`` (see the module's docstring).

    ``sampling`` says how to sample (its ``n`` is replaced by ``config.k``; round r uses seed
    ``sampling.seed + r``).  ``evaluator`` (a ``codegen.measure.Evaluator``, best without a
    cache: a cached outcome is from another session) measures everything, and its target is
    the one the scripts are written for and reported on: a ``target`` that is not the
    evaluator's is refused (ValueError).  Without an evaluator, an uncached one for ``target``
    (default llvm) is made and closed.  ``start`` is ``measure_start``'s result
    when the caller measured it already (``dragon optimize`` does, before loading the model).
    ``label`` names the progress bar (a model's task, for one bar per task).
    ``cost_model`` (a ``codegen.search.cost_model.CostModel``) ranks each round's ``width``
    samples and the search's candidates; it is updated in place with every kernel timed.
    ``corpus`` (``training.datagen.records`` records, e.g. ``RecordStore(dir).all_records()``)
    is where ``config.transfer`` scripts are carried over from.
    """
    from codegen.measure import Evaluator

    config = config or OptimizeConfig()
    sampling = sampling or SamplingConfig()
    if config.width is not None and config.width > config.k and cost_model is None:
        raise ValueError(f"Expected a cost model to rank width={config.width} samples down "
                         f"to k={config.k}")
    if config.transfer and corpus is None:
        raise ValueError(f"Expected a corpus to carry transfer={config.transfer} scripts over "
                         f"from")
    owned = evaluator is None
    if owned:
        evaluator = Evaluator("llvm" if target is None else target, cache=False,
                              config=MEASURE)
    else:
        _check_target(target, evaluator)
    target = evaluator.target
    timer = None
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[phase] = seconds.get(phase, 0.0) + now - clock   # a phase may come twice
        clock = now

    try:
        if start is None:
            start = measure_start(workload, evaluator, refine=refine, config=config)
            lap("start")
        elif refine is not None and (start.given is None
                                     or start.given.script != _canonical(refine)):
            raise ValueError("Expected the start measured for the script to refine but got "
                             "another start")
        if evaluator.cache is not None:  # the re-timing must be a measurement of this moment
            timer = Evaluator(evaluator.target, cache=False, builders=1,
                              config=evaluator.config, device=evaluator.runtime)
        search = _Search(model, tokenizer, workload, target, config, sampling, evaluator, start,
                         cost_model)
        if config.transfer:
            search.run_transfer(corpus)
            lap("transfer")
        search.run(progress, label)
        lap("model")
        search.run_search(progress, label)
        lap("search")
        if config.local:
            left = search.run_local()
            lap("local")
            if left:  # no mutant to time: MetaSchedule's search takes what they left
                search.run_search(progress, label, trials=left)
                lap("search")
        final = search.retime(timer or evaluator)
        lap("retime")
        return OptimizeResult(
            str(getattr(workload, "spec", workload)), evaluator.target.kind.name,
            evaluator.device, config, start, tuple(search.rounds),
            tuple(search.seen.values()), search.best(), final, search.account.spent,
            search.stopped, seconds)
    finally:
        if timer is not None:
            timer.close()
        if owned:
            evaluator.close()


def ranked_picks(scores: Sequence[float], n: int, nearest: int = 0) -> list[int]:
    """Of candidates scored ``scores`` (higher: ranked first) in their pool's order, the
    indices of the ``n - nearest`` ranked first, best first, then of the first ``nearest`` of
    the pool not among those (a pool that lists the nearest workloads' scripts first gives
    their fastest); ``n`` in all, at most.

    >>> ranked_picks([0.1, 0.2, 0.9, 0.8, 0.7], 3, nearest=1)
    [2, 3, 0]
    """
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    top = order[:n - min(nearest, n)]
    chosen = set(top)
    return top + [i for i in range(len(scores)) if i not in chosen][:n - len(top)]


def _check_target(target: Any, evaluator: Any) -> None:
    """Refuses a ``target`` other than ``evaluator``'s: scripts written for one target and
    measured on another would be reported as the evaluator's."""
    from codegen.targets import as_target

    if target is not None and str(as_target(target)) != str(evaluator.target):
        raise ValueError(f"Expected the evaluator's target ({evaluator.target}) or None but got "
                         f"target={target!r}")


class _Search:
    """The rounds of one ``optimize`` call and what they measured."""

    def __init__(self, model, tokenizer, workload, target, config: OptimizeConfig,
                 sampling: SamplingConfig, evaluator, start: Start, cost_model: Any = None
                 ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.cost_model = cost_model
        self.workload, self.target = workload, target
        self.config, self.sampling = config, sampling
        self.evaluator, self.start = evaluator, start
        self.seen: dict[str, Candidate] = {}
        if start.given is not None:
            self.seen[start.given.script] = start.given
        self.account = Account(config.budget, start.cost, start.measurements)
        self.rounds: list[Round] = []
        self.taught: set[str] = set()   # the scripts the cost model has learned
        self.stopped = "rounds"
        self._bar: Any = None    # the search's progress bar, for what is timed between rounds

    def best(self) -> Candidate | None:
        correct = [c for c in self.seen.values() if c.outcome.ok]
        return min(correct, key=lambda c: c.outcome.latency_s) if correct else None

    def _prompt(self) -> tuple[str, str, float | None]:
        from training.prompts.templates import (
            construction_prompt,
            prompt_config_of,
            refinement_prompt,
        )

        best = self.best()
        if best is None:  # nothing correct yet: ask for a construction again
            return "construction", construction_prompt(self.workload, self.target), None
        return ("refinement", refinement_prompt(self.workload, self.target, best.script,
                                                best.outcome.latency_s,
                                                prompt_config_of(self.tokenizer)),
                best.outcome.latency_s)

    def run_transfer(self, corpus: Any) -> None:
        """Times ``config.transfer`` scripts carried over from ``corpus`` (what the budget
        leaves, at most): the first round, "corpus".  With a cost model, ``config.width`` are
        carried over and the ones it ranks first are timed, but for ``config.transfer_nearest``
        of them: the nearest workloads' fastest it did not rank first."""
        from training.optimize.transfer import transferred

        n = int(min(self.config.transfer, self.account.left()))
        if n < 1:
            self.stopped = "budget"
            return
        spec = str(getattr(self.workload, "spec", self.workload))
        width = max(n, self.config.width or n) if self.cost_model is not None else n
        carried = transferred(spec, corpus, self.target, workload=self.workload, limit=width)
        new = self._measure([_canonical(t.script) for t in carried], n, 0, "corpus",
                            nearest=self.config.transfer_nearest)
        self._record(0, "corpus", None, len(carried), new, new)

    def run(self, progress: bool, label: str = "") -> None:
        from tqdm.auto import tqdm

        total = self.config.k * (self.config.rounds + 1)
        offset = len(self.rounds)  # after the corpus round, when there was one
        with tqdm(total=total, unit="script", desc=label or "optimize", disable=not progress,
                  dynamic_ncols=True) as bar:
            for index in range(self.config.rounds + 1):
                left = self.account.left()
                if left < 1:
                    self.stopped = "budget"
                    break
                n = int(min(self.config.k, left))
                bar.set_description(f"{label}round {index}: sampling")
                samples, _ = self._sample_round(offset + index, n, self.sampling.seed + index)
                bar.update(len(samples))
                best = self.best()
                if best is not None:
                    bar.set_postfix_str(f"best {best.outcome.latency_s * 1e6:.1f} us")
            bar.set_description(label or "optimize")

    def _sample_round(self, index: int, n: int, seed: int, kind: str | None = None
                      ) -> tuple[list, list[tuple[str, Any]]]:
        """One round: ``width`` samples from the prompt of the best so far, the ``n`` distinct
        new ones the cost model ranks first measured, the round recorded (as ``kind``, else
        the prompt's); the samples, and the scripts measured with their outcomes."""
        from training.sampling.schedule_aware import sample_schedule_aware

        prompt_kind, prompt, prompt_latency = self._prompt()
        width = max(n, self.config.width or n)
        config = replace(self.sampling, n=width, seed=seed)
        samples = sample_schedule_aware(self.model, self.tokenizer, prompt, self.workload,
                                        self.target, config)
        # A sample that does not apply (on CUDA: its closing `postproc auto` refused) cannot
        # build; it is counted as sampled, never timed.
        texts = [_canonical(s.text) for s in samples if s.applies]
        new = self._measure(texts, n, index, "refine" if kind == "refine" else "sample")
        self._record(index, kind or prompt_kind, prompt_latency, len(samples), new, texts)
        return samples, [(t, self.seen[t].outcome) for t in new]

    def _measure(self, texts: list[str], n: int, index: int, source: str,
                 nearest: int = 0) -> list[str]:
        """The ``n`` distinct scripts of ``texts`` not timed before that the cost model ranks
        first (``_ranked``), timed, kept as round ``index``'s candidates from ``source`` and
        taught to the cost model; those scripts, in order."""
        new = self._ranked([t for t in dict.fromkeys(texts) if t not in self.seen], n, nearest)
        outcomes = self.evaluator.evaluate(self.workload, new) if new else []
        for text, outcome in zip(new, outcomes, strict=True):
            self.seen[text] = Candidate(text, outcome, index, source)
        self.account.spend(len(new))
        self._learn(new, outcomes)
        return new

    def _record(self, index: int, kind: str, prompt_latency: float | None, sampled: int,
                new: list[str], counted: list[str]) -> None:
        """Round ``index``: ``sampled`` scripts, ``new`` of them timed; its fastest is the
        fastest correct one of ``counted`` (timed now or before)."""
        latencies = [c.latency_s for c in (self.seen.get(t) for t in counted)
                     if c is not None and c.latency_s is not None]
        best = self.best()
        self.rounds.append(Round(
            index, kind, prompt_latency, sampled, len(new), len(latencies),
            min(latencies) if latencies else None, best.outcome.latency_s if best else None))

    def _ranked(self, texts: list[str], n: int, nearest: int = 0) -> list[str]:
        """The ``n`` of ``texts`` the cost model ranks first, or ``n - nearest`` of them and
        the first ``nearest`` of ``texts`` not among those; in their order (the first ``n``
        when there is no cost model or no more than ``n``)."""
        if len(texts) <= n or self.cost_model is None:
            return texts[:n]
        scores = self.cost_model.score(self.workload, self.target, texts)
        return [texts[i] for i in sorted(ranked_picks(scores, n, nearest))]

    def _learn(self, texts: list[str], outcomes: list[Any]) -> None:
        if self.cost_model is not None and texts:
            self.cost_model.update(self.workload, self.target, texts,
                                   [o.latency_s if o.ok else None for o in outcomes])
            self.taught.update(texts)

    def _unspent(self) -> int:
        """What the scripts carried over and the model's rounds were given but did not time
        (samples that do not apply, duplicates, fewer scripts fitted): at a budget of n, n
        kernels are timed, so the search (or without one, the mutants) takes it."""
        planned = self.config.transfer + self.config.k * (self.config.rounds + 1)
        timed = sum(r.measured for r in self.rounds
                    if r.prompt in ("corpus", "construction", "refinement"))
        return max(0, planned - timed)

    def run_local(self) -> int:
        """``config.local`` kernels (what the budget leaves, at most) from mutants of the
        three fastest correct kernels so far, in rounds of ``config.local_round``: each round
        ``config.width`` mutants (4 per kernel timed without one), the ones the cost model ranks
        first timed.  Returns how many it did not time for want of a new mutant (parents that
        MetaSchedule's mutators cannot take, a space with no other decision)."""
        from codegen.search.mutate import mutants

        # Without a search, what the corpus and the model left untimed comes here.
        unspent = 0 if self.config.search else self._unspent()
        left = int(min(self.config.local + unspent, self.account.left()))
        while left > 0:
            n = min(self.config.local_round, left)
            parents = sorted((c for c in self.seen.values() if c.outcome.ok),
                             key=lambda c: c.outcome.latency_s)[:3]
            index = len(self.rounds)
            width = max(n, self.config.width or 4 * n) if self.cost_model is not None else n
            texts = mutants(self.workload, self.target, [c.script for c in parents], width,
                            seed=self.sampling.seed + 2000 + index, exclude=list(self.seen))
            new = self._measure(texts, n, index, "local") if texts else []
            if not new:
                return left
            self._record(index, "local", parents[0].outcome.latency_s, len(texts), new, new)
            left -= len(new)
        return 0

    def run_search(self, progress: bool, label: str = "", trials: int | None = None) -> None:
        """MetaSchedule's evolutionary search for ``config.search`` kernels (``trials`` when
        given; what the budget leaves, at most), seeded with every script timed so far; with
        ``config.refine_search`` r, in rounds of max(2r, a quarter of it), the model's r
        refinements of the best so far after each (``_refine_between``), counted in it."""
        from tqdm.auto import tqdm

        from codegen.search.tune import SearchConfig, search

        unspent = self._unspent() if self.config.search else 0
        wanted = self.config.search + unspent if trials is None else trials
        trials = int(min(wanted, self.account.left()))
        if trials < 1:
            if wanted > 0:
                self.stopped = "budget"
            return
        seeds = [(c.script, c.outcome) for c in self.seen.values()] \
            if self.config.seed_search else []
        untaught = [c for c in self.seen.values() if c.script not in self.taught]  # the given
        self._learn([c.script for c in untaught], [c.outcome for c in untaught])
        config = SearchConfig(trials=trials, per_round=trials, seed=self.sampling.seed)
        between = None
        if self.config.refine_search:  # search rounds of a quarter, the model's after each
            config = replace(config, per_round=max(2 * self.config.refine_search, trials // 4))
            between = self._refine_between
        model = self.cost_model.model if self.cost_model is not None else None
        with tqdm(total=trials, unit="kernel", desc=f"{label}search", disable=not progress,
                  dynamic_ncols=True) as bar:
            self._bar = bar
            try:
                self._search_rounds(search(self.workload, self.target, self.evaluator, config,
                                           cost_model=model, seeds=seeds, between=between,
                                           threads=self.config.search_threads,
                                           taught=model is not None),
                                    bar)
            except Exception as exc:  # noqa: BLE001  MetaSchedule raises what its checks raise
                lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
                self.stopped = f"search failed: {lines[-1] if lines else type(exc).__name__}"

    def _refine_between(self, left: int) -> list[tuple[str, Any]]:
        """Between two of the search's rounds: ``config.refine_search`` scripts of the model's
        refinement of the fastest kernel so far, measured (at most ``left``)."""
        n = int(min(self.config.refine_search, left, self.account.left()))
        if n < 1:
            return []
        index = len(self.rounds)
        _, measured = self._sample_round(index, n, self.sampling.seed + 1000 + index, "refine")
        if self._bar is not None:
            self._bar.update(len(measured))
        return measured

    def _search_rounds(self, rounds, bar) -> None:
        """Keeps each round of the search as it comes (a failure later loses none of them)."""
        for found in rounds:
            index = len(self.rounds)
            timed = [(s, o) for s, o in zip(found.scripts, found.outcomes, strict=True)
                     if s is not None and s not in self.seen]
            for script, outcome in timed:
                self.seen[script] = Candidate(script, outcome, index, "search")
            self.account.spend(len(found.outcomes))
            latencies = [o.latency_s for _, o in timed if o.ok]
            best = self.best()
            self.rounds.append(Round(
                index, "search", best.outcome.latency_s if best else None,
                len(found.outcomes), len(found.outcomes), len(latencies),
                min(latencies) if latencies else None,
                best.outcome.latency_s if best else None))
            bar.update(len(found.outcomes))

    def retime(self, timer) -> dict[str, Any]:
        """The best script and the baselines timed again, together; {} when nothing is
        correct."""
        best = self.best()
        if best is None:
            return {}
        final = outcomes(measure_beside(timer, self.workload, {"best": best.script},
                                        Baselines(self.start.modules)))
        self.account.spend(len(final))
        return final
