"""Loading a model and sampling scripts from it: batched ``model.generate`` with the grammar
processor, one ``Sample`` per script with its finish reason and whether it parses."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import LogitsProcessorList

import dragon_dsl
from training.grammars.constraints import sampling_grammar
from training.prompts.templates import STOP, flip_tiles, prompt_config_of
from training.sampling.config import Sample, SamplingConfig
from training.sampling.grammar_processor import (
    GrammarLogitsProcessor,
    grammar_logits_processor,
    llg_tokenizer,
    with_end_marker,
)

__all__ = ["eos_token_ids", "load", "outlines_generator", "sample"]


def load(model_or_path, tokenizer=None):
    """``(model, tokenizer)`` from a local model directory (the tokenizer saved beside the
    weights, as ``training.models.tokenizer`` does) or from an in-memory model and its tokenizer.

    Nothing is downloaded.  A tokenizer without a pad token gets EOS as its pad token.

    >>> model, tokenizer = load("runs/tiny")                      # doctest: +SKIP
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(model_or_path, str | os.PathLike):
        path = Path(model_or_path)
        if not path.is_dir():
            raise FileNotFoundError(f"Expected a local model directory but got "
                                    f"model_or_path={str(model_or_path)!r}")
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    else:
        model = model_or_path
        if tokenizer is None:
            path = Path(getattr(model, "name_or_path", "") or "")
            if not (str(path) and path.is_dir()):
                raise ValueError("Expected a tokenizer with an in-memory model but got "
                                 "tokenizer=None")
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.eval(), tokenizer


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every id that ends a script: the tokenizer's EOS, then the model's (e.g. end of turn)."""
    ids = [tokenizer.eos_token_id]
    declared = getattr(model.generation_config, "eos_token_id", None)
    for i in [declared] if isinstance(declared, int) else declared or []:
        if i not in ids:
            ids.append(i)
    return ids


def sample(model, tokenizer, prompt: str | Sequence[str],
           config: SamplingConfig | None = None) -> list[Sample]:
    """``config.n`` scripts per prompt, sampled in batches of ``config.batch_size``.

    Returns prompt-major order; ``Sample.prompt_index`` names the prompt.  The global torch RNG
    is left as it was; the same seed gives the same samples.

    >>> samples = sample(model, tokenizer, "Workload: matmul(m=128,n=128,k=128)\\n",
    ...                  SamplingConfig(n=4, max_new_tokens=256))   # doctest: +SKIP
    >>> [(s.finish_reason, s.parses) for s in samples]              # doctest: +SKIP
    [('end', True), ('end', True), ('length', False), ('end', True)]
    """
    config = config or SamplingConfig()
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    jobs = [i for i in range(len(prompts)) for _ in range(config.n)]
    eos = eos_token_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    decoder = llg_tokenizer(tokenizer, eos)
    flip = prompt_config_of(tokenizer).tile_order == "inner"
    processor = _processor(model, tokenizer, config, eos) if config.constrained else None
    devices = [] if model.device.type == "cpu" else [model.device]
    samples = []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(config.seed)
        for start in range(0, len(jobs), config.batch_size):
            rows = jobs[start:start + config.batch_size]
            inputs = tokenizer([prompts[i] for i in rows], return_tensors="pt", padding=True,
                               padding_side="left").to(model.device)
            if processor is not None:
                processor.reset()
            stop = {} if processor is not None or not config.stop else {
                "stop_strings": [config.stop], "tokenizer": tokenizer}
            out = model.generate(
                **inputs, do_sample=True, temperature=config.temperature, top_p=config.top_p,
                top_k=0, max_new_tokens=config.max_new_tokens, eos_token_id=eos,
                pad_token_id=pad, **stop,
                logits_processor=LogitsProcessorList([processor]) if processor else None)
            generated = out[:, inputs["input_ids"].shape[1]:].tolist()
            for r, (i, ids) in enumerate(zip(rows, generated, strict=True)):
                samples.append(_sample(ids, i, r, set(eos), pad, decoder, processor,
                                       config.stop, flip))
    return samples


def outlines_generator(model, tokenizer, grammar: str | None = None, stop: str | None = STOP):
    """An ``outlines.Generator`` over the same grammar processor, for Outlines' own API.  Its
    text ends with the ``stop`` marker (``training.prompts.templates.split_completion`` removes it).

    >>> generate = outlines_generator(model, tokenizer)                # doctest: +SKIP
    >>> text = generate(prompt, max_new_tokens=256, do_sample=True)    # doctest: +SKIP
    """
    import outlines

    processor = grammar_logits_processor(tokenizer, grammar, stop=stop,
                                         eos_token_ids=eos_token_ids(model, tokenizer))
    return outlines.Generator(outlines.from_transformers(model, tokenizer), processor=processor)


def _processor(model, tokenizer, config: SamplingConfig, eos: list[int]):
    if config.backend == "outlines":
        import outlines
        from outlines.backends import get_cfg_logits_processor

        lark = config.grammar or sampling_grammar()
        if config.stop:
            lark = with_end_marker(lark, config.stop)
        return get_cfg_logits_processor("llguidance", outlines.from_transformers(model, tokenizer),
                                        lark)
    return grammar_logits_processor(tokenizer, config.grammar, stop=config.stop,
                                    eos_token_ids=eos,
                                    max_new_tokens=config.max_new_tokens,
                                    wind_down=config.wind_down)


def _sample(ids: list[int], prompt_index: int, row: int, eos: set[int], pad: int, decoder,
            processor, stop: str | None, flip: bool = False) -> Sample:
    end = next((k for k, t in enumerate(ids) if t in eos), None)
    script = ids if end is None else ids[:end]
    text = decoder.decode_bytes(script).decode("utf-8", errors="replace")
    if stop:
        # Under the grammar the marker can only be the last thing; free text stops at the first.
        at = (len(text) - len(stop) if text.endswith(stop) else -1) if processor is not None \
            else text.find(stop)
        if at >= 0:
            text, end = text[:at], len(script)
            while script and script[-1] == pad:  # generate() pads a row stopped by the marker
                script = script[:-1]
    if flip:  # a model of prompt format 3 wrote its tiles innermost first
        text = flip_tiles(text)
    error = ""
    try:
        dragon_dsl.parse(text)
    except dragon_dsl.DragonError as e:
        error = str(e)
    forced = 0
    if isinstance(processor, GrammarLogitsProcessor):
        forced = processor.forced_tokens[row]
        if processor.errors[row]:
            error = f"llguidance: {processor.errors[row]}\n{error}".strip()
    return Sample(text=text, finish_reason="length" if end is None else "end",
                  n_tokens=len(script), parses=not error, forced_tokens=forced,
                  prompt_index=prompt_index, error=error)
