"""Tokenizers and tiny models for small models trained from scratch.

A byte-level BPE tokenizer is trained with ``tokenizers`` on Dragon scripts (encoded from real
MetaSchedule traces) and on prompt-like text, and wrapped as a ``PreTrainedTokenizerFast`` with
``<s>``, ``</s>`` and ``<pad>``; ``save_pretrained`` puts it in the model's directory, where
``AutoTokenizer.from_pretrained`` finds it again.  Byte-level BPE keeps every one of the 256
bytes as a token, so any text, and any script the grammar allows, can be spelled.

Real models keep their own tokenizer; this module is only for models trained from scratch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "TokenizerConfig",
    "build_tokenizer",
    "prompt_texts",
    "script_corpus",
    "tiny_model",
    "train_tokenizer",
]

BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
PAD_TOKEN = "<pad>"

# Small shapes of the main families: design spaces build in well under a second each once the
# first one (about 10 s per process) is done.
DEFAULT_WORKLOADS = (
    "matmul(m=128,n=128,k=128)",
    "matmul(m=64,n=256,k=64,dtype=float16)",
    "batch_matmul(b=2,m=32,n=32,k=32)",
    "gemv(m=128,k=128)",
    "conv2d(h=14,w=14,ci=16,co=16,layout=NHWC)",
    "conv2d(h=14,w=14,ci=16,co=16,layout=NCHW,stride=2)",
    "depthwise_conv2d(h=14,w=14,c=16)",
    "softmax(m=32,n=64)",
    "layer_norm(m=32,n=64)",
    "reduce(m=32,n=128,op=max)",
    'elementwise(m=32,n=64,ops="add,relu,exp")',
    "transpose(m=16,n=32,k=8)",
    "pool2d(kind=max)",
)


@dataclass(frozen=True)
class TokenizerConfig:
    """What the tokenizer of a from-scratch model is trained on, and how big it is."""

    vocab_size: int = field(default=1024, metadata={
        "help": "Tokens in the vocabulary, the 256 bytes and the special tokens included."})
    min_frequency: int = field(default=2, metadata={
        "help": "A pair is merged only when it occurs at least this often in the corpus."})
    workloads: tuple[str, ...] = field(default=DEFAULT_WORKLOADS, metadata={
        "help": "Workload specs whose sampled traces become the script corpus."})
    targets: tuple[str, ...] = field(default=("llvm", "cuda"), metadata={
        "help": "Targets (each with its default rule set) the traces are sampled for."})
    traces_per_workload: int = field(default=4, metadata={
        "help": "Sampled traces per workload and target."})
    seed: int = field(default=0, metadata={"help": "Seed of the trace sampling."})


def script_corpus(workloads: Iterable[str] = DEFAULT_WORKLOADS,
                  targets: Iterable[str] = ("llvm",), n: int = 4, seed: int = 0) -> Iterator[str]:
    """Dragon scripts of ``n`` sampled MetaSchedule traces per workload and target.

    A pair MetaSchedule cannot search (some rule sets reject some workloads) is skipped.

    >>> next(script_corpus(["matmul(m=16,n=16,k=16)"], n=1)).startswith('block "C"')
    True
    """
    import dragon_dsl
    from codegen import postproc_set, sample_traces, workload
    from codegen.targets import default_rules

    targets = tuple(targets)
    for spec in workloads:
        wl = workload(spec)
        for target in targets:
            rules = default_rules(target)
            try:
                traces = sample_traces(wl.mod, target, rules, n, seed=seed)
            except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
                continue
            for trace in traces:
                yield dragon_dsl.from_trace(trace, postproc="auto",
                                            postproc_set=postproc_set(rules), workload=wl)


def prompt_texts(workloads: Iterable[str] = DEFAULT_WORKLOADS,
                 targets: Iterable[str] = ("llvm",)) -> Iterator[str]:
    """The construction prompt (``training.prompts``) of each workload and target, followed by
    the end-of-script marker, so that the tokenizer knows both."""
    from codegen import workload
    from training.prompts import SCRIPT_END, construction_prompt

    targets = tuple(targets)
    for spec in workloads:
        wl = workload(spec)
        for target in targets:
            yield construction_prompt(wl, target) + SCRIPT_END


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts``.

    >>> tok = train_tokenizer(["loops C -> i, j\\n"] * 4, vocab_size=300)
    >>> tok.decode(tok("loops C -> i, j\\n").input_ids)
    'loops C -> i, j\\n'
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN]
    if vocab_size < 256 + len(specials):
        raise ValueError(f"Expected vocab_size >= {256 + len(specials)} (every byte and the "
                         f"special tokens) but got vocab_size={vocab_size}")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(texts, trainer=trainer)
    # No cleanup of spaces on decode: a script must come back byte for byte.
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN,
                                   pad_token=PAD_TOKEN, clean_up_tokenization_spaces=False)


def build_tokenizer(config: TokenizerConfig | None = None):
    """Sample the corpus that ``config`` describes and train a tokenizer on it (about 15 s)."""
    config = config or TokenizerConfig()
    texts = list(script_corpus(config.workloads, config.targets, config.traces_per_workload,
                               config.seed))
    texts += prompt_texts(config.workloads, config.targets)
    return train_tokenizer(texts, config.vocab_size, config.min_frequency)


def tiny_model(tokenizer, **config: Any):
    """An untrained ``LlamaForCausalLM`` sized for tests (hidden 64, 2 layers) that matches
    ``tokenizer``; keyword arguments override ``LlamaConfig`` fields.

    >>> tiny_model(train_tokenizer(["x\\n"], vocab_size=300)).config.hidden_size
    64
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  max_position_embeddings=2048, tie_word_embeddings=True,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
    fields.update(config)
    model = LlamaForCausalLM(LlamaConfig(**fields))
    model.generation_config.bos_token_id = fields["bos_token_id"]
    model.generation_config.eos_token_id = fields["eos_token_id"]
    model.generation_config.pad_token_id = fields["pad_token_id"]
    return model.eval()
