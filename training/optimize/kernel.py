"""``optimize()``: the fastest script a model can write for one kernel, measured.

Round 0 samples ``k`` scripts by schedule-aware decoding from the construction prompt (or, given
a script to refine, from its refinement prompt with its latency, measured first).  Each of
rounds 1..R samples ``k`` more from the refinement prompt of the fastest correct script so far
and its measured latency: the model refines its own best.  Every distinct script is built,
verified and timed by one ``Evaluator``; a script written twice (in canonical form) is measured
once.  The baselines, the unscheduled kernel and TVM's rule-based default (DLight, which has
no rule for some kernels on llvm), are measured by the same evaluator first, and at the end the
best script is timed again beside them, so its speedups compare timings of one moment.

The budget counts every kernel handed to the evaluator: the baselines, the script to refine,
each distinct sampled script, and the final re-timing of the best beside the baselines, which
is reserved from the start.  Duplicates are free.  When it runs out, the search stops early.

>>> with Evaluator("llvm", cache=False) as ev:                                 # doctest: +SKIP
...     result = optimize(model, tokenizer, workload("softmax(m=32,n=64)"), "llvm",
...                       config=OptimizeConfig(k=4, rounds=2, budget=20), evaluator=ev)
>>> result.best.script, result.speedup("unscheduled"), result.measurements  # doctest: +SKIP
('block "T_softmax_maxelem" -> ...', 1.8, 14)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from training.optimize.propose import ProposeError
from training.sampling.config import SamplingConfig

__all__ = ["BASELINES", "Baseline", "Candidate", "OptimizeConfig", "OptimizeError",
           "OptimizeResult", "RefineError", "Round", "Start", "available", "make_baselines",
           "measure_start", "optimize", "start_cost"]

# The yardsticks, named as `dragon bench` names them: the kernel as written, and DLight.
BASELINES = ("unscheduled", "default")


class OptimizeError(ProposeError):
    """The optimization cannot run as asked (a budget too small for one sampled script)."""


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
        if self.budget is not None and not self.budget >= 1:
            raise ValueError(f"Expected budget >= 1 but got budget={self.budget}")


@dataclass(frozen=True)
class Baseline:
    """A baseline's outcome, or why it does not exist for this workload and target."""

    name: str
    outcome: Any = None        # codegen.measure.Outcome; None when unavailable
    unavailable: str = ""

    @property
    def latency_s(self) -> float | None:
        return self.outcome.latency_s if self.outcome is not None and self.outcome.ok else None

    def as_dict(self) -> dict[str, Any]:
        if self.outcome is None:
            return {"name": self.name, "status": "unavailable", "message": self.unavailable}
        return {"name": self.name, **self.outcome.as_dict()}


@dataclass(frozen=True)
class Candidate:
    """A distinct script (canonical text) and its first measurement."""

    script: str
    outcome: Any               # codegen.measure.Outcome
    round: int                 # the round that first wrote it (0 for the script to refine)
    source: str = "sample"     # "sample", or "given": the script to refine

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
    prompt: str                    # "construction" or "refinement"
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

    baselines: tuple[Baseline, ...]
    given: Candidate | None
    measurements: int
    modules: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def baseline(self, name: str) -> Baseline:
        return next(b for b in self.baselines if b.name == name)


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
    stopped: str                     # "rounds" (all ran) or "budget"

    @property
    def ok(self) -> bool:
        """A correct script was found, and it was correct again when re-timed."""
        again = self.final.get("best")
        return self.best is not None and again is not None and again.ok

    @property
    def improved(self) -> bool:
        """The best script is one the model wrote, not the script it was given."""
        return self.ok and self.best is not None and self.best.source == "sample"

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
        if not (self.ok and theirs is not None and theirs.ok):
            return None
        return theirs.latency_s / self.latency_s

    def as_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "target": self.target, "device": self.device,
                "k": self.config.k, "rounds_asked": self.config.rounds,
                "budget": self.config.budget, "measurements": self.measurements,
                "spent": self.spent,
                "stopped": self.stopped, "ok": self.ok, "improved": self.improved,
                "best": self.best.as_dict() if self.best else None,
                "latency_s": self.latency_s,
                "speedup": {name: self.speedup(name) for name in BASELINES},
                "final": {name: o.as_dict() for name, o in self.final.items()},
                "baselines": [b.as_dict() for b in self.start.baselines],
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


def _reserve(start: Start) -> int:
    """What the final re-timing costs: the best script and every available baseline."""
    return 1 + len(start.modules)


def start_cost(available: int, refine: bool = False) -> int:
    """The fewest measurements an ``optimize`` call can spend: the ``available`` baselines
    (and the script to refine) timed first, one sampled script, and the best re-timed beside
    the baselines at the end."""
    return available + refine + 1 + 1 + available


def make_baselines(workload: Any, target: Any) -> dict[str, Any]:
    """The baselines' scheduled modules, or why each is unavailable, before any measuring."""
    from codegen.search.baselines import baselines

    return baselines(workload, target, names=BASELINES)


def available(made: dict[str, Any]) -> int:
    """How many of ``make_baselines``' baselines exist for the workload."""
    from codegen.search.baselines import BaselineUnavailable

    return sum(not isinstance(m, BaselineUnavailable) for m in made.values())


def measure_start(workload: Any, evaluator: Any, *, refine: str | None = None,
                  config: OptimizeConfig | None = None,
                  made: dict[str, Any] | None = None) -> Start:
    """The baselines and the script to refine (when given), measured by ``evaluator``;
    ``made`` is ``make_baselines``' result when the caller has it.

    Raises OptimizeError, before measuring anything, when ``config.budget`` leaves no
    measurement for a sampled script, and RefineError when ``refine`` is not correct on the
    workload."""
    from codegen.search.baselines import BaselineUnavailable

    made = made if made is not None else make_baselines(workload, evaluator.target)
    modules = {n: m for n, m in made.items() if not isinstance(m, BaselineUnavailable)}
    config = config or OptimizeConfig()
    before = len(modules) + (refine is not None)
    needed = start_cost(len(modules), refine is not None)
    if config.budget is not None and config.budget < needed:
        raise OptimizeError(
            f"Expected budget >= {needed} but got budget={config.budget}: the baselines take "
            f"{len(modules)}{', the script to refine 1' if refine is not None else ''}, the "
            f"final re-timing {1 + len(modules)}, and one sampled script 1")
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
    measured = evaluator.evaluate_modules(workload, modules) if modules else {}
    rows = tuple(Baseline(n, measured.get(n), "" if n in measured else str(made[n]))
                 for n in made)
    return Start(rows, given, before, modules)


def optimize(model, tokenizer, workload: Any, target: Any = "llvm", *,
             config: OptimizeConfig | None = None, sampling: SamplingConfig | None = None,
             refine: str | None = None, evaluator: Any = None, start: Start | None = None,
             progress: bool = False, label: str = "") -> OptimizeResult:
    """Sample, measure and refine scripts for ``workload`` (see the module's docstring).

    ``sampling`` says how to sample (its ``n`` is replaced by ``config.k``; round r uses seed
    ``sampling.seed + r``).  ``evaluator`` (a ``codegen.measure.Evaluator``, best without a
    cache: a cached outcome is from another session) measures everything; without one, an
    uncached one for ``target`` is made and closed.  ``start`` is ``measure_start``'s result
    when the caller measured it already (``dragon optimize`` does, before loading the model).
    ``label`` names the progress bar (a model's task, for one bar per task).
    """
    from codegen.measure import Evaluator

    config = config or OptimizeConfig()
    sampling = sampling or SamplingConfig()
    owned = evaluator is None
    if owned:
        evaluator = Evaluator(target, cache=False)
    timer = None
    try:
        if start is None:
            start = measure_start(workload, evaluator, refine=refine, config=config)
        elif refine is not None and (start.given is None
                                     or start.given.script != _canonical(refine)):
            raise ValueError("Expected the start measured for the script to refine but got "
                             "another start")
        if evaluator.cache is not None:  # the re-timing must be a measurement of this moment
            timer = Evaluator(evaluator.target, cache=False, builders=1,
                              config=evaluator.config, device=evaluator.runtime)
        search = _Search(model, tokenizer, workload, target, config, sampling, evaluator, start)
        search.run(progress, label)
        final = search.retime(timer or evaluator)
        return OptimizeResult(
            str(getattr(workload, "spec", workload)), evaluator.target.kind.name,
            evaluator.device, config, start, tuple(search.rounds),
            tuple(search.seen.values()), search.best(), final, search.spent, search.stopped)
    finally:
        if timer is not None:
            timer.close()
        if owned:
            evaluator.close()


class _Search:
    """The rounds of one ``optimize`` call and what they measured."""

    def __init__(self, model, tokenizer, workload, target, config: OptimizeConfig,
                 sampling: SamplingConfig, evaluator, start: Start) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.workload, self.target = workload, target
        self.config, self.sampling = config, sampling
        self.evaluator, self.start = evaluator, start
        self.seen: dict[str, Candidate] = {}
        if start.given is not None:
            self.seen[start.given.script] = start.given
        self.spent = start.measurements
        self.rounds: list[Round] = []
        self.stopped = "rounds"

    def best(self) -> Candidate | None:
        correct = [c for c in self.seen.values() if c.outcome.ok]
        return min(correct, key=lambda c: c.outcome.latency_s) if correct else None

    def _left(self) -> float:
        if self.config.budget is None:
            return math.inf
        return self.config.budget - self.spent - _reserve(self.start)

    def _prompt(self) -> tuple[str, str, float | None]:
        from training.prompts.templates import construction_prompt, refinement_prompt

        best = self.best()
        if best is None:  # nothing correct yet: ask for a construction again
            return "construction", construction_prompt(self.workload, self.target), None
        return ("refinement", refinement_prompt(self.workload, self.target, best.script,
                                                best.outcome.latency_s),
                best.outcome.latency_s)

    def run(self, progress: bool, label: str = "") -> None:
        from tqdm.auto import tqdm

        from training.sampling.schedule_aware import sample_schedule_aware

        total = self.config.k * (self.config.rounds + 1)
        with tqdm(total=total, unit="script", desc=label or "optimize", disable=not progress,
                  dynamic_ncols=True) as bar:
            for index in range(self.config.rounds + 1):
                left = self._left()
                if left < 1:
                    self.stopped = "budget"
                    break
                kind, prompt, prompt_latency = self._prompt()
                n = int(min(self.config.k, left))
                bar.set_description(f"{label}round {index}: sampling {n}")
                config = replace(self.sampling, n=n, seed=self.sampling.seed + index)
                samples = sample_schedule_aware(self.model, self.tokenizer, prompt,
                                                self.workload, self.target, config)
                texts = [_canonical(s.text) for s in samples]
                new = [t for t in dict.fromkeys(texts) if t not in self.seen]
                bar.set_description(f"{label}round {index}: measuring {len(new)}")
                outcomes = self.evaluator.evaluate(self.workload, new) if new else []
                for text, outcome in zip(new, outcomes, strict=True):
                    self.seen[text] = Candidate(text, outcome, index)
                self.spent += len(new)
                mine = [self.seen[t] for t in texts]
                latencies = [c.latency_s for c in mine if c.latency_s is not None]
                best = self.best()
                self.rounds.append(Round(
                    index, kind, prompt_latency, len(samples), len(new), len(latencies),
                    min(latencies) if latencies else None,
                    best.outcome.latency_s if best else None))
                bar.update(len(samples))
                if best is not None:
                    bar.set_postfix_str(f"best {best.outcome.latency_s * 1e6:.1f} us")
            bar.set_description(label or "optimize")

    def retime(self, timer) -> dict[str, Any]:
        """The best script and the baselines timed again, together; {} when nothing is
        correct."""
        best = self.best()
        if best is None:
            return {}
        [again] = timer.evaluate(self.workload, [best.script])
        measured = timer.evaluate_modules(self.workload, self.start.modules) \
            if self.start.modules else {}
        self.spent += 1 + len(measured)
        return {"best": again, **measured}
