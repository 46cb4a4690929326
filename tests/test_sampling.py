"""Sampling under the grammar: an untrained tiny model (the hardest case: it has learned
nothing) stays inside grammar/dragon.lark on 1,000 samples, while the same model sampled freely
does not; wide logits, seeds, temperature and top-p, the token budget, model directories,
Outlines and TRL's GRPO rollouts."""

from __future__ import annotations

import collections
import json
import re
import time

import llguidance
import pytest
import torch
from transformers import LogitsProcessorList

import dragon_dsl
from dragon_dsl.grammar import grammar_text
from training.grammars.constraints import expand_ranges
from training.models.tokenizer import (
    TokenizerConfig,
    build_tokenizer,
    openai_tokenizer,
    tiny_model,
    train_tokenizer,
)
from training.prompts.templates import STOP
from training.sampling import (
    SamplingConfig,
    grammar_logits_processor,
    grammar_rollout,
    llg_tokenizer,
    load,
    outlines_generator,
    sample,
)

from .test_constraints import _layout

STATEMENTS = ["matmul(m=128,n=128,k=128)", "softmax(m=32,n=64)", "conv2d(h=14,w=14,ci=16,co=16)",
         "layer_norm(m=32,n=64)", "gemv(m=128,k=128)", "transpose(m=16,n=32,k=8)",
         "reduce(m=32,n=128,op=max)", "pool2d(kind=max)"]
PROMPTS = [f"Workload: {spec}\nTarget: llvm\nScript:\n" for spec in STATEMENTS]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(TokenizerConfig(
        workloads=("matmul(m=64,n=64,k=64)", "softmax(m=32,n=64)",
                   "conv2d(h=14,w=14,ci=16,co=16,layout=NHWC)"),
        targets=("llvm",), traces_per_workload=3))


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    return tiny_model(tokenizer)


@pytest.fixture(scope="module")
def thousand(tokenizer):
    """1,000 constrained samples: 8 prompts x 125, batches of 100, 256 tokens at most, of an
    untrained model smaller still than ``model`` (hidden 32, one layer): untrained, a model of
    any size has learned nothing, and this one computes its tokens in 2/3 of the time."""
    torch.manual_seed(0)
    smaller = tiny_model(tokenizer, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2)
    start = time.perf_counter()
    samples = sample(smaller, tokenizer, PROMPTS,
                     SamplingConfig(n=125, batch_size=100, max_new_tokens=256))
    return samples, time.perf_counter() - start


_MATCHERS: dict[int, llguidance.LLMatcher] = {}


def in_grammar(tokenizer, text: str, *, complete: bool = True) -> bool:
    """Whether llguidance accepts ``text`` (as a whole script, or as a prefix of one)."""
    tok = llg_tokenizer(tokenizer)
    if id(tok) not in _MATCHERS:
        _MATCHERS[id(tok)] = llguidance.LLMatcher(
            tok, llguidance.grammar_from("lark", grammar_text()), log_level=0)
    matcher = _MATCHERS[id(tok)].deep_copy()
    ok = matcher.consume_tokens(tok.tokenize_bytes(text.encode()))
    return ok and (matcher.is_accepting() or not complete)


def summary(samples, seconds: float | None = None) -> str:
    reasons = collections.Counter(s.finish_reason for s in samples)
    ended = [s for s in samples if s.finish_reason == "end"]
    parsed = sum(s.parses for s in ended)
    tokens = sum(s.n_tokens for s in samples)
    rate = f", {tokens / seconds:.0f} tokens/s" if seconds else ""
    return (f"{len(samples)} samples: {reasons['end']} ended ({parsed} parse, "
            f"{sum(s.forced_tokens > 0 for s in ended)} closed by the wind-down), "
            f"{reasons['length']} hit max_new_tokens "
            f"({reasons['length'] / len(samples):.1%}){rate}")


# ---- the 1,000 samples -----------------------------------------------------------------------

def test_thousand_untrained_samples_stay_in_the_grammar(thousand, tokenizer, record_property):
    samples, seconds = thousand
    record_property("sampling", summary(samples, seconds))
    assert len(samples) == 1000
    assert {s.prompt_index for s in samples} == set(range(len(PROMPTS)))
    ended = [s for s in samples if s.finish_reason == "end"]
    outside = [s.text for s in ended if not in_grammar(tokenizer, s.text)]
    assert not outside, f"{len(outside)} finished samples outside the grammar: {outside[:3]}"
    # A sample that ran out of tokens says so, and still holds a valid prefix.
    for s in samples:
        if s.finish_reason == "length":
            assert s.n_tokens == 256 and in_grammar(tokenizer, s.text, complete=False)


def test_thousand_untrained_samples_parse(thousand):
    """Every one of the 1,000 samples ends (the wind-down closes what the model leaves open) and
    parses: the sampling grammar admits only what the parser takes."""
    samples, seconds = thousand
    failed = collections.Counter(
        s.finish_reason if s.finish_reason != "end" else s.error.split("\n")[0][-60:]
        for s in samples if s.finish_reason != "end" or not s.parses)
    assert not failed, (summary(samples, seconds), failed.most_common(8))


# ---- a large model's vocabulary --------------------------------------------------------------

@pytest.fixture(scope="module")
def large():
    """An untrained Llama with OpenAI's cl100k_base vocabulary (100,257 tokens, hundreds of them
    runs of spaces, tabs and newlines), and the seconds the tokenizers took to build."""
    start = time.perf_counter()
    tokenizer = openai_tokenizer("cl100k_base")
    built = time.perf_counter()
    llg_tokenizer(tokenizer)
    seconds = {"tokenizer": built - start, "llguidance": time.perf_counter() - built}
    torch.manual_seed(3)
    return tiny_model(tokenizer), tokenizer, seconds


def _grammar(mode: str) -> str | None:
    from codegen.workloads import workload
    from training.grammars.constraints import workload_grammar

    return None if mode == "plain" else workload_grammar(workload(LARGE_SPEC), "llvm")


LARGE_SPEC = "matmul(m=128,n=128,k=128)"
# Two spaces, a tab, a space at either end of a line, a blank line, a carriage return.
_UNCANONICAL_SPACE = re.compile(r"[ \t]{2}|\t|^ | $|\n\n|\r", re.M)


def _assert_large_vocabulary_samples(large, mode, n, record_property):
    model, tokenizer, seconds = large
    whitespace = [t for t in tokenizer.get_vocab() if len(t) > 1
                  and not tokenizer.convert_tokens_to_string([t]).strip()]
    assert len(whitespace) > 100  # the tokens an untrained model would write for ever
    start = time.perf_counter()
    prompt = f"Workload: {LARGE_SPEC}\nTarget: llvm\nScript:\n"
    if mode == "schedule":
        from codegen.workloads import workload
        from training.sampling import sample_schedule_aware

        samples = sample_schedule_aware(model, tokenizer, prompt, workload(LARGE_SPEC), "llvm",
                                        SamplingConfig(n=n, batch_size=min(n, 64),
                                                       max_new_tokens=48, seed=5))
        assert all(s.applies for s in samples), [s.error[:200] for s in samples
                                                 if not s.applies][:3]
    else:
        samples = sample(model, tokenizer, prompt,
                         SamplingConfig(n=n, batch_size=min(n, 64), max_new_tokens=40, seed=5,
                                        grammar=_grammar(mode)))
    elapsed = time.perf_counter() - start
    record_property("sampling", summary(samples, elapsed))
    record_property("build_seconds", seconds)
    failed = [(s.finish_reason, s.text[-60:], s.error[:80]) for s in samples
              if s.finish_reason != "end" or not s.parses]
    assert not failed, (summary(samples), failed[:3])
    moved = [s.text for s in samples
             if _layout(expand_ranges(dragon_dsl.format(s.text))) != _layout(s.text)]
    assert not moved, moved[:3]  # not one space the printer would not write
    assert all(s.text.strip() for s in samples if s.text)  # text, never a run of whitespace
    assert sum(bool(s.text) for s in samples) >= n // 2, summary(samples)


def test_the_languages_own_grammar_lets_a_large_vocabulary_write_whitespace(large):
    """What the test below guards against: under grammar/dragon.lark itself, which ignores any
    run of spaces and tabs, the same untrained model writes whitespace runs."""
    model, tokenizer, _ = large
    samples = sample(model, tokenizer, f"Workload: {LARGE_SPEC}\nTarget: llvm\nScript:\n",
                     SamplingConfig(n=8, batch_size=8, max_new_tokens=40, seed=5,
                                    grammar=grammar_text()))
    assert sum(bool(_UNCANONICAL_SPACE.search(s.text)) for s in samples) >= 4


@pytest.mark.parametrize("mode,n", [("plain", 64), ("workload", 64), ("schedule", 16)])
def test_a_large_vocabulary_samples_scripts_not_whitespace(large, mode, n, record_property):
    """With a real large vocabulary, an untrained model under each grammar ends every sample,
    and every one parses and is laid out canonically: the grammars leave it no whitespace to
    run on.  (Schedule-aware decoding applies every statement in a live schedule: 16 samples
    here, 512 of each in the slow pass.)"""
    _assert_large_vocabulary_samples(large, mode, n, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "workload", "schedule"])
def test_a_large_vocabulary_samples_scripts_not_whitespace_many(large, mode, record_property):
    _assert_large_vocabulary_samples(large, mode, 512, record_property)


# ---- the same model, unconstrained ----------------------------------------------------------

def test_unconstrained_samples_of_the_same_model_do_not_parse(model, tokenizer):
    free = sample(model, tokenizer, PROMPTS[0],
                  SamplingConfig(n=40, batch_size=40, max_new_tokens=64, constrained=False))
    assert sum(s.parses for s in free) <= 2, summary(free)


# ---- model and tokenizer shapes -------------------------------------------------------------

def test_logits_wider_than_the_vocabulary_are_never_sampled(tokenizer):
    torch.manual_seed(1)
    wide = tiny_model(tokenizer)
    wide.resize_token_embeddings(len(tokenizer) + 37, mean_resizing=False)
    assert wide.get_output_embeddings().weight.shape[0] == len(tokenizer) + 37
    processor = grammar_logits_processor(tokenizer)
    scores = processor(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, len(tokenizer) + 37))
    assert torch.isinf(scores[:, len(tokenizer):]).all()
    assert torch.isfinite(scores[:, :len(tokenizer)]).any(dim=1).all()
    inputs = tokenizer([PROMPTS[1]] * 16, return_tensors="pt")
    out = wide.generate(**inputs, do_sample=True, max_new_tokens=48,
                        logits_processor=LogitsProcessorList([processor]))
    assert int(out.max()) < len(tokenizer)
    samples = sample(wide, tokenizer, PROMPTS[1], SamplingConfig(n=16, max_new_tokens=64))
    assert all(in_grammar(tokenizer, s.text) for s in samples if s.finish_reason == "end")


def test_tokenizer_is_saved_and_loaded_with_the_model(tmp_path, model, tokenizer):
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, tok = load(tmp_path)
    text = 'block "C" -> C\nloops C -> i, j, k\ntile i [8, 16] -> i0, i1\n'
    assert tok.decode(tok(text).input_ids) == text
    assert tok.eos_token_id == tokenizer.eos_token_id and tok.pad_token_id is not None
    samples = sample(loaded, tok, PROMPTS[0], SamplingConfig(n=4, max_new_tokens=32))
    assert len(samples) == 4
    with pytest.raises(FileNotFoundError, match="Expected a local model directory"):
        load(tmp_path / "missing")


def test_dragon_sample_cli(tmp_path, model, tokenizer, capsys):
    from dragon_dsl.cli import main

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    spec = "matmul(m=16,n=16,k=16)"
    code = main(["sample", "--model", str(tmp_path), "--workload", spec, "-n", "3",
                 "--max-new-tokens", "48", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["workload"] == spec and len(out["samples"]) == 3
    assert all(s["parses"] and s["finish_reason"] == "end" for s in out["samples"])
    main(["sample", "--model", str(tmp_path), "--workload", spec, "-n", "2",
          "--max-new-tokens", "48"])
    assert capsys.readouterr().out.startswith("# sample 0")
    assert main(["sample", "--model", str(tmp_path / "missing"), "--workload", spec]) == 2
    assert "no model in" in capsys.readouterr().err
    assert main(["sample", "--model", str(tmp_path), "--workload", "matmul(m=oops)"]) == 2


def test_train_tokenizer_keeps_every_byte():
    tok = train_tokenizer(["loops C -> i, j\n"] * 8, vocab_size=300)
    text = 'annotate b "\\u00e9" = 1  # é, ü\n'
    assert tok.decode(tok(text).input_ids) == text


# ---- sampling options -----------------------------------------------------------------------

def test_same_seed_same_samples(model, tokenizer):
    config = SamplingConfig(n=6, batch_size=3, max_new_tokens=40, seed=7)
    torch.manual_seed(123)
    before = torch.rand(1)
    first = sample(model, tokenizer, PROMPTS[2], config)
    after = torch.rand(1)
    torch.manual_seed(123)
    assert torch.rand(1) == before and torch.rand(1) == after  # the global RNG is untouched
    again = sample(model, tokenizer, PROMPTS[2], config)
    other = sample(model, tokenizer, PROMPTS[2], SamplingConfig(n=6, batch_size=3,
                                                                max_new_tokens=40, seed=8))
    assert [s.text for s in first] == [s.text for s in again]
    assert [s.text for s in first] != [s.text for s in other]


def test_temperature_and_top_p(model, tokenizer):
    samples = sample(model, tokenizer, PROMPTS[3],
                     SamplingConfig(n=16, max_new_tokens=64, temperature=0.7, top_p=0.9))
    assert all(in_grammar(tokenizer, s.text) for s in samples if s.finish_reason == "end")


def test_max_new_tokens_is_a_clear_outcome(model, tokenizer):
    samples = sample(model, tokenizer, PROMPTS[4],
                     SamplingConfig(n=16, max_new_tokens=6, wind_down=0))
    cut = [s for s in samples if s.finish_reason == "length"]
    assert cut and all(s.n_tokens == 6 and s.forced_tokens == 0 for s in cut)


def test_wind_down_closes_scripts_near_the_budget(model, tokenizer):
    samples = sample(model, tokenizer, PROMPTS[5],
                     SamplingConfig(n=32, max_new_tokens=48, wind_down=24))
    closed = [s for s in samples if s.forced_tokens and s.finish_reason == "end"]
    assert len(closed) >= len(samples) // 2, summary(samples)
    assert all(in_grammar(tokenizer, s.text) for s in closed)


def test_end_marker_follows_every_finished_script(model, tokenizer):
    processor = grammar_logits_processor(tokenizer, stop=STOP, max_new_tokens=64, wind_down=32)
    inputs = tokenizer([PROMPTS[6]] * 16, return_tensors="pt")
    out = model.generate(**inputs, do_sample=True, max_new_tokens=64,
                         logits_processor=LogitsProcessorList([processor]))
    rows = [r for r in out[:, inputs["input_ids"].shape[1]:].tolist()
            if tokenizer.eos_token_id in r]
    assert rows
    for row in rows:
        text = tokenizer.decode(row[:row.index(tokenizer.eos_token_id)])
        assert text.endswith(STOP) and in_grammar(tokenizer, text.removesuffix(STOP))
    plain = sample(model, tokenizer, PROMPTS[6],
                   SamplingConfig(n=16, max_new_tokens=64, stop=None))
    assert all(in_grammar(tokenizer, s.text) for s in plain if s.finish_reason == "end")


@pytest.mark.parametrize("field,value", [("n", 0), ("temperature", 0.0), ("top_p", 1.5),
                                         ("max_new_tokens", 0), ("backend", "xgrammar")])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=f"but got {field}="):
        SamplingConfig(**{field: value})


# ---- Outlines and TRL -----------------------------------------------------------------------

def test_outlines_generator_uses_the_grammar(model, tokenizer):
    generate = outlines_generator(model, tokenizer)
    text = generate(PROMPTS[6], max_new_tokens=32, do_sample=True)
    assert isinstance(text, str)
    assert in_grammar(tokenizer, text.removesuffix(STOP), complete=text.endswith(STOP))


@pytest.mark.slow  # Outlines' processor compiles its mask kernel with torch.compile
def test_outlines_backend(model, tokenizer):
    samples = sample(model, tokenizer, PROMPTS[7],
                     SamplingConfig(n=8, max_new_tokens=32, backend="outlines"))
    assert all(in_grammar(tokenizer, s.text, complete=s.finish_reason == "end")
               for s in samples)


def test_grpo_rollouts_stay_in_the_grammar(tmp_path, tokenizer, monkeypatch):
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(2)
    policy = tiny_model(tokenizer)
    seen = []

    def parses(completions, finish_reason, forced_tokens, **kwargs):
        seen.extend(zip(completions, finish_reason, strict=True))
        return [float(_parses(c.removesuffix(STOP))) for c in completions]

    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                          num_generations=4, max_completion_length=48, max_steps=2,
                          report_to=[], use_cpu=True, save_strategy="no", logging_steps=1)
    trainer = trl.GRPOTrainer(
        model=policy, processing_class=tokenizer, reward_funcs=[parses], args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": PROMPTS[:4]}),
        rollout_func=grammar_rollout())
    trainer.train()
    assert len(seen) == 8
    for completion, finish in seen:  # a finished completion is a script, then the marker
        assert completion.endswith(STOP) == (finish == "end")
        assert in_grammar(tokenizer, completion.removesuffix(STOP), complete=finish == "end")


def _parses(text: str) -> bool:
    try:
        dragon_dsl.parse(text)
    except dragon_dsl.DragonError:
        return False
    return True

