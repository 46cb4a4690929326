"""Sampling Dragon scripts from a causal LM, every token constrained by ``grammar/dragon.lark``.

>>> from training.sampling import SamplingConfig, load, sample     # doctest: +SKIP
>>> model, tokenizer = load("runs/tiny")                           # doctest: +SKIP
>>> samples = sample(model, tokenizer, prompt, SamplingConfig(n=16, max_new_tokens=256))
...                                                                # doctest: +SKIP
"""

from training.sampling.closing import CLOSING_PIECES
from training.sampling.config import BACKENDS, DEFAULT_BACKEND, FinishReason, Sample, SamplingConfig
from training.sampling.generate import eos_token_ids, load, outlines_generator, sample
from training.sampling.grammar_processor import (
    GrammarLogitsProcessor,
    grammar_logits_processor,
    llg_tokenizer,
    with_end_marker,
)
from training.sampling.rollout import ScheduleRollout, grammar_rollout, kept_mass, schedule_rollout
from training.sampling.schedule_aware import (
    ScheduleAwareConfig,
    ScheduleAwareResult,
    sample_schedule_aware,
    schedule_aware_generate,
)

__all__ = [
    "BACKENDS",
    "CLOSING_PIECES",
    "DEFAULT_BACKEND",
    "FinishReason",
    "GrammarLogitsProcessor",
    "Sample",
    "SamplingConfig",
    "ScheduleAwareConfig",
    "ScheduleAwareResult",
    "ScheduleRollout",
    "eos_token_ids",
    "grammar_logits_processor",
    "grammar_rollout",
    "kept_mass",
    "llg_tokenizer",
    "load",
    "outlines_generator",
    "sample",
    "sample_schedule_aware",
    "schedule_aware_generate",
    "schedule_rollout",
    "with_end_marker",
]
