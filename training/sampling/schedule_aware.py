"""Schedule-aware decoding: every statement is applied to the kernel as soon as it is written,
and the next one is sampled from what the schedule then allows.

Each row of the batch holds

- a ``dragon_dsl.live.LiveSchedule`` of its kernel, advanced one statement at a time; by
  default (``ScheduleAwareConfig.isolate``) it is held in a worker process
  (``training.sampling.live_worker``) and the row keeps the ``LiveView`` it answers with, so
  that a TVM crash ends that row (its error says so, with the statement), not the sampler;
- the whole-script matcher (the canonical sampling grammar, then the end marker), which keeps
  the script parseable;
- the statement matcher, built from the live state (``training.grammars.statement``): block
  names that exist, loops bound by exactly the loops a block has, tile factors that divide the
  loop's current extent, names in scope of the right kind, canonical result names, ...

Every step masks the logits with both matchers.  When a statement is complete (its newline),
it is sent to be applied, and the row's newline goes into the model's forward pass meanwhile
(isolated, the schedules are spread over ``holders`` worker processes, so that statements
completed at one step are applied at once, beside the model); the next step reads how it went
(the same samples as applying it at once: nothing is drawn for the row in between).  If TVM
refuses it, the statement is rolled back (its tokens leave the sequence:
their key/value columns are masked out and the next logits are those saved at the statement's
start) and sampled again, at most ``statement_retries`` times per statement and
``sample_retries`` per sample.  A sample out of retries, or near its token budget, is closed
with ``postproc auto SET`` and the end marker, written by the sampler (``forced_tokens``).

How rollback changes the distribution: a kept statement is drawn from the model's
distribution restricted to the grammar, conditioned on applying: rejection sampling at the
statement level, so its probability is the masked one divided by the chance of applying.  The
``logprobs`` returned are those of each kept token under the mask actually applied at its step
(temperature included), which is what a policy-gradient ratio needs; rejected attempts are not
part of the sample and carry no logprob.  Forced tokens have logprob 0 (the mask allowed only
them) and are flagged, so a trainer can leave them out of the loss.

A model trained on prompt format 3 (its tokenizer says so: ``training.prompts.prompt_config_of``)
writes a tile's factors innermost first: its statement grammar admits them so, each line is
flipped into Dragon's order before it is applied (``training.prompts.flip_tiles``), and the
text handed back is Dragon's.

The generation loop is our own (``model.generate`` cannot take tokens back): one forward pass
per step with a ``DynamicCache``, explicit position ids, and an attention mask with holes
where tokens were rolled back.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import llguidance
import llguidance.torch
import numpy as np
import torch

import dragon_dsl
from dragon_dsl.live import LiveSchedule
from dragon_dsl.live_view import LiveView
from training.grammars.constraints import sampling_grammar
from training.grammars.statement import statement_grammar
from training.prompts.templates import flip_tiles, prompt_config_of
from training.sampling.config import SamplingConfig
from training.sampling.grammar_processor import llg_tokenizer, with_end_marker
from training.sampling.live_worker import HolderCrashed, shared

__all__ = ["ScheduleAwareConfig", "ScheduleAwareResult", "sample_schedule_aware",
           "schedule_aware_generate"]


@dataclass(frozen=True)
class ScheduleAwareConfig:
    """Limits of schedule-aware decoding."""

    statement_retries: int = field(default=4, metadata={
        "help": "Times one statement may be rolled back and sampled again."})
    sample_retries: int = field(default=16, metadata={
        "help": "Statements one sample may roll back in all; past it the sample is closed."})
    grammar_cache: int = field(default=256, metadata={
        "help": "Compiled statement grammars kept (rows in the same state share one)."})
    isolate: bool = field(default=True, metadata={
        "help": "Hold the live schedules in a worker process (training.sampling.live_worker), "
                "so that a TVM crash ends one sample, not the sampler; false: in this process."})
    holder_timeout: float = field(default=300.0, metadata={
        "help": "Seconds one statement may take in the worker before it is killed (isolate)."})
    holder_memory_mb: int = field(default=0, metadata={
        "help": "Memory the worker may use before it is killed, in MiB; 0: no limit (isolate)."})
    holders: int = field(default=2, metadata={
        "help": "Worker processes holding the rows' schedules (isolate): statements of rows "
                "completed at the same step are applied at the same time."})
    tile_bound: bool = field(default=False, metadata={
        "help": "Keep each tile's last factor within MetaSchedule's bound on the innermost "
                "factor (training.grammars.constraints.tile_max_inner: 64), as every "
                "MetaSchedule script does.  Off by default: for the built-in model it measured "
                "a tie (benchmarks/bench_tile_bound.py, docs/model-sweep)."})
    torch_threads: int = field(default=1, metadata={
        "help": "Threads torch may use for the model's forward passes while decoding on a CPU "
                "(restored after); 0: torch's own setting.  One by default: a small model's "
                "steps are too short to share, and beside a busy process (the holders, a "
                "measurement, a shared machine) two threads wait on each other: 32 conv2d "
                "scripts took 99 s with two and 21 s with one; idle, a tie "
                "(benchmarks/bench_decode_speed.py --busy).  A large model on a CPU wants 0."})


@dataclass
class ScheduleAwareResult:
    """One row: the kept tokens with their logprobs, and how decoding went."""

    tokens: list[int]
    logprobs: list[float]        # under the mask applied (and the temperature)
    forced: list[bool]
    text: str
    finish_reason: str           # "end", "length", or "error" (the schedule holder crashed,
                                 # or the closing `postproc auto` was refused)
    statements: int              # statements applied
    resampled: int               # statements rolled back and sampled again
    applies: bool                # every statement, postproc auto included, applied
    error: str = ""
    live: LiveSchedule | LiveView | None = None  # a LiveView when the schedule is isolated
    model_logprobs: list[float] = field(default_factory=list)  # the same tokens, no mask


class _Row:
    def __init__(self, live: LiveSchedule | LiveView, whole: llguidance.LLMatcher,
                 key: int | None = None) -> None:
        self.live = live
        self.key = key                     # the row's schedule in the LiveWorker (isolate)
        self.whole = whole
        self.stmt: llguidance.LLMatcher | None = None
        self.stmt_key = ""
        self.applied: tuple[str, ...] = ()  # the statements applied so far: the state's key
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.model_logprobs: list[float] = []  # the same tokens without the mask
        self.forced: list[bool] = []
        self.columns: list[int] = []       # cache column of each kept token
        self.stmt_start = 0                # index in tokens where the statement began
        self.start_logits: torch.Tensor | None = None
        self.pending: torch.Tensor | None = None  # logits to sample from instead of the model's
        self.tries = 0
        self.resampled = 0
        self.spent = 0                     # tokens sampled, rolled-back ones included
        self.plan: list[int] = []          # tokens to force
        self.finished = False
        self.finish_reason = "length"
        self.error = ""
        self.failed = False
        self.ticket: Any = None            # a statement being applied (its text, its ticket)


_WHOLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _whole_matcher(tokenizer, llg: llguidance.LLTokenizer, eos: tuple[int, ...],
                   stop: str | None) -> llguidance.LLMatcher:
    """The sampling grammar (then ``stop``) compiled for a tokenizer and its EOS ids, once per
    process (``llg`` is that tokenizer's llguidance view)."""
    per_tokenizer = _WHOLE.setdefault(tokenizer, {})
    if (eos, stop) not in per_tokenizer:
        lark = sampling_grammar()
        if stop:
            lark = with_end_marker(lark, stop)
        matcher = llguidance.LLMatcher(llg, llguidance.grammar_from("lark", lark), log_level=0)
        if matcher.is_error():
            raise ValueError(f"llguidance rejects the sampling grammar: {matcher.get_error()}")
        per_tokenizer[eos, stop] = matcher
    return per_tokenizer[eos, stop]


class _Templates:
    """Compiled statement grammars by text (an LRU): rows in the same state share one."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, size: int) -> None:
        self.tokenizer, self.size = tokenizer, size
        self.cache: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()
        self.compile_seconds = 0.0
        self.hits = self.misses = 0

    def matcher(self, lark: str) -> llguidance.LLMatcher:
        template = self.cache.get(lark)
        if template is None:
            self.misses += 1
            start = time.perf_counter()
            template = llguidance.LLMatcher(self.tokenizer, llguidance.grammar_from("lark", lark),
                                            log_level=0)
            self.compile_seconds += time.perf_counter() - start
            if template.is_error():
                raise ValueError(f"llguidance rejects a statement grammar: "
                                 f"{template.get_error()}\n{lark}")
            self.cache[lark] = template
            if len(self.cache) > self.size:
                self.cache.popitem(last=False)
        else:
            self.hits += 1
            self.cache.move_to_end(lark)
        return template.deep_copy()


@dataclass
class _Stats:
    replay_seconds: list[float] = field(default_factory=list)
    narrow_seconds: list[float] = field(default_factory=list)
    mask_seconds: float = 0.0
    forward_seconds: float = 0.0
    prefill_seconds: float = 0.0
    steps: int = 0


class _Decoder:
    def __init__(self, model, tokenizer, workloads: Sequence[Any], target: Any, *,
                 postproc_set: str, narrowing: Sequence[dict[str, Any]],
                 sampling: SamplingConfig,
                 eos: list[int], config: ScheduleAwareConfig) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.workloads, self.target = workloads, target
        self.postproc_set = postproc_set
        self.narrowing = narrowing  # per workload: statement_grammar's keyword arguments
        self.temperature, self.top_p = sampling.temperature, sampling.top_p
        self.max_new_tokens, self.stop = sampling.max_new_tokens, sampling.stop
        self.eos = eos
        self.config = config
        # A model of prompt format 3 writes tiles innermost first: its lines are flipped into
        # Dragon's order before they are applied, and its text when it is handed back.
        self.tile_order = prompt_config_of(tokenizer).tile_order
        self.flip = self.tile_order == "inner"
        self.holder = shared(target, timeout=config.holder_timeout,
                             memory_limit_mb=config.holder_memory_mb or None,
                             workers=config.holders) if config.isolate else None
        self.llg = llg_tokenizer(tokenizer, eos)
        self.whole = _whole_matcher(tokenizer, self.llg, tuple(eos), self.stop)
        self.templates = _Templates(self.llg, config.grammar_cache)
        # Rows of one workload and narrowing that reach the same state (the same statements
        # applied) get the same statement grammar: it is built once (samples of one prompt share
        # their first statements, and most of their grammars).
        self.grammars: OrderedDict[tuple, str] = OrderedDict()
        self.family: list[int] = []
        for i, (w, kwargs) in enumerate(zip(workloads, narrowing, strict=True)):
            self.family.append(next((j for j in range(i) if workloads[j] is w
                                     and narrowing[j] == kwargs), i))
        self.vocab = self.llg.vocab_size
        self.stats = _Stats()
        self.newlines: dict[int, bool] = {}
        # Encoded apart, so that no token crosses the statement's newline.
        self.closing_after_postproc = self._encode(self.stop or "")
        self.closing = self._encode(f"postproc auto {postproc_set}\n") + \
            self.closing_after_postproc

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    # ---- rows -----------------------------------------------------------------------------

    def _open(self, prompt_row: int) -> _Row:
        workload = self.workloads[prompt_row]
        if self.holder is None:
            return _Row(LiveSchedule(workload, self.target, keep_tile_order=True),
                        self.whole.deep_copy())
        key, view = self.holder.open(workload)
        return _Row(view, self.whole.deep_copy(), key)

    def _submit(self, row: _Row, text: str) -> None:
        """Start applying one statement to the row's schedule (in this process: apply it now).
        Raises ``HolderCrashed`` when the process holding it died."""
        if self.holder is None:
            try:
                row.live.step(text)
                outcome = ""
            except dragon_dsl.DragonError as exc:
                outcome = str(exc)
        else:
            outcome = self.holder.submit(row.key, text)
        row.ticket = (text, outcome)

    def _outcome(self, row: _Row) -> str:
        """The submitted statement's outcome: "" when it applied, else why not.  Raises
        ``HolderCrashed`` when the process holding it died."""
        _, outcome = row.ticket
        if self.holder is None:
            return outcome
        reply = self.holder.result(outcome)
        if isinstance(reply, LiveView):
            row.live = reply
            return ""
        return reply.message

    def _new_statement(self, row: _Row, row_index: int) -> None:
        """Row ``row`` is between statements: the statement matcher for what may come next."""
        start = time.perf_counter()
        state = (self.family[row_index], row.applied)
        lark = self.grammars.get(state)
        if lark is not None:
            self.grammars.move_to_end(state)
        else:
            try:
                lark = statement_grammar(row.live, postproc_set=self.postproc_set,
                                         tile_order=self.tile_order, **self.narrowing[row_index])
                self.grammars[state] = lark
                if len(self.grammars) > 4 * self.config.grammar_cache:
                    self.grammars.popitem(last=False)
            except Exception as exc:  # noqa: BLE001  a query TVM refuses: narrow nothing now
                row.error = f"narrowing the next statement failed: {exc}"
                lark = 'start: /[^\n]*/ "\n"'
        self.stats.narrow_seconds.append(time.perf_counter() - start)
        if row.live.postproc_set is not None:  # complete: only the end marker may follow
            lark = f"start: {json.dumps(self.stop or '')}"
        row.stmt = self.templates.matcher(lark)
        row.stmt_key = lark
        row.stmt_start = len(row.tokens)
        row.tries = 0

    def _complete(self, row: _Row) -> bool:
        """The statement just ended with its newline: send it to be applied (its newline is
        fed to the model meanwhile); the next step reads the outcome (``_resolve``).  False:
        the process holding the schedule died; the row ends."""
        text = self.llg.decode_bytes(row.tokens[row.stmt_start:]).decode("utf-8", "replace")
        text = text[:text.index("\n")]
        if self.flip:
            text = flip_tiles(text)
        start = time.perf_counter()
        try:
            self._submit(row, text)
        except HolderCrashed as exc:  # replaying the row in a new worker failed
            self._crashed(row, exc)
            return False
        finally:
            self.stats.replay_seconds.append(time.perf_counter() - start)
        return True

    def _crashed(self, row: _Row, exc: HolderCrashed) -> None:
        # The schedule is gone with its process: this sample ends with the script so far.
        self._roll_back(row)
        row.error, row.failed, row.finished, row.plan = str(exc), True, True, []
        row.finish_reason = "error"

    def _resolve(self, row: _Row, row_index: int, after: torch.Tensor) -> None:
        """Read the outcome of the row's statement: applied, the next statement's matcher
        (and the logits ``after`` its newline); refused, the statement rolled back, newline
        included (``row.pending``: the logits at its start)."""
        start = time.perf_counter()
        try:
            refused = self._outcome(row)
        except HolderCrashed as exc:
            row.ticket = None
            self._crashed(row, exc)
            return
        finally:
            self.stats.replay_seconds.append(time.perf_counter() - start)
        text, _ = row.ticket
        row.ticket = None
        row.error = refused
        if not refused:
            row.applied += (text,)
            self._new_statement(row, row_index)
            row.pending = after
            return
        self._roll_back(row)
        row.tries += 1
        row.resampled += 1
        if row.plan:
            # The closing `postproc auto` itself was refused (on CUDA: VerifyGPUCode rejects
            # what the statements so far built).  No script that applies ends here, and the end
            # marker cannot follow a script without it: the sample ends, failed, as it stands.
            row.failed, row.finished, row.plan, row.finish_reason = True, True, [], "error"
            row.error = f"the closing `postproc auto {self.postproc_set}` was refused: {refused}"
            return
        if row.tries > self.config.statement_retries or \
                row.resampled > self.config.sample_retries:
            # Out of retries: close the script.
            row.failed = True
            row.plan = list(self.closing)

    def _roll_back(self, row: _Row) -> None:
        """Take the current statement's tokens back out of the row."""
        n = len(row.tokens) - row.stmt_start
        if n:
            row.whole.rollback(n)
            for column in row.columns[row.stmt_start:]:
                self.mask[self.index[id(row)], column] = 0
            del row.tokens[row.stmt_start:], row.logprobs[row.stmt_start:]
            del row.model_logprobs[row.stmt_start:]
            del row.forced[row.stmt_start:], row.columns[row.stmt_start:]
        row.stmt = self.templates.matcher(row.stmt_key)
        row.pending = row.start_logits

    # ---- the loop -------------------------------------------------------------------------

    def run(self, prompts: list, prompt_rows: list[int]) -> list[ScheduleAwareResult]:
        device = self.model.device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.eos[0]
        if prompts and not isinstance(prompts[0], str):  # token ids already
            width = max(len(p) for p in prompts)
            input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts],
                                     device=device)
            self.mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts],
                                     device=device)
        else:
            enc = self.tokenizer(list(prompts), return_tensors="pt", padding=True,
                                 padding_side="left")
            input_ids = enc["input_ids"].to(device)
            self.mask = enc["attention_mask"].to(device).clone()
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        rows = [self._open(p) for p in prompt_rows]
        try:
            return self._loop(rows, input_ids, positions, prompt_rows, pad)
        finally:
            if self.holder is not None:
                self.holder.close([row.key for row in rows if row.key is not None])

    def _loop(self, rows: list[_Row], input_ids: torch.Tensor, positions: torch.Tensor,
              prompt_rows: list[int], pad: int) -> list[ScheduleAwareResult]:
        model, device = self.model, self.model.device
        self.index = {id(row): i for i, row in enumerate(rows)}
        for i, row in enumerate(rows):
            self._new_statement(row, prompt_rows[i])
        prompt_len = self.mask.sum(-1)
        import inspect

        from transformers import DynamicCache

        # transformers 5.x names the cache argument `cache` (`past_key_values` is deprecated).
        key = "cache" if "cache" in inspect.signature(model.forward).parameters \
            else "past_key_values"
        cached = {key: _growing_cache(DynamicCache), "use_cache": True}
        start = time.perf_counter()
        out = model(input_ids=input_ids, attention_mask=self.mask, position_ids=positions,
                    **cached)
        self.stats.prefill_seconds += time.perf_counter() - start
        logits = out.logits[:, -1, :].float()
        # A step feeds no token to a row whose statement was refused (rolled back, sampled
        # again from the pending logits), so steps outnumber a row's spent tokens by at most its
        # refusals, each of which spent a token: twice the budget lets every row reach its
        # wind-down (``_step`` closes it when its spent tokens near the budget) and close.
        for _ in range(2 * self.max_new_tokens + 2):
            if all(row.finished for row in rows):
                break
            tokens = self._step(rows, logits, prompt_rows)
            fed = torch.tensor([t if t is not None else pad for t in tokens], device=device)
            keep = torch.tensor([t is not None for t in tokens], device=device,
                                dtype=self.mask.dtype)
            column = self.mask.shape[1]
            self.mask = torch.cat([self.mask, keep[:, None]], dim=1)
            for row, t in zip(rows, tokens, strict=True):
                if t is not None:
                    row.columns.append(column)
            start = time.perf_counter()
            # A token's position is the prompt's length plus the kept tokens before it: rolled-
            # back tokens leave holes in the cache, not in the positions.
            kept = torch.tensor([len(row.tokens) for row in rows], device=device)
            positions = (prompt_len + kept - 1).clamp(min=0)
            out = model(input_ids=fed[:, None], attention_mask=self.mask,
                        position_ids=positions[:, None], **cached)
            self.stats.forward_seconds += time.perf_counter() - start
            logits = out.logits[:, -1, :].float()
            self.stats.steps += 1
        return [self._result(row) for row in rows]

    def _step(self, rows: list[_Row], logits: torch.Tensor, prompt_rows: list[int]) -> list:
        """Sample one token per unfinished row; None for a row that feeds nothing this step."""
        start = time.perf_counter()
        n = len(rows)
        whole_bits = llguidance.torch.allocate_token_bitmask(n, self.vocab)
        stmt_bits = llguidance.torch.allocate_token_bitmask(n, self.vocab)
        stmt_bits.fill_(-1)
        active = []
        for i, row in enumerate(rows):
            if row.finished:
                continue
            if row.ticket is not None:  # its statement was applied meanwhile: how did it go?
                self._resolve(row, prompt_rows[i], logits[i])
                if row.finished:
                    continue
            if row.pending is not None:
                logits[i] = row.pending
                row.pending = None
            if not row.plan and row.spent + len(self._closing(row)) >= self.max_new_tokens:
                # The budget is near: drop the statement being written and close the script.
                if len(row.tokens) > row.stmt_start:
                    self._roll_back(row)
                    logits[i] = row.pending
                    row.pending = None
                row.plan = list(self._closing(row))
            if len(row.tokens) == row.stmt_start:
                row.start_logits = logits[i].clone()
            active.append(i)
            if not row.plan:
                llguidance.torch.fill_next_token_bitmask(row.whole, whole_bits, i)
                llguidance.torch.fill_next_token_bitmask(row.stmt, stmt_bits, i)
        bits = whole_bits & stmt_bits
        width = min(self.vocab, logits.shape[1])
        allowed = torch.from_numpy(np.unpackbits(bits.numpy().view(np.uint8), axis=1,
                                                 bitorder="little")[:, :width].astype(bool))
        allowed = allowed.to(logits.device)
        self.stats.mask_seconds += time.perf_counter() - start
        # All rows at once: the masked distribution, a draw from it, and (for diagnostics) the
        # model's own log-probability of the drawn token.
        scores = logits[:, :width] / self.temperature
        free = torch.log_softmax(scores, dim=-1)
        masked = torch.log_softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        empty = ~allowed.any(dim=-1)
        probs = masked.exp().nan_to_num(0.0)
        if self.top_p < 1.0:
            probs = _nucleus(probs, self.top_p)
            masked = probs.log()
        probs[empty] = 1.0  # rows that sample nothing this step (forced, finished, stuck)
        drawn_t = torch.multinomial(probs, 1)
        drawn = drawn_t[:, 0].tolist()
        drawn_masked = masked.gather(1, drawn_t)[:, 0].tolist()
        drawn_free = free.gather(1, drawn_t)[:, 0].tolist()
        stuck = empty.tolist()
        tokens: list[int | None] = [None] * n
        for i in active:
            row = rows[i]
            if row.plan:
                token, logprob, forced = row.plan.pop(0), 0.0, True
                free_logprob = float(free[i, token])
            elif stuck[i]:
                # The two grammars disagree (a bug of the narrowing, never expected): drop the
                # statement and close the script.
                so_far = self.llg.decode_bytes(row.tokens[row.stmt_start:])
                row.error = (f"no token is allowed by both grammars after {so_far!r}; "
                             f"statement grammar:\n{row.stmt_key}")
                row.failed = True
                if len(row.tokens) > row.stmt_start:
                    self._roll_back(row)  # the next step samples from the statement's start
                row.plan = list(self._closing(row))
                if not row.plan:
                    row.finished = True
                continue
            else:
                token, forced = drawn[i], False
                logprob, free_logprob = drawn_masked[i], drawn_free[i]
            row.model_logprobs.append(free_logprob)
            tokens[i] = self._consume(row, i, token, logprob, forced, prompt_rows[i])
        return tokens

    def _has_newline(self, token: int) -> bool:
        known = self.newlines.get(token)
        if known is None:
            known = self.newlines[token] = b"\n" in self.llg.decode_bytes([token])
        return known

    def _closing(self, row: _Row) -> list[int]:
        return self.closing_after_postproc if row.live.postproc_set is not None else self.closing

    def _consume(self, row: _Row, i: int, token: int, logprob: float, forced: bool,
                 prompt_row: int) -> int | None:
        row.spent += 1
        if token in self.eos:
            row.model_logprobs.pop()
            row.finished, row.finish_reason = True, "end"
            return None
        if not row.whole.consume_token(token):
            row.model_logprobs.pop()
            row.error = row.error or f"llguidance: {row.whole.get_error()}"
            row.finished = True
            return None
        if not forced:
            if not row.stmt.consume_token(token):
                row.error = row.error or f"statement grammar: {row.stmt.get_error()}"
        row.tokens.append(token)
        row.logprobs.append(logprob)
        row.forced.append(forced)
        if self._has_newline(token) and row.live.postproc_set is None:
            if not self._complete(row):
                return None
        if row.whole.is_accepting() and row.live.postproc_set is not None and \
                self.stop and self.llg.decode_bytes(row.tokens).endswith(self.stop.encode()):
            row.plan = []
            row.finished, row.finish_reason = True, "end"
        return token

    def _result(self, row: _Row) -> ScheduleAwareResult:
        text = self.llg.decode_bytes(row.tokens).decode("utf-8", "replace")
        if self.stop and text.endswith(self.stop):
            text = text[: -len(self.stop)]
        if self.flip:
            text = flip_tiles(text)
        # Refused statements were taken out: the kept script applies once `postproc auto` did.
        applies = row.live.postproc_set is not None
        return ScheduleAwareResult(row.tokens, row.logprobs, row.forced, text, row.finish_reason,
                                   row.live.statements, row.resampled, applies, row.error,
                                   row.live, row.model_logprobs)


def schedule_aware_generate(model, tokenizer, prompts: Sequence[str], workloads: Sequence[Any],
                            target: Any = "llvm", *, rules: str | None = None,
                            postproc_set: str | None = None,
                            categorical: Sequence[Sequence[Sequence[int]]] | None = None,
                            sampling: SamplingConfig | None = None,
                            eos_token_ids: Sequence[int] | None = None,
                            config: ScheduleAwareConfig | None = None,
                            stats: dict | None = None) -> list[ScheduleAwareResult]:
    """One schedule-aware sample per prompt (``prompts[i]`` asks for ``workloads[i]``); repeat
    a prompt for several samples.  Seed torch beforehand for reproducible samples.

    ``sampling``: its ``temperature``, ``top_p``, ``max_new_tokens`` and ``stop`` (its ``n``,
    ``seed`` and ``batch_size`` are ``sample_schedule_aware``'s; default: ``SamplingConfig()``);
    ``rules``: the MetaSchedule rule set (``codegen.targets.RULE_SETS``; default: the target's);
    ``postproc_set``: what ``postproc auto`` names (default: the rule set's);
    ``categorical``: per prompt, the candidate lists of ``sample_categorical`` (default: those
    MetaSchedule offers for the workload and target, ``grammars.constraints``).  ``stats``, when
    given, receives timings: per-statement replay and narrowing seconds, mask, forward.
    """
    from codegen.targets import default_rules
    from codegen.targets import postproc_set as target_postproc_set
    from training.grammars.constraints import categorical_lists, narrowing

    if len(prompts) != len(workloads):
        raise ValueError(f"Expected one workload per prompt but got {len(prompts)} prompts and "
                         f"{len(workloads)} workloads")
    rules = rules or default_rules(target)
    postproc_set = postproc_set or target_postproc_set(rules)
    if categorical is None:
        categorical = [categorical_lists(w, target, rules) or () for w in workloads]
    config = config or ScheduleAwareConfig()
    narrowed = [dict(narrowing(w, target, rules), categorical=lists)
                for w, lists in zip(workloads, categorical, strict=True)]
    if not config.tile_bound:
        for kwargs in narrowed:
            kwargs.pop("tile_max_inner", None)
    eos = list(eos_token_ids) if eos_token_ids else [tokenizer.eos_token_id]
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    decoder = _Decoder(model, tokenizer, workloads, target, postproc_set=postproc_set,
                       narrowing=narrowed, sampling=sampling or SamplingConfig(),
                       eos=eos, config=config)
    threads = config.torch_threads if model.device.type == "cpu" else 0
    with torch.no_grad(), _torch_threads(threads):
        results = decoder.run(list(prompts), list(range(len(prompts))))
    if stats is not None:
        stats.update(replay_seconds=decoder.stats.replay_seconds,
                     narrow_seconds=decoder.stats.narrow_seconds,
                     mask_seconds=decoder.stats.mask_seconds,
                     forward_seconds=decoder.stats.forward_seconds,
                     prefill_seconds=decoder.stats.prefill_seconds, steps=decoder.stats.steps,
                     kept_tokens=sum(len(r.tokens) for r in results),
                     compile_seconds=decoder.templates.compile_seconds,
                     grammar_hits=decoder.templates.hits, grammar_misses=decoder.templates.misses)
    return results


def _growing_cache(cache_class):
    """A ``DynamicCache`` whose layers append a step's keys and values in place, into room
    that doubles when full, instead of concatenating the whole cache every step (copies
    quadratic in the length: the forward pass of the 0.6M model at 1,000 tokens took twice as
    long).  The same keys and values, so the same logits."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.length, self.room = 0, None
            n, added = self.length, key_states.shape[-2]
            if self.room is None or n + added > self.room[0].shape[-2]:
                size = max(2 * (n + added), 64)
                room = tuple(s.new_empty(*s.shape[:-2], size, s.shape[-1])
                             for s in (key_states, value_states))
                if n:
                    room[0][..., :n, :] = self.keys
                    room[1][..., :n, :] = self.values
                self.room = room
            self.room[0][..., n:n + added, :] = key_states
            self.room[1][..., n:n + added, :] = value_states
            self.length = n + added
            self.keys = self.room[0][..., :self.length, :]
            self.values = self.room[1][..., :self.length, :]
            return self.keys, self.values

    cache = cache_class()
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer and not cache.layers:
        cache.layer_class_to_replicate = GrowingLayer
    return cache


@contextlib.contextmanager
def _torch_threads(n: int):
    """Torch's intra-op threads set to ``n`` (0: left as they are) for the block."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n:
            torch.set_num_threads(before)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Each row's smallest set of tokens whose probability reaches ``top_p``, renormalised."""
    ordered, order = probs.sort(dim=-1, descending=True)
    ordered[ordered.cumsum(-1) - ordered >= top_p] = 0
    kept = torch.zeros_like(probs).scatter(-1, order, ordered)
    return kept / kept.sum(-1, keepdim=True).clamp(min=1e-30)


def sample_schedule_aware(model, tokenizer, prompt: str | Sequence[str],
                          workload: Any | Sequence[Any], target: Any = "llvm",
                          config: Any = None, aware: ScheduleAwareConfig | None = None,
                          stats: dict | None = None) -> list:
    """``config.n`` schedule-aware samples per prompt (a ``SamplingConfig``), in batches of
    ``config.batch_size``, as ``Sample``s (prompt-major, like ``training.sampling.sample``).
    ``workload``: one per prompt.  The global torch RNG is left as it was.

    >>> [s.applies for s in sample_schedule_aware(model, tokenizer, prompt,       # doctest: +SKIP
    ...                                            workload("matmul(m=64,n=64,k=64)"))]
    [True, True, True, True, True, True, True, True]
    """
    from training.sampling.config import Sample
    from training.sampling.generate import eos_token_ids

    config = config or SamplingConfig()
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    workloads = [workload] if isinstance(prompt, str) else list(workload)
    jobs = [i for i in range(len(prompts)) for _ in range(config.n)]
    eos = eos_token_ids(model, tokenizer)
    samples = []
    devices = [] if model.device.type == "cpu" else [model.device]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(config.seed)
        for start in range(0, len(jobs), config.batch_size):
            rows = jobs[start:start + config.batch_size]
            part: dict = {}
            results = schedule_aware_generate(
                model, tokenizer, [prompts[i] for i in rows], [workloads[i] for i in rows],
                target, sampling=config, eos_token_ids=eos,
                config=aware, stats=part)
            if stats is not None:
                for key, value in part.items():
                    stats[key] = stats.get(key, 0 if not isinstance(value, list) else []) + value
            for i, r in zip(rows, results, strict=True):
                error = "" if r.applies else r.error or "the script did not apply"
                try:
                    dragon_dsl.parse(r.text)
                    parses = True
                except dragon_dsl.DragonError as exc:
                    parses, error = False, str(exc)
                samples.append(Sample(text=r.text, finish_reason=r.finish_reason,
                                      n_tokens=len(r.tokens), parses=parses,
                                      forced_tokens=sum(r.forced), prompt_index=i, error=error,
                                      resampled=r.resampled, applies=r.applies))
    return samples
