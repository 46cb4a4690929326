"""A sampler of realistic workloads: operator instances whose shapes come from real models.

The tables below hold the layer shapes of published transformer and CNN configurations (each
row names its source). Crossing them with realistic batch sizes, sequence lengths, image
resolutions, dtypes and layouts gives a finite universe of distinct canonical specs, each with
a weight (how common such a layer is; a shape shared by several models adds up). Sampling
draws without replacement in proportion to those weights, so a small sample looks like what a
compiler meets in practice and a large one still covers the long tail.

>>> sample_workloads(2, seed=1)  # doctest: +SKIP
['dense(m=512,n=3072,k=768,bias=1,act=gelu,dtype=float16)', 'conv2d(n=8,h=28,w=28,...)']
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from .families import FAMILIES, WorkloadError
from .specs import format_spec

__all__ = ["FAMILY_SHARES", "iter_workloads", "sample_workloads", "sampler_stats"]

_MAX_ELEMENTS = 2**30  # no tensor above a billion elements (and int32 indexing stays safe)

# ---- transformers --------------------------------------------------------------------------


class Transformer(NamedTuple):
    name: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int  # output classes for ViT
    norm: str  # layer_norm or rms_norm
    act: str  # FFN activation
    gated: bool  # SwiGLU/GeGLU FFN: gate and up projections
    bias: str  # which linear layers have a bias: all, qkv or none
    max_seq: int
    encoder: bool  # bidirectional (no decode step)


TRANSFORMERS = (
    # BERT-base/large (Devlin et al. 2019; HF bert-base-uncased, bert-large-uncased).
    Transformer("bert-base", 768, 3072, 12, 12, 64, 30522, "layer_norm", "gelu", False, "all",
                512, True),
    Transformer("bert-large", 1024, 4096, 16, 16, 64, 30522, "layer_norm", "gelu", False, "all",
                512, True),
    # RoBERTa-base (Liu et al. 2019; HF roberta-base): BERT-base shapes, 50265 tokens.
    Transformer("roberta-base", 768, 3072, 12, 12, 64, 50265, "layer_norm", "gelu", False, "all",
                512, True),
    # GPT-2 small/medium/large/XL (Radford et al. 2019; HF gpt2, gpt2-medium, -large, -xl).
    Transformer("gpt2", 768, 3072, 12, 12, 64, 50257, "layer_norm", "gelu", False, "all",
                1024, False),
    Transformer("gpt2-medium", 1024, 4096, 16, 16, 64, 50257, "layer_norm", "gelu", False, "all",
                1024, False),
    Transformer("gpt2-large", 1280, 5120, 20, 20, 64, 50257, "layer_norm", "gelu", False, "all",
                1024, False),
    Transformer("gpt2-xl", 1600, 6400, 25, 25, 64, 50257, "layer_norm", "gelu", False, "all",
                1024, False),
    # OPT-1.3B (Zhang et al. 2022; HF facebook/opt-1.3b).
    Transformer("opt-1.3b", 2048, 8192, 32, 32, 64, 50272, "layer_norm", "relu", False, "all",
                2048, False),
    # T5-base/large v1.0 (Raffel et al. 2020; HF t5-base, t5-large): RMS-style norm, ReLU.
    Transformer("t5-base", 768, 3072, 12, 12, 64, 32128, "rms_norm", "relu", False, "none",
                512, True),
    Transformer("t5-large", 1024, 4096, 16, 16, 64, 32128, "rms_norm", "relu", False, "none",
                512, True),
    # ViT-B/16, ViT-L/16 (Dosovitskiy et al. 2021; timm vit_base_patch16_224, vit_large_...).
    Transformer("vit-b16", 768, 3072, 12, 12, 64, 1000, "layer_norm", "gelu", False, "all",
                577, True),
    Transformer("vit-l16", 1024, 4096, 16, 16, 64, 1000, "layer_norm", "gelu", False, "all",
                577, True),
    # Whisper-base decoder/encoder width (Radford et al. 2022; HF openai/whisper-base).
    Transformer("whisper-base", 512, 2048, 8, 8, 64, 51865, "layer_norm", "gelu", False, "all",
                1500, False),
    # Phi-2 (Microsoft 2023; HF microsoft/phi-2).
    Transformer("phi-2", 2560, 10240, 32, 32, 80, 51200, "layer_norm", "gelu", False, "all",
                2048, False),
    # Llama-2 7B/13B/70B (Touvron et al. 2023; HF meta-llama/Llama-2-*-hf).
    Transformer("llama-2-7b", 4096, 11008, 32, 32, 128, 32000, "rms_norm", "silu", True, "none",
                4096, False),
    Transformer("llama-2-13b", 5120, 13824, 40, 40, 128, 32000, "rms_norm", "silu", True, "none",
                4096, False),
    Transformer("llama-2-70b", 8192, 28672, 64, 8, 128, 32000, "rms_norm", "silu", True, "none",
                4096, False),
    # Llama-3 8B and Llama-3.2 1B (Meta 2024; HF meta-llama/Meta-Llama-3-8B, Llama-3.2-1B).
    Transformer("llama-3-8b", 4096, 14336, 32, 8, 128, 128256, "rms_norm", "silu", True, "none",
                8192, False),
    Transformer("llama-3.2-1b", 2048, 8192, 32, 8, 64, 128256, "rms_norm", "silu", True, "none",
                8192, False),
    # TinyLlama-1.1B (Zhang et al. 2024; HF TinyLlama/TinyLlama-1.1B-Chat-v1.0).
    Transformer("tinyllama", 2048, 5632, 32, 4, 64, 32000, "rms_norm", "silu", True, "none",
                2048, False),
    # Mistral 7B (Jiang et al. 2023; HF mistralai/Mistral-7B-v0.1).
    Transformer("mistral-7b", 4096, 14336, 32, 8, 128, 32000, "rms_norm", "silu", True, "none",
                8192, False),
    # Qwen2-7B (Qwen team 2024; HF Qwen/Qwen2-7B): bias on q, k, v only.
    Transformer("qwen2-7b", 3584, 18944, 28, 4, 128, 152064, "rms_norm", "silu", True, "qkv",
                8192, False),
    # Gemma-2B (Gemma team 2024; HF google/gemma-2b): multi-query attention, GeGLU.
    Transformer("gemma-2b", 2048, 16384, 8, 1, 256, 256000, "rms_norm", "gelu", True, "none",
                8192, False),
)

# Tokens per sequence.  ViT: 50/197/577 patches(+CLS) for 224/32, 224/16, 384/16 inputs.
ENCODER_SEQS = {16: 0.5, 32: 1, 64: 1, 128: 2, 256: 1.5, 384: 1, 512: 1.5}
VIT_SEQS = {50: 0.5, 197: 3, 577: 1}
PREFILL_SEQS = {16: 0.5, 32: 1, 64: 1, 128: 2, 256: 1.5, 512: 2, 1024: 1.5, 2048: 1.5,
                4096: 1, 8192: 0.5}
KV_LENGTHS = {128: 1, 256: 1, 512: 1.5, 1024: 1.5, 2048: 1.5, 4096: 1, 8192: 0.5}
BATCHES = {1: 4, 2: 1.5, 4: 2, 8: 2, 16: 1.5, 32: 1, 64: 0.5}
DECODE_BATCHES = {1: 4, 2: 1, 4: 1.5, 8: 1.5, 16: 1.5, 32: 1.5, 64: 1, 128: 0.5}
MAX_TOKENS = 65536  # batch x sequence in one step
# float16 dominates GPU transformer inference; int8 only where a family supports it.
TRANSFORMER_DTYPES = {"float16": 5, "float32": 3.5, "int8": 1.5}
CNN_DTYPES = {"float32": 5, "float16": 3.5, "int8": 1.5}


# ---- CNNs ----------------------------------------------------------------------------------

class Conv(NamedTuple):
    scale: int  # input side = resolution // scale
    ci: int
    co: int
    k: int
    stride: int = 1
    groups: int = 1
    dilation: int = 1
    pad: int = -1  # -1: "same" padding, dilation * (k // 2)


def _resnet_basic() -> list[Conv]:
    # ResNet-18/34 basic blocks (He et al. 2016; torchvision resnet18).
    convs = [Conv(1, 3, 64, 7, 2), Conv(4, 64, 64, 3)]
    for i, width in enumerate((128, 256, 512)):
        scale = 4 * 2**i
        convs += [Conv(scale, width // 2, width, 3, 2), Conv(scale * 2, width, width, 3),
                  Conv(scale, width // 2, width, 1, 2, pad=0)]
    return convs


def _resnet_bottleneck(mid: int, groups: int = 1) -> list[Conv]:
    # Bottleneck blocks, stride on the 3x3 (ResNet v1.5): ResNet-50 (mid 64), Wide ResNet-50-2
    # (mid 128), ResNeXt-50 32x4d (mid 128, groups 32) (torchvision resnet50, wide_resnet50_2,
    # resnext50_32x4d).
    convs, cin = [Conv(1, 3, 64, 7, 2)], 64
    for i in range(4):
        width, out, scale = mid * 2**i, 256 * 2**i, 4 * 2**i
        stride, in_scale = (1, scale) if i == 0 else (2, scale // 2)
        convs += [Conv(in_scale, cin, width, 1, pad=0), Conv(in_scale, width, width, 3, stride,
                                                             groups),
                  Conv(scale, width, out, 1, pad=0), Conv(in_scale, cin, out, 1, stride, pad=0),
                  Conv(scale, out, width, 1, pad=0)]
        if stride == 2:
            convs.append(Conv(scale, width, width, 3, 1, groups))
        cin = out
    return convs


def _inverted_residual(stages, stem: int = 32, head: int = 1280) -> list[Conv]:
    # MobileNet-v2 / EfficientNet-B0 inverted residual blocks; depthwise convs have groups=ci.
    convs, cin, scale = [Conv(1, 3, stem, 3, 2)], stem, 2
    for expand, k, stride, cout, repeat in stages:
        for r in range(repeat):
            s = stride if r == 0 else 1
            hidden = cin * expand
            if expand != 1:
                convs.append(Conv(scale, cin, hidden, 1, pad=0))
            convs.append(Conv(scale, hidden, hidden, k, s, hidden))
            scale *= s
            convs.append(Conv(scale, hidden, cout, 1, pad=0))
            cin = cout
    return [*convs, Conv(scale, cin, head, 1, pad=0)]


def _vgg16() -> list[Conv]:
    # VGG-16 (Simonyan & Zisserman 2015; torchvision vgg16).
    plan = [(1, 3, 64), (1, 64, 64), (2, 64, 128), (2, 128, 128), (4, 128, 256), (4, 256, 256),
            (8, 256, 512), (8, 512, 512), (16, 512, 512)]
    return [Conv(scale, ci, co, 3) for scale, ci, co in plan]


def _unet() -> list[Conv]:
    # U-Net encoder and decoder convolutions (Ronneberger et al. 2015, padded variant as in
    # milesial/Pytorch-UNet); the up-convolutions are in UNET_UPCONVS.
    convs = [Conv(1, 3, 64, 3), Conv(1, 64, 64, 3)]
    for i, width in enumerate((128, 256, 512, 1024)):
        scale = 2 ** (i + 1)
        convs += [Conv(scale, width // 2, width, 3), Conv(scale, width, width, 3)]
        convs += [Conv(scale // 2, width, width // 2, 3)]  # decoder, after concatenation
    return [*convs, Conv(1, 64, 2, 1, pad=0)]


def _convnext_tiny() -> list[Conv]:
    # ConvNeXt-T (Liu et al. 2022; torchvision convnext_tiny): 4x4 patchify stem, depthwise
    # 7x7 convs, 2x2 stride-2 downsampling.
    convs = [Conv(1, 3, 96, 4, 4, pad=0)]
    dims = (96, 192, 384, 768)
    for i, dim in enumerate(dims):
        convs.append(Conv(4 * 2**i, dim, dim, 7, 1, dim))
        if i < 3:
            convs.append(Conv(4 * 2**i, dim, dims[i + 1], 2, 2, pad=0))
    return convs


def _deeplab_aspp() -> list[Conv]:
    # DeepLabv3 ASPP head on a ResNet-50 at output stride 8 (Chen et al. 2017; torchvision
    # deeplabv3_resnet50: atrous rates 12, 24, 36) and the dilated 3x3s of layer3 and layer4.
    head = [Conv(8, 2048, 256, 1, pad=0)] + [Conv(8, 2048, 256, 3, dilation=d)
                                             for d in (12, 24, 36)]
    return [*head, Conv(8, 256, 256, 3, dilation=2), Conv(8, 512, 512, 3, dilation=4)]


MOBILENET_V2 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 3, 2, 32, 3), (6, 3, 2, 64, 4),
                (6, 3, 1, 96, 3), (6, 3, 2, 160, 3), (6, 3, 1, 320, 1))  # Sandler et al. 2018
EFFICIENTNET_B0 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                   (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))  # Tan & Le 2019


class CNN(NamedTuple):
    name: str
    convs: tuple[Conv, ...]
    resolutions: dict[int, float]
    final: int  # channels into the classifier (0: none)
    act: str  # the activation after conv + bias


_IMAGENET = {128: 0.5, 160: 0.5, 192: 0.5, 224: 4, 256: 1, 288: 0.5, 320: 0.5, 384: 0.5,
             448: 0.25, 512: 0.25}
CNNS = (
    CNN("resnet18", tuple(_resnet_basic()), _IMAGENET, 512, "relu"),
    CNN("resnet50", tuple(_resnet_bottleneck(64)), _IMAGENET, 2048, "relu"),
    CNN("wide_resnet50_2", tuple(_resnet_bottleneck(128)), _IMAGENET, 2048, "relu"),
    CNN("resnext50_32x4d", tuple(_resnet_bottleneck(128, 32)), _IMAGENET, 2048, "relu"),
    CNN("mobilenet_v2", tuple(_inverted_residual(MOBILENET_V2)), _IMAGENET, 1280, "relu"),
    CNN("efficientnet_b0", tuple(_inverted_residual(EFFICIENTNET_B0)), _IMAGENET, 1280, "silu"),
    CNN("vgg16", tuple(_vgg16()), {224: 4, 256: 1, 320: 0.5, 384: 0.5}, 0, "relu"),
    CNN("unet", tuple(_unet()), {128: 1, 256: 2, 384: 1, 512: 1.5, 640: 0.5}, 0, "relu"),
    CNN("convnext_tiny", tuple(_convnext_tiny()), {224: 4, 256: 1, 288: 0.5, 384: 0.5}, 768,
        "gelu"),
    CNN("deeplabv3", tuple(_deeplab_aspp()), {256: 1, 384: 1, 512: 1.5, 520: 1, 768: 0.5},
        0, "relu"),
)
CNN_BATCHES = {1: 4, 2: 1, 4: 1.5, 8: 1.5, 16: 1, 32: 1, 64: 0.5, 128: 0.25}
LAYOUTS = {"NHWC": 1, "NCHW": 1}
# U-Net 2x2 stride-2 up-convolutions: (scale of the input, ci, co).
UNET_UPCONVS = ((16, 1024, 512), (8, 512, 256), (4, 256, 128), (2, 128, 64))

# Audio 1-D convolutions: (ci, co, k, stride, pad, dilation) chains over input lengths.
# wav2vec 2.0 / HuBERT feature encoder (Baevski et al. 2020; HF facebook/wav2vec2-base).
WAV2VEC2 = ((1, 512, 10, 5, 0, 1),) + ((512, 512, 3, 2, 0, 1),) * 4 + ((512, 512, 2, 2, 0, 1),) * 2
WAV2VEC2_SAMPLES = {16000: 2, 32000: 1, 48000: 1, 80000: 1, 160000: 1, 320000: 0.5}
# Whisper encoder stem, 80 mel bins x 3000 frames (Radford et al. 2022; tiny..large widths).
WHISPER_WIDTHS = {384: 1, 512: 1, 768: 1, 1024: 1, 1280: 1}
# WaveNet dilated convolutions, 64 residual channels, k=2 (van den Oord et al. 2016).
WAVENET_DILATIONS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
WAVENET_LENGTHS = {4096: 1, 8000: 1, 16000: 1}
# 3-D convs: R3D-18 stages (Tran et al. 2018; torchvision r3d_18) as (frames, side, channels)
# at 16 x 112 x 112 clips, and 3-D U-Net levels (Cicek et al. 2016) at 128^3 / 96^3 volumes.
R3D_STAGES = ((16, 56, 64), (8, 28, 128), (4, 14, 256), (2, 7, 512))
UNET3D_LEVELS = ((1, 32), (2, 64), (4, 128), (8, 256))
UNET3D_VOLUMES = {64: 1, 96: 1, 128: 1}

# How often each family appears in a sample (with few draws); the weights within a family
# say which of its instances are common.
FAMILY_SHARES = {
    "dense": 0.19, "conv2d": 0.20, "matmul": 0.07, "attention": 0.07, "batch_matmul": 0.04,
    "softmax": 0.05, "layer_norm": 0.04, "rms_norm": 0.03, "elementwise": 0.07, "reduce": 0.03,
    "depthwise_conv2d": 0.04, "pool2d": 0.03, "gemv": 0.03, "transpose": 0.02, "conv1d": 0.04,
    "conv3d": 0.03, "conv2d_transpose": 0.02,
}


# ---- the universe --------------------------------------------------------------------------

class _Universe:
    def __init__(self) -> None:
        self.raw: dict[tuple, float] = {}

    def add(self, weight: float, family: str, **params) -> None:
        # Formatting is the slow part: sum the weights of identical calls first.
        key = (family, *params.items())
        self.raw[key] = self.raw.get(key, 0.0) + weight

    def weights(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {f: {} for f in FAMILY_SHARES}
        for (family, *items), weight in self.raw.items():
            bucket = out[family]
            spec = format_spec(family, dict(items))
            bucket[spec] = bucket.get(spec, 0.0) + weight
        return out


def _fits(*dims: int) -> bool:
    return math.prod(dims) <= _MAX_ELEMENTS


def _transformer(u: _Universe, t: Transformer) -> None:
    qkv = (t.heads + 2 * t.kv_heads) * t.head_dim
    inner = t.heads * t.head_dim
    for dtype, wd in TRANSFORMER_DTYPES.items():
        if t.encoder:
            seqs = VIT_SEQS if t.name.startswith("vit") else ENCODER_SEQS
            steps = [(b, s, s, wb * ws) for b, wb in BATCHES.items() for s, ws in seqs.items()]
        else:
            steps = [(b, s, s, wb * ws) for b, wb in BATCHES.items()
                     for s, ws in PREFILL_SEQS.items() if s <= t.max_seq]
            steps += [(b, 1, kv, wb * wk) for b, wb in DECODE_BATCHES.items()
                      for kv, wk in KV_LENGTHS.items() if kv <= t.max_seq]
        for batch, sq, skv, w in steps:
            tokens = batch * sq
            if tokens > MAX_TOKENS:
                continue
            _transformer_step(u, t, dtype, w * wd, batch, sq, skv, tokens, qkv, inner)


def _transformer_step(u, t, dtype, w, batch, sq, skv, tokens, qkv, inner) -> None:
    int8 = dtype == "int8"
    bias = int(t.bias == "all")
    projections = [(qkv, t.hidden, int(t.bias != "none"), "none"), (t.hidden, inner, bias, "none")]
    if t.gated:
        projections += [(t.ffn, t.hidden, 0, t.act), (t.ffn, t.hidden, 0, "none")]
    else:
        projections += [(t.ffn, t.hidden, bias, t.act)]
    projections += [(t.hidden, t.ffn, bias, "none")]
    for n, k, b, act in projections:
        if int8 and act not in ("none", "relu"):
            act = "none"  # int8 layers requantize before the activation
        u.add(w, "dense", m=tokens, n=n, k=k, bias=b, act=act, dtype=dtype)
        u.add(w * 0.4, "matmul", m=tokens, n=n, k=k, dtype=dtype)
        if tokens == 1 and not int8:
            u.add(w, "gemv", m=n, k=k, dtype=dtype)
    # The head: logits of the last token when generating, of every token for a masked LM,
    # of the class token for ViT.
    rows = tokens if t.encoder and not t.name.startswith("vit") else batch
    if _fits(rows, t.vocab):
        u.add(w * 0.5, "dense", m=rows, n=t.vocab, k=t.hidden, bias=int(t.encoder and bias),
              dtype=dtype)
    if int8:
        if t.kv_heads == t.heads and _fits(batch * t.heads, sq, skv):
            u.add(w * 0.5, "batch_matmul", b=batch * t.heads, m=sq, n=skv, k=t.head_dim,
                  dtype=dtype)
        return
    gqa = t.heads // t.kv_heads
    if _fits(batch, t.heads, sq, skv):
        for stage in ("scores", "context"):
            u.add(w, "attention", b=batch, heads=t.heads, sq=sq, skv=skv, d=t.head_dim, gqa=gqa,
                  stage=stage, dtype=dtype)
        u.add(w, "softmax", m=batch * t.heads * sq, n=skv, dtype=dtype)
        if gqa == 1:
            u.add(w * 0.5, "batch_matmul", b=batch * t.heads, m=sq, n=skv, k=t.head_dim,
                  dtype=dtype)
            u.add(w * 0.5, "batch_matmul", b=batch * t.heads, m=sq, n=t.head_dim, k=skv,
                  dtype=dtype)
    u.add(w, t.norm, m=tokens, n=t.hidden, dtype=dtype)
    u.add(w, "elementwise", m=tokens, n=t.hidden, ops="add", dtype=dtype)
    if t.gated:
        u.add(w, "elementwise", m=tokens, n=t.ffn, ops=f"{t.act},mul", dtype=dtype)
    else:
        u.add(w * 0.5, "elementwise", m=tokens, n=t.ffn, ops=f"add,{t.act}", dtype=dtype)
    u.add(w * 0.5, "transpose", m=tokens, n=t.heads, k=t.head_dim, axes="1,0,2", dtype=dtype)
    u.add(w * 0.5, "reduce", m=tokens, n=t.hidden, op="mean", dtype=dtype)
    if not t.encoder and _fits(batch, t.vocab):
        u.add(w * 0.3, "reduce", m=batch, n=t.vocab, op="max", dtype=dtype)
        u.add(w * 0.3, "softmax", m=batch, n=t.vocab, dtype=dtype)


def _cnn(u: _Universe, net: CNN) -> None:
    for res, wr in net.resolutions.items():
        for batch, wb in CNN_BATCHES.items():
            for dtype, wd in CNN_DTYPES.items():
                for layout, wl in LAYOUTS.items():
                    _cnn_instance(u, net, res, batch, dtype, layout, wr * wb * wd * wl)


def _cnn_instance(u, net, res, batch, dtype, layout, w) -> None:
    int8 = dtype == "int8"
    for c in net.convs:
        h = res // c.scale
        pad = c.dilation * (c.k // 2) if c.pad < 0 else c.pad
        out = (h + 2 * pad - c.dilation * (c.k - 1) - 1) // c.stride + 1
        if h < c.k or out < 1 or not _fits(batch, h, h, max(c.ci, c.co)):
            continue
        depthwise = c.groups == c.ci == c.co and c.groups > 1
        if depthwise and not int8:
            u.add(w, "depthwise_conv2d", n=batch, h=h, w=h, c=c.ci, kh=c.k, kw=c.k,
                  stride=c.stride, pad=pad, dilation=c.dilation, layout=layout, dtype=dtype)
        # Depthwise convs also reach compilers as grouped convs (PyTorch exports them so).
        u.add(w * (0.3 if depthwise else 1), "conv2d", n=batch, h=h, w=h, ci=c.ci, co=c.co,
              kh=c.k, kw=c.k, stride=c.stride, pad=pad, dilation=c.dilation, groups=c.groups,
              layout=layout, dtype=dtype)
        if not int8:
            u.add(w * 0.3, "elementwise", m=batch * out * out, n=c.co, ops=f"add,{net.act}",
                  dtype=dtype)
    if int8:
        if net.final:
            u.add(w, "dense", m=batch, n=1000, k=net.final, bias=1, dtype=dtype)
        return
    stem = net.convs[0]
    side = (res + 2 * (stem.k // 2 if stem.pad < 0 else stem.pad) - stem.k) // stem.stride + 1
    if net.name.startswith(("resnet", "wide", "resnext")):
        u.add(w, "pool2d", n=batch, c=stem.co, h=side, w=side, k=3, stride=2, pad=1, kind="max",
              layout=layout, dtype=dtype)
        u.add(w * 0.3, "elementwise", m=batch * (res // 4) ** 2, n=256, ops="add,relu",
              dtype=dtype)
    if net.name in ("vgg16", "unet"):
        for c in net.convs:
            if c.scale <= 16 and res // c.scale >= 2:
                u.add(w * 0.5, "pool2d", n=batch, c=c.co, h=res // c.scale, w=res // c.scale,
                      k=2, stride=2, pad=0, kind="max", layout=layout, dtype=dtype)
    if net.name == "unet":
        for scale, ci, co in UNET_UPCONVS:
            h = res // scale
            u.add(w, "conv2d_transpose", n=batch, h=h, w=h, ci=ci, co=co, k=2, stride=2, pad=0,
                  dtype=dtype)
    if net.name == "convnext_tiny":
        for i, dim in enumerate((96, 192, 384, 768)):
            tokens = batch * (res // (4 * 2**i)) ** 2
            if _fits(tokens, 4 * dim):
                u.add(w, "layer_norm", m=tokens, n=dim, dtype=dtype)
                u.add(w, "dense", m=tokens, n=4 * dim, k=dim, bias=1, act="gelu", dtype=dtype)
                u.add(w, "dense", m=tokens, n=dim, k=4 * dim, bias=1, dtype=dtype)
    if net.final:
        side = res // 32
        u.add(w, "pool2d", n=batch, c=net.final, h=side, w=side, kind="global", layout=layout,
              dtype=dtype)
        u.add(w, "dense", m=batch, n=1000, k=net.final, bias=1, dtype=dtype)
        u.add(w * 0.5, "softmax", m=batch, n=1000, dtype=dtype)
    if net.name == "vgg16":
        for n, k in ((4096, 512 * (res // 32) ** 2), (4096, 4096), (1000, 4096)):
            u.add(w, "dense", m=batch, n=n, k=k, bias=1, act="relu" if n == 4096 else "none",
                  dtype=dtype)


def _audio_and_video(u: _Universe) -> None:
    for dtype, wd in (("float32", 5), ("float16", 3.5)):
        for layout in ("NWC", "NCW"):
            for batch, wb in CNN_BATCHES.items():
                w = wd * wb
                for samples, ws in WAV2VEC2_SAMPLES.items():
                    length = samples
                    for ci, co, k, stride, pad, dil in WAV2VEC2:
                        if _fits(batch, length, max(ci, co)):
                            u.add(w * ws, "conv1d", n=batch, l=length, ci=ci, co=co, k=k,
                                  stride=stride, pad=pad, dilation=dil, layout=layout,
                                  dtype=dtype)
                        length = (length - k) // stride + 1
                for width in WHISPER_WIDTHS:
                    u.add(w, "conv1d", n=batch, l=3000, ci=80, co=width, k=3, pad=1,
                          layout=layout, dtype=dtype)
                    u.add(w, "conv1d", n=batch, l=3000, ci=width, co=width, k=3, stride=2, pad=1,
                          layout=layout, dtype=dtype)
                for length, wl in WAVENET_LENGTHS.items():
                    for dil in WAVENET_DILATIONS:
                        u.add(w * wl * 0.5, "conv1d", n=batch, l=length, ci=64, co=128, k=2,
                              pad=0, dilation=dil, layout=layout, dtype=dtype)
        for layout in ("NDHWC", "NCDHW"):
            for batch, wb in CNN_BATCHES.items():
                w = wd * wb
                for frames in (8, 16, 32):
                    for t, side, ch in R3D_STAGES:
                        t = max(1, t * frames // 16)
                        for stride, ci in ((1, ch), (2, ch // 2)):
                            d = t * stride
                            if d >= 3 and side * stride >= 3 and _fits(batch, d, side * stride,
                                                                        side * stride, ch):
                                u.add(w, "conv3d", n=batch, d=d, h=side * stride,
                                      w=side * stride, ci=max(ci, 3), co=ch, stride=stride,
                                      layout=layout, dtype=dtype)
                for volume, wv in UNET3D_VOLUMES.items():
                    if batch > 8:
                        continue
                    for scale, ch in UNET3D_LEVELS:
                        side = volume // scale
                        for ci in (ch // 2 if scale > 1 else 1, ch):
                            if _fits(batch, side, side, side, ch):
                                u.add(w * wv, "conv3d", n=batch, d=side, h=side, w=side, ci=ci,
                                      co=ch, layout=layout, dtype=dtype)


@functools.cache
def _universe() -> dict[str, dict[str, float]]:
    """Family -> {canonical spec: weight}, each family's weights summing to its share."""
    u = _Universe()
    for t in TRANSFORMERS:
        _transformer(u, t)
    for net in CNNS:
        _cnn(u, net)
    _audio_and_video(u)
    weights = u.weights()
    for family, bucket in weights.items():
        total = sum(bucket.values())
        for spec in bucket:
            bucket[spec] *= FAMILY_SHARES[family] / total
    return weights


def _families(families: Iterable[str] | None) -> list[str]:
    if families is None:
        return list(FAMILY_SHARES)
    chosen = [families] if isinstance(families, str) else list(families)
    for name in chosen:
        if name not in FAMILY_SHARES:
            known = sorted(FAMILY_SHARES)
            why = "" if name not in FAMILIES else " (a family the sampler does not draw)"
            raise WorkloadError(f"Expected one of {', '.join(known)} but got family={name!r}"
                                f"{why}", family=name, expected=known)
    return chosen


def sampler_stats(families: Iterable[str] | None = None) -> dict[str, int]:
    """How many distinct canonical specs the sampler can draw, per family.

    >>> sum(sampler_stats().values()) >= 50_000
    True
    """
    universe = _universe()
    return {f: len(universe[f]) for f in _families(families)}


def iter_workloads(seed: int = 0, families: Iterable[str] | None = None) -> Iterator[str]:
    """Every distinct spec once, in a weighted random order fixed by the seed.

    A spec's place is an exponential race (key -log(u)/weight, smallest first), so the first n
    are a weighted sample without replacement; filtering by family keeps the same order.

    >>> next(iter_workloads(seed=0)) == sample_workloads(1, seed=0)[0]
    True
    """
    universe = _universe()
    rng = random.Random(seed)
    keyed = [(-math.log(1.0 - rng.random()) / w, spec)
             for family in FAMILY_SHARES for spec, w in universe[family].items()]
    wanted = set(_families(families))
    keyed.sort()
    for _, spec in keyed:
        if spec[:spec.index("(")] in wanted:
            yield spec


def sample_workloads(n: int, seed: int = 0, families: Iterable[str] | None = None) -> list[str]:
    """n distinct canonical workload specs drawn from real-model shapes, the same per seed.

    >>> len(set(sample_workloads(1000, seed=3)))
    1000
    """
    available = sum(sampler_stats(families).values())
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= available:
        raise WorkloadError(f"Expected n in 0..{available} (the distinct workloads of "
                            f"{'all families' if families is None else _families(families)}) "
                            f"but got n={n!r}", param="n", value=n)
    out = []
    for spec in iter_workloads(seed, families):
        if len(out) == n:
            break
        out.append(spec)
    return out
