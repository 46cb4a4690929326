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
completion, as keyword arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from transformers import LogitsProcessorList

from training.prompts import STOP

from .grammar_processor import grammar_logits_processor

__all__ = ["grammar_rollout"]


def grammar_rollout(tokenizer=None, grammar: str | None = None, *, stop: str | None = STOP,
                    wind_down: int = 32) -> Callable[[list, Any], dict[str, Any]]:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` that samples under the grammar (``grammar``,
    Lark text, or the Dragon grammar), each script followed by the ``stop`` marker (the
    completions keep it: ``training.prompts.split_completion`` takes the script out).  The
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
