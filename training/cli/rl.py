"""``dragon rl``: GRPO from an SFT model, with rollouts by schedule-aware decoding and rewards
measured on the target (``training.train.rl``).

    dragon rl --preset tiny --model runs/sft-tiny --data data/tiny --out runs/rl-tiny
    dragon rl --resume --out runs/rl-tiny

The config is a preset, then ``--config FILE.yaml``'s fields, then the flags given (every field
of ``RLRunConfig`` is a flag).  ``--resume`` reads ``RUN/config.yaml`` back and continues from
the newest checkpoint; ``--validate`` only checks the config and prints it.  Exit codes
(``ExitCode``): 0 trained (or valid, or ``--resume`` of a finished run: nothing to train), 2
usage errors (bad flags, a config field out of range or not finite, missing or damaged data,
a model or checkpoint that does not load, a run directory that already holds a run, is in use
by another run or cannot be written, a model too large for this machine's memory, a loss that
stopped being finite).
"""

from __future__ import annotations

from dragon_dsl.cli_kit import examples
from training.cli.train_command import TrainCommand, number
from training.train.grpo_config import RL_PRESETS, RLRunConfig, resolve_rl
from training.train.rl import RLResult, resumed_rl_config, run_rl

__all__ = ["register"]


def _summary(result: RLResult) -> str:
    return (f"{result.run_dir}: {result.steps} steps on {result.prompts} prompts in "
            f"{result.seconds:.0f} s; mean reward {number(result.mean_reward_first_half)} "
            f"(first half) -> {number(result.mean_reward_second_half)} (second half); "
            f"correct {number(result.correct_share)}; model in {result.final_dir}")


RL = TrainCommand(RLRunConfig, RL_PRESETS, resolve_rl, resumed_rl_config, run_rl, _summary)


def register(subparsers) -> None:
    """Add ``dragon rl`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "rl", help="reinforcement learning (TRL GRPOTrainer) with measured rewards",
        description="Improve an SFT model with GRPO on the prompts of a `dragon datagen` "
                    "output: each prompt's completions are sampled with schedule-aware "
                    "decoding, measured on the target (verified, then timed against a "
                    "reference of the same step) and compared within their group.  The config "
                    "is a preset, then --config's fields, then the flags given (a default "
                    "below is the field's own; a preset or file replaces it).",
        **examples("dragon rl --preset tiny --model runs/sft-tiny --data data/tiny "
                   "--out runs/rl-tiny",
                   "dragon rl --resume --out runs/rl-tiny",
                   "dragon rl --preset paper --validate"))
    RL.add_arguments(p)
