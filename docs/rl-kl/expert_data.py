"""The measured rollouts of `dragon rl` runs as a `dragon sft` dataset of the policy's own
fastest scripts (expert iteration: the policy improved by fine-tuning on the samples its
measured reward ranks first, as ReST and RAFT do), so that groups already paid for teach
more than one small policy-gradient step each.

    python docs/rl-kl/expert_data.py OUT RUN [RUN ...]

A completion is kept when it is correct, is not its prompt's start script, and ties its
group's fastest (its latency within the group's measured noise of the fastest's); for
refinement it must also beat the start script, measured again in the same group, by more
than that noise.  The noise is the group's (the fastest completion timed twice; at least
5%).  The prompt is the one the run trained on (``load_prompts`` of the run's config),
matched by workload and start script.  OUT gets `construction/` and `refinement/` with a
`train` split of the kept pairs and the data's own `validation` split, as `dragon sft` reads
them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from datasets import Dataset, DatasetDict, load_from_disk
from paired_steps import rollouts  # this folder's: run as a script, it is on sys.path

from training.train.rl import load_prompts, resumed_rl_config

MIN_NOISE = 0.05


def kept(group: dict) -> list[str]:
    """The scripts of ``group`` worth imitating (see the module's docstring)."""
    noise = max(float(group.get("noise") or 0.0), MIN_NOISE)
    refine = bool(group["start_script"])
    correct = [c for c in group["completions"]
               if c["status"] == "correct" and c["latency_s"] and not c["same_as_start"]]
    if not correct:
        return []
    fastest = min(c["latency_s"] for c in correct)
    out = []
    for c in correct:
        if c["latency_s"] > fastest * (1 + noise):
            continue
        if refine and not (c["speedup"] and c["speedup"] > 1 + noise):
            continue
        out.append(c["script"])
    return list(dict.fromkeys(out))


def main(out: str, runs: list[str]) -> None:
    root = Path(out)
    pairs: dict[str, list[dict]] = {"construction": [], "refinement": []}
    seen: set[tuple[str, str]] = set()
    groups = 0
    for run in map(Path, runs):
        config = resumed_rl_config(run) if (run / "config.yaml").exists() else _config_of(run)
        prompts = {(p["workload"], p["start_script"]): p for p in load_prompts(config)}
        for group in rollouts(run):
            groups += 1
            prompt = prompts.get((group["workload"], group["start_script"] or ""))
            if prompt is None:
                raise SystemExit(f"{run}: no prompt of {group['workload']} with that start")
            for script in kept(group):
                key = (prompt["prompt"], script)
                if key in seen:
                    continue
                seen.add(key)
                pairs[prompt["task"]].append({
                    "prompt": prompt["prompt"], "completion": script + "<end>\n",
                    "workload": group["workload"], "task": prompt["task"]})
        data = Path(config.data)
    for task, rows in pairs.items():
        splits = {"train": Dataset.from_list(rows)}
        splits["validation"] = load_from_disk(str(data / task))["validation"]
        splits["validation"] = splits["validation"].select_columns(
            ["prompt", "completion", "workload", "task"])
        DatasetDict(splits).save_to_disk(str(root / task))
        print(f"{task}: {len(rows)} pairs")
    print(f"{groups} groups read from {len(runs)} runs")


def _config_of(run: Path):
    """A documented run keeps its config as ``rl.config.yaml``."""
    from training.train.grpo_config import resolve_rl

    return resolve_rl(file=run / "rl.config.yaml")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
