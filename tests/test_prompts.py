"""Kernel descriptions and prompts: content, names shared with Dragon scripts, size,
determinism, the pinned version-1 format, completions, and the chat-template path."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dragon_dsl
from codegen.workloads import workload
from codegen.workloads.families import FAMILIES
from dragon_dsl.printer import expand_ranges
from training.prompts.kernel_text import describe, token_counts, tvmscript
from training.prompts.templates import (
    PROMPT_KEY,
    PROMPT_VERSION,
    SCRIPT_END,
    STOP,
    CompletionError,
    PromptConfig,
    apply_chat_template,
    chat_messages,
    construction_prompt,
    flip_tiles,
    format_completion,
    mark_tokenizer,
    prompt_config_of,
    refinement_prompt,
    split_completion,
    target_name,
)

ROOT = Path(__file__).resolve().parent.parent
MATMUL = "matmul(m=8,n=8,k=4)"

# The version-2 prompts (version 1 showed scripts with their name ranges, `i0..i1`, which no
# sampling grammar admits). A change to either text is a new prompt format: bump
# training.prompts.templates.PROMPT_VERSION, then update these strings.
GOLDEN_V2 = {
    "construction": """\
Dragon construction, target llvm
kernel:
input A float32[8, 4]
input B float32[4, 8]
output C float32[8, 8]
block "C"
  loops i 8 S, j 8 S, k 4 R
  reads A, B; writes C
  init C[i, j] = 0
  C[i, j] += A[i, k] * B[k, j]
script:
""",
    "refinement": """\
Dragon refinement, target cuda
kernel:
input A float32[8, 4]
input B float32[4, 8]
output C float32[8, 8]
block "C"
  loops i 8 S, j 8 S, k 4 R
  reads A, B; writes C
  init C[i, j] = 0
  C[i, j] += A[i, k] * B[k, j]
script (latency 12.35 us):
block "C" -> C
loops C -> i, j, k
tile i [2, 2, 2] -> i0, i1, i2
<end>
improved script:
""",
}
CURRENT = 'block "C" -> C\nloops C -> i, j, k\ntile i [2, 2, 2] -> i0..i2\n'


def _blocks(text: str) -> dict[str, list[str]]:
    """Block name -> its lines (without the two-space indent), from a description."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        match = re.fullmatch(r'block "(.+)"', line)
        if match:
            lines = blocks.setdefault(match.group(1), [])
        elif line.startswith("  "):
            lines.append(line[2:])
    return blocks


def _loops(lines: list[str]) -> list[tuple[str, int, str]]:
    head = next((line for line in lines if line.startswith("loops ")), "loops ")
    return [(name, int(extent), kind) for name, extent, kind in
            (part.split() for part in head[len("loops "):].split(", ") if part)]


# ---- describe ------------------------------------------------------------------------------

def test_matmul_description():
    assert describe(MATMUL) == GOLDEN_V2["construction"].split("kernel:\n")[1][:-len("script:\n")]


@pytest.mark.parametrize("spec, block, loops, expected", [
    ("conv2d", "conv2d_nhwc",
     [("nn", 1, "S"), ("yy", 14, "S"), ("xx", 14, "S"), ("ff", 16, "S"), ("ry", 3, "R"),
      ("rx", 3, "R"), ("rc", 16, "R")],
     ["reads pad_temp, W; writes conv2d_nhwc", "init conv2d_nhwc[nn, yy, xx, ff] = 0",
      "conv2d_nhwc[nn, yy, xx, ff] += pad_temp[nn, yy + ry, xx + rx, rc] * W[ry, rx, rc, ff]"]),
    ("conv2d", "pad_temp", [("i0", 1, "S"), ("i1", 16, "S"), ("i2", 16, "S"), ("i3", 16, "S")],
     ["pad_temp[i0, i1, i2, i3] = if_then_else(1 <= i1 and i1 < 15 and 1 <= i2 and i2 < 15, "
      "X[i0, i1 - 1, i2 - 1, i3], 0)"]),
    ("softmax(m=64,n=128)", "T_softmax_maxelem", [("i0", 64, "S"), ("k", 128, "R")],
     ["init T_softmax_maxelem[i0] = -3.4028235e+38",
      "T_softmax_maxelem[i0] = max(T_softmax_maxelem[i0], X[i0, k])"]),
    ("softmax(m=64,n=128)", "T_softmax_exp", [("i0", 64, "S"), ("i1", 128, "S")],
     ["T_softmax_exp[i0, i1] = exp(X[i0, i1] - T_softmax_maxelem[i0])"]),
    ("layer_norm(m=64,n=128)", "X_var_sum", [("ax0", 64, "S"), ("k1", 128, "R")],
     ["X_var_sum[ax0] += (X[ax0, k1] - X_mean[ax0]) * (X[ax0, k1] - X_mean[ax0])"]),
    ("layer_norm(m=64,n=128)", "T_layer_norm", [("ax0", 64, "S"), ("ax1", 128, "S")],
     ["reads X, X_mean, X_var_sum, gamma, beta; writes T_layer_norm",
      "T_layer_norm[ax0, ax1] = (X[ax0, ax1] - X_mean[ax0]) * rsqrt(X_var_sum[ax0] / 128 + "
      "1e-05) * gamma[ax1] + beta[ax1]"]),
    ("matmul(dtype=int8)", "C", [("i", 64, "S"), ("j", 64, "S"), ("k", 64, "R")],
     ["C[i, j] += int32(A[i, k]) * int32(B[k, j])"]),
])
def test_block_contents(spec, block, loops, expected):
    blocks = _blocks(describe(spec))
    assert _loops(blocks[block]) == loops
    for line in expected:
        assert line in blocks[block]


def test_buffers_in_parameter_order_then_temps():
    head = [line for line in describe("conv2d(layout_free=1)").splitlines()
            if not line.startswith(("block", "  "))]
    assert head == ["input X float32[1, 14, 14, 16]", "input W float32[3, 3, 16, 16] layout_free",
                    "output conv2d_nhwc float32[1, 14, 14, 16]",
                    "temp pad_temp float32[1, 16, 16, 16]"]


@pytest.mark.parametrize("spec", ["matmul", "conv2d", "softmax", "layer_norm",
                                  "dense(bias=1,act=gelu)", "elementwise"])
def test_names_are_the_schedule_names(spec):
    """Blocks in order, and each block's loops as ``get_loops`` names them, with their extents."""
    from tvm.s_tir.schedule import Schedule

    wl = workload(spec)
    sch = Schedule(wl.mod)
    expected = {}
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        loops = [sch.get(loop) for loop in sch.get_loops(block)]
        expected[sch.get(block).name_hint] = [(str(lp.loop_var.name), int(lp.extent))
                                              for lp in loops]
    blocks = _blocks(describe(wl))
    assert list(blocks) == list(expected)
    for name, loops in expected.items():
        assert [(n, e) for n, e, _ in _loops(blocks[name])] == loops


def test_names_are_the_names_from_trace_uses():
    import dragon_dsl
    from codegen.search import sample_traces

    wl = workload("matmul(m=32,n=32,k=32)")
    (trace,) = sample_traces(wl.mod, "llvm", "llvm", 1, seed=1)
    script = dragon_dsl.from_trace(trace, workload=wl)
    blocks = _blocks(describe(wl))
    # Only the first fetch and the first `loops` see the workload's loops (later ones see
    # the tiled loops: `block "C" -> C_2`, `loops C_2 -> l15..l23`).
    fetched: dict[str, str] = {}
    for name, var in re.findall(r'^block "(.+)" -> (\w+)$', script, re.M):
        fetched.setdefault(name, var)
    first: dict[str, str] = {}
    for var, names in re.findall(r"^loops (\w+) -> (.+)$", script, re.M):
        first.setdefault(var, names)
    assert first[fetched["C"]] == "i, j, k"
    for name, var in fetched.items():
        if var in first and name != "root":
            assert first[var].split(", ") == [n for n, _, _ in _loops(blocks[name])]
    # the script also round-trips through a completion
    # The completion is the script with its ranges written out, and formats back to it.
    assert split_completion(format_completion(script)) == expand_ranges(script)
    assert dragon_dsl.format(split_completion(format_completion(script))) == script


def test_shorter_than_tvmscript_for_every_family():
    rows = token_counts([name for name in FAMILIES if name != "tvm"])
    assert len(rows) == len(FAMILIES) - 1
    for row in rows:
        assert row["compact"] < row["tvmscript"], row
    assert sorted(r["ratio"] for r in rows)[len(rows) // 2] < 0.6


FUSED = '''\
@T.prim_func(s_tir=True)
def main(A: T.Buffer((16, 8), "float32"), B: T.Buffer((16, 8), "float32")):
    for f in range(128):
        with T.sblock("B"):
            vi = T.axis.spatial(16, f // 8)
            vj = T.axis.spatial(8, f % 8)
            B[vi, vj] = T.Select(vi < 8, A[vi, vj] * T.float32(2.5), T.float32(-1))
'''


def test_block_variables_not_bound_to_one_loop_get_an_iters_line():
    from codegen.workloads import script_workload

    assert _blocks(describe(script_workload(FUSED))) == {"B": [
        "loops f 128 S", "reads A; writes B", "iters vi 16 S = f // 8, vj 8 S = f % 8",
        "B[vi, vj] = select(vi < 8, A[vi, vj] * 2.5, -1)"]}


def test_unknown_nodes_fall_back_to_tvmscript_text():
    import tvm.ir.prim.expr as E
    from tvm import tirx

    from training.prompts.kernel_text import _Printer

    x = tirx.Var("x", "float32")
    let = E.Let(x, E.FloatImm("float32", 1.0), x * x)
    assert _Printer({}, None).expr(let + E.FloatImm("float32", 2.0)) == \
        "T.Let(x * x, where={x: T.float32(1.0)}) + 2"


def test_tvmscript_drops_import_comments():
    text = tvmscript(MATMUL)
    assert text.startswith("@I.ir_module") and 'T.sblock("C")' in text


# ---- prompts -------------------------------------------------------------------------------

def test_prompt_version_2_is_pinned():
    assert PROMPT_VERSION == 2, "update GOLDEN_V2 to the new format's text"
    assert construction_prompt(MATMUL, "llvm") == GOLDEN_V2["construction"]
    assert refinement_prompt(MATMUL, "cuda", CURRENT, 12.345e-6) == GOLDEN_V2["refinement"]


def test_prompts_are_deterministic_across_processes():
    spec = "layer_norm(m=64,n=128)"
    here = hashlib.sha256((construction_prompt(workload(spec), "llvm") +
                           refinement_prompt(workload(spec), "cuda", CURRENT, 1e-3))
                          .encode()).hexdigest()
    assert here == hashlib.sha256((construction_prompt(spec, "llvm") +
                                   refinement_prompt(spec, "cuda", CURRENT, 1e-3))
                                  .encode()).hexdigest()
    code = ("import hashlib; from training.prompts import *; s = 'layer_norm(m=64,n=128)'; "
            f"print(hashlib.sha256((construction_prompt(s, 'llvm') + refinement_prompt(s, "
            f"'cuda', {CURRENT!r}, 1e-3)).encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": "123"})
    assert out.stdout.strip() == here


def test_prompt_ends_where_the_script_begins():
    prompt = construction_prompt(MATMUL, "llvm")
    completion = format_completion(CURRENT)
    # The script as the model writes it: its ranges written out, as the samplers write them.
    assert (prompt + completion).endswith("script:\n" + expand_ranges(CURRENT) + "<end>\n")
    assert "i0, i1, i2" in completion and ".." not in completion
    assert dragon_dsl.format(split_completion(completion)) == dragon_dsl.format(CURRENT)
    assert SCRIPT_END == "\n<end>\n" and STOP == "<end>"


@pytest.mark.parametrize("seconds, text", [(2.5e-6, "2.5 us"), (0.0123456, "12.35 ms"),
                                           (1.5, "1.5 s"), (4e-8, "0.04 us")])
def test_latency_text(seconds, text):
    assert f"script (latency {text}):\n" in refinement_prompt(MATMUL, "llvm", CURRENT, seconds)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1ms"])
def test_latency_must_be_positive_seconds(bad):
    with pytest.raises(ValueError, match="latency_s="):
        refinement_prompt(MATMUL, "llvm", CURRENT, bad)


def test_config():
    prompt = construction_prompt(MATMUL, "llvm", PromptConfig(kernel="tvmscript",
                                                              include_target=False))
    assert prompt.startswith("Dragon construction\nkernel:\n@I.ir_module\n")
    assert prompt.endswith("\nscript:\n")
    assert "12.3 us" in refinement_prompt(MATMUL, "llvm", CURRENT, 12.345e-6,
                                          PromptConfig(latency_digits=3))
    with pytest.raises(ValueError, match="kernel='python'"):
        PromptConfig(kernel="python")


def test_target_names():
    import tvm

    assert target_name("llvm") == "llvm"
    assert target_name("nvidia/nvidia-h100") == "cuda"
    assert target_name(tvm.target.Target({"kind": "llvm", "num-cores": 2})) == "llvm"


# ---- completions ---------------------------------------------------------------------------

@pytest.mark.parametrize("script", [CURRENT, "", "annotate root parallel=32\n"])
def test_split_completion_round_trips(script):
    assert split_completion(format_completion(script)) == expand_ranges(script)
    if script:
        assert dragon_dsl.format(split_completion(format_completion(script))) == script


def test_split_completion_tolerates_what_samplers_do():
    # stopped at the stop string, with or without what follows it
    assert split_completion(CURRENT + "<end>") == CURRENT
    assert split_completion(CURRENT + "<end>\n\nDragon construction...") == CURRENT
    assert split_completion('block "C" -> C<end>') == 'block "C" -> C\n'
    # a sampler that strips the stop string
    assert split_completion(CURRENT, require_end=False) == CURRENT
    with pytest.raises(CompletionError, match="cut off") as info:
        split_completion("tile i [8, 2")
    assert info.value.text == "tile i [8, 2"


# ---- format 3: tiles innermost first -----------------------------------------------------

INNER = PromptConfig(tile_order="inner")


def test_format_3_writes_a_metaschedule_scripts_tiles_innermost_first_and_back():
    """Format 3 changes only the order of each ``tile``'s factors, in completions and in the
    script a refinement prompt shows; the script comes back exactly, and it applies."""
    from codegen.targets import postproc_set

    from .traces import applies_in_tvm, fixed_traces

    wl = workload("matmul(m=128,n=128,k=128)")
    [trace] = fixed_traces(wl.spec, "llvm", "llvm", 1)
    script = dragon_dsl.from_trace(trace, postproc="auto", postproc_set=postproc_set("llvm"),
                                   workload=wl)
    written = format_completion(script, INNER)
    plain = format_completion(script)
    changed = [(a, b) for a, b in zip(plain.splitlines(), written.splitlines(), strict=True)
               if a != b]
    assert changed, "no tile to flip: the test shows nothing"
    for a, b in changed:
        assert a.startswith("tile ") and b.startswith("tile ")
        factors = [re.search(r"\[(.*?)\]", line).group(1).split(", ") for line in (a, b)]
        assert factors[1] == factors[0][::-1] and a[a.index("]"):] == b[b.index("]"):]
    assert split_completion(written, config=INNER) == expand_ranges(script)
    assert flip_tiles(flip_tiles(plain)) == plain
    assert applies_in_tvm(split_completion(written, config=INNER), wl)
    refine = refinement_prompt(wl, "llvm", script, 1e-3, INNER)
    assert written in refine and plain not in refine
    assert construction_prompt(wl, "llvm", INNER) == construction_prompt(wl, "llvm")
    assert (PromptConfig().version, INNER.version) == (PROMPT_VERSION, 3)
    assert PromptConfig.of_version(3) == INNER
    with pytest.raises(ValueError, match="prompt_version=7"):
        PromptConfig.of_version(7)
    with pytest.raises(ValueError, match="tile_order"):
        PromptConfig(tile_order="sideways")


def test_a_models_tokenizer_carries_its_prompt_format(tmp_path):
    """``mark_tokenizer`` writes the format into the tokenizer, so that every
    ``tokenizer_config.json`` saved from it names it; ``prompt_config_of`` reads it from the
    tokenizer or the folder, the default format when there is none, and names a bad one."""
    tokenizer = _tokenizer(None)
    assert prompt_config_of(tokenizer) == PromptConfig() == prompt_config_of(tmp_path)
    mark_tokenizer(tokenizer, INNER)
    tokenizer.save_pretrained(tmp_path / "m")
    assert prompt_config_of(tokenizer) == INNER == prompt_config_of(tmp_path / "m")
    mark_tokenizer(tokenizer, PromptConfig())
    assert prompt_config_of(tokenizer) == PromptConfig()
    config = tmp_path / "m" / "tokenizer_config.json"
    config.write_text(config.read_text().replace(f'"{PROMPT_KEY}": 3', f'"{PROMPT_KEY}": 9'))
    with pytest.raises(ValueError, match=f"{PROMPT_KEY}=9"):
        prompt_config_of(tmp_path / "m")
    config.write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer_config.json"):
        prompt_config_of(tmp_path / "m")


# ---- chat ----------------------------------------------------------------------------------

def _tokenizer(template: str | None):
    pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "<eos>"])
    tok.train_from_iterator([GOLDEN_V2["refinement"]], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    tokenizer.chat_template = template
    return tokenizer


def test_chat_template_path():
    template = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    messages = chat_messages(MATMUL, "llvm")
    text = apply_chat_template(_tokenizer(template), messages)
    assert text == (f"<|system|>\n{messages[0]['content']}<|user|>\n"
                    f"{GOLDEN_V2['construction']}<|assistant|>\n")
    refine = chat_messages(MATMUL, "cuda", CURRENT, 12.345e-6)
    assert refine[1]["content"] == GOLDEN_V2["refinement"]


def test_chat_falls_back_to_the_plain_prompt():
    messages = chat_messages(MATMUL, "cuda", CURRENT, 12.345e-6)
    assert apply_chat_template(_tokenizer(None), messages) == GOLDEN_V2["refinement"]
    assert apply_chat_template(None, chat_messages(MATMUL, "llvm")) == \
        GOLDEN_V2["construction"]


def test_chat_messages_need_script_and_latency_together():
    with pytest.raises(ValueError, match="both script and latency_s"):
        chat_messages(MATMUL, "llvm", script=CURRENT)
    with pytest.raises(ValueError, match="'role' and 'content'"):
        apply_chat_template(None, [{"content": "x"}])
