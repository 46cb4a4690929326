"""The workload library: spec parsing and its errors, canonical specs, identities, TVMScript
files, the sampler, and `dragon workloads` (each family's maths: `test_family_maths.py`)."""

from __future__ import annotations

import io
import json
import math
import random
import subprocess
import sys

import pytest

from codegen.cli.workloads import main as workloads_main
from codegen.workloads import (
    Workload,
    WorkloadError,
    canonical_spec,
    format_spec,
    parse_spec,
    workload,
)
from codegen.workloads.families import FAMILIES
from codegen.workloads.shapes import iter_workloads, sample_workloads, sampler_stats
from dragon_dsl.errors import DragonError

# Identities of specs the other tests and the benchmarks use, from before the family library
# was split: the split (and any later edit) must build exactly these modules.
GOLDEN_IDENTITIES = {
    "matmul(m=64,n=64,k=64)": "8521d080e87e4aed",
    "matmul(m=128,n=128,k=128,dtype=float16)": "71d47fd9246a8a3e",
    "batch_matmul(b=2,m=32,n=32,k=32)": "a7c7e3f2507c88ec",
    "gemv(m=128,k=128)": "fab1125651c7c144",
    "conv1d(l=32,ci=8,co=8,layout=NCW)": "08cb75bced74abd0",
    "conv2d(h=14,w=14,ci=16,co=16,layout=NCHW,stride=2)": "82005055ab8cbbc0",
    "conv2d(h=14,w=14,ci=32,co=32,dtype=float16)": "137c6325884c5129",
    "conv2d(h=14,w=14,ci=16,co=16,groups=4)": "d1256d1026de74e6",
    "conv3d(d=4,h=8,w=8,ci=8,co=8,layout=NCDHW)": "e164eb4f2a40c4e8",
    "depthwise_conv2d()": "0ca202d7b0d1a5a8",
    "conv2d_transpose(h=8,w=8,ci=8,co=8)": "331f462d30da6288",
    "pool2d(kind=avg)": "c4feb1507f5d106a",
    "pool2d(kind=global)": "71b4ed5ffd3094d9",
    "softmax(m=32,n=64)": "287daa819e7f6fc9",
    "layer_norm(m=32,n=64)": "c7ceb331dcbad1c1",
    "reduce(m=32,n=128,op=max)": "cbfc149e6977645e",
    'elementwise(m=32,n=64,ops="add,relu,exp")': "9e7bdeb06d000769",
    "transpose(m=16,n=32,k=8)": "904b07345dcb8568",
    "tvm(name=C2D,index=0)": "56c2bd3cba2bf656",
    "tvm(name=SFM)": "4e16b0d3c2f9da57",
}


# ---- parsing and its errors ----------------------------------------------------------------

def test_parse_spec_keeps_its_signature():
    assert parse_spec("matmul(m=8,n=16)") == ("matmul", {"m": 8, "n": 16})
    assert parse_spec('elementwise(ops="add,relu", m=4)') == (
        "elementwise", {"ops": "add,relu", "m": 4})
    assert parse_spec("softmax") == ("softmax", {})


@pytest.mark.parametrize("spec, needles", [
    ("nosuch(x=1)", ["Expected one of", "matmul", "but got family='nosuch'"]),
    ("matmul(m=1", ["Expected a workload spec like"]),
    ("matmul(m)", ["Expected key=value", "'m'"]),
    ("matmul(m=1,m=2)", ["Expected each parameter once", "m twice"]),
    ("matmul(q=1)", ["Expected one of m, n, k, dtype, layout_free", "but got q=1"]),
    ("matmul(m=abc)", ["Expected an integer for matmul parameter m", "m='abc'"]),
    ("matmul(m=0)", ["Expected m positive for matmul but got m=0"]),
    ("conv2d(pad=-1)", ["Expected pad >= 0 for conv2d but got pad=-1"]),
    ("softmax(dtype=int8)", ["Expected one of float32, float16 for softmax dtype",
                             "dtype='int8'"]),
    ("matmul(dtype=bfloat16)", ["Expected one of float32, float16, int8"]),
    ("conv2d(layout=NCWH)", ["Expected one of NHWC, NCHW for conv2d layout", "'NCWH'"]),
    ('elementwise(ops="add,foo")', ["Expected one of add, sub, mul", "ops='add,foo'"]),
    ("dense(bias=2)", ["Expected one of 0, 1 for dense bias but got bias=2"]),
])
def test_spec_errors_say_what_was_expected(spec, needles):
    with pytest.raises(WorkloadError) as info:
        workload(spec)
    for needle in needles:
        assert needle in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spec, needles", [
    ("conv2d(ci=16,co=16,groups=3)", ["groups dividing both ci and co", "groups=3"]),
    ("conv2d(h=2,w=2,pad=0)", ["a window that fits", "size=2"]),
    ("attention(heads=6,gqa=4)", ["gqa dividing heads", "gqa=4"]),
    ("dense(act=gelu,dtype=int8)", ["act none or relu with int8"]),
    ("tvm(name=NOPE)", ["Expected one of", "C2D", "name='NOPE'"]),
    ("tvm(name=C2D,index=9)", ["index in 0..3", "index=9"]),
    ("matmul(layout_free=3)", ["Expected layout_free < 3"]),
])
def test_family_constraints_are_checked_when_building(spec, needles):
    with pytest.raises(WorkloadError) as info:
        workload(spec)
    for needle in needles:
        assert needle in str(info.value), str(info.value)


def test_workload_error_is_structured():
    with pytest.raises(WorkloadError) as info:
        canonical_spec("conv2d(layout=XYZW)")
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, DragonError)
    assert (err.family, err.param, err.value) == ("conv2d", "layout", "XYZW")
    assert err.expected == ["NHWC", "NCHW"]


# ---- canonical specs and identities --------------------------------------------------------

@pytest.mark.parametrize("variant, canonical", [
    ("matmul(k=64, m=64)", "matmul()"),
    ("matmul(m=128,n=128,k=128,dtype=float32)", "matmul(m=128,n=128,k=128)"),
    ("conv2d(layout=nchw, ci=16, dtype=fp16)", "conv2d(layout=NCHW,dtype=float16)"),
    ('elementwise(ops="ADD, relu",m=8)', 'elementwise(m=8,ops="add,relu")'),
    ('transpose(axes="1, 0, 2")', 'transpose(axes="1,0,2")'),
    ("conv2d(layout_free=1,h=7)", "conv2d(h=7,layout_free=1)"),
    ("tvm(name=C2D,index=0)", "tvm(name=C2D)"),
    ("softmax", "softmax()"),
])
def test_canonical_spec_normalises_and_drops_defaults(variant, canonical):
    assert canonical_spec(variant) == canonical
    assert canonical_spec(canonical) == canonical


def test_format_spec_matches_canonical_spec():
    params = {"dtype": "float16", "n": 8, "h": 28, "w": 28, "kh": 3, "layout": "NHWC"}
    assert format_spec("conv2d", params) == canonical_spec(format_spec("conv2d", params))
    assert format_spec("conv2d", params) == "conv2d(n=8,h=28,w=28,dtype=float16)"


def test_existing_specs_build_the_same_modules():
    assert {s: workload(s).identity for s in GOLDEN_IDENTITIES} == GOLDEN_IDENTITIES


def test_identity_names_the_module_not_the_text():
    a, b = workload("matmul()"), workload("matmul(n=64,k=64,m=64,dtype=fp32)")
    assert a.spec != b.spec and a.identity == b.identity
    assert len(a.identity) == 16 and int(a.identity, 16) >= 0
    assert workload("matmul(m=32)").identity != a.identity
    assert workload("dense()").identity != a.identity


def test_identity_is_the_same_in_another_process():
    specs = ["matmul(m=32,n=48,k=16,dtype=int8)", "conv2d(layout=NCHW,groups=4)",
             "attention(gqa=2,stage=context,dtype=float16)"]
    code = ("import sys; from codegen.workloads import workload; "
            "print(' '.join(workload(s).identity for s in sys.argv[1:]))")
    out = subprocess.run([sys.executable, "-c", code, *specs], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [workload(s).identity for s in specs]


# ---- TVMScript files -----------------------------------------------------------------------

def test_a_printed_module_read_back_has_the_spec_identity(tmp_path):
    wl = workload("conv2d(h=8,w=8,ci=8,co=8,layout=NCHW)")
    path = tmp_path / "conv.py"
    path.write_text("from tvm.script import ir as I\nfrom tvm.script import tirx as T\n\n"
                    + wl.mod.script())
    for read in (workload(str(path)), workload(path), workload(f'file(path="{path}")')):
        assert read.identity == wl.identity
        assert list(read.mod.functions) and read.mod.get_global_vars()[0].name_hint == "main"
    assert workload(path).spec == f"file(path={path})" == canonical_spec(str(path))


def test_a_prim_func_file_is_renamed_main(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(workload("softmax(m=4,n=8)").mod["main"].script().replace(
        "def main", "def my_softmax"))
    wl = workload(path)
    assert wl.identity == workload("softmax(m=4,n=8)").identity


@pytest.mark.parametrize("text, needle", [
    ("x = 1\n", "Expected one @I.ir_module class or @T.prim_func"),
    ("def f(:\n", "Expected Python syntax"),
    ("@T.prim_func(s_tir=True)\ndef f(A: T.Buffer((4,), 'float32')):\n    A[0] = nope\n",
     "Expected a buildable workload"),
])
def test_bad_files_raise_one_line_errors(tmp_path, text, needle):
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(WorkloadError) as info:
        workload(path)
    assert needle in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(WorkloadError, match="Expected a readable TVMScript file"):
        workload(tmp_path / "missing.py")


# ---- sizes (every family's maths is checked in test_family_maths.py) ---------------------

def test_default_instances_are_small():
    for name in FAMILIES:
        func = workload(f"{name}()").mod["main"]
        assert all(math.prod(int(d) for d in p.shape) <= 65536 for p in func.params), name


# ---- the sampler ---------------------------------------------------------------------------

def test_sampler_draws_fifty_thousand_distinct_canonical_specs():
    specs = sample_workloads(50_000, seed=0)
    assert len(set(specs)) == 50_000
    stats = sampler_stats()
    assert sum(stats.values()) >= 50_000 and min(stats.values()) > 0
    for spec in random.Random(1).sample(specs, 1000):
        assert canonical_spec(spec) == spec


def test_sampler_is_deterministic_per_seed_and_filters_families():
    a = sample_workloads(200, seed=7)
    assert a == sample_workloads(200, seed=7) != sample_workloads(200, seed=8)
    assert a[:10] == [s for _, s in zip(range(10), iter_workloads(seed=7), strict=False)]
    only = sample_workloads(50, seed=7, families=["conv1d", "attention"])
    assert {s.split("(")[0] for s in only} == {"conv1d", "attention"}
    assert only == [s for s in iter_workloads(seed=7)
                    if s.split("(")[0] in ("conv1d", "attention")][:50]


def test_sampler_rejects_what_it_cannot_give():
    total = sum(sampler_stats(["gemv"]).values())
    with pytest.raises(WorkloadError, match=f"Expected n in 0..{total}"):
        sample_workloads(total + 1, families=["gemv"])
    with pytest.raises(WorkloadError, match="a family the sampler does not draw"):
        sample_workloads(1, families=["tvm"])


def test_a_sampled_subsample_builds_with_distinct_identities():
    specs = sample_workloads(3000, seed=11)
    picked = random.Random(0).sample(specs, 30)
    identities = {workload(s).identity for s in picked}
    assert len(identities) == 30


def test_sampled_shapes_come_from_real_models():
    specs = set(sample_workloads(20_000, seed=0))
    # BERT-base FFN up projection at 4 x 128 tokens; Llama-3 8B GQA decode scores; a ResNet-50
    # 3x3 at 56x56.
    universe = set(iter_workloads(seed=0))
    assert "dense(m=512,n=3072,k=768,bias=1,act=gelu,dtype=float16)" in universe
    assert "attention(heads=32,sq=1,skv=2048,d=128,gqa=4,dtype=float16)" in universe
    assert "conv2d(h=56,w=56,ci=64,co=64)" in universe
    families = {s.split("(")[0] for s in specs}
    assert {"dense", "conv2d", "attention", "rms_norm", "depthwise_conv2d"} <= families


# ---- `dragon workloads` --------------------------------------------------------------------

def test_cli_list(capsys):
    assert workloads_main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(FAMILIES) + 1  # and the model(...) workloads
    assert lines[0].startswith("matmul(m=64,n=64,k=64,dtype=float32)")
    assert lines[-1].startswith("model(name=bert,preset=tiny,task=0)")
    assert workloads_main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["family"] == "matmul" and listed[0]["dtypes"] == ["float32", "float16",
                                                                       "int8"]


def test_cli_show(capsys, tmp_path):
    spec = "dense(m=8,n=16,k=4,bias=1,act=relu)"
    assert workloads_main(["show", spec]) == 0
    out = capsys.readouterr().out
    assert "@I.ir_module" in out and f"identity:  {workload(spec).identity}" in out
    assert "T_dense: i:8 j:16 k:4(R)" in out and "in   bias: float32[16]" in out
    assert "flops:     1,280" in out
    assert workloads_main(["show", "--json", "matmul(m=8,n=8,k=4)"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["blocks"][0]["loops"] == [["i", 8, "spatial"], ["j", 8, "spatial"],
                                          ["k", 4, "reduce"]]
    assert info["canonical"] == "matmul(m=8,n=8,k=4)" and info["flops"] == 512
    assert [b["role"] for b in info["buffers"]] == ["in", "in", "out"]


def test_cli_show_reads_tvmscript_from_stdin(capsys, monkeypatch):
    wl = workload("softmax(m=4,n=8)")
    monkeypatch.setattr(sys, "stdin", io.StringIO(wl.mod.script()))
    assert workloads_main(["show", "--no-script", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("spec:      file(path=-)") and f"identity:  {wl.identity}" in out


def test_cli_sample(capsys):
    assert workloads_main(["sample", "-n", "5", "--seed", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == sample_workloads(5, seed=3)
    assert workloads_main(["sample", "-n", "3", "--family", "rms_norm", "--json"]) == 0
    assert {d["family"] for d in json.loads(capsys.readouterr().out)} == {"rms_norm"}


@pytest.mark.parametrize("argv", [
    ["show", "matmul(q=1)"], ["show", "conv2d(groups=3)"], ["sample", "-n", "10000000"],
    ["sample", "--family", "nosuch"], ["sample", "-n", "x"], [],
])
def test_cli_bad_usage_exits_2_with_one_line(argv, capsys):
    assert workloads_main(argv) == 2
    err = capsys.readouterr().err
    if argv and argv[-1] != "x":
        assert err.startswith("dragon: Expected") and err.count("\n") == 1, err


def test_dragon_workloads_through_the_entry_point(monkeypatch, capsys):
    from importlib import metadata

    import dragon_dsl.cli as cli

    real = metadata.entry_points
    mine = metadata.EntryPoint("workloads", "codegen.cli.workloads:register", "dragon.commands")

    def entry_points(group):
        found = [e for e in real(group=group) if e.name != "workloads"]
        return [*found, mine] if group == "dragon.commands" else found

    monkeypatch.setattr(cli.metadata, "entry_points", entry_points)
    assert cli.main(["workloads", "sample", "-n", "2", "--seed", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == sample_workloads(2, seed=1)
    assert cli.main(["workloads", "show", "nosuch()"]) == 2
    assert capsys.readouterr().err.startswith("dragon: Expected one of")


def test_workload_type_is_exported():
    assert isinstance(workload("gemv(m=4,k=4)"), Workload)
