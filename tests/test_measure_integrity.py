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
from codegen.measure.evaluator import MEASURE_VERSION, workload_identity, workload_text_hash
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


@pytest.mark.slow  # three Evaluators; that each part changes the key is the test above's
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
    assert len(rows) == 3 and {r["settings"].split(":")[0] for r in rows} == {f"v{MEASURE_VERSION}"}


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


def _writes_past_the_end(spec: str, script: str) -> dict[str, int]:
    """An independent check (no guards, no worker): the kernel built with ``tvm.compile`` and
    run on arguments that are views into arrays twice their size filled with 7; the elements
    past each argument's end that changed."""
    import numpy as np
    import tvm

    from codegen.apply import apply
    from codegen.measure.verify import make_inputs, params_of

    wl = workload(spec)
    lib = tvm.compile(apply(script, wl), target="llvm")
    params = params_of(wl)
    bigs, views = [], []
    for array in make_inputs(params, 0):
        pad = array.size
        raw = np.empty((array.size + pad) * array.itemsize + 64, np.uint8)
        start = (-raw.ctypes.data) % 64  # TVM wants 64-byte aligned data
        big = raw[start:start + (array.size + pad) * array.itemsize].view(array.dtype)
        big[:] = 7
        big[:array.size] = np.nan_to_num(array.reshape(-1), nan=0)
        bigs.append(big)
        views.append(tvm.runtime.from_dlpack(big[:array.size].reshape(array.shape)))
    lib["main"](*views)
    return {p.name: int(np.count_nonzero(big[big.size // 2:] != 7))
            for p, big in zip(params, bigs, strict=True)}


# Splits past a loop's extent with predication disabled.  Each writes past the end of its
# output, which the independent check above confirms; the outputs themselves can be right.
# With 0xFF guards alone the first was `correct` and timed: it reads W past its end (a NaN
# guard) and NaN arithmetic wrote that same bit pattern into C's guard.
PAST_THE_END = [
    ("dense(m=100,n=64,k=32)", 'block "T_dense" -> b\nloops b -> i, j, k\n'
     "split j [none, 3] disable_predication=true -> j0, j1\n"),
    ("dense(m=100,n=64,k=32)", 'block "T_dense" -> b\nloops b -> i, j, k\n'
     "split i [none, 3] disable_predication=true -> i0, i1\n"),
    ("matmul(m=256,n=256,k=64)", 'block "C" -> C\nloops C -> i, j, k\n'
     "split j [none, 3] disable_predication=true -> j0, j1\n"),
    ("conv2d(n=1,h=14,w=14,ci=8,co=8)", 'block "conv2d_nhwc" -> b\n'
     "loops b -> n, y, x, f, ry, rx, rc\nsplit x [none, 4] disable_predication=true -> x0, x1\n"),
    ("reduce(m=30,n=64)", 'block "X_red" -> b\nloops b -> i, k\n'
     "split i [none, 4] disable_predication=true -> i0, i1\n"),
]


@pytest.mark.parametrize("spec,script", PAST_THE_END)
def test_a_split_past_the_extent_is_out_of_bounds_and_never_timed(ev_fast, spec, script):
    written = _writes_past_the_end(spec, script)
    assert sum(written.values()) > 0, f"the variant no longer writes out of bounds: {written}"
    [o] = ev_fast.evaluate(workload(spec), [script])
    assert o.status is Status.INCORRECT and o.out_of_bounds, o.summary()
    assert "past the end of" in o.message and o.latency_s is None and not o.repeats


def test_guards_are_filled_twice_poison_then_random_bytes():
    import numpy as np
    import tvm

    from codegen.measure.guards import FILLS, GUARD_BYTE, POISON, GuardedArgs

    assert FILLS[0] is POISON and len(FILLS) == 2 and FILLS[1] is not POISON
    arrays = [np.ones(3, "float32"), np.zeros(4, "float32")]
    poison, other = (GuardedArgs(arrays, tvm.cpu(), fill) for fill in FILLS)
    start, end = poison.guards[1]
    assert (poison.before[start:end] == GUARD_BYTE).all()
    guard = other.before[start:end].view("float32")
    assert np.isfinite(guard).all() and len(set(guard.tolist())) > 1
    # Writing the first fill's bytes into the second fill's guard is a change it sees.
    other.base.copyfrom(np.where(np.arange(other.before.size) == start, GUARD_BYTE,
                                 other.before).astype("uint8"))
    assert other.check(outputs=[1]).out_of_bounds == {0: 1}


def test_gather_indices_are_within_the_axis_they_index():
    from codegen.measure.verify import make_inputs, params_of

    wl = workload("model(name=bert,preset=tiny,task=1)")  # the embedding lookup (take)
    params = {p.name: p for p in params_of(wl)}
    index = next(p for p in params.values() if p.index_extent is not None)
    table = next(p for p in params.values() if p.shape and p.shape[0] == index.index_extent)
    values = make_inputs(list(params.values()), 0)[list(params).index(index.name)]
    assert 0 <= values.min() and values.max() < table.shape[0]
    assert len(set(values.tolist())) > 1


def test_a_gather_task_is_verified_and_has_a_baseline(ev_fast):
    [o] = ev_fast.evaluate(workload("model(name=bert,preset=tiny,task=1)"), [""])
    assert o.ok and o.out_of_bounds == 0 and o.latency_s > 0, o.summary()


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


def test_a_long_wait_for_the_device_names_its_lock_once(tmp_path, monkeypatch, caplog):
    """A measuring process that was stopped (Ctrl-Z) keeps its lock: whoever waits for it says
    so on stderr, once, naming the lock, and goes on waiting."""
    import logging
    import threading

    from codegen.measure.locks import device_lock

    monkeypatch.setenv("DRAGON_CACHE_DIR", str(tmp_path))
    waited: list[float] = []

    def waiter():
        with device_lock("cpu", shared=True, warn_after_s=0.2) as seconds:
            waited.append(seconds)

    with caplog.at_level(logging.WARNING, logger="codegen.measure.locks"):
        with device_lock("cpu"):                    # another open file: held against it
            thread = threading.Thread(target=waiter)
            thread.start()
            time.sleep(0.8)
            assert thread.is_alive() and not waited  # still waiting, after the warning
        thread.join(timeout=10)
    assert waited and waited[0] >= 0.8
    warnings = [r.getMessage() for r in caplog.records if r.name == "codegen.measure.locks"]
    assert len(warnings) == 1 and "waiting" in warnings[0] and "'cpu'" in warnings[0]
    assert str(tmp_path) in warnings[0]


# ---- 4. no measurement, no "correct"; valid JSON; valid cores --------------------------------

@pytest.mark.parametrize("field,value", [("repeat", 0), ("warmup", -1), ("run_timeout_s", 0),
                                         ("min_repeat_ms", -1.0), ("memory_limit_mb", 0),
                                         ("limit_factor", -1.0), ("limit_factor", float("nan")),
                                         ("limit_floor_s", 0.0), ("cutoff_factor", -1.0),
                                         ("cutoff_factor", float("nan"))])
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
