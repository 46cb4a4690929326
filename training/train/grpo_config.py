"""``RLRunConfig``: what ``dragon rl`` trains (GRPO from an SFT model), on which prompts, with
which measured reward; the named presets.

Layered as ``SFTRunConfig`` is (``dragon_dsl.configs.layered``): a preset, then a YAML file, then
the flags given.  The rollouts' ``sampling`` and the rewards' ``measure`` are the configs of
what they configure (``SamplingConfig``, ``MeasureConfig``), nested; their flags and YAML keys
keep their flat names (``--temperature``, ``repeat: 3``).  ``validate`` checks every field
without loading the model.

>>> RL_PRESETS["tiny"].num_generations, RL_PRESETS["paper"].use_peft
(4, True)
>>> RLRunConfig(num_generations=1)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dragon_dsl.configs.ConfigError: Expected num_generations >= 2 ... but got num_generations=1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codegen.measure.config import MeasureConfig
from dragon_dsl.configs import from_flat, layered
from training.sampling.config import SamplingConfig
from training.train.sft_config import (
    TrainerScale,
    _help,
    check_scale,
    check_types,
    field_checker,
)

__all__ = ["LOSS_TYPES", "RLRunConfig", "RL_PRESETS", "SCALE_REWARDS", "resolve_rl"]

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")
SCALE_REWARDS = ("group", "batch", "none")


@dataclass(frozen=True)
class RLRunConfig(TrainerScale):
    """One GRPO run: the SFT model it starts from, prompts, rollouts, reward, optimisation."""

    model: str = field(default="", metadata=_help(
        "The model RL starts from: an SFT run directory (its final/ model) or a local model "
        "directory."))
    data: str = field(default="", metadata=_help(
        "A `dragon datagen` output directory: its train splits give the prompts."))
    out: str = field(default="", metadata=_help("The run directory (created if needed)."))
    max_prompts: int = field(default=0, metadata=_help(
        "Use at most this many distinct prompts, spread over the tasks (0: all)."))
    max_kernel_ms: float = field(default=0.0, metadata=_help(
        "Leave out the prompts of kernels whose fastest script in the data ran longer than "
        "this (ms): they cost the most to measure, and a group of them that all run past "
        "run_timeout_s teaches nothing (0: keep every prompt)."))
    target: str = field(default="", metadata=_help(
        "Where rewards are measured: a target JSON or tag (default: the data's own target)."))
    num_generations: int = field(default=4, metadata=_help(
        "Completions per prompt: the group whose rewards are compared."))
    prompts_per_step: int = field(default=2, metadata=_help(
        "Prompts per optimizer step per device (a step trains on prompts x generations)."))
    max_steps: int = field(default=20, metadata=_help("Optimizer steps."))
    learning_rate: float = field(default=1e-5, metadata=_help("Peak learning rate."))
    lr_scheduler: str = field(default="constant_with_warmup", metadata=_help(
        "Learning-rate schedule after warm-up.",
        choices=("linear", "cosine", "constant", "constant_with_warmup")))
    warmup_steps: int = field(default=0, metadata=_help("Linear warm-up steps."))
    loss_type: str = field(default="dapo", metadata=_help(
        "TRL's GRPO loss normalisation.", choices=LOSS_TYPES))
    scale_rewards: str = field(default="group", metadata=_help(
        "What a group's advantages (rewards less the group's mean) are divided by: the "
        "group's own standard deviation (TRL's default), the step's, or nothing.  Per group, "
        "a group whose completions differ by less than the timing noise gets advantages as "
        "large as one whose kernels differ by 10x.", choices=SCALE_REWARDS))
    beta: float = field(default=0.0, metadata=_help(
        "KL penalty against the starting model (0: none, no reference model kept)."))
    epsilon: float = field(default=0.2, metadata=_help("PPO clip range of the ratio."))
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(max_new_tokens=768), metadata=_help(
            "How rollouts are sampled (near max_new_tokens, the decoder closes the script); "
            "its temperature, top_p and max_new_tokens are flags and flat keys.",
            flags=("temperature", "top_p", "max_new_tokens")))
    measure: MeasureConfig = field(
        default_factory=lambda: MeasureConfig(repeat=5, min_repeat_ms=10.0, run_timeout_s=10.0),
        metadata=_help("How rewards are measured (a candidate past run_timeout_s is a timeout, "
                       "the low reward); its repeat, min_repeat_ms and run_timeout_s are flags "
                       "and flat keys.", flags=("repeat", "min_repeat_ms", "run_timeout_s")))
    builders: int = field(default=2, metadata=_help("Parallel kernel builds per group."))
    cap: float = field(default=16.0, metadata=_help(
        "Speedup (and slowdown) at which the latency bonus saturates."))
    retime_best: bool = field(default=True, metadata=_help(
        "Time each group's fastest correct kernel again, keeping the slower time."))
    best_of: int = field(default=1, metadata=_help(
        "Train for the best of this many completions, not their mean: each group's rewards "
        "become their expected best of best_of (training.train.reward.max_at_k); 1: the mean. "
        "At most num_generations."))
    seed: int = field(default=0, metadata=_help("Seed of sampling, shuffling and dropout."))
    logging_steps: int = field(default=1, metadata=_help("Steps between metrics lines."))
    save_steps: int = field(default=5, metadata=_help("Steps between checkpoints."))
    save_total_limit: int = field(default=2, metadata=_help("Checkpoints kept."))
    def __post_init__(self) -> None:
        validate_rl(self)


def validate_rl(config: RLRunConfig) -> None:
    """Raise ``ConfigError`` naming the first field that is not sane."""
    need = field_checker(config)
    check_types(config)
    check_scale(config)
    need(config.num_generations >= 2, "num_generations",
         ">= 2 (a group needs siblings to compare)")
    for name in ("prompts_per_step", "max_steps", "builders",
                 "logging_steps", "save_steps", "save_total_limit"):
        need(getattr(config, name) >= 1, name, ">= 1")
    for name in ("max_prompts", "warmup_steps"):
        need(getattr(config, name) >= 0, name, ">= 0")
    need(config.max_kernel_ms >= 0, "max_kernel_ms", ">= 0")
    need(config.learning_rate > 0, "learning_rate", "> 0")
    need(config.loss_type in LOSS_TYPES, "loss_type", f"one of {LOSS_TYPES}")
    need(config.scale_rewards in SCALE_REWARDS, "scale_rewards", f"one of {SCALE_REWARDS}")
    need(config.beta >= 0, "beta", ">= 0")
    need(0 < config.epsilon < 1, "epsilon", "in (0, 1)")
    need(config.cap > 1, "cap", "> 1")
    need(1 <= config.best_of <= config.num_generations, "best_of",
         f"in [1, num_generations={config.num_generations}]")


RL_PRESETS: dict[str, RLRunConfig] = {
    # The tiny SFT model (dragon sft --preset tiny), CPU, llvm rewards: about 10 minutes here.
    "tiny": from_flat(RLRunConfig, num_generations=4, prompts_per_step=2, max_steps=20,
                      learning_rate=2e-4, warmup_steps=2, max_new_tokens=640, repeat=3,
                      min_repeat_ms=5.0, save_steps=4),
    # The paper's 8B SFT model with LoRA on 8 GPUs; rewards measured on the GPU (CUDA) or over
    # RPC.  8 devices x 8 prompts x 8 generations = 512 completions a step.
    "paper": from_flat(RLRunConfig, model="runs/sft-paper/final", target="nvidia/nvidia-h100",
                       num_generations=8, prompts_per_step=8, max_steps=500,
                       learning_rate=1e-6, warmup_steps=10, max_new_tokens=2048, repeat=5,
                       min_repeat_ms=20.0, builders=8, use_peft=True, lora_r=64,
                       lora_alpha=128, bf16=True, gradient_checkpointing=True, save_steps=25,
                       save_total_limit=3, deepspeed="deepspeed_zero3.json"),
}


def resolve_rl(preset: str | None = None, file: str | Path | None = None,
               **overrides: Any) -> RLRunConfig:
    """The RL config of ``preset``, then ``file``'s fields, then ``overrides``."""
    return layered(RLRunConfig, RL_PRESETS, preset, file, overrides)
