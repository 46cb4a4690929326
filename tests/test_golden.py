"""Golden corpora: canonical scripts (format must give the same bytes) and trace <-> script
pairs sampled from MetaSchedule.  Set DRAGON_UPDATE_GOLDEN=1 to regenerate the pairs (and
rewrite scripts in canonical form) after an intended change of the language."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

import dragon_dsl
from dragon_dsl.tvm_bridge import trace_json

HERE = pathlib.Path(__file__).resolve().parent / "golden"
SCRIPTS = sorted((HERE / "scripts").glob("*.dragon"))
UPDATE = os.environ.get("DRAGON_UPDATE_GOLDEN") == "1"

# name -> (workload, target, rule set, seed): the pairs, sampled from MetaSchedule.
PAIRS = {
    "matmul_llvm": ("matmul(m=128,n=128,k=128)", "llvm", "llvm", 1),
    "conv2d_layout_rewrite_llvm": ("conv2d(h=14,w=14,ci=16,co=16,layout_free=1)", "llvm",
                                   "llvm", 5),
    "softmax_llvm": ("softmax(m=32,n=64)", "llvm", "llvm", 2),
    "matmul_cuda": ("matmul(m=128,n=128,k=128)", "cuda", "cuda", 1),
    "layer_norm_cuda": ("layer_norm(m=32,n=64)", "cuda", "cuda", 4),
    "matmul_f16_wmma": ("matmul(m=128,n=128,k=128,dtype=float16)", "cuda", "cuda-tensorcore", 1),
    "matmul_f16_mma": ("matmul(m=128,n=128,k=128,dtype=float16)", "cuda", "mma", 1),
}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_canonical_scripts_are_fixed_points_of_format(path):
    text = path.read_text()
    if UPDATE:
        path.write_text(dragon_dsl.format(text))
        text = path.read_text()
    assert dragon_dsl.format(text) == text
    assert not dragon_dsl.check(text), dragon_dsl.check(text)


def _regenerate(name: str) -> None:
    from codegen import sample_traces, workload

    spec, target, rules, seed = PAIRS[name]
    trace = sample_traces(workload(spec).mod, target, rules, 1, seed=seed)[0]
    (HERE / "pairs" / f"{name}.trace.json").write_text(json.dumps(trace_json(trace), indent=1))
    (HERE / "pairs" / f"{name}.dragon").write_text(dragon_dsl.from_trace(trace))


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_trace_script_pairs(name):
    if UPDATE:
        _regenerate(name)
    data = json.loads((HERE / "pairs" / f"{name}.trace.json").read_text())
    script = (HERE / "pairs" / f"{name}.dragon").read_text()
    assert dragon_dsl.from_trace(data) == script
    assert trace_json(dragon_dsl.to_trace(script)) == data
