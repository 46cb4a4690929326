"""The built-in model (``training/models/dragon-tiny``): shipped complete and small, used by
``dragon sample`` and ``dragon optimize`` without ``--model``, and named when it is missing."""

from __future__ import annotations

import json

import pytest

from dragon_dsl.cli import main
from training.models import builtin as default_model
from training.models.builtin import DefaultModelMissing, default_model_dir

from .traces import applies_in_tvm


def test_the_built_in_model_is_complete_and_small():
    path = default_model_dir()
    assert sum(f.stat().st_size for f in path.iterdir()) < 5_000_000
    assert json.loads((path / "config.json").read_text())["model_type"] == "llama"


def test_a_missing_built_in_model_is_named(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(default_model, "DEFAULT_MODEL", tmp_path)
    with pytest.raises(DefaultModelMissing, match="model.safetensors.*make default-model"):
        default_model_dir()
    assert main(["sample", "--workload", "softmax(m=32,n=64)"]) == 2
    assert "--model: the built-in model is incomplete" in capsys.readouterr().err


def test_dragon_sample_without_a_model_uses_the_built_in_one(capsys):
    code = main(["sample", "--workload", "softmax(m=32,n=64)", "-n", "2", "--max-new-tokens",
                 "256", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and len(out["samples"]) == 2
    # Schedule-aware decoding: every sample parses and applies to the kernel.
    assert all(s["parses"] and s["applies"] for s in out["samples"])
    assert all(applies_in_tvm(s["script"], "softmax(m=32,n=64)") for s in out["samples"])
