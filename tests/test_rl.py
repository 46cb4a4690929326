"""``dragon rl`` (training.train.rl): real short GRPO runs on the CPU, rollouts decoded
schedule-aware and rewards measured on llvm kernels.

The small `dragon datagen` output of ``tests/tiny_datagen.py`` feeds a very small SFT run (a few
seconds), the model RL starts from; one 2-step GRPO run of it, checkpointed every step, feeds
the tests of the run directory, the metrics and the weights, and resume adds a third step to a
copy of it.  How rewards rank real kernels (wrong < slow < fast, refinements against their
start) is tests/test_reward.py's.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dragon_dsl.cli_kit import ExitCode
from dragon_dsl.configs import ConfigError, from_flat
from training.train import (
    RL_PRESETS,
    RLResult,
    RLRunConfig,
    RunError,
    resolve_rl,
    resumed_rl_config,
    run_rl,
)
from training.train.sft_config import CONFIGS_DIR

STEPS = 2


def _config(data: Path, model: Path, out: Path, **changes) -> RLRunConfig:
    # One construction and one refinement prompt, 4 completions of one prompt a step.
    base = dict(model=str(model), data=str(data), out=str(out), max_prompts=2,
                num_generations=4, prompts_per_step=1, max_steps=STEPS, learning_rate=1e-4,
                lr_scheduler="constant", warmup_steps=0, max_new_tokens=160, repeat=2,
                min_repeat_ms=1.0, builders=1, logging_steps=1, save_steps=1,
                save_total_limit=3)
    return from_flat(RLRunConfig, **{**base, **changes})


@pytest.fixture(scope="module")
def rl_run(datagen_dir, sft_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("rl") / "run"
    return run_rl(_config(datagen_dir, sft_model, out), progress=False)


def _metrics(root: str | Path) -> list[dict]:
    return [json.loads(line) for line in (Path(root) / "metrics.jsonl").read_text().splitlines()]


# ---- configs -------------------------------------------------------------------------------

def test_presets_validate_without_a_model():
    assert resolve_rl("tiny") == RL_PRESETS["tiny"]
    assert resolve_rl("paper", model="/no/such/model").use_peft


def test_the_config_files_say_what_the_presets_say():
    assert resolve_rl(file=CONFIGS_DIR / "rl_tiny.yaml") == RL_PRESETS["tiny"]
    paper = resolve_rl(file=CONFIGS_DIR / "rl_paper.yaml")
    assert paper == replace(RL_PRESETS["paper"], model="runs/sft-paper")


def test_flat_and_nested_keys_set_the_nested_configs(tmp_path):
    """``sampling`` and ``measure`` nest; the flat keys and flags of before still set them."""
    nested = tmp_path / "nested.yaml"
    nested.write_text("preset: tiny\nsampling: {temperature: 0.7}\nmeasure: {repeat: 4}\n")
    flat = tmp_path / "flat.yaml"
    flat.write_text("preset: tiny\ntemperature: 0.7\nrepeat: 4\n")
    config = resolve_rl(file=nested)
    assert config == resolve_rl(file=flat)
    assert (config.sampling.temperature, config.sampling.max_new_tokens) == (0.7, 640)
    assert (config.measure.repeat, config.measure.min_repeat_ms) == (4, 5.0)
    assert resolve_rl("tiny", temperature=0.5).sampling.temperature == 0.5
    with pytest.raises(ConfigError, match="temperature"):
        resolve_rl("tiny", temperature=0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("sampling: {nosuch: 1}\n")
    with pytest.raises(ConfigError, match="nosuch"):
        resolve_rl(file=bad)


# ---- a real run ----------------------------------------------------------------------------

def test_the_run_directory_is_complete(rl_run, datagen_dir, sft_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = Path(rl_run.run_dir)
    assert isinstance(rl_run, RLResult)
    assert rl_run.steps == STEPS and rl_run.prompts == 2 and rl_run.resumed_from is None
    assert resumed_rl_config(root) == _config(datagen_dir, sft_model, root)
    steps = [r for r in _metrics(root) if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    for row in steps:
        # The reward, what the measurements found, and where the step's time went.
        assert -1.0 <= row["reward"] <= 1.0
        assert 0.0 <= row["measure/correct_share"] <= 1.0
        assert row["measure/apply_share"] == 1.0  # schedule-aware: every rollout applies
        assert row["time/generation_s"] > 0 and row["time/measurement_s"] > 0
        assert 0.0 < row["mask/kept_mass"] <= 1.0
    summary = json.loads((root / "result.json").read_text())
    assert summary["steps"] == STEPS and summary["correct_share"] is not None
    assert summary["first_reward"] == steps[0]["reward"]
    assert sorted(p.name for p in (root / "checkpoints").glob("checkpoint-*")) == \
        [f"checkpoint-{s}" for s in range(1, STEPS + 1)]
    model = AutoModelForCausalLM.from_pretrained(rl_run.final_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(rl_run.final_dir, local_files_only=True)
    assert model.config.vocab_size >= len(tokenizer)


def test_every_group_measured_is_logged_with_its_scripts_and_verdicts(rl_run):
    """``RUN/rollouts.jsonl``: one line per group, each completion's script with the status,
    message, latency and reward it was scored with; the rewards are those the metrics
    averaged."""
    from codegen.measure import Status
    from codegen.workloads import workload
    from dragon_dsl import parse

    lines = [json.loads(line) for line in
             (Path(rl_run.run_dir) / "rollouts.jsonl").read_text().splitlines()]
    assert [g["step"] for g in lines] == list(range(1, STEPS + 1))  # one prompt a step
    for group, step in zip(lines, (r for r in _metrics(rl_run.run_dir) if "loss" in r),
                           strict=True):
        workload(group["workload"])  # the spec of the kernel measured
        assert len(group["completions"]) == 4
        for c in group["completions"]:
            parse(c["script"])
            assert Status(c["status"]) and -1.0 <= c["reward"] <= 1.0
            assert (c["latency_s"] is not None) == (c["status"] == "correct")
        rewards = [c["reward"] for c in group["completions"]]
        assert sum(rewards) / len(rewards) == pytest.approx(step["rewards/measured/mean"])


def test_the_weights_moved(rl_run, sft_model):
    import torch
    from transformers import AutoModelForCausalLM

    assert any(r.get("grad_norm", 0) > 0 for r in _metrics(rl_run.run_dir))
    before = AutoModelForCausalLM.from_pretrained(sft_model / "final", local_files_only=True)
    after = AutoModelForCausalLM.from_pretrained(rl_run.final_dir, local_files_only=True)
    old, new = before.state_dict(), after.state_dict()
    assert old.keys() == new.keys()
    assert all(torch.isfinite(t).all() for t in new.values())
    moved = [k for k in old if not torch.equal(old[k], new[k])]
    assert moved, "GRPO changed no weight"


def test_resume_continues_from_the_last_checkpoint(rl_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(rl_run.run_dir, copy)
    shutil.rmtree(copy / "final")
    before = len(_metrics(copy))
    with pytest.raises(RunError, match="already holds a run"):
        run_rl(resumed_rl_config(copy), progress=False)
    result = run_rl(resumed_rl_config(copy, max_steps=STEPS + 1), resume=True, progress=False)
    assert Path(result.resumed_from).name == f"checkpoint-{STEPS}"
    assert result.steps == STEPS + 1
    after = [r for r in _metrics(copy)[before:] if "loss" in r]
    assert [r["step"] for r in after] == [STEPS + 1]
    assert (copy / "final" / "config.json").is_file()
    # The optimizer went on from the checkpoint's state: Adam has taken STEPS + 1 steps.
    import torch

    saved = torch.load(copy / "checkpoints" / f"checkpoint-{STEPS + 1}" / "optimizer.pt",
                       weights_only=False)
    assert {int(s["step"]) for s in saved["state"].values()} == {STEPS + 1}


def test_a_run_killed_after_its_last_checkpoint_resumes_to_its_weights(rl_run, tmp_path):
    # As an uninterrupted run ends: the final model is the last checkpoint's weights, not the
    # SFT model's; nothing more is trained.
    import torch
    from safetensors.torch import load_file

    copy = tmp_path / "run"
    shutil.copytree(rl_run.run_dir, copy)
    shutil.rmtree(copy / "final")
    result = run_rl(resumed_rl_config(copy), resume=True, progress=False)
    assert result.steps == STEPS
    last = load_file(copy / "checkpoints" / f"checkpoint-{STEPS}" / "model.safetensors")
    final = load_file(Path(result.final_dir) / "model.safetensors")
    uninterrupted = load_file(Path(rl_run.final_dir) / "model.safetensors")
    assert last.keys() == final.keys()
    assert all(torch.equal(final[k], last[k]) and torch.equal(final[k], uninterrupted[k])
               for k in last)


# ---- runs that cannot start ----------------------------------------------------------------

def test_nothing_to_resume(datagen_dir, sft_model, tmp_path):
    with pytest.raises(RunError, match="nothing to resume .* no config.yaml"):
        resumed_rl_config(tmp_path)
    with pytest.raises(RunError, match="nothing to resume .* no checkpoints"):
        run_rl(_config(datagen_dir, sft_model, tmp_path / "out"), resume=True, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_model_path_that_is_not_a_model(datagen_dir, tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(RunError, match="no model in .*config.json.*nothing is downloaded"):
        run_rl(_config(datagen_dir, tmp_path, tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()


def test_data_without_datasets(datagen_dir, sft_model, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RunError, match="cannot read the data's target.*give --target"):
        run_rl(_config(empty, sft_model, tmp_path / "out"), progress=False)
    shutil.copy(datagen_dir / "datagen.json", empty)  # the target, but no datasets
    with pytest.raises(RunError, match="no construction dataset in"):
        run_rl(_config(empty, sft_model, tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_validates_and_refuses(tmp_path, capsys):
    from dragon_dsl.cli import main

    assert main(["rl", "--preset", "paper", "--model", "/no/such/model", "--validate"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "/no/such/model"
    assert main(["rl", "--resume", "--out", str(tmp_path)]) == ExitCode.USAGE
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["rl", "--preset", "tiny", "--num-generations", "1"]) == ExitCode.USAGE
    assert "num_generations" in capsys.readouterr().err
    # best of more completions than a group holds: refused, naming both
    assert main(["rl", "--preset", "tiny", "--best-of", "8"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "best_of" in err and "num_generations=4" in err
    assert main(["rl", "--preset", "tiny", "--best-of", "4", "--model", "m", "--validate"]) == 0
    assert json.loads(capsys.readouterr().out)["best_of"] == 4


def test_scale_rewards_reaches_trl_and_a_wrong_one_is_refused(tmp_path, capsys):
    """How advantages are scaled is TRL's ``scale_rewards``, passed through as given."""
    from dragon_dsl.cli import main
    from training.train.rl import grpo_args

    for scale in ("group", "batch", "none"):
        config = _config(tmp_path, tmp_path, tmp_path / "run", scale_rewards=scale)
        assert grpo_args(config, progress=False).scale_rewards == scale
    assert RL_PRESETS["tiny"].scale_rewards == "group"  # TRL's own default
    assert main(["rl", "--preset", "tiny", "--scale-rewards", "sideways"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "--scale-rewards" in err and "sideways" in err and "batch" in err
    with pytest.raises(ConfigError, match="scale_rewards"):  # a YAML file's value
        resolve_rl("tiny", scale_rewards="std")


def test_a_format_3_policy_reads_its_prompts_tiles_innermost_first(datagen_dir):
    """``dragon rl`` of a format-3 model prompts it as it was trained: the script a refinement
    prompt shows has its tiles innermost first; construction prompts, and any prompt for a
    format-2 model, are as the datasets hold them."""
    from training.datagen.dataset import in_prompt_format
    from training.prompts.templates import PromptConfig, flip_tiles
    from training.train.rl import load_prompts

    prompts = load_prompts(RLRunConfig(data=str(datagen_dir), out="unused"))
    assert in_prompt_format(prompts, PromptConfig()) is prompts
    inner = in_prompt_format(prompts, PromptConfig(tile_order="inner"))
    changed = 0
    for before, after in zip(prompts, inner, strict=True):
        head, marker, shown = before["prompt"].partition("\nscript (latency ")
        assert after["prompt"] == head + marker + flip_tiles(shown)
        assert marker or after["prompt"] == before["prompt"]
        changed += after["prompt"] != before["prompt"]
    assert changed, "no refinement prompt shows a tile: the test shows nothing"


def test_max_kernel_ms_leaves_out_the_prompts_of_slow_kernels():
    """``max_kernel_ms`` drops every prompt of a workload whose fastest script in the train
    splits ran longer, keeps every other, and names itself when it would leave nothing (the
    kept corpus: a thousand workloads measured by search)."""
    from datasets import load_from_disk

    from training.train.rl import load_prompts

    corpus = Path(__file__).resolve().parent.parent / "corpus" / "llvm"
    fastest: dict[str, float] = {}
    for task in ("construction", "refinement"):
        train = load_from_disk(str(corpus / task))["train"]
        for spec, latency in zip(train["workload"], train["latency_s"], strict=True):
            if latency not in (None, ""):
                fastest[spec] = min(float(latency), fastest.get(spec, math.inf))
    every = load_prompts(RLRunConfig(data=str(corpus), out="unused"))
    kept = load_prompts(RLRunConfig(data=str(corpus), out="unused", max_kernel_ms=20))
    fast = {spec for spec, latency in fastest.items() if latency <= 0.020}
    assert set(kept["workload"]) == fast and fast < set(every["workload"])
    assert sorted(kept["prompt"]) == sorted(
        p for p, spec in zip(every["prompt"], every["workload"], strict=True) if spec in fast)
    with pytest.raises(RunError, match="max_kernel_ms=1e-05 leaves none"):
        load_prompts(RLRunConfig(data=str(corpus), out="unused", max_kernel_ms=1e-5))
