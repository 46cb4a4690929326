"""Which prompts a `dragon rl` run drew at each step, replayed from its config: the run's
prompts (``training.train.rl.load_prompts``) through TRL's own ``RepeatSampler`` with the
run's seed, as ``GRPOTrainer`` draws them.  For runs older than ``RUN/rollouts.jsonl``.

    python docs/rl-kl/which_prompts.py runs/s33/rl 29 43 45 53 59
"""

from __future__ import annotations

import sys

from trl.trainer.grpo_trainer import RepeatSampler

from training.train.rl import load_prompts, resumed_rl_config


def steps_of(run: str, steps: list[int]) -> dict[int, list[tuple[str, str]]]:
    config = resumed_rl_config(run)
    prompts = load_prompts(config)
    per_step = config.prompts_per_step * config.num_generations
    order = list(RepeatSampler(data_source=prompts, mini_repeat_count=config.num_generations,
                               batch_size=config.prompts_per_step, repeat_count=1,
                               shuffle=True, seed=config.seed))
    out = {}
    for step in steps:
        batch = order[(step - 1) * per_step: step * per_step]
        rows = sorted(set(batch), key=batch.index)
        out[step] = [(prompts[i]["task"], prompts[i]["workload"]) for i in rows]
    return out


if __name__ == "__main__":
    for step, rows in steps_of(sys.argv[1], [int(s) for s in sys.argv[2:]]).items():
        for task, spec in rows:
            print(step, task, spec)
