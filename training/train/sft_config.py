"""``SFTRunConfig``: what ``dragon sft`` trains, on what, and how; the named presets.

A config comes from three layers, later ones winning (``dragon_dsl.configs.layered``, as
``dragon datagen`` layers its presets): a preset (``PRESETS``), a YAML file (``load_yaml``: a
mapping of field names, a ``preset:`` key naming the base), and command-line flags
(``dragon_dsl.cli_kit`` makes one per field, from the field's help).  ``validate`` (run by the
dataclass itself) checks every field without touching the model or the data, so the
``paper`` config validates on a machine that does not hold the 8B model.

This is the layering of TRL's ``TrlParser`` (YAML under flags), done here because ``TrlParser`` is
a parser of its own (an ``HfArgumentParser``) where ``dragon sft`` is a subcommand of the one
``dragon`` parser, and it knows no presets; the flags come from the same dataclass fields.

>>> PRESETS["tiny"].model, PRESETS["paper"].use_peft
('tiny', True)
>>> SFTRunConfig(learning_rate=-1.0)
Traceback (most recent call last):
...
dragon_dsl.configs.ConfigError: Expected learning_rate > 0 but got learning_rate=-1.0
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dragon_dsl import configs
from dragon_dsl.configs import ConfigError, names
from training.prompts.templates import TILE_ORDERS

__all__ = ["CONFIGS_DIR", "PRESETS", "TASKS", "ConfigError", "SFTRunConfig", "TrainerScale",
           "check_scale", "check_types", "config_dict", "deepspeed_path", "field_checker",
           "load_yaml", "resolve"]

TASKS = ("construction", "refinement")
TINY = "tiny"
CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"
_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup")


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


@dataclass(frozen=True)
class TrainerScale:
    """What SFT and RL runs share: the tasks trained on, LoRA, precision and DeepSpeed (the
    fields that scale a run from the tiny model on a CPU to an 8B model on GPUs)."""

    tasks: str = field(default="construction,refinement", metadata=_help(
        "Comma-separated datasets trained on together (construction, refinement)."))
    use_peft: bool = field(default=False, metadata=_help(
        "Train LoRA adapters (peft) instead of every weight."))
    lora_r: int = field(default=16, metadata=_help("LoRA rank."))
    lora_alpha: int = field(default=32, metadata=_help("LoRA scaling numerator."))
    lora_dropout: float = field(default=0.05, metadata=_help("Dropout on the LoRA inputs."))
    lora_target_modules: str = field(default="all-linear", metadata=_help(
        "Modules given adapters: 'all-linear' or comma-separated names (q_proj,v_proj)."))
    bf16: bool = field(default=False, metadata=_help("Train in bfloat16 mixed precision."))
    gradient_checkpointing: bool = field(default=False, metadata=_help(
        "Recompute activations in the backward pass (less memory, more time)."))
    deepspeed: str = field(default="", metadata=_help(
        "A DeepSpeed JSON config (a path, or a file name in training/configs/); empty: none."))

    @property
    def task_list(self) -> tuple[str, ...]:
        return names(self.tasks)


def check_scale(config: TrainerScale) -> None:
    """Raise ``ConfigError`` naming the first of the shared fields that is not sane."""
    need = field_checker(config)
    need(bool(config.task_list) and set(config.task_list) <= set(TASKS), "tasks",
         f"a comma-separated subset of {','.join(TASKS)}")
    for name in ("lora_r", "lora_alpha"):
        need(getattr(config, name) >= 1, name, ">= 1")
    need(0 <= config.lora_dropout < 1, "lora_dropout", "in [0, 1)")
    need(bool(config.lora_target_modules.strip()), "lora_target_modules",
         "'all-linear' or module names")
    if config.deepspeed:
        need(deepspeed_path(config.deepspeed).is_file(), "deepspeed",
             "a DeepSpeed JSON file (a path, or a name in training/configs/)")
        need(_json_object(deepspeed_path(config.deepspeed)), "deepspeed",
             "a DeepSpeed JSON file (a JSON object)")


def _json_object(path: Path, limit: int = 1 << 20) -> bool:
    """Whether ``path`` holds a JSON object (read up to ``limit`` bytes)."""
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
        return len(data) <= limit and isinstance(json.loads(data), dict)
    except (OSError, ValueError, RecursionError):
        return False


@dataclass(frozen=True)
class SFTRunConfig(TrainerScale):
    """One supervised fine-tuning run: data, model, optimisation, run directory, LoRA."""

    data: str = field(default="", metadata=_help(
        "A `dragon datagen` output directory (its construction/ and refinement/ datasets)."))
    out: str = field(default="", metadata=_help("The run directory (created if needed)."))
    model: str = field(default=TINY, metadata=_help(
        "'tiny' (a small Llama built from a config, trained from scratch with a tokenizer "
        "trained on the data) or a local model directory (nothing is downloaded)."))
    tile_order: str = field(default="outer", metadata=_help(
        "How the model learns to write a tile's factors: 'outer' (outermost first, as Dragon "
        "does: prompt format 2) or 'inner' (innermost first: prompt format 3, the last factor "
        "written takes what is left of the loop).  The datasets stay in format 2; the model's "
        "tokenizer records the format, and every sampler reads it there."))
    hidden_size: int = field(default=128, metadata=_help("tiny: the model's width."))
    layers: int = field(default=4, metadata=_help("tiny: transformer layers."))
    heads: int = field(default=4, metadata=_help("tiny: attention heads (divides hidden_size)."))
    vocab_size: int = field(default=2048, metadata=_help(
        "tiny: the BPE vocabulary trained on the train split's prompts and completions."))
    min_frequency: int = field(default=2, metadata=_help(
        "tiny: a pair is merged only when it occurs at least this often."))
    max_steps: int = field(default=-1, metadata=_help(
        "Optimizer steps; -1 trains for `epochs` instead."))
    epochs: float = field(default=3.0, metadata=_help("Passes over the train split."))
    learning_rate: float = field(default=2e-4, metadata=_help("Peak learning rate."))
    lr_scheduler: str = field(default="cosine", metadata=_help(
        "Learning-rate schedule after warm-up.", choices=_SCHEDULERS))
    warmup_steps: int = field(default=0, metadata=_help("Linear warm-up steps."))
    weight_decay: float = field(default=0.0, metadata=_help("AdamW weight decay."))
    batch_size: int = field(default=8, metadata=_help("Examples per device per step."))
    grad_accum: int = field(default=1, metadata=_help("Gradient accumulation steps."))
    max_length: int = field(default=2048, metadata=_help(
        "Longest prompt + completion in tokens; longer examples are truncated (and counted)."))
    seed: int = field(default=0, metadata=_help("Seed of the model init, shuffling, dropout."))
    logging_steps: int = field(default=10, metadata=_help("Steps between metrics lines."))
    eval_steps: int = field(default=100, metadata=_help(
        "Steps between evaluations on the validation split (0: only at the end)."))
    max_eval_examples: int = field(default=0, metadata=_help(
        "Evaluate on at most this many validation examples (0: all)."))
    save_steps: int = field(default=100, metadata=_help("Steps between checkpoints."))
    save_total_limit: int = field(default=2, metadata=_help(
        "Checkpoints kept (the newest, and the best one with keep_best)."))
    keep_best: bool = field(default=True, metadata=_help(
        "The final model is the checkpoint of the lowest eval loss, not the last one (needs "
        "eval_steps > 0 dividing save_steps)."))
    def __post_init__(self) -> None:
        validate(self)


def validate(config: SFTRunConfig) -> None:
    """Raise ``ConfigError`` naming the first field that is not sane (no file is opened except
    a named DeepSpeed config, which must exist)."""
    need = field_checker(config)
    check_types(config)
    check_scale(config)
    need(bool(config.model.strip()), "model", "'tiny' or a local model directory")
    for name in ("hidden_size", "layers", "heads", "batch_size", "grad_accum", "max_length",
                 "logging_steps", "save_steps", "save_total_limit"):
        need(getattr(config, name) >= 1, name, ">= 1")
    need(config.hidden_size % config.heads == 0, "hidden_size", "a multiple of heads")
    need(config.tile_order in TILE_ORDERS, "tile_order", f"one of {TILE_ORDERS}")
    need(config.vocab_size >= 259, "vocab_size", ">= 259 (every byte and 3 special tokens)")
    need(config.min_frequency >= 1, "min_frequency", ">= 1")
    need(config.max_steps == -1 or config.max_steps >= 1, "max_steps", "-1 or >= 1")
    need(config.epochs > 0, "epochs", "> 0")
    need(config.learning_rate > 0, "learning_rate", "> 0")
    need(config.lr_scheduler in _SCHEDULERS, "lr_scheduler", f"one of {_SCHEDULERS}")
    for name in ("warmup_steps", "eval_steps", "max_eval_examples"):
        need(getattr(config, name) >= 0, name, ">= 0")
    need(config.weight_decay >= 0, "weight_decay", ">= 0")
    need(not (config.keep_best and config.eval_steps) or config.save_steps % config.eval_steps == 0,
         "save_steps", "a multiple of eval_steps (keep_best compares checkpoints' eval loss)")
    need(not (config.use_peft and config.model == TINY), "use_peft",
         "False with model='tiny' (a model trained from scratch trains every weight)")


def field_checker(config: Any) -> Callable[[bool, str, str], None]:
    """``need(ok, name, expected)``: raise ``ConfigError`` for field ``name`` of ``config``
    unless ``ok``, in the form "Expected NAME EXPECTED but got NAME=VALUE".

    >>> need = field_checker(SFTRunConfig())
    >>> need(False, "lora_r", ">= 1")
    Traceback (most recent call last):
    ...
    dragon_dsl.configs.ConfigError: Expected lora_r >= 1 but got lora_r=16
    """
    def need(ok: bool, name: str, expected: str) -> None:
        if not ok:
            raise ConfigError(f"Expected {name} {expected} but got "
                              f"{name}={getattr(config, name)!r}", field=name)

    return need


def check_types(config: Any) -> None:
    """Raise ``ConfigError`` naming the first field of a config dataclass whose value is not of
    the field's type (an int is a float; a bool is not an int; a float is finite)."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value, kind = getattr(config, f.name), hints[f.name]
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ConfigError(f"Expected {f.name} a {kind.__name__} but got "
                              f"{f.name}={value!r}", field=f.name)
        if kind is float and not math.isfinite(value):  # inf and nan pass every comparison
            raise ConfigError(f"Expected {f.name} a finite number but got {f.name}={value!r}",
                              field=f.name)


def deepspeed_path(name: str) -> Path:
    """``name`` as given when it is a file, else the file of that name in ``CONFIGS_DIR``."""
    path = Path(name)
    return path if path.is_file() else CONFIGS_DIR / name


PRESETS: dict[str, SFTRunConfig] = {
    # About 6 minutes on 2 idle CPU cores (2.3 s a step) on `dragon datagen --preset tiny` data.
    "tiny": SFTRunConfig(model=TINY, hidden_size=256, layers=4, heads=4, vocab_size=2048,
                         max_steps=150, learning_rate=2e-3, warmup_steps=20, batch_size=8,
                         max_length=1024, logging_steps=10, eval_steps=25,
                         max_eval_examples=64, save_steps=25),
    # An 8B instruct model from a local path (--model), LoRA, bf16, DeepSpeed ZeRO-3 under
    # `accelerate launch`; 8 GPUs x batch 4 x accumulation 4 = 128 examples a step.
    "paper": SFTRunConfig(model="models/Llama-3.1-8B-Instruct", use_peft=True, lora_r=64,
                          lora_alpha=128, lora_dropout=0.05, lora_target_modules="all-linear",
                          bf16=True, gradient_checkpointing=True, epochs=3.0,
                          learning_rate=1e-4, warmup_steps=100, batch_size=4, grad_accum=4,
                          max_length=4096, logging_steps=10, eval_steps=200,
                          max_eval_examples=2000, save_steps=200, save_total_limit=3,
                          deepspeed="deepspeed_zero3.json"),
}


def config_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def load_yaml(path: str | Path, kind: type = SFTRunConfig) -> dict[str, Any]:
    """The mapping in a YAML config file (``dragon_dsl.configs.load_yaml``)."""
    return configs.load_yaml(path, kind)


def resolve(preset: str | None = None, file: str | Path | None = None,
            **overrides: Any) -> SFTRunConfig:
    """The config of ``preset``, then ``file``'s fields, then ``overrides`` (flags given)."""
    return configs.layered(SFTRunConfig, PRESETS, preset, file, overrides)
