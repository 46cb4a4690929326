"""Draw again what a `dragon rl` run's steps drew, and score it as the run did: each step's
prompts (``which_prompts.py``), 8 schedule-aware samples of each from MODEL, scored by a
``Rewarder`` with the run's reward and measure config (no cache); prints each completion's
status, stage, message and latency.

    python docs/rl-kl/replay_steps.py runs/s33/rl runs/s33/rl/final 29 43
"""

from __future__ import annotations

import collections
import sys
from dataclasses import replace
from pathlib import Path

from datasets import Dataset

from codegen.workloads import workload
from training.cli.common import load_model
from training.datagen.dataset import in_prompt_format
from training.prompts.templates import prompt_config_of
from training.sampling.schedule_aware import sample_schedule_aware
from training.train.reward import RewardConfig, Rewarder
from training.train.rl import data_target, load_prompts, resumed_rl_config

sys.path.insert(0, str(Path(__file__).parent))
from which_prompts import steps_of  # noqa: E402


def main(run: str, model_dir: str, steps: list[int]) -> None:
    config = resumed_rl_config(run)
    prompts = load_prompts(config)
    rows = {(r["task"], r["workload"]): r for r in prompts}
    model, tokenizer = load_model(model_dir)
    prompt_config = prompt_config_of(tokenizer)
    target = config.target or data_target(config.data)
    rewarder = Rewarder(target, RewardConfig(cap=config.cap, retime_best=config.retime_best,
                                             best_of=config.best_of),
                        measure=config.measure, builders=2, cache=False)
    rewarder.prompt_config = prompt_config
    try:
        for step, drawn in steps_of(run, steps).items():
            for task, spec in drawn:
                row = in_prompt_format(Dataset.from_list([rows[(task, spec)]]), prompt_config)[0]
                samples = sample_schedule_aware(model, tokenizer, row["prompt"], workload(spec),
                                                target, config=replace(config.sampling, n=8,
                                                                       seed=step))
                rewarder([row["prompt"]] * 8, [s.text for s in samples], workload=[spec] * 8,
                         start_script=[row["start_script"]] * 8)
                scored = rewarder.reports[-1].scored
                print(step, task, spec,
                      collections.Counter(s.outcome.status.value for s in scored))
                for s in scored:
                    print("   ", s.outcome.status.value, s.outcome.stage,
                          (s.outcome.message or "")[:160], s.outcome.latency_s)
    finally:
        rewarder.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]])
