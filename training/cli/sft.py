"""``dragon sft``: supervised fine-tuning on `dragon datagen` data (``training.train``).

    dragon sft --preset tiny --data data/tiny --out runs/sft-tiny
    dragon sft --config training/configs/sft_paper.yaml --model /models/llama-8b-instruct \\
        --data data/paper --out runs/sft-paper
    dragon sft --resume --out runs/sft-tiny

The config is a preset, then ``--config FILE.yaml``'s fields, then the flags given (every field
of ``SFTRunConfig`` is a flag).  ``--resume`` reads ``RUN/config.yaml`` back and continues from
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
from training.train.sft import SFTResult, resumed_config, run_sft
from training.train.sft_config import PRESETS, SFTRunConfig, resolve

__all__ = ["register"]


def _summary(result: SFTResult) -> str:
    return (f"{result.run_dir}: {result.steps} steps in {result.seconds:.0f} s; train loss "
            f"{number(result.first_loss)} -> {number(result.last_loss)}, eval loss "
            f"{number(result.first_eval_loss)} -> {number(result.last_eval_loss)}; "
            f"{number(result.tokens_per_second)} tokens/s; model in {result.final_dir}")


SFT = TrainCommand(SFTRunConfig, PRESETS, resolve, resumed_config, run_sft, _summary)


def register(subparsers) -> None:
    """Add ``dragon sft`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "sft", help="supervised fine-tuning (TRL SFTTrainer) on dragon datagen data",
        description="Fine-tune a model on the construction and refinement datasets of a "
                    "`dragon datagen` output (loss on completions only), evaluate on their "
                    "validation splits, and save checkpoints, metrics and the final model in "
                    "the run directory.  The config is a preset, then --config's fields, then "
                    "the flags given (a default below is the field's own; a preset or file "
                    "replaces it).",
        **examples("dragon sft --preset tiny --data data/tiny --out runs/sft-tiny",
                   "dragon sft --config training/configs/sft_paper.yaml --model "
                   "/models/llama-8b-instruct --data data/paper --out runs/sft-paper",
                   "dragon sft --resume --out runs/sft-tiny",
                   "dragon sft --preset paper --validate"))
    SFT.add_arguments(p)
