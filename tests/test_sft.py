"""``dragon sft`` (training.train): configs, a real short SFT run, resume, the loss mask, and
sampling from the trained model.

One real MetaSchedule search of two tiny workloads feeds a small dataset (``datagen_dir``,
``tests/tiny_datagen.py``); one short run of a very small model (a few seconds) feeds the tests
that need a trained model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from training.train import (
    CONFIGS_DIR,
    PRESETS,
    ConfigError,
    SFTRunConfig,
    build_trainer,
    check_tokenizer,
    last_checkpoint,
    load_examples,
    make_model,
    make_tokenizer,
    resolve,
    resumed_config,
    run_sft,
)
from training.train.sft import RunError

from .tiny_datagen import SPECS
from .traces import applies_in_tvm

DRAGON = os.path.join(os.path.dirname(sys.executable), "dragon")
STEPS = 8


def _config(data: Path, out: Path, **changes) -> SFTRunConfig:
    base = dict(data=str(data), out=str(out), model="tiny", hidden_size=32, layers=1, heads=2,
                vocab_size=400, max_steps=STEPS, learning_rate=1e-2, warmup_steps=0,
                batch_size=4, max_length=768, logging_steps=1, eval_steps=4, save_steps=4,
                save_total_limit=3, lr_scheduler="constant")
    return SFTRunConfig(**{**base, **changes})


@pytest.fixture(scope="module")
def run(datagen_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    return run_sft(_config(datagen_dir, out), progress=False)


# ---- configs -------------------------------------------------------------------------------

def test_paper_config_loads_from_yaml_and_validates():
    config = resolve(file=CONFIGS_DIR / "sft_paper.yaml")
    assert config.use_peft and config.bf16 and config.model != "tiny"
    assert config.deepspeed and (CONFIGS_DIR / config.deepspeed).is_file()
    json.loads((CONFIGS_DIR / config.deepspeed).read_text())
    assert config == replace(PRESETS["paper"], model=config.model)  # the file is the preset
    assert resolve(file=CONFIGS_DIR / "sft_tiny.yaml") == PRESETS["tiny"]


def test_flags_override_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("preset: paper\nlora_r: 8\nlearning_rate: 3e-5\n")
    config = resolve(file=path, lora_r=4)
    assert (config.lora_r, config.learning_rate, config.lora_alpha) == (4, 3e-5, 128)


@pytest.mark.parametrize("text,name", [
    ("preset: paper\nlora_r: 0\n", "lora_r"),
    ("preset: paper\nbatch_size: two\n", "batch_size"),
    ("preset: paper\nlearning_rate: -1\n", "learning_rate"),
    ("preset: paper\nlora_rank: 8\n", "lora_rank"),
    ("preset: nosuch\n", "preset"),
    ("preset: paper\ndeepspeed: no_such.json\n", "deepspeed"),
])
def test_an_invalid_config_is_refused_with_the_field_named(tmp_path, text, name):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        resolve(file=path)
    assert info.value.field == name and name in str(info.value)


def test_cli_validates_the_paper_config_without_the_model(capsys):
    from dragon_dsl.cli import main

    code = main(["sft", "--config", str(CONFIGS_DIR / "sft_paper.yaml"), "--model",
                 "/no/such/model", "--validate"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["model"] == "/no/such/model"


# ---- the data and the loss mask ------------------------------------------------------------

def test_every_prompt_and_completion_tokenizes_losslessly(datagen_dir, tmp_path):
    config = _config(datagen_dir, tmp_path / "r")
    data = load_examples(config)
    assert len(data["train"]) and len(data["validation"])
    tokenizer = make_tokenizer(config, data["train"])
    check_tokenizer(tokenizer, [t for split in data.values() for c in ("prompt", "completion")
                                for t in split[c]])

    class Lower:
        def __call__(self, text, **_):
            return type("T", (), {"input_ids": list(text.encode())})()

        def decode(self, ids):
            return bytes(ids).decode().lower()

    with pytest.raises(RunError, match="does not spell"):
        check_tokenizer(Lower(), ["Dragon construction"])


def test_a_format_3_run_learns_tiles_innermost_first_and_its_model_says_so(datagen_dir,
                                                                          tmp_path):
    """``tile_order="inner"``: the datasets (format 2) are read with every tile of the
    completions, and of the scripts refinement prompts show, written innermost first, and the
    final model and each checkpoint carry format 3 in their tokenizer, where every sampler
    reads it; data already in another format is refused."""
    from datasets import load_from_disk

    from training.datagen.dataset import save_atomically
    from training.prompts.templates import flip_tiles, prompt_config_of

    plain = load_examples(_config(datagen_dir, tmp_path / "a"))
    inner = load_examples(_config(datagen_dir, tmp_path / "b", tile_order="inner"))
    flipped = 0
    for before, after in zip(plain["train"], inner["train"], strict=True):
        assert after["completion"] == flip_tiles(before["completion"])
        head, _, shown = before["prompt"].partition("\nscript (latency ")
        assert after["prompt"] == head + (_ + flip_tiles(shown) if _ else "")
        flipped += after["completion"] != before["completion"]
    assert flipped, "no completion tiles: the test shows nothing"

    result = run_sft(_config(datagen_dir, tmp_path / "run", tile_order="inner", max_steps=4),
                     progress=False)
    assert prompt_config_of(result.final_dir).tile_order == "inner"
    checkpoints = sorted((tmp_path / "run" / "checkpoints").glob("checkpoint-*"))
    assert checkpoints and all(prompt_config_of(c).version == 3 for c in checkpoints)
    assert prompt_config_of(datagen_dir).tile_order == "outer"

    bad = tmp_path / "v3"
    for task in ("construction", "refinement"):
        data = load_from_disk(str(datagen_dir / task))
        save_atomically(data.map(lambda row: {"prompt_version": 3}), str(bad / task))
    with pytest.raises(RunError, match="prompt format \\[3\\]"):
        load_examples(_config(bad, tmp_path / "c"))
    with pytest.raises(ConfigError, match="tile_order"):
        _config(datagen_dir, tmp_path / "d", tile_order="sideways")


def test_loss_covers_the_completion_only(datagen_dir, tmp_path):
    config = _config(datagen_dir, tmp_path / "r")
    data = load_examples(config)
    tokenizer = make_tokenizer(config, data["train"])
    trainer = build_trainer(config, make_model(config, tokenizer), tokenizer, data,
                            progress=False)
    assert trainer.args.completion_only_loss
    rows = [trainer.train_dataset[i] for i in range(3)]
    batch = trainer.data_collator(rows)
    for i, row in enumerate(rows):
        example = data["train"][i]
        n = len(row["input_ids"])
        labels = batch["labels"][i][:n].tolist()
        kept = [t for t in labels if t != -100]
        # Only the completion (and the EOS after it) is learned; the prompt never is.
        assert tokenizer.decode(kept) == example["completion"] + tokenizer.eos_token
        first = next(j for j, t in enumerate(labels) if t != -100)
        assert tokenizer.decode(row["input_ids"][:first]) == example["prompt"]
        assert all(t != -100 for t in labels[first:])


# ---- a real run ----------------------------------------------------------------------------

def test_loss_goes_down_and_the_run_directory_is_complete(run, datagen_dir):
    import math

    root = Path(run.run_dir)
    assert run.steps == STEPS and run.last_loss < run.first_loss
    # Evaluated at the start (random weights) and after training.  The validation split is one
    # other family (softmax, trained on matmul only) after 8 steps: its loss need not fall.
    assert math.isfinite(run.first_eval_loss) and math.isfinite(run.last_eval_loss)
    # keep_best: the final model is the checkpoint of the lowest eval loss, evaluated again.
    best = [r for r in _metrics(root) if "eval_loss" in r and r["step"] > 0][:-1]
    assert Path(run.best_checkpoint).name == \
        f"checkpoint-{min(best, key=lambda r: r['eval_loss'])['step']}"
    assert run.last_eval_loss == pytest.approx(min(r["eval_loss"] for r in best))
    assert run.tokens_per_second and run.tokens_per_second > 0
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, STEPS + 1))
    assert any("eval_loss" in r for r in rows)
    assert resumed_config(root) == _config(datagen_dir, root)
    assert (root / "tokenizer" / "tokenizer.json").is_file()
    assert last_checkpoint(root).endswith(f"checkpoint-{STEPS}")
    assert json.loads((root / "result.json").read_text())["steps"] == STEPS


def _metrics(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]


def test_the_final_model_loads_with_transformers_and_generates(run):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run.final_dir, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(run.final_dir, local_files_only=True)
    ids = tokenizer("Dragon construction, target llvm\n", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids.shape[1]


def test_resume_continues_at_the_checkpoint_step(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run.run_dir, copy)
    shutil.rmtree(copy / "checkpoints" / f"checkpoint-{STEPS}")
    shutil.rmtree(copy / "final")
    metrics = copy / "metrics.jsonl"
    before = len(metrics.read_text().splitlines())
    with pytest.raises(RunError, match="already holds a run"):
        run_sft(resumed_config(copy), progress=False)
    result = run_sft(resumed_config(copy), resume=True, progress=False)
    assert result.resumed_from.endswith(f"checkpoint-{STEPS // 2}")
    assert result.steps == STEPS
    after = [json.loads(line) for line in metrics.read_text().splitlines()[before:]]
    assert [r["step"] for r in after if "loss" in r] == list(range(STEPS // 2 + 1, STEPS + 1))
    # The same data order, weights and optimizer: the resumed steps' losses match the first run.
    first = {r["step"]: r["loss"] for r in map(json.loads, (Path(run.run_dir) /
             "metrics.jsonl").read_text().splitlines()) if "loss" in r}
    for r in after:
        if "loss" in r:
            assert r["loss"] == pytest.approx(first[r["step"]], rel=1e-3)


def test_dragon_sample_on_the_trained_model_applies(run, capsys):
    from dragon_dsl.cli import main

    code = main(["sample", "--model", run.final_dir, "--workload", SPECS[0], "--target", "llvm",
                 "-n", "2", "--max-new-tokens", "160", "--json"])
    assert code == 0
    samples = json.loads(capsys.readouterr().out)["samples"]
    assert len(samples) == 2
    assert all(s["parses"] for s in samples)
    assert all(s["applies"] for s in samples if s["finish_reason"] == "end")
    assert all(applies_in_tvm(s["script"], SPECS[0]) for s in samples
               if s["finish_reason"] == "end")


@pytest.mark.slow
def test_cli_trains_a_small_run_end_to_end(datagen_dir, tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([DRAGON, "sft", "--preset", "tiny", "--data", str(datagen_dir), "--out",
                           str(out), "--max-steps", "4", "--hidden-size", "32", "--layers", "1",
                           "--vocab-size", "400", "--save-steps", "2", "--eval-steps", "2",
                           "--quiet", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["steps"] == 4
    again = subprocess.run([DRAGON, "sft", "--preset", "tiny", "--data", str(datagen_dir),
                            "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "--resume" in again.stderr


def test_lora_on_a_local_model_directory(run, datagen_dir, tmp_path):
    """The `paper` path on CPU: a local model directory (the tiny run's model), LoRA adapters,
    merged into `final/`."""
    from transformers import AutoModelForCausalLM

    config = _config(datagen_dir, tmp_path / "lora", model=run.final_dir, use_peft=True, lora_r=4,
                     lora_alpha=8, lora_target_modules="q_proj,v_proj", max_steps=2,
                     save_steps=2, eval_steps=0)
    result = run_sft(config, progress=False)
    assert result.steps == 2
    assert (tmp_path / "lora" / "adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(result.final_dir, local_files_only=True)
    assert not any("lora" in name for name, _ in merged.named_parameters())
