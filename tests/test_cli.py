"""The dragon command line: exit codes 0/1/2, --json, stdin, and the trace JSON round trip."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from dragon_dsl.cli import main

GOLDEN = pathlib.Path(__file__).parent / "golden"
SCRIPT = GOLDEN / "scripts" / "matmul_llvm.dragon"
PAIR = GOLDEN / "pairs" / "matmul_cuda"


def run(args, stdin=None):
    """``dragon ARGS`` in a fresh interpreter: the tests of each command's process (exit
    status, stdin, start-up time).  ``dragon_cmd`` (conftest) runs the others in this
    process."""
    return subprocess.run([sys.executable, "-m", "dragon_dsl.cli", *args], input=stdin,
                          capture_output=True, text=True)


def test_check_clean_and_with_findings(tmp_path, capsys):
    assert main(["check", str(SCRIPT)]) == 0
    bad = tmp_path / "bad.dragon"
    bad.write_text('block "C" -> C\nloops D -> l0\n')
    assert main(["check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:2:7: error: 'D' is not defined" in out


def test_check_json_for_tools(tmp_path, capsys):
    bad = tmp_path / "bad.dragon"
    bad.write_text("loops ->\n")
    assert main(["check", "--json", str(SCRIPT), str(bad)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report[0]["ok"] and not report[1]["ok"]
    assert report[1]["diagnostics"][0]["stage"] == "syntax"
    assert report[1]["diagnostics"][0]["line"] == 1


def test_check_reads_stdin():
    result = run(["check", "-"], stdin="loops C -> l0\n")
    assert result.returncode == 1 and "<stdin>:1:7" in result.stdout


def test_usage_errors_exit_2(tmp_path, dragon_cmd):
    assert dragon_cmd(["check"]).returncode == 2
    assert dragon_cmd(["check", str(tmp_path / "missing.dragon")]).returncode == 2
    assert dragon_cmd(["nonsense"]).returncode == 2
    assert dragon_cmd(["check", "--workload", "nosuch(x=1)", str(SCRIPT)]).returncode == 2


def test_fmt_check_and_rewrite(tmp_path, capsys):
    messy = tmp_path / "m.dragon"
    messy.write_text('loops  C ->l0,l1 ,l2\n')
    assert main(["fmt", "--check", str(messy)]) == 1
    assert main(["fmt", str(messy)]) == 0
    assert messy.read_text() == "loops C -> l0..l2\n"
    assert main(["fmt", "--check", str(messy)]) == 0
    assert main(["fmt", "--check", str(SCRIPT)]) == 0
    capsys.readouterr()


def test_fmt_stdin_to_stdout():
    result = run(["fmt", "-"], stdin="loops C ->l0,l1 ,l2")
    assert result.returncode == 0 and result.stdout == "loops C -> l0..l2\n"


def test_encode_decode_round_trip(tmp_path):
    script = PAIR.with_suffix(".dragon").read_text()
    encoded = run(["encode", str(PAIR.with_suffix(".trace.json"))])
    assert encoded.returncode == 0 and encoded.stdout == script
    decoded = run(["decode", "--typed", "-"], stdin=script)
    assert decoded.returncode == 0
    assert json.loads(decoded.stdout) == json.loads(PAIR.with_suffix(".trace.json").read_text())


def test_encode_rejects_corrupt_json(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("[[[\"GetLoops\"]], []]")
    result = run(["encode", str(bad)])
    assert result.returncode == 1 and "instruction 0" in result.stderr
    bad.write_text("{not json")
    assert run(["encode", str(bad)]).returncode == 1


@pytest.mark.slow
def test_roundtrip_runs():
    result = subprocess.run([sys.executable, "-m", "dragon_dsl.cli", "roundtrip"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "identical trace JSON (kinds, wiring, typed attrs, decisions): True" in result.stdout


def test_decode_postproc_auto_with_workload(dragon_cmd):
    result = dragon_cmd(["decode", str(SCRIPT), "--workload", "matmul(m=128,n=128,k=128)",
                         "--target", "llvm", "--compact"])
    assert result.returncode == 0, result.stderr
    kinds = [inst[0] for inst in json.loads(result.stdout)[0]]
    assert "EnterPostproc" in kinds and kinds.index("EnterPostproc") < len(kinds) - 1


def test_encode_tvm_database_json_with_workload(tmp_path, dragon_cmd):
    """A MetaSchedule database stores trace JSON with plain numbers; TVM's replay on the
    workload decides the types (annotation values become plain ints), and the script keeps
    exactly that replayed trace, which schedules the workload as the original did."""
    from codegen import sample_traces, workload

    wl = workload("matmul(m=64,n=64,k=64)")
    trace = sample_traces(wl.mod, "llvm", "llvm", 1, seed=2)[0]
    path = tmp_path / "db_trace.json"
    path.write_text(json.dumps(trace.as_json(), default=lambda o: o.value))
    result = dragon_cmd(["encode", str(path), "--workload", wl.spec])
    import tvm_ffi
    from tvm.s_tir.schedule import Schedule

    import dragon_dsl

    assert result.returncode == 0, result.stderr
    decoded = dragon_dsl.to_trace(result.stdout)
    a, b = Schedule(wl.mod), Schedule(wl.mod)
    trace.apply_to_schedule(a, remove_postproc=False)
    decoded.apply_to_schedule(b, remove_postproc=False)
    assert tvm_ffi.structural_equal(a.mod, b.mod)


# ---- faithful conversion (issue 10, items 5-7) ---------------------------------------------

PAIR_LLVM = GOLDEN / "pairs" / "matmul_llvm"   # sampled by MetaSchedule
MATMUL = "matmul(m=128,n=128,k=128)"


def dragon(argv, capsys, stdin=None, monkeypatch=None):
    """``dragon ARGV`` in-process: (exit code, stdout, stderr)."""
    if stdin is not None:
        import io

        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_encode_postproc_auto_keeps_edited_postprocessing(tmp_path, capsys, monkeypatch):
    """A trace edited after EnterPostproc must not be elided to `postproc auto`, which would
    decode to MetaSchedule's postprocessing instead of the edited one."""
    data = json.loads(PAIR_LLVM.with_suffix(".trace.json").read_text())
    [index] = [i for i, inst in enumerate(data[0])
               if inst[0] == "Annotate" and inst[2] == ["pragma_auto_unroll_max_step"]]
    assert data[0][index][1][1] == {"IntImm": ["int32", 64]}
    data[0][index][1][1] = {"IntImm": ["int32", 16]}
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    for flags in ([], ["--workload", MATMUL, "--target", "llvm"]):
        code, out, err = dragon(["encode", path, "--postproc", "auto", *flags], capsys)
        assert code == 0, err
        assert "postproc auto" not in out and "kept explicit" in err
        code, decoded, _ = dragon(["decode", "--typed", "-"], capsys, out, monkeypatch)
        assert code == 0 and json.loads(decoded) == data
    code, out, err = dragon(["encode", PAIR_LLVM.with_suffix(".trace.json"), "--postproc", "auto",
                             "--workload", MATMUL, "--target", "llvm"], capsys)
    assert code == 0 and out.endswith("postproc auto llvm\n") and not err


def test_encode_postproc_auto_in_the_api():
    import dragon_dsl
    from codegen import workload

    data = json.loads(PAIR_LLVM.with_suffix(".trace.json").read_text())
    assert dragon_dsl.encode(data, postproc="auto").postproc == "explicit"
    assert dragon_dsl.encode(data, postproc="auto", trust_postproc=True).postproc == "trusted"
    encoded = dragon_dsl.encode(data, postproc="auto", workload=workload(MATMUL), target="llvm")
    assert encoded.postproc == "verified" and encoded.text.endswith("postproc auto llvm\n")


def test_encode_untyped_trace_on_the_wrong_workload_names_the_instruction(tmp_path, capsys):
    """TVM's replay re-samples a decision that does not fit; encode must refuse, not write
    the re-sampled tile."""
    import dragon_dsl

    trace = dragon_dsl.to_trace(PAIR_LLVM.with_suffix(".dragon").read_text())
    path = tmp_path / "untyped.json"
    path.write_text(json.dumps(trace.as_json(), default=lambda o: o.value))
    code, out, err = dragon(["encode", path, "--workload", "matmul(m=7,n=13,k=3)"], capsys)
    assert code == 1 and not out
    assert "instruction 4 (SamplePerfectTile)" in err and "[8, 2, 8, 1]" in err
    code, out, _ = dragon(["encode", path, "--workload", MATMUL], capsys)
    assert code == 0 and "tile i [8, 2, 8, 1] -> i0..i3" in out
    code, _, err = dragon(["encode", PAIR_LLVM.with_suffix(".trace.json"), "--workload",
                           "matmul(m=7,n=13,k=3)"], capsys)
    assert code == 1 and "instruction 4 (SamplePerfectTile)" in err


def test_encode_refuses_an_unknown_instruction_kind(tmp_path, capsys):
    data = json.loads(PAIR_LLVM.with_suffix(".trace.json").read_text())
    data[0].insert(2, ["NoSuchKind", [], [], []])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    code, out, err = dragon(["encode", path], capsys)
    assert code == 1 and not out
    assert "instruction 2: unknown instruction kind 'NoSuchKind'" in err


def test_decode_writes_tvm_json_and_encode_reads_both_forms(tmp_path, capsys, monkeypatch):
    """By default ``decode`` writes TVM's own JSON (Trace.as_json(), which TVM applies), with
    --typed the typed form; ``encode`` tells them apart, and TVM's needs --workload."""
    import dragon_dsl

    script = PAIR_LLVM.with_suffix(".dragon").read_text()
    typed = json.loads(PAIR_LLVM.with_suffix(".trace.json").read_text())
    code, out, _ = dragon(["decode", "-"], capsys, script, monkeypatch)
    tvm_form = json.loads(out)
    assert code == 0 and tvm_form == dragon_dsl.tvm_json(dragon_dsl.to_trace(script))
    assert "IntImm" not in out and tvm_form != typed
    code, out, _ = dragon(["decode", "--typed", "-"], capsys, script, monkeypatch)
    assert code == 0 and json.loads(out) == typed
    tvm_path, typed_path = tmp_path / "trace.json", tmp_path / "typed.json"
    tvm_path.write_text(json.dumps(tvm_form))
    typed_path.write_text(json.dumps(typed))
    code, out, _ = dragon(["encode", typed_path], capsys)
    assert code == 0 and out == script
    code, out, err = dragon(["encode", tvm_path], capsys)
    assert code == 2 and not out and "TVM's own trace JSON" in err and "--workload" in err
    code, out, err = dragon(["encode", tvm_path, "--workload", MATMUL, "--target", "llvm",
                             "--postproc", "auto"], capsys)
    assert code == 0 and out.endswith("postproc auto llvm\n") and not err
    code, decoded, _ = dragon(["decode", "-", "--workload", MATMUL, "--target", "llvm"],
                              capsys, out, monkeypatch)
    assert code == 0 and json.loads(decoded) == tvm_form


def test_check_without_workload_is_fast():
    """No TVM, torch or subcommand plugins for a syntax check (it took 4 to 9 s)."""
    import time

    start = time.perf_counter()
    assert run(["check", str(SCRIPT)]).returncode == 0
    assert time.perf_counter() - start < 5  # a cold interpreter; about 0.5 s when idle
