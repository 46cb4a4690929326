"""Training: ``dragon sft`` (TRL's ``SFTTrainer``), configured by ``SFTRunConfig``.

>>> from training.train import PRESETS, resolve
>>> resolve("tiny", max_steps=5).max_steps
5
"""

from .config import CONFIGS_DIR, PRESETS, ConfigError, SFTRunConfig, load_yaml, resolve
from .sft import (
    RunError,
    SFTResult,
    build_trainer,
    check_tokenizer,
    last_checkpoint,
    load_examples,
    make_model,
    make_tokenizer,
    resumed_config,
    run_sft,
)

__all__ = ["CONFIGS_DIR", "PRESETS", "ConfigError", "RunError", "SFTResult", "SFTRunConfig",
           "build_trainer", "check_tokenizer", "last_checkpoint", "load_examples", "load_yaml",
           "make_model", "make_tokenizer", "resolve", "resumed_config", "run_sft"]
