"""The run directory that ``dragon sft`` and ``dragon rl`` share, and what both do to it::

    RUN/config.yaml      the resolved config (a resumed run reads it back: ``read_config``)
    RUN/checkpoints/     the Trainer's checkpoint-STEP folders (``last_checkpoint``)
    RUN/metrics.jsonl    one JSON object per logging step (``MetricsCallback``)
    RUN/adapter/         with LoRA: the adapters alone
    RUN/final/           the trained model and its tokenizer, LoRA adapters merged
                         (``save_final``)
    RUN/result.json      the run's summary (``write_result``)

Under ``accelerate launch`` every process runs the trainer; the first one (``RANK`` 0) writes
the files.

>>> from training.train.sft_config import resolve
>>> read_config("/no/such/run", resolve)
Traceback (most recent call last):
...
training.train.run_dir.RunError: nothing to resume in /no/such/run: no config.yaml
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dragon_dsl.errors import DragonError
from dragon_dsl.files import write_atomic
from training.train.sft_config import config_dict

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CONFIG_FILE", "METRICS_FILE", "RESULT_FILE", "MetricsCallback", "RunError",
           "data_target", "is_main_process", "last_checkpoint", "lora_config", "metrics_callback",
           "model_dir", "read_config", "save_final", "start_run", "write_config", "write_result"]

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"


class RunError(DragonError):
    """A run that cannot start: missing data, a run directory in use, nothing to resume."""


def is_main_process() -> bool:
    """Whether this process writes the run's files (the only one, or rank 0)."""
    return int(os.environ.get("RANK", "0")) == 0


def last_checkpoint(run_dir: str | Path) -> str | None:
    """The newest ``checkpoint-STEP`` in ``RUN/checkpoints``, or None."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(run_dir) / "checkpoints"
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def start_run(run: Path, *, resume: bool) -> str | None:
    """The checkpoint a run continues from (None for a new run).  ``RunError`` when ``resume``
    finds no checkpoint, or a new run finds a run already there."""
    checkpoint = last_checkpoint(run) if resume else None
    if resume and checkpoint is None:
        raise RunError(f"nothing to resume in {run}: no checkpoints/checkpoint-STEP")
    if is_main_process() and not resume and (run / CONFIG_FILE).exists():
        raise RunError(f"{run} already holds a run (--resume continues it)")
    return checkpoint


def write_config(config: Any, run: Path) -> None:
    """``RUN/config.yaml``: the config's fields, written through a temporary file."""
    text = yaml.safe_dump(config_dict(config), sort_keys=False)
    write_atomic(run / CONFIG_FILE, text)


def read_config(run_dir: str | Path, resolve: Callable[..., Any], **overrides: Any) -> Any:
    """The config a run directory was started with (``RUN/config.yaml``, read by ``resolve``),
    with ``out`` set to ``run_dir`` and then ``overrides``."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RunError(f"nothing to resume in {run_dir}: no {CONFIG_FILE}")
    return resolve(file=path, **{"out": str(run_dir), **overrides})


class MetricsCallback:
    """Appends each of the Trainer's logs to ``RUN/metrics.jsonl`` with the step, the wall
    time and the training tokens per second since the previous line."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._mark: tuple[float, int] | None = None

    def _tokens(self, state: Any, logs: dict[str, Any]) -> int:
        # TRL's count of the tokens attended to; the Trainer's own count includes padding.
        return int(logs.get("num_tokens") or getattr(state, "num_input_tokens_seen", 0) or 0)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        now = time.time()
        line: dict[str, Any] = {"step": state.global_step, "epoch": state.epoch, "time": now,
                                **logs}
        if "loss" in logs:
            tokens = self._tokens(state, logs)
            if self._mark is not None and now > self._mark[0] and tokens > self._mark[1]:
                line["tokens_per_second"] = (tokens - self._mark[1]) / (now - self._mark[0])
            self._mark = (now, tokens)
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


def metrics_callback(run: Path, kind: type = MetricsCallback) -> Any:
    """A Trainer callback writing ``RUN/metrics.jsonl``: ``kind`` (``MetricsCallback`` or a
    subclass) with ``TrainerCallback``'s no-op hooks."""
    from transformers import TrainerCallback

    return type(f"Jsonl{kind.__name__.lstrip('_')}", (kind, TrainerCallback), {})(
        run / METRICS_FILE)


def lora_config(config: Any) -> Any:
    """peft's ``LoraConfig`` from a config's ``lora_*`` fields, or None without ``use_peft``."""
    if not config.use_peft:
        return None
    from peft import LoraConfig

    modules = config.lora_target_modules
    targets: Any = modules if modules == "all-linear" else \
        [m.strip() for m in modules.split(",") if m.strip()]
    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout, target_modules=targets,
                      task_type="CAUSAL_LM")


def save_final(trainer: Any, tokenizer: PreTrainedTokenizerBase, run: Path, *,
               use_peft: bool) -> Path:
    """Save the trained model and its tokenizer in ``RUN/final``; with LoRA, the adapters in
    ``RUN/adapter`` and the model with them merged in ``final``."""
    final = run / "final"
    if use_peft:
        # Under DeepSpeed ZeRO-3 the merge needs the whole weights in one process: not tried
        # on a GPU yet (see README).
        trainer.save_model(str(run / "adapter"))
        if trainer.is_world_process_zero():
            trainer.model.merge_and_unload().save_pretrained(final)
            tokenizer.save_pretrained(final)
    else:
        trainer.save_model(str(final))  # gathers ZeRO-3 shards; saves the tokenizer too
    return final


def write_result(trainer: Any, run: Path, result: Any) -> None:
    """``RUN/result.json``: the result's ``as_dict()``, from the first process."""
    if trainer.is_world_process_zero():
        (run / RESULT_FILE).write_text(json.dumps(result.as_dict(), indent=2) + "\n",
                                       encoding="utf-8")


def model_dir(model: str) -> Path:
    """The model directory of ``model``: a run directory's ``final/``, or the directory."""
    path = Path(model)
    if (path / "final" / "config.json").is_file():
        return path / "final"
    if (path / "config.json").is_file():
        return path
    raise RunError(f"no model in {model}: expected a model directory (config.json) or an SFT "
                   "run directory with final/ (nothing is downloaded)")


def data_target(data: str | Path) -> dict[str, Any]:
    """The target a ``dragon datagen`` output was searched for (its ``datagen.json``)."""
    path = Path(data) / "datagen.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))["settings"]["target"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise RunError(f"cannot read the data's target from {path}: {exc}; give --target") from None
