"""Shared test set-up: Hypothesis profiles, MetaSchedule search spaces kept for the whole
session (the first design-space generation in a process costs 15 to 25 s), and one small
`dragon datagen` output for the training tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# Profiles are chosen by DRAGON_HYPOTHESIS_PROFILE: "ci" (the default run), "thorough".
settings.register_profile(
    "ci", max_examples=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("DRAGON_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def datagen_dir(tmp_path_factory):
    """A small `dragon datagen` output from a real search (``tests/tiny_datagen.py``), shared
    by the training tests."""
    from .tiny_datagen import write_datagen

    return write_datagen(tmp_path_factory.mktemp("datagen"))


@pytest.fixture(scope="session")
def sft_model(datagen_dir, tmp_path_factory):
    """An SFT run directory: a very small model trained 8 steps on ``datagen_dir`` (a few
    seconds), checkpointed at steps 4 and 8; its final/ model is step 8's."""
    from training.train import SFTRunConfig, run_sft

    out = tmp_path_factory.mktemp("sft") / "run"
    run_sft(SFTRunConfig(data=str(datagen_dir), out=str(out), model="tiny", hidden_size=32,
                         layers=1, heads=2, vocab_size=400, max_steps=8, learning_rate=1e-2,
                         lr_scheduler="constant", batch_size=4, max_length=768,
                         logging_steps=4, eval_steps=0, max_eval_examples=4, save_steps=4,
                         keep_best=False), progress=False)
    return out
