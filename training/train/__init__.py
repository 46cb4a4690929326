"""Training: ``dragon sft`` (TRL's ``SFTTrainer``, configured by ``SFTRunConfig``) and
``dragon rl`` (TRL's ``GRPOTrainer`` with measured rewards, configured by ``RLRunConfig``); both
keep their run in a run directory (``run_dir``).

>>> from training.train import PRESETS, RL_PRESETS, resolve, resolve_rl
>>> resolve("tiny", max_steps=5).max_steps
5
>>> resolve_rl("tiny", num_generations=2).num_generations
2
"""

from training.train.grpo_config import RL_PRESETS, RLRunConfig, resolve_rl
from training.train.rl import RLResult, resumed_rl_config, run_rl
from training.train.run_dir import RunError, last_checkpoint
from training.train.sft import (
    SFTResult,
    build_trainer,
    check_tokenizer,
    load_examples,
    make_model,
    make_tokenizer,
    resumed_config,
    run_sft,
)
from training.train.sft_config import (
    CONFIGS_DIR,
    PRESETS,
    ConfigError,
    SFTRunConfig,
    load_yaml,
    resolve,
)

__all__ = ["CONFIGS_DIR", "PRESETS", "RL_PRESETS", "ConfigError", "RLResult", "RLRunConfig",
           "RunError", "SFTResult", "SFTRunConfig", "build_trainer", "check_tokenizer",
           "last_checkpoint", "load_examples", "load_yaml", "make_model", "make_tokenizer",
           "resolve", "resolve_rl", "resumed_config", "resumed_rl_config", "run_rl", "run_sft"]
