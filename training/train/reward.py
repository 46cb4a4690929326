"""Rewards for reinforcement learning: measured, gated on correctness, relative to a baseline
measured in the same session.

A completion's reward follows the stage its script reached (``codegen.measure.Status``):

    parse_error, apply_error            -1.0   the script is not a schedule of this kernel
    build_error, runtime_error, timeout -0.75  it is one, but the kernel does not build or run
    incorrect                           -0.5   it runs and computes the wrong thing
    correct                              0.5 + 0.5 * clip(log2(speedup) / log2(cap), -1, 1)

so every correct kernel, however slow, scores above every incorrect one, and only a correct
kernel earns a latency bonus.  The speedup is the reference's latency over the candidate's,
both measured by one ``Evaluator`` in one session: the unscheduled kernel for construction,
and for refinement the given script measured again (never the latency written in the prompt);
when the reference cannot be measured this time, correct kernels get 0.5, without a bonus.
The bonus is a log speedup, so halving and doubling the time move the reward by the same
amount (group-relative advantages treat a slower and a faster sibling symmetrically), clipped
at ``cap`` (16x by default) so that one outlier cannot dominate its group.  A refinement that
returns the given script, or one that decodes to the same trace, earns no bonus: 0.5.

Best of k: ``dragon eval`` and the paper's head to head compare the best of k attempts, not their
mean, and a mean reward can teach the opposite of that: a risky edit (tiling) that is sometimes
much faster and sometimes slower loses, on average, to a safe one (annotations only), although
it wins the best of four.  With ``best_of = k > 1`` each group's rewards are replaced by
``max_at_k``: completion i's value is the expected best reward of a group of k that holds it
(over every k-subset of its n siblings), the transformation of Pass@K Policy Optimization
(Walder and Karkhanis, 2025), whose policy gradient is that of the expected best of k.  A group
of n >= k is needed; TRL's group-relative advantage then subtracts the group's mean.

Noise: the fastest correct completion of a group is timed a second time without the cache, and
its slower measurement is kept, so a lucky run does not win the group; the relative difference
between the two timings is reported as the group's noise.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from codegen.measure import Evaluator, MeasureConfig, Outcome, Status
from codegen.measured import speedup as speedup_of
from codegen.search.baselines import unscheduled
from codegen.workloads import workload as make_workload
from dragon_dsl import format as canonical
from dragon_dsl import to_tvm_json
from dragon_dsl.errors import DragonError
from training.prompts.templates import PromptConfig, split_completion

if TYPE_CHECKING:
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["RewardConfig", "Rewarder", "Scored", "max_at_k", "score"]


@dataclass(frozen=True)
class RewardConfig:
    """The reward's levels and its latency bonus."""

    malformed: float = field(default=-1.0, metadata={
        "help": "Reward of a script that does not parse or does not apply to the kernel."})
    broken: float = field(default=-0.75, metadata={
        "help": "Reward of a kernel that does not build, crashes or runs past its limit."})
    incorrect: float = field(default=-0.5, metadata={
        "help": "Reward of a kernel whose outputs differ from the reference's."})
    correct: float = field(default=0.5, metadata={
        "help": "Reward of a correct kernel as fast as the reference."})
    bonus: float = field(default=0.5, metadata={
        "help": "Largest latency bonus (or penalty) of a correct kernel."})
    cap: float = field(default=16.0, metadata={
        "help": "Speedup (and slowdown) at which the bonus saturates."})
    retime_best: bool = field(default=True, metadata={
        "help": "Time the fastest correct completion of a group again and keep the slower "
                "measurement."})
    best_of: int = field(default=1, metadata={
        "help": "k of the objective, the expected best reward of k completions (max_at_k); "
                "1: the mean reward."})

    def __post_init__(self) -> None:
        if not self.malformed <= self.broken <= self.incorrect < self.correct - self.bonus:
            raise ValueError(
                f"Expected malformed <= broken <= incorrect < correct - bonus, so that every "
                f"correct kernel outranks every incorrect one, but got malformed="
                f"{self.malformed}, broken={self.broken}, incorrect={self.incorrect}, "
                f"correct={self.correct}, bonus={self.bonus}")
        if not self.cap > 1.0:
            raise ValueError(f"Expected cap > 1 but got cap={self.cap}")
        if not (isinstance(self.best_of, int) and self.best_of >= 1):
            raise ValueError(f"Expected best_of >= 1 but got best_of={self.best_of!r}")


@dataclass(frozen=True)
class Scored:
    """A completion's reward and what it was made of."""

    reward: float
    outcome: Outcome
    speedup: float | None = None      # reference latency / latency (correct only)
    bonus: float = 0.0
    same_as_start: bool = False       # a refinement that returned the given script


_MALFORMED = {Status.PARSE_ERROR, Status.APPLY_ERROR}
_BROKEN = {Status.BUILD_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT}


def score(outcome: Outcome, reference_s: float | None, config: RewardConfig | None = None, *,
          same_as_start: bool = False) -> Scored:
    """The reward of one measured completion.

    >>> from codegen.measure import Outcome, Status
    >>> score(Outcome(Status.CORRECT, latency_s=1e-3), 4e-3).reward
    0.75
    >>> score(Outcome(Status.INCORRECT), 4e-3).reward
    -0.5
    """
    config = config or RewardConfig()
    if outcome.status in _MALFORMED:
        return Scored(config.malformed, outcome)
    if outcome.status in _BROKEN:
        return Scored(config.broken, outcome)
    if outcome.status is Status.INCORRECT:
        return Scored(config.incorrect, outcome)
    if outcome.status is not Status.CORRECT:
        raise ValueError(f"Expected a measured outcome but got {outcome.status.value} "
                         f"({outcome.message}): a reward needs a device to run kernels on")
    assert outcome.latency_s is not None
    if reference_s is None or not reference_s > 0:
        # No reference to compare with (it failed to run this time): correct, no bonus.
        return Scored(config.correct, outcome)
    speedup = speedup_of(reference_s, outcome.latency_s)
    assert speedup is not None
    if same_as_start:
        return Scored(config.correct, outcome, speedup, 0.0, True)
    ratio = max(-1.0, min(1.0, math.log(speedup) / math.log(config.cap)))
    bonus = config.bonus * ratio
    return Scored(config.correct + bonus, outcome, speedup, bonus)


def max_at_k(rewards: list[float], k: int) -> list[float]:
    """Each reward replaced by the mean, over the k-subsets of ``rewards`` that hold it, of the
    subset's best: with the rewards sorted ascending, r_(1) <= ... <= r_(n), the i-th becomes

        (C(i-1, k-1) r_(i) + sum_{j>i} C(j-2, k-2) r_(j)) / C(n-1, k-1)

    (r_(i) is the best of the C(i-1, k-1) subsets whose other members rank below it; r_(j) of the
    C(j-2, k-2) that hold both).  k = 1 gives the rewards back; ties keep their values.

    >>> max_at_k([0.0, 1.0], 2)
    [1.0, 1.0]
    >>> [round(r, 4) for r in max_at_k([0.2, 0.9, 0.5, 0.4], 2)]  # the best keeps its own
    [0.6, 0.9, 0.6333, 0.6]
    >>> max_at_k([0.3, 0.1], 1)
    [0.3, 0.1]
    """
    n = len(rewards)
    if not 1 <= k <= n:
        raise ValueError(f"Expected 1 <= k <= {n} (the group's size) but got k={k}")
    if k == 1:
        return list(rewards)
    order = sorted(range(n), key=lambda i: rewards[i])
    ranked = [rewards[i] for i in order]
    # above[i]: sum over j > i (0-based, sorted) of C(j-1, k-2) r_(j), built from the top down
    above = [0.0] * (n + 1)
    for j in range(n - 1, 0, -1):
        above[j] = above[j + 1] + math.comb(j - 1, k - 2) * ranked[j]
    total = math.comb(n - 1, k - 1)
    out = [0.0] * n
    for i, index in enumerate(order):
        out[index] = (math.comb(i, k - 1) * ranked[i] + above[i + 1]) / total
    return out


@dataclass
class GroupReport:
    """What one group's scoring measured: for metrics and logs."""

    reference_s: float | None
    scored: list[Scored]
    noise: float | None = None        # |t2 - t1| / t1 of the best completion's two timings
    reference_status: str = ""
    workload: str = ""                # the workload's spec, and the scripts scored (for logs)
    scripts: list[str] = field(default_factory=list)
    start_script: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The group as one JSON object: what ``RUN/rollouts.jsonl`` holds per group."""
        return {"workload": self.workload, "start_script": self.start_script,
                "reference_s": self.reference_s, "reference_status": self.reference_status,
                "noise": self.noise,
                "completions": [{"script": text, "status": s.outcome.status.value,
                                 "message": s.outcome.message,
                                 "latency_s": s.outcome.latency_s,
                                 "max_abs_error": s.outcome.max_abs_error,
                                 "speedup": s.speedup, "reward": s.reward,
                                 "same_as_start": s.same_as_start}
                                for text, s in zip(self.scripts, self.scored, strict=True)]}

    def shares(self) -> dict[str, float]:
        n = max(1, len(self.scored))
        statuses = [s.outcome.status for s in self.scored]
        return {"apply": sum(s not in _MALFORMED for s in statuses) / n,
                "build": sum(s not in _MALFORMED | {Status.BUILD_ERROR} for s in statuses) / n,
                "correct": sum(s is Status.CORRECT for s in statuses) / n}


class Rewarder:
    """Scores groups of completions for one target by measuring them.

    ``measure`` says how kernels are verified and timed; ``evaluator`` measures the
    completions (batched, parallel builds, cached, isolated);
    ``timer`` times again without the cache (a second Evaluator with ``cache=False``).  Both
    default to new ones for ``target``; ``close`` ends what this object started.
    """

    def __init__(self, target: TargetLike = "llvm", config: RewardConfig | None = None, *,
                 measure: MeasureConfig | None = None, evaluator: Evaluator | None = None,
                 timer: Evaluator | None = None, **evaluator_options: Any) -> None:
        self.config = config or RewardConfig()
        if measure is not None:
            evaluator_options["config"] = measure
        self._owned: list[Evaluator] = []
        if evaluator is None:
            evaluator = Evaluator(target, **evaluator_options)
            self._owned.append(evaluator)
        if timer is None and self.config.retime_best:
            options = {k: v for k, v in evaluator_options.items() if k != "cache"}
            timer = Evaluator(target, cache=False, **{"builders": 1, **options})
            self._owned.append(timer)
        self.evaluator, self.timer = evaluator, timer
        self.reports: list[GroupReport] = []
        # The format completions are written in (the policy's tokenizer says: prompt_config_of).
        self.prompt_config = PromptConfig()

    def reference(self, workload: WorkloadLike, start_script: str | None) -> Outcome:
        """The reference outcome, measured now: the unscheduled kernel, or the given script."""
        if start_script is not None:
            return self._timed(workload, start_script)

        mod = unscheduled(workload, self.evaluator.target)
        measured = self.evaluator.evaluate_modules(workload, {"unscheduled": mod})
        return measured["unscheduled"]

    def _timed(self, workload: WorkloadLike, script: str) -> Outcome:
        """``script`` measured by the timer (no cache), else by the evaluator."""
        return ((self.timer or self.evaluator).evaluate(workload, [script]))[0]

    def score_group(self, workload: WorkloadLike, scripts: list[str],
                    start_script: str | None = None) -> GroupReport:
        """The rewards of ``scripts`` (completions of one prompt) on ``workload``."""
        outcomes = self.evaluator.evaluate(workload, scripts)
        reference = self.reference(workload, start_script)
        report = GroupReport(reference.latency_s if reference.ok else None, [],
                             reference_status=reference.status.value,
                             workload=getattr(workload, "spec", None) or str(workload),
                             scripts=list(scripts), start_script=start_script)
        same = [False] * len(scripts)
        if start_script is not None:
            start = _trace_key(start_script, workload, self.evaluator.target)
            for i, text in enumerate(scripts):
                try:
                    same[i] = canonical(text) == canonical(start_script) or (
                        outcomes[i].ok
                        and _trace_key(text, workload, self.evaluator.target) == start)
                except DragonError:
                    same[i] = False
        if self.config.retime_best:
            outcomes, report.noise = self._retime_best(workload, scripts, outcomes, same)
        report.scored = [score(o, report.reference_s, self.config, same_as_start=s)
                         for o, s in zip(outcomes, same, strict=True)]
        self.reports.append(report)
        return report

    def _retime_best(self, workload, scripts, outcomes, same):
        correct = [i for i, o in enumerate(outcomes) if o.ok and not same[i]]
        if not correct:
            return outcomes, None
        best = min(correct, key=lambda i: outcomes[i].latency_s)
        again = self._timed(workload, scripts[best])
        first = outcomes[best]
        assert first.latency_s is not None
        if not again.ok:  # correct once, not twice: the slower verdict stands
            outcomes = [*outcomes[:best], again, *outcomes[best + 1:]]
            return outcomes, None
        assert again.latency_s is not None
        noise = abs(again.latency_s - first.latency_s) / first.latency_s
        if again.latency_s > first.latency_s:
            outcomes = [*outcomes[:best], replace(first, latency_s=again.latency_s),
                        *outcomes[best + 1:]]
        return outcomes, noise

    def __call__(self, prompts: list[Any], completions: list[Any], *, workload: list[Any],
                 start_script: list[str | None] | None = None, **_: Any) -> list[float]:
        """TRL's reward-function signature: dataset columns arrive as lists beside the
        completions; consecutive completions of one prompt form a group."""
        starts = start_script or [None] * len(completions)
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        scripts = [split_completion(t, require_end=False, config=self.prompt_config)
                   for t in texts]
        rewards: list[float] = [0.0] * len(scripts)
        i = 0
        while i < len(scripts):
            j = i
            while j < len(scripts) and (prompts[j], workload[j], starts[j]) == \
                    (prompts[i], workload[i], starts[i]):
                j += 1
            wl = make_workload(workload[i]) if isinstance(workload[i], str) else workload[i]
            report = self.score_group(wl, scripts[i:j], starts[i] or None)
            rewards[i:j] = max_at_k([s.reward for s in report.scored], self.config.best_of)
            i = j
        return rewards

    def close(self) -> None:
        for evaluator in self._owned:
            evaluator.close()

    def __enter__(self) -> Rewarder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _trace_key(script: str, workload: WorkloadLike, target: TargetLike) -> str | None:
    """The script's TVM trace JSON on the workload (None when it does not decode)."""
    try:
        return json.dumps(to_tvm_json(script, workload=workload, target=target), sort_keys=True)
    except DragonError:
        return None
