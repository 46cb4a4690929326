"""Hostile input for every ``dragon`` subcommand: bad flags, bad files, oversized and deeply
nested input.  Each must end in one clean message (``dragon: ...`` or ``FILE:LINE:COL: ...``),
the documented exit code (``ExitCode``: 0 ok, 1 findings, 2 usage), no traceback, and bounded
time and memory.  Most cases run in-process (an escaping exception fails the test by itself);
a few run as subprocesses under an address-space limit and a timeout."""

from __future__ import annotations

import io
import json
import pathlib
import resource
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dragon_dsl
from dragon_dsl.cli import main
from dragon_dsl.limits import DEFAULT_LIMITS, Limits

GOLDEN = pathlib.Path(__file__).parent / "golden"
SCRIPT = GOLDEN / "scripts" / "matmul_llvm.dragon"        # ends in `postproc auto llvm`
PAIR = GOLDEN / "pairs" / "matmul_llvm"                    # sampled by MetaSchedule
MATMUL = "matmul(m=128,n=128,k=128)"
USAGE, FINDINGS, OK = 2, 1, 0


def run(argv, capsys, *, seconds: float = 30.0):
    """``dragon ARGV`` in-process: (exit code, stdout, stderr), within ``seconds``."""
    start = time.perf_counter()
    code = main([str(a) for a in argv])
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert isinstance(code, int)
    assert "Traceback" not in err and "Traceback" not in out
    assert elapsed < seconds, f"{argv} took {elapsed:.1f} s"
    return code, out, err


def one_line(err: str) -> str:
    """The message: one line starting with `dragon:` or naming a file."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines, "no message"
    assert lines[-1].startswith("dragon:") or ":" in lines[-1], err
    return lines[-1]


def write(tmp_path, name: str, content: str | bytes) -> pathlib.Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.fixture
def stdin(monkeypatch):
    def feed(data: bytes) -> None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    return feed


# ---- the top level -------------------------------------------------------------------------

def test_version_and_bare_invocations(capsys):
    code, out, _ = run(["--version"], capsys)
    assert code == OK and out.startswith("dragon ") and out.strip() != "dragon"
    assert run([], capsys)[0] == USAGE
    assert run(["nosuch"], capsys)[0] == USAGE


def test_every_help_has_examples_and_no_rst_markup(capsys):
    commands = ["check", "fmt", "encode", "decode", "apply", "bench", "roundtrip", "demo",
                "sample", "workloads", "init-model", "workloads list", "workloads show",
                "workloads sample", "datagen", "sft", "rl", "eval", "optimize", "grammar",
                "cost-model"]
    assert run(["--help"], capsys)[0] == OK
    for command in commands:
        code, out, _ = run([*command.split(), "--help"], capsys)
        assert code == OK, command
        assert "example" in out, f"`dragon {command} --help` shows no example"
        assert "``" not in out, f"`dragon {command} --help` has reStructuredText markup"


# ---- check ---------------------------------------------------------------------------------

def test_check_reports_the_readable_files_when_one_is_missing(tmp_path, capsys):
    code, out, err = run(["check", SCRIPT, tmp_path / "missing.dragon", SCRIPT], capsys)
    assert code == USAGE
    assert out.count(": ok") == 2 and "cannot read" in one_line(err)
    code, out, _ = run(["check", "--json", SCRIPT, tmp_path / "missing.dragon"], capsys)
    report = json.loads(out)
    assert code == USAGE and report[0]["ok"] and "cannot read" in report[1]["error"]


@pytest.mark.parametrize("make,needle", [
    (lambda d: "/dev/zero", "larger than"),
    (lambda d: d, "cannot read"),                                       # a directory
    (lambda d: write(d, "latin1.dragon", b"loops C -> \xe9\n"), "not UTF-8"),
    (lambda d: write(d, "big.dragon", "#" * (DEFAULT_LIMITS.max_bytes + 1)), "larger than"),
])
def test_check_unreadable_input_is_a_usage_error(tmp_path, capsys, make, needle):
    code, _, err = run(["check", make(tmp_path)], capsys)
    assert code == USAGE and needle in one_line(err)


def test_check_invalid_utf8_on_stdin(capsys, stdin):
    stdin(b"loops C -> l0\xff\n")
    code, _, err = run(["check", "-"], capsys)
    assert code == USAGE and "not UTF-8" in one_line(err)


@pytest.mark.parametrize("flags", [
    ["--max-bytes", "0"], ["--max-list", "-1"], ["--max-depth", "abc"], ["--max-names", ""],
    ["--workload-timeout-s", "0"], ["--workload-memory-mb", "-5"], ["--target", "nosuch"],
    ["--workload", "nosuch(x=1)"], ["--workload", "matmul(m=0)"],
])
def test_check_bad_flags(capsys, flags):
    code, _, err = run(["check", SCRIPT, *flags], capsys)
    assert code == USAGE, err
    one_line(err)


def _deep_chain(n: int) -> str:
    return 'block "C" -> C\n\n@Annotate(; map(i => i' + " + 1" * n + "))\n"


def _nested_casts(n: int) -> str:
    return '@Annotate(; map(i => ' + "cast<int32>(" * n + "i" + ")" * n + "))\n"


@pytest.mark.parametrize("text,where,needle", [
    (_deep_chain(5000), (3, 22), "nest more than 64 deep"),
    (_nested_casts(3000), (1, None), "nest more than 64 deep"),
    ('@Annotate(; ' + "[" * 3000 + "]" * 3000 + ")\n", (1, None), "nest more than"),
    ("sample_categorical [" + "1" * 5000 + "] 0 -> v\n", (1, 21), "5000 digits"),
    ("@Annotate(; " + "1" * 5000 + "i64)\n", (1, 13), "out of the range of int64"),
    ("@Annotate(; " + "9" * 400 + ".5)\n", (1, 13), "out of the range of a 64-bit float"),
    ("loops C -> p0..p5000\n", (1, 12), "stands for 5001 names"),
    ("".join(f"loops C{k} -> p{k}x0..p{k}x999\n" for k in range(70)), (66, 14),
     "more than 65536 names"),
    ('block "C" -> C\nloops C -> i\ntile i [' + "1, " * 2000 + "128] -> " +
     ", ".join(f"t{k}" for k in range(2001)) + "\n", (3, 8), "a list has 2001 items"),
    ("reorder " + " ".join(f"l{k}" for k in range(1500)) + "\n", (1, 1), "1500 arguments"),
    ('block "C" -> C\nloops C -> i\ntile i [8, -2, -8] -> a, b, c\n', (3, 1),
     "factor -2 must be positive"),
])
def test_check_bounds_and_locates(tmp_path, capsys, text, where, needle):
    code, out, _ = run(["check", write(tmp_path, "s.dragon", text)], capsys, seconds=20)
    assert code == FINDINGS and needle in out, out[:300]
    line, column = where
    assert f"s.dragon:{line}:" in out.splitlines()[0]
    if column:
        assert out.splitlines()[0].split(":")[2] == str(column)
    assert "recursion" not in out and "set_int_max_str_digits" not in out


def test_limits_are_flags(tmp_path, capsys):
    path = write(tmp_path, "r.dragon", "loops C -> p0..p9\n")
    code, out, _ = run(["check", path, "--max-list", "5"], capsys)
    assert code == FINDINGS and "at most 5" in out
    code, _, err = run(["check", path, "--max-bytes", "4"], capsys)
    assert code == USAGE and "larger than 4 bytes" in err
    with pytest.raises(dragon_dsl.DslSyntaxError, match="at most 5"):
        dragon_dsl.parse("loops C -> p0..p9\n", limits=Limits(max_list=5))


def test_check_with_workload_needs_a_target_for_postproc_auto(capsys):
    code, out, _ = run(["check", SCRIPT, "--workload", MATMUL], capsys)
    assert code == FINDINGS and "needs a target" in out and ":19:1:" in out


def test_check_with_workload_is_isolated_and_timed(capsys):
    """The apply stage runs in a worker: past its time limit it is a finding, not a hang."""
    code, out, _ = run(["check", SCRIPT, "--workload", MATMUL, "--target", "llvm",
                        "--workload-timeout-s", "1"], capsys, seconds=60)
    assert code == FINDINGS and "did not finish" in out


# ---- fmt -----------------------------------------------------------------------------------

def test_fmt_hostile(tmp_path, capsys, stdin):
    stdin(b"loops C -> l0\xff\n")
    code, _, err = run(["fmt", "-"], capsys)
    assert code == USAGE and "not UTF-8" in one_line(err)
    bad = write(tmp_path, "bad.dragon", "block \"C\" -> C\nloops ->\n")
    code, _, err = run(["fmt", bad, tmp_path / "missing.dragon"], capsys)
    assert code == USAGE and f"{bad}:2:7: unexpected" in err and "cannot read" in err
    code, _, err = run(["fmt", write(tmp_path, "deep.dragon", _deep_chain(3000))], capsys)
    assert code == FINDINGS and "deep.dragon:3:" in err


def test_fmt_rewrites_in_place_keeping_the_mode(tmp_path, capsys):
    messy = write(tmp_path, "m.dragon", "loops  C ->l0,l1 ,l2\n")
    messy.chmod(0o640)
    assert run(["fmt", messy], capsys)[0] == OK
    assert messy.read_text() == "loops C -> l0..l2\n" and messy.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.dragon"]  # no temporary left


# ---- encode --------------------------------------------------------------------------------

def _typed() -> list:
    return json.loads(PAIR.with_suffix(".trace.json").read_text())


@pytest.mark.parametrize("content,needle", [
    ('{"a": 1}', "Expected a Trace or trace JSON"),
    ("42", "but got trace=42"),
    ("null", "but got trace=None"),
    ('"text"', "but got trace=a str"),
    ("[]", "[instructions, decisions]"),
    ("[1, 2]", "[instructions, decisions]"),
    ("{not json", "not JSON"),
    ("[" * 5000 + "]" * 5000, "nests more than"),
    ("[[], [[" + "7" * 5000 + ", 1]]]", "not a trace"),
    ('[[["Annotate", [], [{"IntImm": ["int9999", 1e400]}], []]], []]', "must be an integer"),
    ('[[["Annotate", [], [{"IntImm": ["int8", 300]}], []]], []]', "out of the range of int8"),
    ('[[["Annotate", [], [{"IntImm": "x"}], []]], []]', "expected {'IntImm'"),
    ('[[["Annotate", [], [{"FloatImm": ["float16", 1e9]}], []]], []]', "out of the range"),
    ('[[["Annotate", [], [{"Map": [1, 2]}], []]], []]', "[key, value] pairs"),
    ('[[["Annotate", [], [{"Other": 1}], []]], []]', "unexpected JSON object"),
    ('[[["Annotate", [], ["{not a map}"], []]], []]', "does not load"),
    ('[[["Annotate", [], [], [1]]], []]', "lists of inputs, attrs and output names"),
    ('[[["GetLoops", "b0", [], []]], []]', "lists of inputs"),
    ('[[["GetLoops", ["b0"], [], ["l1"]]], []]', "no earlier instruction defines"),
    ('[[["NoSuchKind", [], [], []]], []]', "unknown instruction kind 'NoSuchKind'"),
    ('[[[42, [], [], []]], []]', "unknown instruction kind"),
    ('[[], [["x", 1]]]', "decisions [index, decision]"),
    ('[[], [[1]]]', "decisions [index, decision]"),
])
def test_encode_malformed_trace_json(tmp_path, capsys, content, needle):
    path = write(tmp_path, "t.json", content)
    code, _, err = run(["encode", path], capsys)
    assert code == FINDINGS and needle in err, err
    assert err.startswith(f"{path}: ") and err.count("\n") == 1


def test_encode_from_stdin_and_bad_flags(capsys, stdin):
    stdin(b'{"a": 1}')
    code, _, err = run(["encode", "-"], capsys)
    assert code == FINDINGS and err.startswith("<stdin>: Expected a Trace")
    for flags in (["--workload", "nosuch(x=1)"], ["--target", "nosuch"],
                  ["--postproc", "sometimes"], ["--max-depth", "0"]):
        code, _, err = run(["encode", PAIR.with_suffix(".trace.json"), *flags], capsys)
        assert code == USAGE, flags
        one_line(err)


# ---- decode --------------------------------------------------------------------------------

def test_decode_hostile(tmp_path, capsys):
    code, _, err = run(["decode", SCRIPT], capsys)
    assert code == USAGE and "needs --workload and --target" in one_line(err)
    assert "workload=" not in err  # the CLI's flags, not the API's arguments
    code, _, err = run(["decode", write(tmp_path, "s.dragon", "loops C ->\n")], capsys)
    assert code == FINDINGS and "s.dragon:1:11: unexpected end of line" in err
    code, _, err = run(["decode", write(tmp_path, "t.dragon", "@Annotate(; map(i => i + 1.5))\n")],
                       capsys)
    assert code == FINDINGS and "mismatched types" in err
    for flags in (["--workload", "nosuch(x=1)"], ["--target", "nosuch"]):
        code, _, err = run(["decode", SCRIPT, *flags], capsys)
        assert code == USAGE
        one_line(err)
    code, _, err = run(["decode", "/dev/zero"], capsys)
    assert code == USAGE and "larger than" in err


# ---- apply, bench, workloads, demo ---------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["apply", SCRIPT, "--workload", MATMUL, "--timeout", "0"],
    ["apply", SCRIPT, "--workload", "nosuch(x=1)"],
    ["apply", SCRIPT, "--workload", MATMUL, "--target", "nosuch"],
    ["apply", "/dev/zero", "--workload", MATMUL],
    ["apply", "/no/such/file", "--workload", MATMUL],
    ["bench", SCRIPT, "--workload", MATMUL, "--trials", "0", "--baselines", "metaschedule"],
    ["bench", SCRIPT, "--workload", MATMUL, "--trials", "-3", "--baselines",
     "unscheduled,metaschedule"],
    ["bench", SCRIPT, "--workload", MATMUL, "--baselines", "nosuch"],
    ["bench", SCRIPT, "--workload", MATMUL, "--builders", "0"],
    ["bench", "--workload", MATMUL, "--baselines", "none"],
    ["bench", SCRIPT, "--workload", "nosuch(x=1)"],
    ["bench", "/no/such/file", "--workload", MATMUL, "--baselines", "none"],
    ["bench", SCRIPT, "--workload", MATMUL, "--repeat", "0", "--baselines", "none"],
    *[["bench", SCRIPT, "--workload", MATMUL, "--target", f'{{"kind": "llvm", "num-cores": {n}}}',
       "--baselines", "none"] for n in (0, -4, 4096)],
    ["workloads", "show", "nosuch(x=1)"],
    ["workloads", "show", "matmul(m=-1)"],
    ["workloads", "show", "/no/such/kernel.py"],
    ["workloads", "sample", "-n", "-1"],
    ["workloads", "list", "extra"],
    ["roundtrip", "--workload", "nosuch(x=1)"],
    ["roundtrip", "--target", "nosuch"],
    ["roundtrip", "--rules", "nosuch"],
    ["roundtrip", "--seed", "-1"],
])
def test_codegen_commands_bad_usage(capsys, argv):
    code, _, err = run(argv, capsys)
    assert code == USAGE, err
    one_line(err)


def test_workloads_list_names_the_model_workloads(capsys):
    code, out, _ = run(["workloads", "list"], capsys)
    assert code == OK and "model(name=bert,preset=tiny,task=0)" in out
    code, out, _ = run(["workloads", "list", "--json"], capsys)
    assert json.loads(out)[-1]["family"] == "model"


# ---- sample and init-model -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    """A saved tiny model, one with a truncated weights file and one with an edited config."""
    from training.models.tokenizer import tiny_model, train_tokenizer

    root = tmp_path_factory.mktemp("models")
    tokenizer = train_tokenizer(['block "C" -> C\nloops C -> i, j, k\n'] * 4, vocab_size=300)
    good = root / "tiny"
    tiny_model(tokenizer).save_pretrained(good)
    tokenizer.save_pretrained(good)
    dirs = {"tiny": good}
    for name in ("truncated", "vocab"):
        dirs[name] = root / name
        dirs[name].mkdir()
        for f in good.iterdir():
            (dirs[name] / f.name).write_bytes(f.read_bytes())
    weights = dirs["truncated"] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    config = json.loads((dirs["vocab"] / "config.json").read_text())
    (dirs["vocab"] / "config.json").write_text(json.dumps({**config, "vocab_size": 17}))
    return dirs


@pytest.mark.parametrize("flags,needle", [
    (["-n", "0"], "n=0"), (["--temperature", "0"], "temperature"), (["--top-p", "0"], "top_p"),
    (["--top-p", "1.5"], "top_p"), (["--max-new-tokens", "0"], "max_new_tokens"),
    (["--batch-size", "0"], "batch_size"), (["--wind-down", "-1"], "wind_down"),
    (["--target", "nosuch"], "nosuch"), (["--latency-us", "-5"], "--latency-us"),
    (["--latency-us", "nan"], "--latency-us"), (["--workload", "nosuch(x=1)"], "nosuch"),
    (["--backend", "nosuch"], "invalid choice"), (["--refine", "/no/such.dragon"], "cannot read"),
])
def test_sample_bad_flags(tiny_dirs, capsys, flags, needle):
    argv = ["sample", "--model", tiny_dirs["tiny"], "--workload", "matmul(m=16,n=16,k=16)",
            *flags]
    code, _, err = run(argv, capsys)
    assert code == USAGE and needle in err, err
    one_line(err)


@pytest.mark.parametrize("which", ["truncated", "vocab", "missing"])
def test_sample_unloadable_models(tiny_dirs, capsys, tmp_path, which):
    model = tiny_dirs.get(which, tmp_path / "missing")
    code, _, err = run(["sample", "--model", model, "--workload", "matmul(m=16,n=16,k=16)",
                        "-n", "1", "--max-new-tokens", "8"], capsys)
    needle = "no model in" if which == "missing" else "cannot load the model"
    assert code == USAGE and needle in one_line(err)
    assert "LOAD REPORT" not in err


def test_sample_refuses_a_broken_script_to_refine_before_loading(tmp_path, capsys):
    old = write(tmp_path, "old.dragon", 'block "C" -> C\nloops C ->\n')
    code, _, err = run(["sample", "--model", tmp_path / "no-model", "--workload",
                        "matmul(m=16,n=16,k=16)", "--refine", old, "--latency-us", "5"], capsys)
    assert code == USAGE and "old.dragon:2:11: error: unexpected end of line" in one_line(err)


@pytest.mark.parametrize("flags", [
    ["--vocab-size", "10"], ["--hidden-size", "6"], ["--layers", "0"],
    ["--workload", "nosuch(x=1)"], ["--target", "nosuch"], ["--traces-per-workload", "0"],
])
def test_init_model_bad_flags(tmp_path, capsys, flags):
    code, _, err = run(["init-model", tmp_path / "m", *flags], capsys)
    assert code == USAGE, err
    one_line(err)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    code, _, err = run(["init-model", tmp_path / "full"], capsys)
    assert code == USAGE and "not empty" in err


def test_init_model_then_sample(tmp_path, capsys):
    """The documented way to get a model for `dragon sample`."""
    model = tmp_path / "tiny"
    code, out, _ = run(["init-model", model, "--workload", "matmul(m=16,n=16,k=16)", "--target",
                        "llvm", "--traces-per-workload", "1", "--vocab-size", "300"], capsys,
                       seconds=120)
    assert code == OK and "dragon sample --model" in out
    code, out, _ = run(["sample", "--model", model, "--workload", "matmul(m=16,n=16,k=16)",
                        "-n", "2", "--max-new-tokens", "24", "--json"], capsys)
    assert code in (OK, FINDINGS) and len(json.loads(out)["samples"]) == 2


# ---- Hypothesis: arbitrary files and flags for the language's own commands ----------------

_FLAGS = st.lists(st.sampled_from(["--max-bytes", "--max-list", "--max-depth", "--max-names"])
                  .flatmap(lambda f: st.tuples(st.just(f), st.integers(-3, 10**4).map(str))),
                  max_size=2)


@given(command=st.sampled_from(["check", "fmt", "encode", "decode"]),
       content=st.one_of(st.binary(max_size=300), st.text(max_size=300),
                         st.sampled_from([SCRIPT.read_text(), json.dumps(_typed())])),
       flags=_FLAGS)
def test_arbitrary_input_and_flags_end_cleanly(tmp_path_factory, command, content, flags):
    path = tmp_path_factory.mktemp("h") / "input"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    argv = [command, str(path), *(x for pair in flags for x in pair)]
    if command == "fmt":
        argv.append("--stdout")
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(argv)
    finally:
        sys.stdout, sys.stderr = saved
    assert code in (OK, FINDINGS, USAGE)
    assert "Traceback" not in err.getvalue()
    if code != OK:
        assert err.getvalue().strip() or out.getvalue().strip()


# ---- subprocesses: time, memory, and what check imports ------------------------------------

def _limited(argv, *, stdin: bytes | None = None, memory_mb: int = 1024, seconds: float = 60):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))

    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "dragon_dsl.cli", *map(str, argv)],
                            input=stdin, capture_output=True, timeout=seconds,
                            preexec_fn=limit)
    return result, time.perf_counter() - start


@pytest.mark.parametrize("make,code", [
    (lambda d: "/dev/zero", USAGE),
    (lambda d: write(d, "big.dragon", 'block "C" -> C\n' * 2_000_000), USAGE),  # 30 MB
    (lambda d: write(d, "ranges.dragon", "".join(f"loops C -> p{k}x0..p{k}x4095\n"
                                                  for k in range(1000))), FINDINGS),
    (lambda d: write(d, "max.dragon", ('block "C" -> C\n' + "".join(
        f"loops C -> a{k}, b{k}, c{k}\n" for k in range(12000)))[:DEFAULT_LIMITS.max_bytes]
                     .rsplit("\n", 1)[0] + "\n"), OK),                 # the largest allowed
])
def test_check_is_bounded_in_a_subprocess(tmp_path, make, code):
    result, _ = _limited(["check", "-q", make(tmp_path)])
    assert result.returncode == code, result.stderr.decode()[-500:]
    assert b"Traceback" not in result.stderr and b"MemoryError" not in result.stderr


def test_fmt_stdin_is_bounded_in_a_subprocess():
    result, _ = _limited(["fmt", "-"], stdin=b"#" * (DEFAULT_LIMITS.max_bytes * 4))
    assert result.returncode == USAGE and b"larger than" in result.stderr


def test_check_without_workload_imports_neither_tvm_nor_torch():
    probe = ("import sys; from dragon_dsl.cli import main; code = main(['check', '-q', "
             f"{str(SCRIPT)!r}]); heavy = [m for m in ('tvm', 'torch', 'codegen', 'training') "
             "if m in sys.modules]; print(code, heavy)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.strip() == "0 []", result.stdout + result.stderr


# ---- check without TVM agrees with TVM -----------------------------------------------------

_SUFFIXES = ["", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "b", "f16", "f32", "f64"]
_LITERALS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.tuples(st.integers(-(2**70), 2**70), st.sampled_from(_SUFFIXES)).map(
        lambda t: f"{t[0]}{t[1]}"),
    st.floats(allow_nan=False, allow_infinity=False).map(repr).filter(lambda r: "e" not in r),
    st.tuples(st.floats(-1e40, 1e40).map(lambda f: f"{f:.3e}"),
              st.sampled_from(["", "f16", "f32", "f64"])).map("".join),
    st.text(max_size=5).map(json.dumps), st.sampled_from(["none", "true", "false"]))
_VALUES = st.recursive(_LITERALS, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.lists(st.tuples(inner, inner), max_size=2).map(
        lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}")), max_leaves=8)


@given(st.lists(_VALUES, min_size=1, max_size=3))
def test_what_check_passes_without_tvm_tvm_builds(values):
    """``check`` without a workload skips TVM for scripts without expressions: for those,
    building the trace must never fail (what TVM's constructors refuse is caught earlier)."""
    from dragon_dsl.api import _build, _decode

    text = f"@Annotate(; {', '.join(values)})\n"
    if dragon_dsl.check(text):
        return
    _, decoded = _decode(text)
    _build(decoded.insts)


# ---- encode never writes what check refuses ------------------------------------------------

_DTYPES = st.sampled_from(["int32", "int64", "int8", "bool", "float32", "float16", "uint8",
                           "int4", "x"])
_NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.booleans())
_JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=4), st.text(max_size=3).map(lambda t: f'"{t}"'),
    st.builds(lambda d, v: {"IntImm": [d, v]}, _DTYPES, _NUMBERS),
    st.builds(lambda d, v: {"FloatImm": [d, v]}, _DTYPES, _NUMBERS))
_JSON_VALUES = st.recursive(_JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.builds(lambda kv: {"Map": kv},
              st.lists(st.lists(inner, min_size=2, max_size=2), max_size=2))), max_leaves=6)


@given(st.data())
def test_encode_writes_only_what_check_accepts(data):
    """Arbitrary trace JSON (any kinds, values, wiring): encode refuses it with a DragonError,
    or writes a script that check accepts."""
    from dragon_dsl.tvm_bridge import ALL_KINDS

    insts, names, decisions = [], [], []
    for i in range(data.draw(st.integers(1, 5))):
        pick = st.sampled_from(names) if names else _JSON_VALUES
        inputs = data.draw(st.lists(st.one_of(_JSON_VALUES, pick), max_size=3))
        outputs = [f"{data.draw(st.sampled_from('blv'))}{len(names) + k}"
                   for k in range(data.draw(st.integers(0, 2)))]
        names += outputs
        insts.append([data.draw(st.sampled_from(ALL_KINDS)), inputs,
                      data.draw(st.lists(_JSON_VALUES, max_size=3)), outputs])
        if data.draw(st.booleans()):
            decisions.append([i, data.draw(_JSON_VALUES)])
    trace = json.loads(json.dumps([insts, decisions]))
    try:
        text = dragon_dsl.encode(trace).text
    except dragon_dsl.DragonError:
        return
    assert dragon_dsl.check(text) == [], text


def test_fmt_writes_through_a_symbolic_link(tmp_path, capsys):
    real = write(tmp_path, "real.dragon", "loops  C ->l0\n")
    link = tmp_path / "link.dragon"
    link.symlink_to(real)
    assert run(["fmt", link], capsys)[0] == OK
    assert link.is_symlink() and real.read_text() == "loops C -> l0\n"


@pytest.mark.parametrize("command", [["workloads", "show"], ["apply", SCRIPT, "--workload"],
                                     ["check", SCRIPT, "--target", "llvm", "--workload"]])
def test_workload_files_are_bounded(tmp_path, capsys, command):
    for spec in ("file(path=/dev/zero)", f"file(path={tmp_path})"):
        code, _, err = run([*command, spec], capsys)
        assert code == USAGE and "not a regular file" in one_line(err)


# ---- datagen -------------------------------------------------------------------------------

@pytest.mark.parametrize("flags,needle", [
    ([], "name the workloads"),
    (["--workload", "nosuch(x=1)"], "nosuch"),
    (["--preset", "tiny", "--workers", "0"], "--workers"),
    (["--workload", "matmul()", "--trials", "0"], "trials"),
    (["--workload", "matmul()", "--cost-model", "nope"], "cost_model"),
    (["--workload", "matmul()", "--repeat", "0"], "repeat"),
    (["--workload", "matmul()", "--target", "nosuch"], "nosuch"),
    (["--workload", "matmul()", "--k", "0"], "k >= 1"),
    (["--workload", "matmul()", "--min-gain", "1.0"], "min_gain"),
    (["--from-database", "no/such/dir"], "no such file"),
    (["--workload", "matmul()", "--rpc-tracker", "localhost:9190"], "--rpc-key"),
])
def test_datagen_bad_flags_fail_before_any_search(tmp_path, capsys, flags, needle):
    code, _, err = run(["datagen", "--out", tmp_path / "out", *flags], capsys)
    assert code == USAGE, err
    assert needle in one_line(err)
    assert not (tmp_path / "out" / "records").exists()


def test_datagen_out_must_be_a_directory(tmp_path, capsys):
    code, _, err = run(["datagen", "--out", write(tmp_path, "f", "x"), "--preset", "tiny"],
                       capsys)
    assert code == USAGE and "not a directory" in one_line(err)


# ---- grammar -------------------------------------------------------------------------------

@pytest.mark.parametrize("flags,needle", [
    (["--format", "ebnf"], "invalid choice: 'ebnf'"),
    ([], "the following arguments are required: --format"),
    (["--format", "gbnf", "--workload", "nosuch(x=1)"], "nosuch"),
    (["--format", "gbnf", "--workload", "matmul(m=0)"], "matmul"),
    (["--format", "lark", "--target", "nosuch"], "nosuch"),
    (["--format", "lark", "--workload", "matmul(m=16,n=16,k=16)", "--rules", "nosuch"],
     "Expected --rules among"),
    (["--format", "lark", "--out", "DIR"], "not a file in an existing directory"),
    (["--format", "lark", "--out", "DIR/no/such/g.lark"], "not a file in an existing directory"),
])
def test_grammar_bad_flags(tmp_path, capsys, flags, needle):
    flags = [f.replace("DIR", str(tmp_path)) for f in flags]
    code, out, err = run(["grammar", *flags], capsys)
    assert code == USAGE, err
    assert needle in one_line(err) and not out
    assert not list(tmp_path.iterdir())


# ---- eval ----------------------------------------------------------------------------------

@pytest.mark.parametrize("flags,needle", [
    (["--model", "=x"], "expected NAME=PATH"),
    (["--model", "a=x", "--model", "a=y"], "two models named 'a'"),
    (["--model", "a=DIR", "-k", "0"], "attempts >= 1"),
    (["--model", "a=DIR"], "no model in"),
    (["--model", "a=DIR", "--target", "{oops"], "no model in"),
])
def test_eval_bad_flags_fail_before_any_measuring(tmp_path, capsys, flags, needle):
    flags = [f.replace("DIR", str(tmp_path)) for f in flags]
    code, _, err = run(["eval", *flags, "--data", str(tmp_path), "--out",
                        str(tmp_path / "out")], capsys)
    assert code == USAGE, err
    assert needle in one_line(err)
    assert not (tmp_path / "out").exists()


# ---- optimize ------------------------------------------------------------------------------

@pytest.mark.parametrize("flags,needle", [
    (["--model", "MISSING"], "no model in"),
    (["-k", "0"], "k >= 1"),
    (["--rounds", "-1"], "rounds >= 0"),
    (["--budget", "0"], "budget >= 1"),
    (["--budget", "5"], "Expected budget >= 6 but got budget=5"),   # 2 baselines, re-timed
    (["--budget", "x"], "invalid int value"),
    (["--temperature", "0"], "temperature"),
    (["--repeat", "0"], "repeat"),
    (["--builders", "0"], "--builders"),
    (["--target", "nosuch"], "nosuch"),
    (["--workload", "nosuch(x=1)"], "nosuch"),
    (["--refine", "/no/such.dragon"], "cannot read"),
    (["--out", "DIR"], "not a file in an existing directory"),
    (["--out", "DIR/no/such/best.dragon"], "not a file in an existing directory"),
    # A kernel refuses the whole-model flags rather than ignore them.
    (["--e2e-rounds", "3"], "--e2e-rounds: only a whole model"),
    (["--population", "8"], "--population: only a whole model"),
    (["--metaschedule", "--json"], "--metaschedule: only a whole model"),
    (["--database", "DIR"], "--database: only a whole model"),
])
def test_optimize_bad_flags_fail_before_loading_the_model(tmp_path, capsys, flags, needle):
    model = tmp_path / "model"  # not loadable: every case must fail before loading it
    model.mkdir()
    (model / "config.json").write_text("{}")
    options = {"--model": str(model), "--workload": "softmax(m=32,n=64)"}
    options.update(zip(flags[::2], flags[1::2], strict=True))
    spec = options.pop("--workload")
    if options["--model"] is None:
        del options["--model"]
    argv = ["optimize", spec] + [str(tmp_path / "none") if v == "MISSING"
                                 else v.replace("DIR", str(tmp_path))
                                 for pair in options.items() for v in pair]
    code, _, err = run(argv, capsys)
    assert code == USAGE, err
    assert needle in one_line(err)
    assert not list(tmp_path.glob("*.dragon"))


# ---- sft -----------------------------------------------------------------------------------

@pytest.mark.parametrize("flags,needle", [
    ([], "choose a config"),
    (["--preset", "tiny", "--lora-r", "0"], "lora_r"),
    (["--preset", "tiny", "--tasks", "nosuch"], "tasks"),
    (["--preset", "tiny", "--heads", "3"], "hidden_size"),
    (["--preset", "tiny", "--use-peft"], "use_peft"),
    (["--preset", "paper", "--deepspeed", "no/such.json"], "deepspeed"),
    (["--preset", "tiny", "--data", "no/such/dir", "--out", "OUT"], "no construction dataset"),
    (["--preset", "tiny", "--data", "DIR"], "run directory"),
    (["--resume", "--out", "OUT"], "nothing to resume"),
    (["--resume", "--preset", "tiny", "--out", "OUT"], "--resume reads"),
    (["--config", "no/such.yaml"], "cannot read"),
])
def test_sft_bad_flags_fail_before_any_training(tmp_path, capsys, flags, needle):
    flags = [str(tmp_path / "out") if f == "OUT" else str(tmp_path) if f == "DIR" else f
             for f in flags]
    code, _, err = run(["sft", *flags], capsys)
    assert code == USAGE, err
    assert needle in one_line(err)
    assert not (tmp_path / "out").exists()


def test_sft_config_file_names_the_bad_field(tmp_path, capsys):
    code, _, err = run(["sft", "--config", write(tmp_path, "c.yaml", "preset: paper\nlr: 1\n")],
                       capsys)
    assert code == USAGE and "'lr'" in one_line(err)
    code, _, err = run(["sft", "--config", write(tmp_path, "c.yaml", "- a\n")], capsys)
    assert code == USAGE and "mapping" in one_line(err)
    code, _, err = run(["sft", "--preset", "tiny", "--batch-size", "x"], capsys)
    assert code == USAGE
