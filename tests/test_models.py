"""Real models as workloads: each zoo model imports into Relax, its MetaSchedule tasks build, and
the compiled Relax module computes what torch computes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # configs only: nothing may come from the hub
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from tvm import relax  # noqa: E402

from codegen.workloads.model_zoo import MODELS  # noqa: E402
from codegen.workloads.models import (  # noqa: E402
    extract_tasks,
    import_model,
    model_spec,
    model_workload,
    parse_model_spec,
)

LLVM = tvm.target.Target({"kind": "llvm", "num-cores": 2})

# Substrings of fused task names that each model must produce.
EXPECTED_KINDS = {
    "bert": ["take", "layer_norm", "matmul", "softmax", "gelu", "tanh"],
    "gpt2": ["take", "layer_norm", "matmul", "softmax", "tanh"],
    "llama": ["take", "mean", "rsqrt", "matmul", "softmax", "sigmoid"],
    "resnet": ["conv2d", "relu", "max_pool2d", "mean", "matmul"],
}


def test_import_is_cheap():
    code = "import sys, codegen.workloads.models; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("call", [
    lambda: import_model("alexnet"),
    lambda: extract_tasks("bert", "huge"),
    lambda: model_workload("model(name=vgg,preset=tiny,task=0)"),
])
def test_unknown_model_or_preset(call):
    with pytest.raises(ValueError, match=r"Expected one of \[.*\] but got (name|preset)="):
        call()


def test_spec_roundtrip():
    assert model_spec("bert", "tiny", 3) == "model(name=bert,preset=tiny,task=3)"
    assert model_spec("bert", "tiny", 3, seq=16) == "model(name=bert,preset=tiny,task=3)"
    spec = model_spec("gpt2", "base", 0, batch=2, seq=64)
    assert spec == "model(name=gpt2,preset=base,task=0,batch=2,seq=64)"
    assert model_spec(**parse_model_spec(spec)) == spec
    for bad in ["bert(preset=tiny)", "model(name=bert,preset=tiny)",
                "model(name=bert,preset=tiny,task=0,dtype=float16)"]:
        with pytest.raises(ValueError, match="Expected"):
            parse_model_spec(bad)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_tasks_build(name):
    tasks = extract_tasks(name, "tiny", LLVM)
    assert [t.spec for t in tasks] == [model_spec(name, "tiny", i) for i in range(len(tasks))]
    assert len({tvm_ffi.structural_hash(t.mod) for t in tasks}) == len(tasks)
    assert all(t.weight >= 1 for t in tasks)
    names = " ".join(t.name for t in tasks)
    assert [k for k in EXPECTED_KINDS[name] if k not in names] == []
    for task in tasks:
        assert [gv.name_hint for gv in task.mod.get_global_vars()] == ["main"]
        tvm.compile(task.mod, target=LLVM)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tasks_do_not_depend_on_target(name):
    cpu = extract_tasks(name, "tiny", LLVM)
    gpu = extract_tasks(name, "tiny", "nvidia/nvidia-h100")
    assert [(t.spec, t.weight) for t in gpu] == [(t.spec, t.weight) for t in cpu]
    assert all(tvm_ffi.structural_equal(a.mod, b.mod) for a, b in zip(cpu, gpu, strict=True))


def test_model_workload():
    tasks = extract_tasks("resnet", "tiny")
    work = model_workload("model(name=resnet,preset=tiny,task=1)")
    assert work.spec == tasks[1].workload.spec == "model(name=resnet,preset=tiny,task=1)"
    assert tvm_ffi.structural_equal(work.mod, tasks[1].mod)
    with pytest.raises(ValueError, match=rf"Expected task in 0..{len(tasks) - 1} but got task=99"):
        model_workload("model(name=resnet,preset=tiny,task=99)")


def _matches_torch(name: str) -> float:
    preset = MODELS[name].presets["tiny"]
    model, inputs = MODELS[name].build(1, preset.seq, **preset.config)
    with torch.no_grad():
        expected = model(*inputs)
    expected = expected if isinstance(expected, torch.Tensor) else expected[0]
    vm = relax.VirtualMachine(tvm.compile(import_model(name), target=LLVM), tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(x.numpy()) for x in inputs))[0].numpy()
    return float(np.abs(got - expected.numpy()).max())


def test_resnet_matches_torch():
    assert _matches_torch("resnet") < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_transformer_matches_torch(name):
    assert _matches_torch(name) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_base_tasks(name):
    tasks = extract_tasks(name, "base", LLVM)
    names = " ".join(t.name for t in tasks)
    assert [k for k in EXPECTED_KINDS[name] if k not in names] == []
