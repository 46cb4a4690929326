"""Tokenizers and tiny models: for small models trained from scratch, and a real large
vocabulary for tests.

A byte-level BPE tokenizer is trained with ``tokenizers`` on Dragon scripts (encoded from real
MetaSchedule traces) and on prompt-like text, and wrapped as a ``PreTrainedTokenizerFast`` with
``<s>``, ``</s>`` and ``<pad>``; ``save_pretrained`` puts it in the model's directory, where
``AutoTokenizer.from_pretrained`` finds it again.  Byte-level BPE keeps every one of the 256
bytes as a token, so any text, and any script the grammar allows, can be spelled.

``openai_tokenizer`` gives OpenAI's cl100k_base or o200k_base vocabulary, built locally from the
``bpe-openai`` package, as the same kind of tokenizer: a large model's vocabulary, with tokens
that are long runs of spaces, tabs and newlines, for testing the sampler against what real
models can write.  Real models keep their own tokenizer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import dragon_dsl
from codegen import postproc_set, sample_traces, workload
from codegen.targets import default_rules
from training.prompts.templates import SCRIPT_END, construction_prompt

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "OPENAI_ENCODINGS",
    "PAD_TOKEN",
    "TokenizerConfig",
    "build_tokenizer",
    "openai_tokenizer",
    "prompt_texts",
    "script_corpus",
    "tiny_config",
    "tiny_model",
    "train_tokenizer",
    "vocab_mismatch",
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


# Each encoding's split regex as tiktoken defines it (bpe_openai.registry), without the
# possessive quantifiers of its cl100k pattern, as transformers' TikTokenConverter writes it.
OPENAI_ENCODINGS: dict[str, str] = {
    "cl100k_base": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                   r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "o200k_base": "|".join([
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""", r"""\s+""",
    ]),
}
OPENAI_EOS = "<|endoftext|>"


@functools.cache
def openai_tokenizer(name: str = "cl100k_base"):
    """OpenAI's ``name`` vocabulary (``OPENAI_ENCODINGS``) as a byte-level BPE
    ``PreTrainedTokenizerFast``, built without network from the ranks ``bpe-openai`` ships, with
    ``<|endoftext|>`` as its EOS and pad token (the next id after the ranks).  It tokenizes as
    tiktoken does (the same ids for the ranks).  Building cl100k_base takes about 1.5 s, so
    it is built once per process; the tokenizer returned is shared: do not change it.

    The merges are read back from the ranks as transformers' ``TikTokenConverter`` does: a
    token of rank r merges every split of it into two tokens, at r.

    >>> tok = openai_tokenizer()
    >>> len(tok), tok.decode(tok("tile i [4, 8] -> i0, i1\\n").input_ids)
    (100257, 'tile i [4, 8] -> i0, i1\\n')
    """
    import bpe_openai
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    if name not in OPENAI_ENCODINGS:
        raise ValueError(f"Expected one of {sorted(OPENAI_ENCODINGS)} but got name={name!r}")
    encoding = bpe_openai.get_encoding(name)
    special = {encoding.encode_single_token(t) for t in encoding.special_tokens_set}
    ranks = {encoding.decode_single_token_bytes(i): i for i in range(encoding.n_vocab)
             if i not in special and _has_bytes(encoding, i)}
    byte_char = bytes_to_unicode()

    def spell(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        merges.extend((rank, ranks[token[:k]], ranks[token[k:]], token[:k], token[k:])
                      for k in range(1, len(token)) if token[:k] in ranks and token[k:] in ranks)
    merges.sort()
    bpe = Tokenizer(models.BPE({spell(t): r for t, r in ranks.items()},
                               [(spell(a), spell(b)) for *_, a, b in merges],
                               ignore_merges=True))  # a pre-token in the vocabulary stays whole
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(OPENAI_ENCODINGS[name]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=OPENAI_EOS,
                                   pad_token=OPENAI_EOS, clean_up_tokenization_spaces=False)


def _has_bytes(encoding: Any, rank: int) -> bool:
    """Whether ``rank`` is a token (cl100k_base leaves a few ids unused)."""
    try:
        encoding.decode_single_token_bytes(rank)
    except KeyError:
        return False
    return True


def tiny_config(vocab_size: int, **config: Any):
    """The ``LlamaConfig`` of ``tiny_model`` for a vocabulary of ``vocab_size`` (no tokenizer
    needed: what a run's memory is estimated from); keyword arguments override its fields.

    >>> tiny_config(300, hidden_size=32).intermediate_size
    128
    """
    from transformers import LlamaConfig

    fields = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  max_position_embeddings=2048, tie_word_embeddings=True)
    fields.update(config)
    return LlamaConfig(**fields)


def tiny_model(tokenizer, **config: Any):
    """An untrained ``LlamaForCausalLM`` sized for tests (hidden 64, 2 layers) that matches
    ``tokenizer``; keyword arguments override ``LlamaConfig`` fields.

    >>> tiny_model(train_tokenizer(["x\\n"], vocab_size=300)).config.hidden_size
    64
    """
    from transformers import LlamaForCausalLM

    fields = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id, **config)
    model = LlamaForCausalLM(tiny_config(len(tokenizer), **fields))
    model.generation_config.bos_token_id = fields["bos_token_id"]
    model.generation_config.eos_token_id = fields["eos_token_id"]
    model.generation_config.pad_token_id = fields["pad_token_id"]
    return model.eval()


def vocab_mismatch(tokenizer, model) -> str | None:
    """Why ``tokenizer`` cannot drive ``model`` (it has token ids past the model's embedding
    rows: another model's tokenizer), or None when it fits."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        return (f"the tokenizer has {len(tokenizer)} tokens but the model's embedding only "
                f"{rows} rows (a tokenizer of another model?)")
    return None
