"""What the model-driven subcommands (``dragon sample``, ``dragon optimize``) share: reading
the script to refine and loading a local model, each failure a ``UsageError``."""

from __future__ import annotations

from dragon_dsl.cli_kit import UsageError, read_source

__all__ = ["load_model", "model_path", "script_to_refine"]


def script_to_refine(path: str) -> str:
    """The script to refine; a UsageError (before any model is loaded) unless it is clean,
    naming the file, line and column of the first finding."""
    import dragon_dsl

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
        raise UsageError(f"--model: {exc}") from None


def load_model(path: str):
    """The model and tokenizer of a local directory; UsageError when they do not load (a
    truncated weights file, a config that does not match the weights, no tokenizer)."""
    from transformers.utils import logging as hf_logging

    from training.sampling import load

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # not transformers' load report: one line says it
    hf_logging.disable_progress_bar()  # nor its bar over the weights, which takes no time
    try:
        return load(path)
    except Exception as exc:  # noqa: BLE001  transformers, safetensors and torch all raise
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                     type(exc).__name__)
        if "ignore_mismatched_sizes" in first or "size mismatch" in str(exc):
            first = "the weights do not have the sizes config.json gives (an edited config?)"
        raise UsageError(f"cannot load the model from {path}: {first}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
