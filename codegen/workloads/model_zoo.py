"""Model builders: four real networks in PyTorch, each at named size presets.

A builder is a plain function ``(batch, seq, **config) -> (torch module in eval mode, example
inputs)``. The transformers are built from their Hugging Face configs with random weights
(nothing is downloaded); the CNN is a ResNet written here. torch and transformers are imported
inside the builders, so importing this module is cheap.

Presets (``seq`` is tokens per sequence, or the image side in pixels for ``resnet``):

- ``tiny``: 2 layers and hidden sizes of 64 (ResNet: widths 8, 16 at 32x32), to import and
  extract in seconds. Used by the tests.
- ``base``: the real model's hidden, FFN and head sizes with 2 layers, since every layer
  repeats the same tasks: BERT-base, GPT-2 (124M), Llama-3.2-1B (grouped-query attention,
  its 128k vocabulary cut to 32000 to keep the embedding table at 250 MiB), and a full
  ResNet-18 at 224x224.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MODELS", "ModelEntry", "Preset", "bert", "gpt2", "llama", "resnet"]


@dataclass(frozen=True)
class Preset:
    """A named size of one model: the builder's config arguments and the default input length."""

    config: Mapping[str, Any] = field(metadata={"help": "keyword arguments of the builder"})
    seq: int = field(metadata={"help": "default tokens per sequence, or image side in pixels"})
    max_seq: int = field(default=0, metadata={
        "help": "the largest seq= the model takes: its position table, or for an image the "
                "side whose activations still fit in memory (0: seq)"})


@dataclass(frozen=True)
class ModelEntry:
    """A model of the zoo: its builder and its presets by name."""

    build: Callable[..., tuple[Any, tuple]]
    presets: Mapping[str, Preset]


def _tokens(vocab_size: int, batch: int, seq: int):
    import torch

    return torch.randint(0, vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))


def bert(batch: int, seq: int, **config: Any) -> tuple[Any, tuple]:
    """transformers ``BertModel`` (with its pooler) from a ``BertConfig``."""
    import torch
    import transformers

    torch.manual_seed(0)
    # Eager attention is matmul + softmax + matmul, the classic tasks; SDPA adds NaN guards.
    cfg = transformers.BertConfig(attn_implementation="eager", **config)
    return transformers.BertModel(cfg).eval(), (_tokens(cfg.vocab_size, batch, seq),)


def gpt2(batch: int, seq: int, **config: Any) -> tuple[Any, tuple]:
    """transformers ``GPT2Model`` (no LM head) from a ``GPT2Config``."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(attn_implementation="eager", use_cache=False, **config)
    return transformers.GPT2Model(cfg).eval(), (_tokens(cfg.vocab_size, batch, seq),)


def llama(batch: int, seq: int, **config: Any) -> tuple[Any, tuple]:
    """transformers ``LlamaModel`` (no LM head) from a ``LlamaConfig``."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(attn_implementation="eager", use_cache=False, **config)
    return transformers.LlamaModel(cfg).eval(), (_tokens(cfg.vocab_size, batch, seq),)


def resnet(batch: int, seq: int, widths: tuple[int, ...], blocks: tuple[int, ...],
           classes: int) -> tuple[Any, tuple]:
    """A ResNet of conv-bn-relu basic blocks: a 7x7 stride-2 stem and max pool, one stage per
    width (stride 2 and a 1x1 downsample path from the second on), global average pool, fc."""
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                             nn.BatchNorm2d(cout))

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.a, self.b = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, 1)
            self.down = conv_bn(cin, cout, 1, stride) if stride > 1 or cin != cout else None

        def forward(self, x):
            skip = x if self.down is None else self.down(x)
            return torch.relu(self.b(torch.relu(self.a(x))) + skip)

    torch.manual_seed(0)
    layers: list[nn.Module] = [conv_bn(3, widths[0], 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = widths[0]
    for i, (width, count) in enumerate(zip(widths, blocks, strict=True)):
        for j in range(count):
            layers.append(Block(cin, width, 2 if i > 0 and j == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    model = nn.Sequential(*layers).eval()
    # Fresh batch-norm statistics are the identity; random ones make the numerics test real.
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    image = torch.randn(batch, 3, seq, seq, generator=torch.Generator().manual_seed(0))
    return model, (image,)


_TINY_TEXT = {"vocab_size": 512, "num_hidden_layers": 2}

MODELS: dict[str, ModelEntry] = {
    "bert": ModelEntry(bert, {
        "tiny": Preset({**_TINY_TEXT, "hidden_size": 64, "num_attention_heads": 2,
                        "intermediate_size": 128, "max_position_embeddings": 64},
                       seq=16, max_seq=64),
        "base": Preset({"vocab_size": 30522, "num_hidden_layers": 2, "hidden_size": 768,
                        "num_attention_heads": 12, "intermediate_size": 3072},
                       seq=128, max_seq=512),
    }),
    "gpt2": ModelEntry(gpt2, {
        "tiny": Preset({"vocab_size": 512, "n_layer": 2, "n_embd": 64, "n_head": 2,
                        "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0},
                       seq=16, max_seq=64),
        "base": Preset({"vocab_size": 50257, "n_layer": 2, "n_embd": 768, "n_head": 12,
                        "n_positions": 1024}, seq=128, max_seq=1024),
    }),
    "llama": ModelEntry(llama, {
        "tiny": Preset({**_TINY_TEXT, "hidden_size": 64, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "intermediate_size": 128,
                        "max_position_embeddings": 64}, seq=16, max_seq=64),
        "base": Preset({"vocab_size": 32000, "num_hidden_layers": 2, "hidden_size": 2048,
                        "num_attention_heads": 32, "num_key_value_heads": 8,
                        "intermediate_size": 8192, "max_position_embeddings": 2048},
                       seq=128, max_seq=2048),
    }),
    "resnet": ModelEntry(resnet, {
        "tiny": Preset({"widths": (8, 16), "blocks": (1, 1), "classes": 10}, seq=32, max_seq=256),
        "base": Preset({"widths": (64, 128, 256, 512), "blocks": (2, 2, 2, 2),
                        "classes": 1000}, seq=224, max_seq=512),
    }),
}
