"""What the model-driven subcommands (``dragon sample``, ``dragon optimize``) share: reading
the script to refine and loading a local model, each failure a ``UsageError``; and the
measurement flags of ``dragon optimize`` and ``dragon datagen``, made from ``MeasureConfig``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import dragon_dsl
from codegen.measure.config import MeasureConfig
from dragon_dsl.cli_kit import UsageError, add_config_arguments, read_source
from dragon_dsl.configs import layered

__all__ = ["MEASURE_FLAGS", "add_measure_arguments", "load_model", "measure_from_args",
           "model_path", "script_to_refine"]

# The measurement settings a training command offers (MeasureConfig's seed, of the inputs, is
# not its --seed).
MEASURE_FLAGS = ("repeat", "min_repeat_ms", "build_timeout_s", "run_timeout_s", "limit_factor",
                 "build_limit_factor", "limit_floor_s", "cutoff_factor")


def add_measure_arguments(parser: argparse.ArgumentParser, *, preset: bool = False,
                          defaults: MeasureConfig | None = None) -> None:
    """``--repeat``, ``--min-repeat-ms``, ``--build-timeout-s``, ``--run-timeout-s``
    (``--timeout``), ``--limit-factor``, ``--build-limit-factor``, ``--limit-floor-s`` and
    ``--cutoff-factor``, from
    ``MeasureConfig``'s fields (``defaults``' values when given); ``preset``: a flag not given
    leaves the preset's value (``measure_from_args``)."""
    add_config_arguments(parser, MeasureConfig, only=MEASURE_FLAGS, layered=preset,
                         aliases={"run_timeout_s": ("--timeout",)}, defaults=defaults)


def measure_from_args(args: argparse.Namespace,
                      preset: Mapping[str, Any] | None = None) -> MeasureConfig:
    """The ``MeasureConfig`` of the measurement flags given over ``preset``'s fields (then
    the defaults); UsageError for a value it refuses."""
    given = {n: getattr(args, n) for n in MEASURE_FLAGS if getattr(args, n, None) is not None}
    try:
        return layered(MeasureConfig, {"preset": preset or {}}, "preset", None, given)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def script_to_refine(path: str) -> str:
    """The script to refine; a UsageError (before any model is loaded) unless it is clean,
    naming the file, line and column of the first finding."""
    text = read_source(path)
    found = dragon_dsl.check(text)
    if found:
        name = "<stdin>" if path == "-" else path
        raise UsageError(f"--refine {name}:{str(found[0]).splitlines()[0]}")
    return text


def model_path(value: str | None) -> str:
    """The model directory ``--model`` names (a run directory's ``final/``); without
    ``--model``, the built-in model (``training.models.builtin``).  A UsageError when neither
    holds a model."""
    from training.models.builtin import DefaultModelMissing, default_model_dir
    from training.train.run_dir import RunError, model_dir

    try:
        return str(default_model_dir() if value is None else model_dir(value))
    except (RunError, DefaultModelMissing) as exc:
        hint = "" if value is None else ("; `dragon sft` or `dragon rl` with --out DIR makes "
                                         "one, and without --model the built-in model is used")
        raise UsageError(f"--model: {exc}{hint}") from None


def load_model(path: str):
    """The model and tokenizer of a local directory; UsageError when they do not load (a
    truncated weights file, a config that does not match the weights, no tokenizer) or the
    tokenizer has more tokens than the model's embedding (another model's tokenizer)."""
    from transformers.utils import logging as hf_logging

    from training.models.tokenizer import vocab_mismatch
    from training.sampling import load

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # not transformers' load report: one line says it
    hf_logging.disable_progress_bar()  # nor its bar over the weights, which takes no time
    try:
        model, tokenizer = load(path)
    except Exception as exc:  # noqa: BLE001  transformers, safetensors and torch all raise
        from dragon_dsl.configs import bounded

        # The whole reason on one line: transformers puts the field on the first line and
        # what is wrong with it on the next ones.
        reason = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or \
            type(exc).__name__
        if "ignore_mismatched_sizes" in reason or "size mismatch" in reason:
            reason = "the weights do not have the sizes config.json gives (an edited config?)"
        raise UsageError(bounded(f"cannot load the model from {path}: {reason}", 600)) from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    wrong = vocab_mismatch(tokenizer, model)
    if wrong:
        raise UsageError(f"--model {path}: {wrong}")
    return model, tokenizer
