"""Supervised fine-tuning with TRL's ``SFTTrainer`` on the construction and refinement datasets.

Both datasets' train splits are trained on together as prompt/completion pairs, so the loss
covers the completion (the script and its ``<end>`` line, then EOS) and never the prompt
(``SFTConfig(completion_only_loss=True)``); their validation splits are the eval set.  The
run directory (``training.train.run_dir``)::

    RUN/config.yaml       the resolved SFTRunConfig (a resumed run reads it back)
    RUN/tokenizer/        the tokenizer (for model='tiny', trained on the train split's text)
    RUN/checkpoints/      the Trainer's checkpoint-STEP folders (weights, optimizer, RNG state)
    RUN/metrics.jsonl     one JSON object per logging step: loss, eval_loss, tokens/s, ...
    RUN/final/            the trained model (with keep_best, the checkpoint of the lowest
                          eval loss) and its tokenizer (LoRA adapters merged), for
                          `dragon sample --model RUN/final`
    RUN/result.json       the run's summary (SFTResult)

``run_sft(config, resume=True)`` continues from the newest checkpoint with the Trainer's
``resume_from_checkpoint`` (same step, optimizer, scheduler and data order).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.datagen.dataset import in_prompt_format
from training.models.tokenizer import tiny_config, tiny_model, train_tokenizer
from training.prompts.templates import PROMPT_VERSION, PromptConfig, mark_tokenizer
from training.train.run_dir import (
    METRICS_FILE,
    RunError,
    finite_loss_callback,
    is_main_process,
    last_checkpoint,
    load_dataset_dir,
    lora_config,
    metrics_callback,
    read_config,
    read_metrics,
    repair_metrics,
    run_lock,
    save_final,
    start_run,
    write_config,
    write_result,
)
from training.train.sft_config import TINY, SFTRunConfig, deepspeed_path, resolve

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["RunError", "SFTResult", "build_trainer", "check_tokenizer", "last_checkpoint",
           "load_examples", "make_model", "make_tokenizer", "resumed_config", "run_sft"]


@dataclass
class SFTResult:
    """What a run did; also written to ``RUN/result.json``."""

    run_dir: str
    final_dir: str
    steps: int
    seconds: float
    train_examples: int
    eval_examples: int
    truncated_examples: int
    first_loss: float | None = None
    last_loss: float | None = None
    first_eval_loss: float | None = None
    last_eval_loss: float | None = None
    tokens_per_second: float | None = None
    resumed_from: str | None = None
    best_checkpoint: str | None = None  # with keep_best: the checkpoint the final model is
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_examples(config: SFTRunConfig) -> dict[str, Any]:
    """``{"train": Dataset, "validation": Dataset}`` of prompt/completion rows, the tasks of
    ``config.tasks`` concatenated (train shuffled with the seed)."""
    from datasets import concatenate_datasets

    root = Path(config.data)
    splits: dict[str, list] = {"train": [], "validation": []}
    for task in config.task_list:
        path = root / task
        data = load_dataset_dir(path, task, root)  # in memory: nothing written into the input
        for split in splits:
            if split not in data:
                raise RunError(f"{path} has no {split} split")
            columns = set(data[split].column_names)
            if not {"prompt", "completion"} <= columns:
                raise RunError(f"{path}: its {split} split has no prompt and completion "
                               f"columns (it has {sorted(columns)})")
            if "prompt_version" in columns:
                versions = set(data[split]["prompt_version"]) - {PROMPT_VERSION}
                if versions:
                    raise RunError(f"{path}: its {split} split holds prompt format "
                                   f"{sorted(versions)}; dragon sft reads format "
                                   f"{PROMPT_VERSION} and writes others itself (tile_order)")
            splits[split].append(in_prompt_format(
                data[split].select_columns(["prompt", "completion"]),
                PromptConfig(tile_order=config.tile_order)))
    train = concatenate_datasets(splits["train"]).shuffle(seed=config.seed)
    validation = concatenate_datasets(splits["validation"])
    if config.max_eval_examples and len(validation) > config.max_eval_examples:
        validation = validation.shuffle(seed=config.seed).select(range(config.max_eval_examples))
    if len(train) == 0:
        raise RunError(f"the train splits of {config.tasks} in {root} are empty")
    return {"train": train, "validation": validation}


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> None:
    """Raise ``RunError`` unless every text comes back byte for byte from its tokens."""
    for text in texts:
        back = tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids)
        if back != text:
            at = next((i for i, (a, b) in enumerate(zip(text, back, strict=False)) if a != b),
                      min(len(text), len(back)))
            lo = max(0, at - 20)
            raise RunError(f"the tokenizer does not spell this text back at character {at}: "
                           f"{text[lo:at + 20]!r} -> {back[lo:at + 20]!r}")


def make_tokenizer(config: SFTRunConfig, train: Any) -> Any:
    """For ``tiny``, a byte-level BPE trained on the train split's prompts and completions;
    else the model directory's own tokenizer."""
    if config.model == TINY:
        texts = list(train["prompt"]) + list(train["completion"])
        return train_tokenizer(texts, config.vocab_size, config.min_frequency)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.model, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def make_model(config: SFTRunConfig, tokenizer: PreTrainedTokenizerBase) -> Any:
    """For ``tiny``, a Llama of the config's size with random weights (seeded); else the local
    model directory's weights (bf16 when ``config.bf16``)."""
    import torch

    if config.model == TINY:
        torch.manual_seed(config.seed)
        model = tiny_model(tokenizer, **_tiny_fields(config))
        return model.train()
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if config.bf16 else "auto"
    return AutoModelForCausalLM.from_pretrained(config.model, local_files_only=True, dtype=dtype)


def _tiny_fields(config: SFTRunConfig) -> dict[str, int]:
    return dict(hidden_size=config.hidden_size, intermediate_size=4 * config.hidden_size,
                num_hidden_layers=config.layers, num_attention_heads=config.heads,
                num_key_value_heads=config.heads, max_position_embeddings=config.max_length)


def check_model_memory(config: SFTRunConfig) -> None:
    """``RunError`` (``ModelTooLarge``) when training the config's model cannot fit in this
    machine's memory, estimated from its config alone (``training.train.memory``)."""
    from training.train.memory import check_memory

    if config.model == TINY:
        model_config = tiny_config(config.vocab_size, **_tiny_fields(config))
        what = f"the tiny model (hidden_size {config.hidden_size}, layers {config.layers})"
    else:
        from transformers import AutoConfig

        try:
            model_config = AutoConfig.from_pretrained(config.model, local_files_only=True)
        except Exception as exc:  # noqa: BLE001  a missing or broken config.json
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                         type(exc).__name__)
            raise RunError(f"cannot load the model from {config.model}: {first[:300]}") from None
        what = f"the model in {config.model}"
    check_memory(model_config, full=not config.use_peft, bf16=config.bf16,
                 deepspeed=bool(config.deepspeed), what=what)


def build_trainer(config: SFTRunConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                  data: dict[str, Any], *,
                  progress: bool = True) -> Any:
    """TRL's ``SFTTrainer`` for ``config`` (checkpoints and metrics in ``config.out``)."""
    from trl import SFTConfig, SFTTrainer

    run = Path(config.out)
    evaluate = len(data["validation"]) > 0
    args = SFTConfig(
        output_dir=str(run / "checkpoints"), seed=config.seed, data_seed=config.seed,
        max_steps=config.max_steps, num_train_epochs=config.epochs,
        learning_rate=config.learning_rate, lr_scheduler_type=config.lr_scheduler,
        warmup_steps=config.warmup_steps, weight_decay=config.weight_decay,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum, max_length=config.max_length,
        completion_only_loss=True, packing=False,
        logging_steps=config.logging_steps, logging_first_step=True,
        eval_strategy="steps" if evaluate and config.eval_steps else "no",
        eval_steps=config.eval_steps or None, eval_on_start=evaluate,
        save_strategy="steps", save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        load_best_model_at_end=bool(config.keep_best and evaluate and config.eval_steps),
        metric_for_best_model="eval_loss", greater_is_better=False,
        bf16=config.bf16, activation_checkpointing=config.gradient_checkpointing,
        deepspeed=str(deepspeed_path(config.deepspeed)) if config.deepspeed else None,
        include_num_input_tokens_seen=True, report_to="none", disable_tqdm=not progress,
        dataset_num_proc=None)
    return SFTTrainer(model=model, args=args, train_dataset=data["train"],
                      eval_dataset=data["validation"] if evaluate else None,
                      processing_class=tokenizer, peft_config=lora_config(config),
                      callbacks=[metrics_callback(run), finite_loss_callback()])


def resumed_config(run_dir: str | Path, **overrides: Any) -> SFTRunConfig:
    """The config a run directory was started with (``RUN/config.yaml``), with overrides."""
    return read_config(run_dir, resolve, **overrides)


def _summary(metrics: Path) -> dict[str, Any]:
    losses, evals, speeds = [], [], []
    for row in read_metrics(metrics):  # a torn last line is skipped
        if "loss" in row:
            losses.append(row["loss"])
        if "eval_loss" in row:
            evals.append(row["eval_loss"])
        if "tokens_per_second" in row:
            speeds.append(row["tokens_per_second"])
    return {"first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "first_eval_loss": evals[0] if evals else None,
            "last_eval_loss": evals[-1] if evals else None,
            "tokens_per_second": sum(speeds) / len(speeds) if speeds else None}


def run_sft(config: SFTRunConfig, *, resume: bool = False, progress: bool = True) -> SFTResult:
    """Train as ``config`` says, in ``config.out``; with ``resume``, continue from the newest
    checkpoint there.  A run directory that already holds a run is refused without
    ``resume``."""
    if not config.data:
        raise RunError("name the data: a `dragon datagen` output directory (data)")
    if not config.out:
        raise RunError("name the run directory (out)")
    if config.model != TINY and not Path(config.model).is_dir():
        raise RunError(f"no local model directory {config.model} (nothing is downloaded)")
    run = Path(config.out)
    checkpoint = start_run(run, resume=resume, max_steps=config.max_steps)
    check_model_memory(config)
    # Under `accelerate launch` every process runs this; the first one writes the files.
    started = time.time()
    data = load_examples(config)
    with run_lock(run):
        # Again, now that no other run can start here between the check and the first file.
        checkpoint = start_run(run, resume=resume, max_steps=config.max_steps)
        return _train(config, run, data, checkpoint, started, resume=resume,
                      progress=progress)


def _train(config: SFTRunConfig, run: Path, data: dict[str, Any], checkpoint: str | None,
           started: float, *, resume: bool, progress: bool) -> SFTResult:
    main = is_main_process()
    tokenizer_dir = run / "tokenizer"
    made = not (resume and tokenizer_dir.is_dir())
    if not made:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    else:
        tokenizer = make_tokenizer(config, data["train"])  # deterministic: the same everywhere
    # Every tokenizer saved from here on (checkpoints, final) names the prompt format.
    mark_tokenizer(tokenizer, PromptConfig(tile_order=config.tile_order))
    texts = [t for split in data.values() for col in ("prompt", "completion") for t in split[col]]
    check_tokenizer(tokenizer, texts)
    lengths = [len(tokenizer(p + c, add_special_tokens=False).input_ids) + 1
               for p, c in zip(data["train"]["prompt"], data["train"]["completion"],
                               strict=True)]
    truncated = sum(n > config.max_length for n in lengths)
    for split, rows in data.items():
        # TRL drops the examples whose completion is cut off entirely: none may be left.
        shortest = min((len(tokenizer(p, add_special_tokens=False).input_ids)
                        for p in rows["prompt"]), default=0)
        if len(rows) and shortest >= config.max_length:
            raise RunError(f"max_length {config.max_length} leaves no completion token: every "
                           f"{split} prompt is as long or longer (the shortest has {shortest} "
                           "tokens)")
    # The run's first files, once nothing above refused it (a refused run leaves no run behind).
    if main:
        write_config(config, run)
        repair_metrics(run / METRICS_FILE)
        if made:
            tokenizer.save_pretrained(tokenizer_dir)

    from transformers import set_seed

    set_seed(config.seed)
    model = make_model(config, tokenizer)
    trainer = build_trainer(config, model, tokenizer, data, progress=progress)
    trainer.train(resume_from_checkpoint=checkpoint)
    evaluated = any("eval_loss" in row and row.get("step") == trainer.state.global_step
                    for row in trainer.state.log_history)
    best = trainer.state.best_model_checkpoint if trainer.args.load_best_model_at_end else None
    if len(data["validation"]) and (best or not evaluated):  # the final model's eval loss
        trainer.evaluate()
    final = save_final(trainer, tokenizer, run, use_peft=config.use_peft)
    result = SFTResult(run_dir=str(run), final_dir=str(final), steps=trainer.state.global_step,
                       seconds=time.time() - started, train_examples=len(data["train"]),
                       eval_examples=len(data["validation"]), truncated_examples=truncated,
                       resumed_from=checkpoint, best_checkpoint=best, seed=config.seed,
                       **_summary(run / METRICS_FILE))
    write_result(trainer, run, result)
    return result
