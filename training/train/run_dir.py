"""The run directory that ``dragon sft`` and ``dragon rl`` share, and what both do to it::

    RUN/config.yaml      the resolved config (a resumed run reads it back: ``read_config``)
    RUN/checkpoints/     the Trainer's checkpoint-STEP folders (``last_checkpoint``)
    RUN/metrics.jsonl    one JSON object per logging step (``MetricsCallback``)
    RUN/adapter/         with LoRA: the adapters alone
    RUN/final/           the trained model and its tokenizer, LoRA adapters merged
                         (``save_final``)
    RUN/result.json      the run's summary (``write_result``)
    RUN/.lock            held (``flock``) by the run training there (``run_lock``)

Before any work a run checks that it can write its directory (``check_out``); a resumed run
checks its checkpoint (``check_checkpoint``) and that it has steps left (``RunFinished``).
Training stops at the first loss that is not finite (``finite_loss_callback``), before a
final model of NaN weights is saved.

Under ``accelerate launch`` every process runs the trainer; the first one (``RANK`` 0) writes
the files.

>>> from training.train.sft_config import resolve
>>> read_config("/no/such/run", resolve)
Traceback (most recent call last):
...
training.train.run_dir.RunError: nothing to resume in /no/such/run: no config.yaml
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dragon_dsl.configs import names
from dragon_dsl.errors import DragonError
from dragon_dsl.files import unwritable, write_atomic
from training.train.sft_config import config_dict

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["CONFIG_FILE", "LOCK_FILE", "METRICS_FILE", "RESULT_FILE", "MetricsCallback",
           "RunError", "RunFinished", "check_checkpoint", "check_out", "data_target",
           "finite_loss_callback", "is_main_process", "last_checkpoint", "load_dataset_dir",
           "load_model_dir", "lora_config", "metrics_callback", "model_dir", "read_config",
           "read_metrics", "repair_metrics", "run_lock", "save_final", "start_run",
           "write_config", "write_result"]

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
LOCK_FILE = ".lock"


class RunError(DragonError):
    """A run that cannot start: missing data, a run directory in use, nothing to resume."""


class RunFinished(RunError):
    """``--resume`` on a run that has trained all its steps: nothing to do (``result`` is its
    ``result.json``, ``message`` says so)."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


def is_main_process() -> bool:
    """Whether this process writes the run's files (the only one, or rank 0)."""
    return int(os.environ.get("RANK", "0")) == 0


def last_checkpoint(run_dir: str | Path) -> str | None:
    """The newest ``checkpoint-STEP`` in ``RUN/checkpoints``, or None."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(run_dir) / "checkpoints"
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def start_run(run: Path, *, resume: bool, max_steps: int | None = None) -> str | None:
    """The checkpoint a run continues from (None for a new run).  ``RunError`` when ``resume``
    finds no checkpoint or a damaged one, or a new run finds a run already there;
    ``RunFinished`` when ``resume`` finds a run that has written its result and has no step
    left below ``max_steps`` (None: the same length as it was started with)."""
    check_out(run)
    checkpoint = last_checkpoint(run) if resume else None
    if resume and checkpoint is None:
        raise RunError(f"nothing to resume in {run}: no checkpoints/checkpoint-STEP")
    if is_main_process() and not resume and (run / CONFIG_FILE).exists():
        raise RunError(f"{run} already holds a run (--resume continues it)")
    if checkpoint is not None:
        _check_finished(run, max_steps)
        check_checkpoint(checkpoint)
    return checkpoint


def _check_finished(run: Path, max_steps: int | None) -> None:
    # A run is finished once it saved final/ and wrote result.json; resuming it trains only
    # when a larger max_steps is asked for (else the Trainer would train on, overwriting final/).
    if not (run / "final").is_dir():
        return
    try:
        result = json.loads((run / RESULT_FILE).read_text(encoding="utf-8"))
        steps = int(result["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # no result: the run was stopped before its end
    if max_steps is None or max_steps == -1 or max_steps <= steps:
        raise RunFinished(f"{run} is finished (step {steps}, its result in {run / RESULT_FILE}): "
                          "nothing to resume; --resume --max-steps above "
                          f"{steps} trains it further", result)


def check_out(run: Path) -> None:
    """``RunError`` unless the run directory ``run`` can be created and written: not a file,
    and its nearest existing folder takes a new file (tried, as permissions do not tell for
    root or a read-only file system)."""
    why = unwritable(run, folder=True)
    if why:
        raise RunError(f"cannot write the run directory {why}")


@contextlib.contextmanager
def run_lock(run: Path) -> Iterator[None]:
    """Create ``run`` and hold ``RUN/.lock`` while the block runs (the first process only);
    ``RunError`` at once when another run holds it.  The kernel drops the lock when its holder
    dies, so a killed run leaves nothing to clean up."""
    if not is_main_process():
        yield
        return
    try:
        run.mkdir(parents=True, exist_ok=True)
        fd = os.open(run / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise RunError(f"cannot write the run directory {run}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunError(f"{run} is in use by another run (its {LOCK_FILE} is locked): wait "
                           "for it, or choose another out") from None
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def check_checkpoint(checkpoint: str | Path) -> None:
    """``RunError`` naming a checkpoint the Trainer could not resume from: no readable
    ``trainer_state.json``, or a weights, optimizer or state file cut short (a safetensors
    file shorter than its header says, a torch file that is not a whole zip archive)."""
    path = Path(checkpoint)
    advice = "remove it to resume from the checkpoint before it"
    try:
        state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
        int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = "no trainer_state.json" if isinstance(exc, FileNotFoundError) \
            else f"trainer_state.json: {exc}"
        raise RunError(f"cannot resume from {path}: {reason}; {advice}") from None
    for file in sorted(path.iterdir()):
        reason = None
        if file.suffix == ".safetensors":
            reason = _safetensors_damage(file)
        elif file.suffix in (".pt", ".pth", ".bin"):
            try:
                with zipfile.ZipFile(file):
                    pass
            except (OSError, zipfile.BadZipFile) as exc:
                reason = f"not a whole torch file ({exc})"
        if reason:
            raise RunError(f"cannot resume from {path}: {file.name} is damaged: {reason}; "
                           f"{advice}")


def _safetensors_damage(file: Path) -> str | None:
    # The format: an 8-byte little-endian header length, a JSON header whose data_offsets
    # give each tensor's bytes after it.
    try:
        size = file.stat().st_size
        with file.open("rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n <= 0 or 8 + n > size:
                return "its header is cut short"
            header = json.loads(f.read(n))
        end = max((int(v["data_offsets"][1]) for k, v in header.items()
                   if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return f"unreadable header ({exc})"
    if 8 + n + end > size:
        return f"{size} bytes where its header needs {8 + n + end}"
    return None


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


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The lines of ``RUN/metrics.jsonl``, skipping a line that is not a JSON object (the
    torn last line of a run killed while writing it)."""
    rows = []
    with contextlib.suppress(FileNotFoundError):
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def repair_metrics(path: str | Path) -> None:
    """Cut a torn last line (one without its newline) off ``RUN/metrics.jsonl``, so that the
    lines a resumed run appends start on a line of their own."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


class _FiniteLoss:
    """Stops training at the first logged loss (train or eval) or gradient norm that is not
    finite: ``RunError`` naming the step, raised out of ``Trainer.train``."""

    KEYS = ("loss", "eval_loss", "grad_norm")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        for key in self.KEYS:
            value = (logs or {}).get(key)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                raise RunError(f"training diverged: {key} is {value} at step "
                               f"{state.global_step} (a learning rate too high?); no final "
                               "model was saved")


def finite_loss_callback() -> Any:
    """A Trainer callback that stops a run whose loss is no longer finite (``RunError``)."""
    from transformers import TrainerCallback

    return type("FiniteLoss", (_FiniteLoss, TrainerCallback), {})()


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
    targets: Any = modules if modules == "all-linear" else list(names(modules))
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


def load_dataset_dir(path: Path, task: str, root: Path) -> Any:
    """The ``DatasetDict`` a `dragon datagen` output holds for ``task``, read into memory: the
    datasets' later ``map``, ``shuffle`` and ``select`` keep their results in memory and never
    write cache files into the input's folders.  ``RunError`` when it is missing or damaged (a
    corrupt ``dataset_dict.json``, a truncated arrow file)."""
    from datasets import load_from_disk

    if not (path / "dataset_dict.json").is_file():
        raise RunError(f"no {task} dataset in {root} (expected {path}/ written by "
                       "`dragon datagen`)")
    try:
        return load_from_disk(str(path), keep_in_memory=True)
    except Exception as exc:  # noqa: BLE001  datasets, pyarrow and json all raise their own
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                     type(exc).__name__)
        raise RunError(f"cannot read the {task} dataset in {path}: {first[:300]} (write it "
                       "again with `dragon datagen`)") from None


def load_model_dir(source: Path, *, bf16: bool) -> tuple[Any, Any]:
    """The model and tokenizer of a local model directory, the tokenizer's pad token set;
    ``RunError`` when they do not load (truncated weights, a broken config) or the tokenizer
    does not fit the model's embedding."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.models.tokenizer import vocab_mismatch

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            source, local_files_only=True, dtype=torch.bfloat16 if bf16 else "auto")
    except Exception as exc:  # noqa: BLE001  transformers, safetensors and torch all raise
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                     type(exc).__name__)
        raise RunError(f"cannot load the model from {source}: {first[:300]}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    wrong = vocab_mismatch(tokenizer, model)
    if wrong:
        raise RunError(f"{source}: {wrong}")
    return model, tokenizer


def data_target(data: str | Path) -> dict[str, Any]:
    """The target a ``dragon datagen`` output was searched for (its ``datagen.json``)."""
    path = Path(data) / "datagen.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))["settings"]["target"]
    except (OSError, KeyError, TypeError, ValueError, RecursionError) as exc:
        # ValueError: not UTF-8, or not JSON (JSONDecodeError is one)
        reason = str(exc)[:200] or type(exc).__name__
        raise RunError(f"cannot read the data's target from {path}: {reason}; give --target") \
            from None
