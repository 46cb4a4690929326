"""Propose and measure: prompt a model for a kernel, sample scripts under the grammar, and
measure each one.  ``dragon sample --check`` uses it; evaluation, ``dragon optimize`` and the RL
reward are built on it.

>>> from training.sampling import SamplingConfig
>>> proposals = propose(model, tokenizer, workload("matmul(m=64,n=64,k=64)"),   # doctest: +SKIP
...                     config=SamplingConfig(n=4), evaluator=Evaluator("llvm"))
>>> [p.outcome.status.value for p in proposals]                               # doctest: +SKIP
['correct', 'apply_error', 'correct', 'correct']
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dragon_dsl.errors import DragonError
from training.grammars.constraints import workload_grammar
from training.prompts.templates import (
    PromptConfig,
    construction_prompt,
    prompt_config_of,
    refinement_prompt,
)
from training.sampling import sample
from training.sampling.config import Sample, SamplingConfig
from training.sampling.schedule_aware import sample_schedule_aware

if TYPE_CHECKING:
    from codegen.measure import Evaluator
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["GRAMMARS", "Proposal", "ProposeError", "measured_latency", "prompt_for", "propose"]

# How samples are constrained: schedule-aware decoding (each statement applied as it is written,
# the next one narrowed by the live schedule, refused statements sampled again), the workload
# grammar (its blocks, tile factors, candidate lists), the language's grammar alone, or not at
# all (a baseline).
GRAMMARS = ("schedule", "workload", "plain", "none")


class ProposeError(DragonError):
    """The request cannot be served: for example, the script to refine does not work."""


@dataclass(frozen=True)
class Proposal:
    """One sampled script and, when an evaluator was given, its measured outcome."""

    sample: Sample
    outcome: Any = None  # codegen.measure.Outcome

    def as_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"script": self.sample.text,
                               "finish_reason": self.sample.finish_reason,
                               "tokens": self.sample.n_tokens, "parses": self.sample.parses}
        if self.sample.applies is not None:
            row.update(applies=self.sample.applies, resampled=self.sample.resampled)
        if self.outcome is not None:
            row["outcome"] = self.outcome.as_dict()
        return row


def prompt_for(workload: WorkloadLike, target: TargetLike = "llvm", *, refine: str | None = None,
               latency_s: float | None = None, evaluator: Evaluator | None = None,
               prompt_config: PromptConfig | None = None) -> str:
    """The construction prompt, or with ``refine`` the refinement prompt.  The script to refine
    is measured with ``evaluator`` when ``latency_s`` is not given; it must be correct.
    ``prompt_config``: the format the model reads (``prompt_config_of(tokenizer)``)."""
    if refine is None:
        return construction_prompt(workload, target)
    if latency_s is None:
        if evaluator is None:
            raise ProposeError("refining needs the script's latency: pass latency_s= or an "
                               "evaluator to measure it")
        latency_s = measured_latency(workload, refine, evaluator)
    return refinement_prompt(workload, target, refine, latency_s, prompt_config)


def measured_latency(workload: WorkloadLike, script: str, evaluator: Evaluator) -> float:
    """The script's latency on the evaluator's device; ProposeError unless it is correct."""
    [measured] = evaluator.evaluate(workload, [script])
    if not measured.ok:
        raise ProposeError(f"not a working script for "
                           f"{getattr(workload, 'spec', 'the workload')}: {measured.summary()}")
    return float(measured.latency_s)


def propose(model, tokenizer, workload: WorkloadLike, target: TargetLike = "llvm", *,
            config: SamplingConfig | None = None, grammar: str = "schedule",
            refine: str | None = None, latency_s: float | None = None,
            evaluator: Evaluator | None = None) -> list[Proposal]:
    """Sample ``config.n`` scripts for ``workload`` under ``grammar`` (one of ``GRAMMARS``)
    and, when ``evaluator`` (a ``codegen.measure.Evaluator``) is given, build, verify and time
    each one on it."""
    if grammar not in GRAMMARS:
        raise ValueError(f"Expected one of {GRAMMARS} but got grammar={grammar!r}")
    prompt = prompt_for(workload, target, refine=refine, latency_s=latency_s,
                        evaluator=evaluator, prompt_config=prompt_config_of(tokenizer))
    config = config or SamplingConfig()
    if grammar == "schedule":
        samples = sample_schedule_aware(model, tokenizer, prompt, workload, target, config)
        return _measured(samples, workload, evaluator)
    if grammar == "workload":
        config = replace(config, constrained=True,
                         grammar=workload_grammar(workload, target))
    else:
        config = replace(config, constrained=grammar == "plain", grammar=None)
    return _measured(sample(model, tokenizer, prompt, config), workload, evaluator)


def _measured(samples: list[Sample], workload: WorkloadLike,
              evaluator: Evaluator | None) -> list[Proposal]:
    if evaluator is None:
        return [Proposal(s) for s in samples]
    outcomes = evaluator.evaluate(workload, [s.text for s in samples])
    return [Proposal(s, o) for s, o in zip(samples, outcomes, strict=True)]
