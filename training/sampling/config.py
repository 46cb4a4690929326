"""What a sampling run asks for (``SamplingConfig``) and what each sample reports (``Sample``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from training.prompts.templates import STOP

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "FinishReason", "Sample", "SamplingConfig"]

# "llguidance": this package's GrammarLogitsProcessor, one llguidance matcher per row.
# "outlines": Outlines' own LLGuidanceLogitsProcessor, unchanged.  Both load grammar/dragon.lark;
# grammar_processor.py says what Outlines' processor lacks and why the default is ours.
BACKENDS = ("llguidance", "outlines")
DEFAULT_BACKEND = "llguidance"

FinishReason = Literal["end", "length", "error"]


@dataclass(frozen=True)
class SamplingConfig:
    """How many scripts to sample, and how."""

    n: int = field(default=8, metadata={"help": "Samples per prompt."})
    temperature: float = field(default=1.0, metadata={
        "help": "Softmax temperature, applied after the grammar mask."})
    top_p: float = field(default=1.0, metadata={
        "help": "Nucleus sampling threshold, applied after the grammar mask and the temperature."})
    seed: int = field(default=0, metadata={
        "help": "Seed of the sampling; the global torch RNG is restored afterwards."})
    max_new_tokens: int = field(default=512, metadata={
        "help": "Token budget per sample; a sample that reaches it ends with finish_reason "
                "'length' and in general does not parse."})
    batch_size: int = field(default=32, metadata={"help": "Rows per model.generate call."})
    constrained: bool = field(default=True, metadata={
        "help": "Mask every step with the Dragon grammar (False: plain sampling, for baselines)."})
    grammar: str | None = field(default=None, metadata={
        "help": "Lark grammar text to constrain by (llguidance's Lark, e.g. "
                "training.grammars.constraints.workload_grammar); None: grammar/dragon.lark."})
    stop: str | None = field(default=STOP, metadata={
        "help": "End-of-script marker the model writes after a script (training.prompts.STOP). "
                "Constrained, the grammar requires it after the script; unconstrained, "
                "generation stops at it.  Sample.text never includes it.  None: a script "
                "ends at EOS."})
    wind_down: int = field(default=32, metadata={
        "help": "In the last this-many tokens of the budget, steer each unfinished script to its "
                "end: EOS as soon as the grammar accepts, else the tokens of a short string that "
                "closes the current statement (earlier, up to twice this many tokens, when that "
                "string is long).  The steered tokens are counted in Sample.forced_tokens.  "
                "0 turns it off.  Only the 'llguidance' backend does this."})
    backend: str = field(default=DEFAULT_BACKEND, metadata={
        "help": f"Constrained-generation backend, one of {BACKENDS}.", "choices": BACKENDS})

    def __post_init__(self) -> None:
        checks = [("n", self.n >= 1), ("temperature", 0 < self.temperature < math.inf),
                  ("top_p", 0 < self.top_p <= 1), ("max_new_tokens", self.max_new_tokens >= 1),
                  ("batch_size", self.batch_size >= 1), ("wind_down", self.wind_down >= 0)]
        for name, ok in checks:
            if not ok:
                raise ValueError(f"Expected a valid {name} but got {name}={getattr(self, name)!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"Expected one of {BACKENDS} but got backend={self.backend!r}")


@dataclass(frozen=True)
class Sample:
    """One sampled script and how its generation ended.

    ``finish_reason`` is "end" when the end marker or EOS ended it (the grammar allows them only
    where a script may end), "length" when ``max_new_tokens`` ran out first, and "error" when
    the sampler could not go on (the process holding the live schedule crashed, or the closing
    ``postproc auto`` was refused: on CUDA, VerifyGPUCode rejecting the schedule so far).
    ``forced_tokens`` counts tokens the sampler chose during the wind-down instead of the model:
    such a sample ends where the grammar allows, but its end was written by the sampler.
    """

    text: str
    finish_reason: FinishReason
    n_tokens: int          # generated tokens, the end marker included, EOS not
    parses: bool           # dragon_dsl.parse accepted ``text``
    forced_tokens: int = 0
    prompt_index: int = 0  # which prompt it answers, when several were given
    error: str = ""        # the parser's message when it does not parse
    # Schedule-aware decoding only: statements rolled back and sampled again, and whether the
    # whole script (postproc auto included) applied to the kernel as it was written.
    resampled: int = 0
    applies: bool | None = None
