"""Grammar-constrained rollouts for TRL's ``GRPOTrainer``, so that every RL rollout is sampled
under ``grammar/dragon.lark``.

Why a rollout function and not ``GRPOConfig.generation_kwargs``: TRL (1.16) turns those kwargs
into a ``transformers.GenerationConfig``, which refuses a ``logits_processor`` ("should be passed
to generate() directly"), and its own ``generate`` call takes no processor.  ``GRPOTrainer``'s
``rollout_func`` argument (marked experimental in TRL) replaces that generation step; this one
generates exactly as TRL's transformers path does (same generation config, left padding,
completions cut after the first EOS) with the grammar processor added.

    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[...],
                          args=GRPOConfig(...), train_dataset=dataset,
                          rollout_func=grammar_rollout())

Reward functions receive ``finish_reason`` ("end": the end marker and EOS; or "length") and
``forced_tokens`` (tokens the wind-down chose, see ``SamplingConfig.wind_down``) for each
completion, as keyword arguments.  ``ScheduleRollout`` (``schedule_rollout``) samples with
schedule-aware decoding instead, so that every rollout also applies to its kernel, and passes
on the logprobs under the mask and the share of probability the mask kept.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from transformers import LogitsProcessorList

from training.prompts.templates import STOP
from training.sampling.config import SamplingConfig
from training.sampling.grammar_processor import grammar_logits_processor

__all__ = ["ScheduleRollout", "grammar_rollout", "kept_mass", "schedule_rollout"]


def grammar_rollout(tokenizer=None, grammar: str | None = None, *, stop: str | None = STOP,
                    wind_down: int = 32) -> Callable[[list, Any], dict[str, Any]]:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` that samples under the grammar (``grammar``,
    Lark text, or the Dragon grammar), each script followed by the ``stop`` marker (the
    completions keep it: ``training.prompts.templates.split_completion`` takes the script out).  The
    tokenizer defaults to the trainer's ``processing_class``; the token budget, temperature,
    top-p and EOS ids are the trainer's.

    >>> GRPOTrainer(..., rollout_func=grammar_rollout())   # doctest: +SKIP
    """

    def rollout(prompts: list, trainer) -> dict[str, Any]:
        from trl.models import unwrap_model_for_generation

        tok = tokenizer if tokenizer is not None else trainer.processing_class
        config = copy.deepcopy(trainer.generation_config)
        eos = list(trainer.eos_token_ids)
        processor = grammar_logits_processor(tok, grammar, stop=stop, eos_token_ids=eos,
                                             max_new_tokens=config.max_new_tokens,
                                             wind_down=wind_down)
        prompt_ids = _prompt_ids(tok, prompts)
        inputs = _left_padded(prompt_ids, tok.pad_token_id, trainer.accelerator.device)
        with unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=getattr(trainer, "generation_kwargs", None)) as model, \
                torch.no_grad():
            out = model.generate(**inputs, generation_config=config,
                                 logits_processor=LogitsProcessorList([processor]))
        completion_ids, finish = [], []
        for row in out[:, inputs["input_ids"].shape[1]:].tolist():
            end = next((k for k, t in enumerate(row) if t in eos), None)
            completion_ids.append(row if end is None else row[:end + 1])
            finish.append("length" if end is None else "end")
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None,
                "finish_reason": finish, "forced_tokens": list(processor.forced_tokens)}

    return rollout


class ScheduleRollout:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` with schedule-aware decoding
    (``training.sampling.schedule_aware``): every rollout applies to its kernel.

    ``workload_of`` maps a prompt (as the dataset holds it; a conversation by its last user
    message) to its workload: a dict or a function.  The completions keep the ``stop`` marker
    and EOS; ``logprobs`` are those of the kept tokens under the mask applied at each step (0
    for tokens the sampler wrote).  Reward functions also receive, per completion,
    ``finish_reason``, ``forced_tokens``, ``resampled`` (statements sampled again),
    ``applies`` and ``kept_mass``: the mean, over the tokens the model drew, of the share of
    the model's probability the mask kept at that step (``exp(model - masked)`` of each token's
    logprobs, at most 1).  ``seconds`` holds the wall time of each call.  ``sampling``: the
    rollouts' temperature, top_p, token budget and end marker (a ``SamplingConfig``, the run
    config's own); without it, those of the trainer's generation config and ``stop``.

    >>> GRPOTrainer(..., rollout_func=ScheduleRollout(dict(zip(prompts, workloads))))
    ... # doctest: +SKIP
    """

    def __init__(self, workload_of: Callable[[Any], Any] | Mapping[str, Any],
                 target: Any = "llvm", tokenizer=None, *, stop: str | None = STOP,
                 config: Any = None, sampling: SamplingConfig | None = None) -> None:
        self._lookup = workload_of.__getitem__ if isinstance(workload_of, Mapping) \
            else workload_of
        self.target = target
        self.tokenizer = tokenizer
        self.stop = stop
        self.config = config
        self.sampling = sampling
        self.seconds: list[float] = []

    def workload(self, prompt: Any) -> Any:
        """The workload of ``prompt`` (text, or a conversation)."""
        return self._lookup(prompt if isinstance(prompt, str) else _last_user_text(prompt))

    def __call__(self, prompts: list, trainer) -> dict[str, Any]:
        from trl.models import unwrap_model_for_generation

        from training.sampling.schedule_aware import schedule_aware_generate

        started = time.perf_counter()
        tok = self.tokenizer if self.tokenizer is not None else trainer.processing_class
        generation = trainer.generation_config
        sampling = self.sampling or SamplingConfig(
            temperature=generation.temperature or 1.0, top_p=generation.top_p or 1.0,
            max_new_tokens=generation.max_new_tokens, stop=self.stop)
        eos = list(trainer.eos_token_ids)
        prompt_ids = _prompt_ids(tok, prompts)
        workloads = [self.workload(p) for p in prompts]
        with unwrap_model_for_generation(
                trainer.model_wrapped, trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation) as model:
            results = schedule_aware_generate(
                model, tok, prompt_ids, workloads, self.target, sampling=sampling,
                eos_token_ids=eos, config=self.config)
        completions, logprobs = [], []
        for r in results:
            ended = r.finish_reason == "end"
            completions.append(r.tokens + ([eos[0]] if ended else []))
            logprobs.append(r.logprobs + ([0.0] if ended else []))
        self.seconds.append(time.perf_counter() - started)
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": logprobs,
                "finish_reason": [r.finish_reason for r in results],
                "forced_tokens": [sum(r.forced) for r in results],
                "resampled": [r.resampled for r in results],
                "applies": [r.applies for r in results],
                "kept_mass": [kept_mass(r) for r in results]}


def schedule_rollout(workload_of: Callable[[Any], Any] | Mapping[str, Any], target: Any = "llvm",
                     tokenizer=None, *, stop: str | None = STOP,
                     config: Any = None) -> ScheduleRollout:
    """``ScheduleRollout(workload_of, target, tokenizer, stop=stop, config=config)``.

    >>> GRPOTrainer(..., rollout_func=schedule_rollout(dict(zip(prompts, workloads))))
    ... # doctest: +SKIP
    """
    return ScheduleRollout(workload_of, target, tokenizer, stop=stop, config=config)


def kept_mass(result: Any) -> float:
    """The mean share of the model's probability that the mask kept, over the tokens of a
    ``ScheduleAwareResult`` the model drew (forced tokens left out; 1.0 when there are none).
    A token's masked logprob is its model logprob minus the log of the mass kept at its step,
    so ``exp(model - masked)`` is that mass (clipped at 1 against rounding)."""
    shares = [math.exp(min(0.0, free - masked))
              for masked, free, forced in zip(result.logprobs, result.model_logprobs,
                                              result.forced, strict=False) if not forced]
    return sum(shares) / len(shares) if shares else 1.0


def _last_user_text(messages: list) -> str:
    return next(m["content"] for m in reversed(messages) if m.get("role") == "user")


def _prompt_ids(tokenizer, prompts: list) -> list[list[int]]:
    # As GRPOTrainer tokenizes: plain text as is, conversations through the chat template.
    if prompts and isinstance(prompts[0], list):
        encoded = tokenizer.apply_chat_template(prompts, add_generation_prompt=True,
                                                tokenize=True, return_dict=True)
        return [list(ids) for ids in encoded["input_ids"]]
    return [list(ids) for ids in tokenizer(text=prompts)["input_ids"]]


def _left_padded(rows: list[list[int]], pad: int, device) -> dict[str, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return {"input_ids": ids, "attention_mask": mask}
