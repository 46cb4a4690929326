"""``dragon sft`` and ``dragon rl`` under hostile use (issue 24): no wrong result, no lost run,
no traceback.  Each case runs the command in this process (``dragon_cmd``) on the small
`dragon datagen` output and the very small SFT run the training tests share, or a damaged
copy of them, and expects exit code 2 with one line ``dragon: ...`` naming what is wrong (or,
for a finished run resumed, exit 0 and nothing trained)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from dragon_dsl.cli_kit import ExitCode

# A very small tiny-model run: a few seconds on 2 cores.
SMALL = ["--hidden-size", "32", "--layers", "1", "--heads", "2", "--vocab-size", "400",
         "--max-steps", "2", "--batch-size", "4", "--max-length", "768", "--eval-steps", "0",
         "--save-steps", "2", "--logging-steps", "1", "--max-eval-examples", "4", "-q"]
# A very small RL run (refused before it trains, in these tests).
RL_SMALL = ["--preset", "tiny", "--max-prompts", "2", "--num-generations", "2",
            "--prompts-per-step", "1", "--max-steps", "1", "--max-new-tokens", "64",
            "--repeat", "1", "-q"]


def sft(dragon_cmd, data, out, *flags):
    return dragon_cmd(["sft", "--preset", "tiny", "--data", data, "--out", out, *SMALL, *flags])


def rl(dragon_cmd, model, data, out, *flags):
    return dragon_cmd(["rl", "--model", model, "--data", data, "--out", out, *RL_SMALL, *flags])


def refused(done, *words: str) -> str:
    """The one-line message of a command refused with exit code 2, checked for ``words``."""
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("dragon: ")]
    assert len(lines) == 1, done.stderr[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def copy_data(datagen_dir: Path, to: Path) -> Path:
    """A copy of the datagen output without the cache files earlier runs may have left."""
    shutil.copytree(datagen_dir, to, ignore=shutil.ignore_patterns("cache-*"))
    return to


def copy_run(run: Path, to: Path, *, unfinished: bool = False) -> Path:
    shutil.copytree(run, to)
    if unfinished:  # as a run killed before its end leaves it
        shutil.rmtree(to / "final")
        (to / "result.json").unlink()
    return to


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# ---- 1. a finished run resumes to nothing --------------------------------------------------

def test_sft_resume_of_a_finished_run_trains_nothing(dragon_cmd, sft_model, tmp_path):
    run = copy_run(sft_model, tmp_path / "run")
    before = {p: (run / p).read_bytes() for p in ("result.json", "final/model.safetensors")}
    lines = len((run / "metrics.jsonl").read_text().splitlines())
    done = dragon_cmd(["sft", "--resume", "--out", run, "-q"])
    assert done.returncode == ExitCode.OK, done.stderr[-2000:]
    assert "finished" in done.stdout and "nothing to resume" in done.stdout
    assert {p: (run / p).read_bytes() for p in before} == before
    assert len((run / "metrics.jsonl").read_text().splitlines()) == lines


def test_rl_resume_of_a_finished_run_trains_nothing(dragon_cmd, datagen_dir, sft_model, tmp_path):
    # A finished RL run's directory as `dragon rl` leaves it: its config, a checkpoint at its
    # last step, final/ and result.json (the weights are the SFT model's, which RL starts from).
    from dragon_dsl.configs import from_flat
    from training.train import RLRunConfig
    from training.train.run_dir import write_config

    run = tmp_path / "rl"
    (run / "checkpoints").mkdir(parents=True)
    write_config(from_flat(RLRunConfig, model=str(sft_model), data=str(datagen_dir),
                           out=str(run), max_prompts=2, num_generations=2, prompts_per_step=1,
                           max_steps=1, max_new_tokens=64, repeat=1), run)
    step = sft_model / "checkpoints" / "checkpoint-8"
    shutil.copytree(step, run / "checkpoints" / "checkpoint-1")
    state = json.loads((step / "trainer_state.json").read_text())
    (run / "checkpoints" / "checkpoint-1" / "trainer_state.json").write_text(
        json.dumps({**state, "global_step": 1, "max_steps": 1}))
    shutil.copytree(sft_model / "final", run / "final")
    (run / "result.json").write_text(json.dumps({"steps": 1}) + "\n")
    before = {p: (run / p).read_bytes() for p in ("result.json", "final/model.safetensors")}
    done = dragon_cmd(["rl", "--resume", "--out", run, "-q", "--json"])
    assert done.returncode == ExitCode.OK, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"steps": 1}
    assert {p: (run / p).read_bytes() for p in before} == before
    assert not (run / "metrics.jsonl").exists()


# ---- 2. one run per run directory ----------------------------------------------------------

def test_a_run_directory_in_use_is_refused_at_once(dragon_cmd, datagen_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)  # as a run training there holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused(sft(dragon_cmd, datagen_dir, out), str(out), "in use by another run")
    finally:
        os.close(fd)
    assert not (out / "config.yaml").exists() and not (out / "metrics.jsonl").exists()


# ---- 3. non-finite settings and losses -----------------------------------------------------

@pytest.mark.parametrize("flag", ["--learning-rate", "--epochs", "--weight-decay"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_sft_refuses_non_finite_settings(dragon_cmd, flag, value, tmp_path):
    name = flag[2:].replace("-", "_")
    refused(dragon_cmd(["sft", "--preset", "tiny", "--data", tmp_path, "--out", tmp_path / "o",
                        flag, value]), name, "finite")


def test_rl_refuses_non_finite_settings(dragon_cmd, tmp_path):
    refused(dragon_cmd(["rl", "--preset", "tiny", "--model", tmp_path, "--data", tmp_path,
                        "--out", tmp_path / "o", "--learning-rate", "inf"]),
            "learning_rate", "finite")


def test_a_diverging_run_stops_without_a_final_model(dragon_cmd, datagen_dir, tmp_path):
    out = tmp_path / "run"
    line = refused(sft(dragon_cmd, datagen_dir, out, "--learning-rate", "1e30",
                       "--max-steps", "4", "--save-steps", "4"), "diverged", "step")
    assert "nan" in line or "inf" in line
    assert not (out / "final").exists() and not (out / "result.json").exists()


# ---- 4. inputs are read, never written -----------------------------------------------------

def test_sft_and_rl_write_nothing_into_the_data(dragon_cmd, datagen_dir, tmp_path):
    from training.train import resolve_rl
    from training.train.rl import load_prompts

    data = copy_data(datagen_dir, tmp_path / "data")
    before = files(data)
    done = sft(dragon_cmd, data, tmp_path / "run")
    assert done.returncode == ExitCode.OK, done.stderr[-2000:]
    load_prompts(resolve_rl("tiny", data=str(data)))
    assert files(data) == before


# ---- 5. a model too large for the machine --------------------------------------------------

def test_a_model_too_large_for_memory_is_refused_before_allocation(dragon_cmd, datagen_dir,
                                                                   tmp_path):
    out = tmp_path / "run"
    line = refused(dragon_cmd(["sft", "--preset", "tiny", "--data", datagen_dir, "--out", out,
                               "--hidden-size", "65536", "-q"]), "parameters", "GiB")
    assert "65536" in line
    assert not out.exists()


# ---- 6. a torn metrics line ----------------------------------------------------------------

def test_resume_repairs_a_torn_metrics_line(dragon_cmd, sft_model, tmp_path):
    run = copy_run(sft_model, tmp_path / "run", unfinished=True)
    shutil.rmtree(run / "checkpoints" / "checkpoint-8")
    metrics = run / "metrics.jsonl"
    losses = sum("loss" in json.loads(ln) for ln in metrics.read_text().splitlines())
    with metrics.open("a") as f:
        f.write('{"step": 5, "loss": 1.2')  # killed while writing a line
    done = dragon_cmd(["sft", "--resume", "--out", run, "-q", "--json"])
    assert done.returncode == ExitCode.OK, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["steps"] == 8 and result["last_loss"] is not None
    rows = [json.loads(ln) for ln in metrics.read_text().splitlines()]  # every line whole
    assert [r["step"] for r in rows if "loss" in r][losses:] == [8]  # logged every 4 steps


# ---- 7. one line, not a traceback ----------------------------------------------------------

def test_an_out_that_is_a_file_is_refused(dragon_cmd, datagen_dir, sft_model, tmp_path):
    out = tmp_path / "file"
    out.write_text("not a directory")
    refused(sft(dragon_cmd, datagen_dir, out), str(out), "is not a directory")
    refused(rl(dragon_cmd, sft_model, datagen_dir, out), str(out), "is not a directory")
    refused(sft(dragon_cmd, datagen_dir, out / "run"), "is not a directory")
    assert out.read_text() == "not a directory"


def test_an_out_that_cannot_be_written_is_refused(dragon_cmd, datagen_dir, sft_model):
    out = Path("/proc/dragon-hostile-run")  # read-only even for root
    refused(sft(dragon_cmd, datagen_dir, out), "cannot write the run directory")
    refused(rl(dragon_cmd, sft_model, datagen_dir, out), "cannot write the run directory")


def test_a_truncated_model_is_refused(dragon_cmd, datagen_dir, sft_model, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(sft_model / "final", model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    refused(rl(dragon_cmd, model, datagen_dir, tmp_path / "run"), "cannot load the model",
            str(model))
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_a_corrupt_dataset_dict_is_refused(dragon_cmd, datagen_dir, sft_model, tmp_path):
    data = copy_data(datagen_dir, tmp_path / "data")
    (data / "construction" / "dataset_dict.json").write_text('{"splits": ["tra')
    refused(sft(dragon_cmd, data, tmp_path / "run"), "construction dataset")
    refused(rl(dragon_cmd, sft_model, data, tmp_path / "rl"), "construction dataset")


def test_a_truncated_arrow_file_is_refused(dragon_cmd, datagen_dir, tmp_path):
    data = copy_data(datagen_dir, tmp_path / "data")
    arrow = next((data / "construction" / "train").glob("*.arrow"))
    arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    refused(sft(dragon_cmd, data, tmp_path / "run"), "construction dataset")


@pytest.mark.parametrize("damage", ["truncated weights", "no trainer_state.json",
                                    "truncated optimizer"])
def test_a_damaged_checkpoint_is_refused_on_resume(dragon_cmd, sft_model, tmp_path, damage):
    run = copy_run(sft_model, tmp_path / "run", unfinished=True)
    step = run / "checkpoints" / "checkpoint-8"
    if damage == "no trainer_state.json":
        (step / "trainer_state.json").unlink()
    else:
        file = step / ("model.safetensors" if "weights" in damage else "optimizer.pt")
        file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    line = refused(dragon_cmd(["sft", "--resume", "--out", run, "-q"]), "checkpoint-8")
    assert "trainer_state.json" in line if "state" in damage else "damaged" in line


def _foreign_tokenizer_model(sft_model: Path, to: Path) -> Path:
    from transformers import AutoTokenizer

    shutil.copytree(sft_model / "final", to)
    tokenizer = AutoTokenizer.from_pretrained(to)
    tokenizer.add_tokens([f"<extra{i}>" for i in range(600)])
    tokenizer.save_pretrained(to)
    return to


def test_a_tokenizer_larger_than_the_embedding_is_refused(dragon_cmd, datagen_dir, sft_model,
                                                          tmp_path):
    model = _foreign_tokenizer_model(sft_model, tmp_path / "model")
    refused(rl(dragon_cmd, model, datagen_dir, tmp_path / "run"), "tokenizer", "embedding")
    refused(dragon_cmd(["sample", "--model", model, "--workload", "matmul(m=32,n=32,k=32)",
                        "-n", "1", "--max-new-tokens", "16"]), "tokenizer", "embedding")


def test_rl_refuses_a_bogus_target(dragon_cmd, datagen_dir, sft_model, tmp_path):
    refused(rl(dragon_cmd, sft_model, datagen_dir, tmp_path / "run", "--target", "bogus"),
            "target", "bogus")
    assert not (tmp_path / "run").exists()


def test_rl_refuses_a_device_this_machine_lacks_before_sampling(dragon_cmd, datagen_dir,
                                                                sft_model, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    refused(rl(dragon_cmd, sft_model, datagen_dir, tmp_path / "run", "--target", "cuda"),
            "cuda", "no such device")
    assert not (tmp_path / "run").exists()


def test_sft_refuses_a_max_length_that_leaves_no_completion(dragon_cmd, datagen_dir, tmp_path):
    out = tmp_path / "run"
    refused(sft(dragon_cmd, datagen_dir, out, "--max-length", "1"), "max_length 1")
    assert not (out / "config.yaml").exists()


def test_sft_refuses_a_deepspeed_file_that_is_not_json(dragon_cmd, tmp_path):
    refused(dragon_cmd(["sft", "--preset", "tiny", "--data", tmp_path, "--out", tmp_path / "o",
                        "--deepspeed", "/etc/passwd"]), "deepspeed", "/etc/passwd")


@pytest.mark.parametrize("command", ["sft", "rl"])
def test_a_binary_config_file_is_refused(dragon_cmd, tmp_path, command):
    config = tmp_path / "config.yaml"
    config.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    refused(dragon_cmd([command, "--config", config, "--validate"]), str(config), "YAML")


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"[" * 100_000])
def test_a_damaged_datagen_json_is_refused_naming_it(dragon_cmd, datagen_dir, sft_model,
                                                     tmp_path, content):
    data = copy_data(datagen_dir, tmp_path / "data")
    (data / "datagen.json").write_bytes(content)
    refused(rl(dragon_cmd, sft_model, data, tmp_path / "run"), "datagen.json", "--target")
