"""A logits processor that keeps every sampled token inside the Dragon grammar.

One llguidance matcher per row of the batch, built from ``grammar/dragon.lark`` without name
ranges (``grammars.constraints.sampling_grammar``).  It is a ``transformers.LogitsProcessor`` for
``model.generate(logits_processor=[...])`` and has the ``reset()`` that Outlines calls, so
``outlines.Generator(model, processor=...)`` takes it too.

Why not Outlines' own ``LLGuidanceLogitsProcessor`` (the "outlines" backend, kept selectable):
it keeps feeding a row's matcher after the row has ended, so every later pad token puts the
matcher in an error state with a warning per row and step; it applies the mask through a
``torch.compile`` kernel, which costs seconds of compilation on CPU and loops over the rows; and
it cannot steer a script to its end when the token budget runs out.  This processor masks the
whole batch with one vectorised operation, computes the rows' masks in parallel
(``LLExecutor``), skips finished rows, and winds scripts down near ``max_new_tokens``.

Logits wider than the tokenizer's vocabulary (models pad their embedding matrix, e.g. to a
multiple of 64) are handled: the mask covers the tokenizer's ids and every column beyond them
is set to -inf, so such ids can never be sampled.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from collections.abc import Iterable, Sequence

import llguidance
import llguidance.hf
import llguidance.torch
import numpy as np
import torch
from transformers import LogitsProcessor

from training.grammars.constraints import sampling_grammar
from training.sampling.closing import CLOSING_PIECES, Closer, grammar_literals

__all__ = ["SEARCH_COOLDOWN", "GrammarLogitsProcessor", "grammar_logits_processor", "llg_tokenizer",
           "with_end_marker"]

# After a failed search for a closing string the model picks this many tokens before the next
# search, twice as many after each further failure: a state with none (a required keyword the
# model has not written yet, or a comment opened mid-statement, which no string can close)
# rarely gets one from a single token.
SEARCH_COOLDOWN = 4
# Between 2 x wind_down (at most half the budget) and wind_down steps before the budget ends,
# a row starts closing early when it is between statements or its closing string is within
# this many tokens of what is left (a `partitioned_tile` statement needs 40 characters).
EARLY_MARGIN = 4

# Rows whose masks are computed in llguidance's thread pool from this many on; fewer are
# computed one after another: on 2 cores that is as fast or faster up to 128 rows (the pool's
# threads compete with torch's).
PARALLEL_ROWS = 256

_LLG_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def llg_tokenizer(tokenizer, eos_token_ids: Sequence[int] | None = None) -> llguidance.LLTokenizer:
    """The llguidance view of a fast Hugging Face tokenizer, cached per tokenizer (building it
    costs about a second for a 150k vocabulary).  EOS is ``eos_token_ids`` when given (a model may
    end on several ids, e.g. an end-of-turn token), else the tokenizer's."""
    eos = tuple(eos_token_ids) if eos_token_ids else (tokenizer.eos_token_id,)
    if eos[0] is None:
        raise ValueError("Expected a tokenizer with an EOS token but got eos_token_id=None")
    per_tokenizer = _LLG_TOKENIZERS.setdefault(tokenizer, {})
    if eos not in per_tokenizer:
        per_tokenizer[eos] = llguidance.hf.from_tokenizer(tokenizer, eos_token=list(eos))
    return per_tokenizer[eos]


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks each row's logits to the tokens its llguidance matcher allows next.

    The first call of a generation starts one matcher per row (copies of one compiled matcher);
    each later call feeds every unfinished row its last sampled token.  A row is finished once it
    has sampled an EOS id.  A new generation is recognised by its batch or sequence length, so
    one processor can serve many ``generate`` calls; ``reset()`` forces a fresh start.

    With ``max_new_tokens`` and ``wind_down`` set, the last ``wind_down`` steps (or more, for a
    row whose closing string is longer: ``EARLY_MARGIN``) force, per row,
    EOS when the grammar accepts, else the next token of a closing string (``closing.Closer``;
    when there is none, the model picks among the allowed tokens); ``forced_tokens[i]`` counts
    the tokens forced in row ``i``.
    """

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str, *,
                 max_new_tokens: int | None = None, wind_down: int = 0,
                 closing_pieces: Iterable[bytes] = CLOSING_PIECES,
                 extra_pieces: Iterable[bytes] = (), final_pieces: Iterable[bytes] = (),
                 num_threads: int | None = None):
        self.tokenizer = tokenizer
        self._template = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self._template.is_error():
            raise ValueError(f"llguidance rejects the grammar: {self._template.get_error()}")
        self.vocab_size = tokenizer.vocab_size
        self.eos_token_ids = frozenset(tokenizer.eos_tokens)
        self._eos = tokenizer.eos_token
        self.max_new_tokens = max_new_tokens
        self.wind_down = wind_down if max_new_tokens else 0
        # The early part of the wind-down never takes more than half the budget.
        self._early = min(2 * self.wind_down, max(self.wind_down, (max_new_tokens or 0) // 2))
        self._closer = Closer(tokenizer, closing_pieces, extra_pieces, final_pieces)
        self._executor = llguidance.LLExecutor(num_threads)
        self.mask_seconds = 0.0  # time spent feeding matchers, computing and applying masks
        self.mask_rows = 0       # masks computed (one per unfinished row and step)
        # Set to a list to record (seconds, unfinished rows) for every call (benchmarks do).
        self.steps: list[tuple[float, int]] | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the current generation; the next call starts new matchers."""
        self.matchers: list[llguidance.LLMatcher] = []
        self.finished: list[bool] = []
        self.forced_tokens: list[int] = []
        self.errors: list[str] = []
        self._plans: list[list[int]] = []
        self._closing: list[bool] = []
        self._retry_at: list[int] = []
        self._failures: list[int] = []
        self._start_len = 0
        self._step = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        start = time.perf_counter()
        batch, length = input_ids.shape
        if self._continues(batch, length):
            self._feed(input_ids[:, -1].tolist())
        else:
            self._start(batch, length)
        active, bitmask = self._masks()
        for i in active:
            if self.matchers[i].is_error():
                self.errors[i] = self.errors[i] or self.matchers[i].get_error()
                _allow_only(bitmask, i, self._eos)
        remaining = self.max_new_tokens - self._step if self.wind_down else None
        if remaining is not None and remaining <= self._early:
            for i in active:
                if (remaining <= self.wind_down or self._closing[i]
                        or self._closes_late(i, remaining)):
                    self._force_closing(bitmask, i)
        self._apply(scores, bitmask)
        self._step += 1
        self.mask_rows += len(active)
        elapsed = time.perf_counter() - start
        self.mask_seconds += elapsed
        if self.steps is not None:
            self.steps.append((elapsed, len(active)))
        return scores

    # ---- steps ----------------------------------------------------------------------------

    def _continues(self, batch: int, length: int) -> bool:
        return batch == len(self.matchers) and length == self._start_len + self._step

    def _masks(self) -> tuple[list[int], torch.Tensor]:
        """The unfinished rows, and the bitmask of every row's allowed tokens."""
        active = [i for i in range(len(self.matchers)) if not self.finished[i]]
        bitmask = llguidance.torch.allocate_token_bitmask(len(self.matchers), self.vocab_size)
        if len(active) >= PARALLEL_ROWS:
            llguidance.torch.fill_next_token_bitmask_par(
                self._executor, [(self.matchers[i], i) for i in active], bitmask)
        else:
            for i in active:
                llguidance.torch.fill_next_token_bitmask(self.matchers[i], bitmask, i)
        return active, bitmask

    def _start(self, batch: int, length: int) -> None:
        self.reset()
        self.matchers = [self._template.deep_copy() for _ in range(batch)]
        self.finished = [False] * batch
        self.forced_tokens = [0] * batch
        self.errors = [""] * batch
        self._plans = [[] for _ in range(batch)]
        self._closing = [False] * batch
        self._retry_at = [0] * batch
        self._failures = [0] * batch
        self._start_len = length

    def _feed(self, last_tokens: list[int]) -> None:
        # One row at a time: consuming a token takes microseconds, less than handing the rows to
        # llguidance's thread pool (consume_token_par) costs.
        for i, token in enumerate(last_tokens):
            if self.finished[i]:
                continue
            if token in self.eos_token_ids or self.matchers[i].is_stopped():
                self.finished[i] = True
            elif not self.matchers[i].consume_token(token):
                self.errors[i] = self.errors[i] or self.matchers[i].get_error()

    def _closes_late(self, i: int, remaining: int) -> bool:
        """Whether row ``i`` must start closing now: it is between statements (a new one might
        not fit), or its closing string is within ``EARLY_MARGIN`` tokens of what is left (the
        string becomes the row's plan)."""
        if self.matchers[i].is_accepting():  # no new statement this close to the end
            self._closing[i] = True
            return True
        path = self._plan(i)
        if not path or (len(path) + EARLY_MARGIN < remaining
                        and tuple(path) not in self._closer.finals):
            return False
        self._plans[i] = path
        self._closing[i] = True
        return True

    def _plan(self, i: int) -> list[int]:
        """Row ``i``'s closing string, or [] when there is none or the search is cooling down
        after failing (``SEARCH_COOLDOWN``)."""
        if self._step < self._retry_at[i]:
            return []
        path = self._closer.path(self.matchers[i])
        if path is None:
            self._failures[i] += 1
            self._retry_at[i] = self._step + SEARCH_COOLDOWN * 2 ** (self._failures[i] - 1)
        return path or []

    def _force_closing(self, bitmask: torch.Tensor, i: int) -> None:
        matcher = self.matchers[i]
        if matcher.is_accepting():
            token = self._eos
        else:
            if not self._plans[i]:
                self._plans[i] = self._plan(i)
            token = self._plans[i].pop(0) if self._plans[i] else None
        if token is not None:
            _allow_only(bitmask, i, token)
            self.forced_tokens[i] += 1

    def _apply(self, scores: torch.Tensor, bitmask: torch.Tensor) -> None:
        # Finished rows get whatever the model says: generate() replaces their token by padding,
        # and an all -inf row would make the sampler's softmax NaN.
        for i, done in enumerate(self.finished):
            if done:
                bitmask[i] = -1
        width = min(self.vocab_size, scores.shape[1])
        bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")
        blocked = torch.from_numpy(bits[:, :width] == 0).to(scores.device)
        scores[:, :width].masked_fill_(blocked, float("-inf"))
        scores[:, self.vocab_size:] = float("-inf")


def _allow_only(bitmask: torch.Tensor, row: int, token: int) -> None:
    bitmask[row] = 0
    bit = 1 << (token % 32)
    bitmask[row, token // 32] = bit - (1 << 32) if bit >= 1 << 31 else bit


def with_end_marker(lark: str, marker: str) -> str:
    """``lark`` with its ``start`` rule followed by ``marker``: a script, then the marker that
    ends it (``training.prompts.templates.STOP``), then nothing but EOS.

    >>> with_end_marker('start: "x"*', "<end>").splitlines()[-1]
    'start: _script "<end>"'
    """
    if not re.search(r"^start\s*:", lark, flags=re.M):
        raise ValueError("Expected a grammar with a `start` rule but got none")
    body = re.sub(r"^start(\s*):", r"_script\1:", lark, count=1, flags=re.M)
    return f"{body}\nstart: _script {json.dumps(marker)}"


def grammar_logits_processor(tokenizer, grammar: str | None = None, *,
                             stop: str | None = None,
                             eos_token_ids: Sequence[int] | None = None,
                             max_new_tokens: int | None = None,
                             wind_down: int = 0) -> GrammarLogitsProcessor:
    """A ``GrammarLogitsProcessor`` for a Hugging Face tokenizer and the Dragon grammar (or
    ``grammar``, Lark text).  With ``stop``, a script must be followed by that end marker.
    Pass it to ``model.generate(logits_processor=[...])``; with ``max_new_tokens`` and
    ``wind_down``, pass the same ``max_new_tokens`` to ``generate``.

    >>> from transformers import LogitsProcessorList                        # doctest: +SKIP
    >>> processor = grammar_logits_processor(tokenizer)                     # doctest: +SKIP
    >>> model.generate(**inputs, do_sample=True, max_new_tokens=256,
    ...                logits_processor=LogitsProcessorList([processor]))   # doctest: +SKIP
    """
    lark = grammar if grammar is not None else sampling_grammar()
    if stop:
        lark = with_end_marker(lark, stop)
    return GrammarLogitsProcessor(llg_tokenizer(tokenizer, eos_token_ids),
                                  llguidance.grammar_from("lark", lark),
                                  max_new_tokens=max_new_tokens, wind_down=wind_down,
                                  extra_pieces=grammar_literals(lark),
                                  final_pieces=[stop.encode()] if stop else [])
