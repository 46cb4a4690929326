"""Measurements nobody can fool: the cache never answers for a kernel a script sees differently,
kernels that write outside their outputs are incorrect and never timed, measurements on one
device are serialised across processes, and a measurement that did not happen is never correct.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time

import pytest

from codegen.measure import Evaluator, MeasureConfig, Outcome, Status, devices
from codegen.measure.cache import Cache, cache_key
from codegen.measure.evaluator import workload_identity, workload_text_hash
from codegen.workloads import script_workload, workload
from dragon_dsl.cli import main

FAST = MeasureConfig(repeat=3, min_repeat_ms=1.0)
TILED = 'block "C" -> C\nloops C -> i, j, k\ntile i [8, 8] -> i0, i1\nparallel i0\n'


# ---- 1. the cache key covers what a script observes -------------------------------------------

def test_renaming_a_block_keeps_the_identity_but_misses_the_cache(tmp_path):
    text = workload("matmul(m=64,n=64,k=64)").mod.script()
    original = script_workload(text)
    renamed = script_workload(text.replace('T.sblock("C")', 'T.sblock("D")'))
    assert workload_identity(original) == workload_identity(renamed)  # names are not structure
    assert workload_text_hash(original) != workload_text_hash(renamed)
    with Evaluator("llvm", cache=str(tmp_path / "m.sqlite"), config=FAST, builders=1) as ev:
        [first] = ev.evaluate(original, [TILED])
        [second] = ev.evaluate(renamed, [TILED])
    assert first.ok and not first.cached
    assert second.status is Status.APPLY_ERROR and not second.cached, second.summary()


def test_the_key_changes_with_every_part():
    parts = ["w0:h0", TILED, '{"kind": "llvm"}', "cpu x2", "v2:r9"]
    keys = {cache_key(*parts)}
    for index, other in enumerate(["w0:h1", TILED + "parallel i1\n", '{"kind": "cuda"}',
                                   "cpu x1", "v2:r3"]):
        changed = list(parts)
        changed[index] = other
        keys.add(cache_key(*changed))
    assert len(keys) == 6


def test_the_cache_misses_for_another_target_or_measurement_setting(tmp_path):
    wl = workload("matmul(m=64,n=64,k=64)")
    path = str(tmp_path / "m.sqlite")
    with Evaluator("llvm", cache=path, config=FAST, builders=1) as ev:
        assert not ev.evaluate(wl, [TILED])[0].cached
        assert ev.evaluate(wl, [TILED])[0].cached
    with Evaluator({"kind": "llvm", "num-cores": 1}, cache=path, config=FAST, builders=1) as ev:
        assert not ev.evaluate(wl, [TILED])[0].cached
    with Evaluator("llvm", cache=path, config=MeasureConfig(repeat=4, min_repeat_ms=1.0),
                   builders=1) as ev:
        assert not ev.evaluate(wl, [TILED])[0].cached
    rows = Cache(path).query(workload=wl.identity, status="correct")
    assert len(rows) == 3 and {r["settings"].split(":")[0] for r in rows} == {"v2"}


def test_an_edited_cache_row_is_a_miss_not_a_correct_result(tmp_path):
    cache = Cache(str(tmp_path / "m.sqlite"))
    cache.put("k", Outcome(Status.CORRECT, latency_s=1e-3, repeats=[1e-3]))
    for edited in ('{"status": "correct"}', '{"status": "correct", "latency_s": NaN}',
                   '{"status": "correct", "latency_s": -1}', '{"latency_s": 1}', "[]", "{"):
        cache.db.execute("UPDATE outcomes SET outcome = ?", (edited,))
        assert cache.get("k") is None, edited
    assert cache.query() == []


# ---- 2. writes outside the outputs -----------------------------------------------------------

DOUBLE = """
@T.prim_func(s_tir=True)
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i in range(EXTENT):
        with T.sblock("B"):
            vi = T.axis.spatial(EXTENT, i)
            BODY
"""


def _kernel(extent: int, body: str):
    text = "from tvm.script import tirx as T\n" + DOUBLE.replace("EXTENT", str(extent)).replace(
        "BODY", body)
    return script_workload(textwrap.dedent(text)).mod


def test_a_kernel_writing_past_its_output_is_incorrect_and_not_timed(ev_fast):
    wl = script_workload("from tvm.script import tirx as T\n" + textwrap.dedent(
        DOUBLE.replace("EXTENT", "64").replace("BODY", "B[vi] = A[vi] * T.float32(2)")))
    past = _kernel(66, "B[vi] = A[vi % 64] * T.float32(2)")
    into_input = _kernel(64, "B[vi] = A[vi] * T.float32(2)\n            A[vi] = T.float32(0)")
    outcomes = ev_fast.evaluate_modules(wl, {"ok": wl.mod, "past": past, "input": into_input})
    assert outcomes["ok"].ok and outcomes["ok"].out_of_bounds == 0
    for name, words in (("past", "past the end of B"), ("input", "into the input A")):
        o = outcomes[name]
        assert o.status is Status.INCORRECT and words in o.message, o.summary()
        assert o.out_of_bounds > 0 and o.latency_s is None and not o.repeats
    # The outputs themselves were right: only the guards saw it.
    assert outcomes["past"].max_abs_error == 0


@pytest.fixture(scope="module")
def ev_fast(llvm_evaluator):
    """The session's llvm Evaluator (conftest): FAST's settings."""
    assert llvm_evaluator.config == FAST
    return llvm_evaluator


def test_the_split_past_the_extent_is_verified_with_guards(ev_fast):
    # The example: 86 x 3 = 258 > 256.  TVM's llvm build keeps it inside C (the guards
    # stay untouched); whatever a build does, the outcome says so before any timing.
    script = ('block "C" -> C\nloops C -> i, j, k\n'
              "split j [none, 3] disable_predication=true -> j0, j1\n")
    [o] = ev_fast.evaluate(workload("matmul(m=256,n=256,k=64)"), [script])
    assert o.out_of_bounds is not None
    assert o.ok == (o.out_of_bounds == 0 and o.max_abs_error is not None)


# ---- 3. one measurement per device at a time -------------------------------------------------

def test_measurements_wait_for_another_process_on_the_same_device(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAGON_CACHE_DIR", str(tmp_path))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.modules['torch'] = None\n"
         "from codegen.measure.locks import device_lock\n"
         "with device_lock('cpu'):\n    print('held', flush=True)\n    time.sleep(4)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        with Evaluator("llvm", cache=False, config=FAST, builders=1) as ev:
            [o] = ev.evaluate(workload("matmul(m=16,n=16,k=16)"), ['block "C" -> C'])
        waited = time.monotonic() - start
    finally:
        holder.wait(timeout=30)
    assert o.ok and waited >= 3.0, waited


# ---- 4. no measurement, no "correct"; valid JSON; valid cores --------------------------------

@pytest.mark.parametrize("field,value", [("repeat", 0), ("warmup", -1), ("run_timeout_s", 0),
                                         ("min_repeat_ms", -1.0), ("memory_limit_mb", 0)])
def test_measure_config_refuses_what_cannot_be_measured(field, value):
    with pytest.raises(ValueError, match=field):
        MeasureConfig(**{field: value})


def test_bench_repeat_zero_is_a_usage_error(tmp_path, capsys):
    script = tmp_path / "s.dragon"
    script.write_text('block "C" -> C\n')
    assert main(["bench", str(script), "--workload", "matmul(m=8,n=8,k=8)", "--repeat", "0",
                 "--baselines", "none"]) == 2
    assert "repeat" in capsys.readouterr().err


def test_a_correct_outcome_needs_a_latency_and_json_is_always_valid():
    for latency in (None, float("nan"), 0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="latency_s"):
            Outcome(Status.CORRECT, latency_s=latency)
    wrong_shape = Outcome(Status.INCORRECT, max_abs_error=math.inf, max_rel_error=math.nan)
    text = wrong_shape.to_json()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c}"))
    assert Outcome.from_json(text).max_abs_error is None


@pytest.mark.parametrize("cores", [0, -4, 4096])
def test_invalid_num_cores_is_refused(cores):
    with pytest.raises(ValueError, match="num-cores"):
        devices.create({"kind": "llvm", "num-cores": cores})
