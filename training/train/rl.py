"""Reinforcement learning with TRL's ``GRPOTrainer``: rollouts by schedule-aware decoding,
rewards measured by ``training.train.reward.Rewarder``.

The prompts are the distinct prompts of the ``dragon datagen`` train splits (construction: a
kernel; refinement: a kernel and a script to improve).  Each step samples ``num_generations``
completions of each prompt with ``training.sampling.ScheduleRollout`` (every statement is
checked against the live schedule, so every completion applies), measures them on the target
(verified against the unscheduled kernel's outputs, timed against a reference measured in the
same step) and takes a GRPO step on the group-relative advantages.  The run directory
(``training.train.run_dir``)::

    RUN/config.yaml        the resolved RLRunConfig (a resumed run reads it back)
    RUN/checkpoints/       the Trainer's checkpoint-STEP folders
    RUN/metrics.jsonl      one JSON object per logging step: reward, its components, times
    RUN/rollouts.jsonl     one JSON object per group measured: its step, the workload, the
                           reference, each completion's script, status (with TVM's or the
                           verifier's message), latency, speedup and reward
    RUN/measure-cache.sqlite  measurements of this run (the best of a group is re-timed without)
    RUN/final/             the trained model and its tokenizer
    RUN/result.json        the run's summary (RLResult)

Policy-gradient ratio under masking.  The rollout returns the logprobs of the kept tokens under
the mask actually applied.  TRL's transformers path (``use_vllm=False``) does not use rollout
logprobs: with one optimisation pass per generation it sets the old logprobs to the current
model's, detached, so the ratio is exactly 1 and the gradient is that of the unmasked log
probability of each kept token.  TRL reads rollout logprobs only for its vLLM
importance-sampling correction, where ``exp(old - sampling)`` is the share of probability the
mask kept (at most 1); ``mask/kept_mass`` in the metrics logs that share, so one can see how far
the correction would reweight (``token_truncate``) or drop (``*_mask`` modes, below
``vllm_importance_sampling_clip_min``) masked rows.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codegen.measure import Evaluator
from codegen.workloads import workload
from training.datagen.dataset import in_prompt_format
from training.prompts.templates import prompt_config_of
from training.sampling.rollout import ScheduleRollout
from training.train.grpo_config import RLRunConfig, resolve_rl
from training.train.run_dir import (
    METRICS_FILE,
    MetricsCallback,
    RunError,
    data_target,
    finite_loss_callback,
    is_main_process,
    load_dataset_dir,
    load_model_dir,
    lora_config,
    metrics_callback,
    model_dir,
    read_config,
    read_metrics,
    repair_metrics,
    run_lock,
    save_final,
    start_run,
    write_config,
    write_result,
)
from training.train.sft_config import deepspeed_path

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from training.sampling.rollout import ScheduleRollout

__all__ = ["MeasuredReward", "RLResult", "build_grpo_trainer", "check_device",
           "check_source_memory", "data_target", "grpo_args", "load_prompts", "model_dir",
           "resumed_rl_config", "run_rl", "workload_of"]

CACHE_FILE = "measure-cache.sqlite"


@dataclass
class RLResult:
    """What a run did; also written to ``RUN/result.json``."""

    run_dir: str
    final_dir: str
    steps: int
    seconds: float
    prompts: int
    first_reward: float | None = None
    last_reward: float | None = None
    mean_reward_first_half: float | None = None
    mean_reward_second_half: float | None = None
    correct_share: float | None = None
    generation_share: float | None = None
    measurement_share: float | None = None
    resumed_from: str | None = None
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_prompts(config: RLRunConfig) -> Any:
    """A ``Dataset`` of distinct prompts (``prompt``, ``workload``, ``start_script`` ("" for
    construction), ``task``) from the train splits of ``config.tasks``, shuffled with the seed;
    with ``max_kernel_ms``, none of a kernel whose fastest script in those splits (``latency_s``)
    ran longer; with ``max_prompts``, the first ones taken from the tasks in turn."""
    from datasets import Dataset

    root = Path(config.data)
    per_task: list[list[dict[str, str]]] = []
    fastest: dict[str, float] = {}
    for task in config.task_list:
        path = root / task
        data = load_dataset_dir(path, task, root)  # in memory: nothing written into the input
        if "train" not in data or not {"prompt", "workload"} <= set(data["train"].column_names):
            raise RunError(f"{path} has no train split of prompts and workloads")
        train = data["train"].shuffle(seed=config.seed)
        seen: set[str] = set()
        rows = []
        for row in train:
            latency = _seconds(row.get("latency_s"))
            if latency is not None:
                fastest[row["workload"]] = min(latency, fastest.get(row["workload"], latency))
            if row["prompt"] in seen:
                continue
            seen.add(row["prompt"])
            rows.append({"prompt": row["prompt"], "workload": row["workload"],
                         "start_script": row.get("start_script") or "", "task": task})
        per_task.append(rows)
    merged = [row for group in _interleave(per_task) for row in group]
    if not merged:
        raise RunError(f"the train splits of {config.tasks} in {root} hold no prompts")
    if config.max_kernel_ms:
        limit = config.max_kernel_ms / 1e3
        kept = [row for row in merged if fastest.get(row["workload"], 0.0) <= limit]
        if not kept:
            raise RunError(f"max_kernel_ms={config.max_kernel_ms:g} leaves none of the "
                           f"{len(merged)} prompts in {root}: the fastest kernel of every "
                           f"workload ran longer (the quickest {min(fastest.values()) * 1e3:.3g} "
                           "ms)")
        merged = kept
    if config.max_prompts:
        merged = merged[:config.max_prompts]
    return Dataset.from_list(merged)


def _seconds(value: Any) -> float | None:
    """A dataset's latency cell (a string or a number, empty when not measured) in seconds."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _interleave(groups: list[list[dict]]) -> list[list[dict]]:
    out, width = [], max((len(g) for g in groups), default=0)
    for i in range(width):
        out.append([g[i] for g in groups if i < len(g)])
    return out


ROLLOUTS_FILE = "rollouts.jsonl"


def workload_of(specs: dict[str, str]) -> Callable[[str], Any]:
    """Prompt -> its workload, from ``specs`` (prompt -> workload spec); each spec is made
    once, since the prompts of one kernel share it."""
    make = functools.cache(workload)
    return lambda prompt: make(specs[prompt])


class MeasuredReward:
    """TRL's reward function: ``Rewarder`` scores each group by measuring it; the components
    go to the trainer's metrics through TRL's ``log_metric``."""

    __name__ = "measured"

    def __init__(self, rewarder: Any, rollout: ScheduleRollout | None = None, *,
                 log: Path | None = None) -> None:
        self.rewarder = rewarder
        self.rollout = rollout
        self.seconds: list[float] = []
        self.log = log  # RUN/rollouts.jsonl: each group measured, appended as it is

    def __call__(self, prompts: list, completions: list, *, workload: list,
                 start_script: list | None = None, log_metric: Any = None,
                 kept_mass: list | None = None, resampled: list | None = None,
                 forced_tokens: list | None = None, trainer_state: Any = None,
                 **_: Any) -> list[float]:
        started = time.perf_counter()
        before = len(self.rewarder.reports)
        specs = [self.rollout.workload(p) if self.rollout else w
                 for p, w in zip(prompts, workload, strict=True)]
        rewards = self.rewarder(prompts, completions, workload=specs,
                                start_script=start_script)
        self.seconds.append(time.perf_counter() - started)
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as out:
                for report in self.rewarder.reports[before:]:
                    step = getattr(trainer_state, "global_step", None)
                    out.write(json.dumps({"step": None if step is None else step + 1,
                                          "time": time.time(), **report.as_dict()}) + "\n")
        if log_metric is not None:
            for name, value in self.metrics(self.rewarder.reports[before:], kept_mass,
                                            resampled, forced_tokens).items():
                log_metric(name, value)
        return rewards

    def metrics(self, reports: list, kept_mass: list | None, resampled: list | None,
                forced: list | None) -> dict[str, float]:
        scored = [s for r in reports for s in r.scored]
        n = max(1, len(scored))
        out: dict[str, float] = {}
        for key in ("apply", "build", "correct"):
            values = [r.shares()[key] * len(r.scored) for r in reports]
            out[f"measure/{key}_share"] = sum(values) / n
        speedups = [s.speedup for s in scored if s.speedup]
        if speedups:
            out["measure/speedup_geomean"] = math.exp(
                sum(math.log(x) for x in speedups) / len(speedups))
            out["measure/speedup_median"] = statistics.median(speedups)
            out["measure/faster_share"] = sum(x > 1 for x in speedups) / n
        out["measure/same_as_start_share"] = sum(s.same_as_start for s in scored) / n
        noise = [r.noise for r in reports if r.noise is not None]
        if noise:
            out["measure/noise_median"] = statistics.median(noise)
        out["time/measurement_s"] = self.seconds[-1]
        if self.rollout is not None and self.rollout.seconds:
            out["time/generation_s"] = self.rollout.seconds[-1]
        if kept_mass:
            out["mask/kept_mass"] = sum(kept_mass) / len(kept_mass)
        if resampled:
            out["decode/resampled"] = sum(resampled) / len(resampled)
        if forced:
            out["decode/forced_tokens"] = sum(forced) / len(forced)
        return out


class _StepTimes(MetricsCallback):
    """``MetricsCallback`` with each line's wall seconds per step since the previous line."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if logs and "loss" in logs:
            now, last = time.time(), getattr(self, "_last", None)
            if last is not None and state.global_step > last[1]:
                logs = {**logs, "time/step_s": (now - last[0]) / (state.global_step - last[1])}
            self._last = (now, state.global_step)
        super().on_log(args, state, control, logs, **kwargs)


def build_grpo_trainer(config: RLRunConfig, model: PreTrainedModel,
                       tokenizer: PreTrainedTokenizerBase, prompts: Any,
                       reward: MeasuredReward, rollout: ScheduleRollout, *,
                       progress: bool = True) -> Any:
    """TRL's ``GRPOTrainer`` for ``config``, with ``rollout`` and ``reward``."""
    from trl import GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is "experimental"
    return GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[reward],
                       args=grpo_args(config, progress=progress), train_dataset=prompts,
                       rollout_func=rollout, peft_config=lora_config(config),
                       callbacks=[metrics_callback(Path(config.out), _StepTimes),
                                  finite_loss_callback()])


def grpo_args(config: RLRunConfig, *, progress: bool = True) -> Any:
    """TRL's ``GRPOConfig`` for ``config``."""
    from trl import GRPOConfig

    run = Path(config.out)
    return GRPOConfig(
        output_dir=str(run / "checkpoints"), seed=config.seed, data_seed=config.seed,
        max_steps=config.max_steps, learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler, warmup_steps=config.warmup_steps,
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        gradient_accumulation_steps=1, num_generations=config.num_generations,
        max_completion_length=config.sampling.max_new_tokens,
        temperature=config.sampling.temperature, top_p=config.sampling.top_p,
        loss_type=config.loss_type, scale_rewards=config.scale_rewards, beta=config.beta,
        epsilon=config.epsilon, num_iterations=1, use_vllm=False,
        logging_steps=config.logging_steps, logging_first_step=True,
        save_strategy="steps", save_steps=config.save_steps,
        save_total_limit=config.save_total_limit, bf16=config.bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        deepspeed=str(deepspeed_path(config.deepspeed)) if config.deepspeed else None,
        report_to="none", disable_tqdm=not progress, use_cpu=not _has_gpu())


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def resumed_rl_config(run_dir: str | Path, **overrides: Any) -> RLRunConfig:
    """The config a run directory was started with (``RUN/config.yaml``), with overrides."""
    return read_config(run_dir, resolve_rl, **overrides)


def _summary(metrics: Path) -> dict[str, Any]:
    rows = read_metrics(metrics)  # a torn last line is skipped
    rewards = [r["reward"] for r in rows if "reward" in r]
    correct = [r["measure/correct_share"] for r in rows if "measure/correct_share" in r]
    steps = [r for r in rows if "time/step_s" in r]
    half = len(rewards) // 2

    def share(key: str) -> float | None:
        if not steps:
            return None
        total = sum(r["time/step_s"] for r in steps)
        return sum(r.get(key, 0.0) for r in steps) / total if total else None

    return {"first_reward": rewards[0] if rewards else None,
            "last_reward": rewards[-1] if rewards else None,
            "mean_reward_first_half": statistics.fmean(rewards[:half]) if half else None,
            "mean_reward_second_half": statistics.fmean(rewards[half:]) if half else None,
            "correct_share": statistics.fmean(correct) if correct else None,
            "generation_share": share("time/generation_s"),
            "measurement_share": share("time/measurement_s")}


def run_rl(config: RLRunConfig, *, resume: bool = False, progress: bool = True,
           evaluator: Evaluator | None = None) -> RLResult:
    """Train as ``config`` says, in ``config.out``; with ``resume``, continue from the newest
    checkpoint there.  ``evaluator`` (a ``codegen.measure.Evaluator``) measures the rewards;
    by default one for the target with the run's cache."""
    if not config.model:
        raise RunError("name the model RL starts from: an SFT run directory or model (model)")
    if not config.data:
        raise RunError("name the data: a `dragon datagen` output directory (data)")
    if not config.out:
        raise RunError("name the run directory (out)")
    source = model_dir(config.model)
    run = Path(config.out)
    checkpoint = start_run(run, resume=resume, max_steps=config.max_steps)
    target: Any = config.target or data_target(config.data)
    if evaluator is None:  # one given measures where it was made to (over RPC, say)
        check_device(target)
    check_source_memory(config, source)
    started = time.time()
    prompts = load_prompts(config)
    with run_lock(run):
        # Again, now that no other run can start here between the check and the first file.
        checkpoint = start_run(run, resume=resume, max_steps=config.max_steps)
        return _train(config, run, source, target, prompts, checkpoint, started,
                      progress=progress, evaluator=evaluator)


def check_device(target: Any) -> None:
    """``RunError`` unless ``target`` is a target whose device this machine has: rewards are
    measured by running kernels, so a run without it would sample for nothing."""
    from codegen.measure.devices import create

    try:
        device = create(target)
    except (ValueError, TypeError) as exc:  # TargetError
        raise RunError(f"target: {exc}") from None
    info = device.describe()
    if not info.present:
        raise RunError(f"target {device.ref.target_kind}: this machine has no such device "
                       f"({info.name}), and rewards are measured by running kernels: train "
                       "where the device is")


def check_source_memory(config: RLRunConfig, source: Path) -> None:
    """``RunError`` (``ModelTooLarge``) when training the starting model cannot fit in this
    machine's memory, estimated from its config.json."""
    from transformers import AutoConfig

    from training.train.memory import check_memory

    try:
        model_config = AutoConfig.from_pretrained(source, local_files_only=True)
    except Exception as exc:  # noqa: BLE001  a broken config.json
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()),
                     type(exc).__name__)
        raise RunError(f"cannot load the model from {source}: {first[:300]}") from None
    check_memory(model_config, full=not config.use_peft, bf16=config.bf16,
                 deepspeed=bool(config.deepspeed), what=f"the model in {source}")


def _train(config: RLRunConfig, run: Path, source: Path, target: Any, prompts: Any,
           checkpoint: str | None, started: float, *, progress: bool,
           evaluator: Evaluator | None) -> RLResult:
    from transformers import set_seed

    from training.train.reward import RewardConfig, Rewarder

    set_seed(config.seed)
    model, tokenizer = load_model_dir(source, bf16=config.bf16)
    prompt_config = prompt_config_of(tokenizer)  # the format the model was trained on
    prompts = in_prompt_format(prompts, prompt_config)
    if is_main_process():  # the run's first files, once its model loaded
        write_config(config, run)
        repair_metrics(run / METRICS_FILE)
        repair_metrics(run / ROLLOUTS_FILE)  # the torn line of a run killed writing it
    owned = evaluator is None
    if evaluator is None:
        evaluator = Evaluator(target, builders=config.builders, config=config.measure,
                              cache=str(run / CACHE_FILE))
    rollout = ScheduleRollout(
        workload_of(dict(zip(prompts["prompt"], prompts["workload"], strict=True))),
        evaluator.target, sampling=config.sampling)
    rewarder = Rewarder(evaluator.target, RewardConfig(cap=config.cap,
                                                       retime_best=config.retime_best,
                                                       best_of=config.best_of),
                        measure=config.measure, evaluator=evaluator)
    rewarder.prompt_config = prompt_config
    reward = MeasuredReward(rewarder, rollout,
                            log=run / ROLLOUTS_FILE if is_main_process() else None)
    try:
        trainer = build_grpo_trainer(config, model, tokenizer, prompts, reward, rollout,
                                     progress=progress)
        trainer.train(resume_from_checkpoint=checkpoint)
        final = save_final(trainer, tokenizer, run, use_peft=config.use_peft)
    finally:
        rewarder.close()
        if owned:
            evaluator.close()
    result = RLResult(run_dir=str(run), final_dir=str(final), steps=trainer.state.global_step,
                      seconds=time.time() - started, prompts=len(prompts),
                      resumed_from=checkpoint, seed=config.seed,
                      **_summary(run / METRICS_FILE))
    write_result(trainer, run, result)
    return result
