"""Building, verifying and timing candidates in isolated workers: every outcome, for real.

Scripts come from MetaSchedule (``sample_traces``) or are hand-written for a failure they must
produce; wrong kernels are real wrong kernels, crashes are real signals, hangs are real kernels
run past their limit.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

import dragon_dsl
from codegen.measure import MeasureConfig
from codegen.measure.cache import Cache
from codegen.measure.evaluator import Evaluator, workload_identity
from codegen.measure.outcomes import Outcome, Status
from codegen.measure.protocol import PingJob, ReferenceJob, WorkloadData
from codegen.measure.verify import compare, poison
from codegen.measure.worker import JobCrashed, Worker
from codegen.search import sample_traces
from codegen.workloads import workload

FAST = MeasureConfig(repeat=3, min_repeat_ms=1.0)

# One default-sized instance of every family, and a few other dtypes and layouts.
FAMILY_SPECS = [
    "matmul(m=64,n=64,k=64)", "matmul(m=32,n=32,k=64,dtype=float16)",
    "matmul(m=32,n=32,k=32,dtype=int8)", "batch_matmul(b=2,m=32,n=32,k=32)",
    "gemv(m=128,k=128)", "dense(m=32,n=48,k=64,bias=1,act=relu)",
    "conv1d(n=1,l=32,ci=8,co=8)", "conv2d(n=1,h=8,w=8,ci=8,co=8)",
    "conv2d(n=1,h=8,w=8,ci=8,co=8,layout=NCHW,groups=2)", "conv3d(d=4,h=4,w=4,ci=4,co=4)",
    "depthwise_conv2d(h=8,w=8,c=8)", "conv2d_transpose(h=4,w=4,ci=4,co=4)",
    "pool2d(c=4,h=8,w=8,kind=avg)", "pool2d(c=4,h=8,w=8,kind=global)", "softmax(m=16,n=64)",
    "layer_norm(m=16,n=64)", "rms_norm(m=16,n=64)", "reduce(m=16,n=64,op=max)",
    "elementwise(m=16,n=64)", "transpose(m=8,n=16,k=4)",
    "attention(b=1,heads=2,sq=16,skv=16,d=16)",
]


@pytest.fixture(scope="module")
def ev(llvm_evaluator):
    """The session's llvm Evaluator (conftest): FAST's settings, 1 builder."""
    assert llvm_evaluator.config == FAST
    return llvm_evaluator


def sampled(spec: str, n: int, target: str = "llvm", rules: str = "llvm", seed: int = 1):
    wl = workload(spec)
    traces = sample_traces(wl.mod, target, rules, n, seed=seed)
    return wl, [dragon_dsl.from_trace(t, postproc="auto", postproc_set=rules) for t in traces]


# In the default pass: a matmul in two dtypes and a softmax (several blocks, a reduction); the
# other families (15 to 25 s each on 2 busy cores) in the slow pass.
DEFAULT_FAMILY_SPECS = ("matmul(m=64,n=64,k=64)", "matmul(m=32,n=32,k=64,dtype=float16)",
                        "softmax(m=16,n=64)")


@pytest.mark.parametrize("spec", [spec if spec in DEFAULT_FAMILY_SPECS
                                  else pytest.param(spec, marks=pytest.mark.slow)
                                  for spec in FAMILY_SPECS])
def test_every_family_verifies_unscheduled_and_sampled(ev, spec):
    from codegen.search.baselines import unscheduled

    wl, scripts = sampled(spec, 2)
    assert scripts, f"MetaSchedule gave no trace for {spec}"
    outcomes = ev.evaluate(wl, scripts)
    base = ev.evaluate_modules(wl, {"unscheduled": unscheduled(wl, "llvm")})["unscheduled"]
    for outcome in [*outcomes, base]:
        assert outcome.status is Status.CORRECT, outcome.summary()
        assert outcome.unwritten == 0
        assert outcome.latency_s > 0 and len(outcome.repeats) == FAST.repeat
        assert min(outcome.repeats) <= outcome.latency_s <= max(outcome.repeats)


def test_outcomes_for_text_that_does_not_fit(ev):
    wl = workload("matmul(m=16,n=16,k=16)")
    parse, apply_, good = ev.evaluate(wl, [
        'block "C" -> b0\nsplit b0 by 4',
        'block "C" -> b0\nloops b0 -> i, j',  # the block has three loops
        'block "C" -> b0\nloops b0 -> i, j, k\nsplit i [4, 4] -> i0, i1\nparallel i0',
    ])
    assert parse.status is Status.PARSE_ERROR and (parse.line, parse.column) == (2, 10)
    assert apply_.status is Status.APPLY_ERROR and apply_.line == 2
    assert good.ok


def test_wrong_kernels_are_incorrect_not_errors(ev):
    wl = workload("matmul(m=32,n=32,k=256)")
    # The accumulator kept in float16 (a real schedule primitive, used unsafely) loses
    # precision; kept in int8 it loses everything.
    lossy, garbage = ev.evaluate(wl, [
        f'block "C" -> b0\ncache_write b0 0 "local" -> b1\n@UnsafeSetDType(b0; 0, "{dtype}")'
        for dtype in ("float16", "int8")])
    assert lossy.status is Status.INCORRECT and 1e-3 < lossy.max_abs_error < 10
    assert garbage.status is Status.INCORRECT and garbage.max_abs_error > lossy.max_abs_error
    assert "elements differ" in garbage.message and lossy.latency_s is None


def test_unwritten_outputs_are_caught_by_the_poison(ev):
    import tvm

    wl = workload("matmul(m=16,n=16,k=16)")
    text = wl.mod.script().replace("T.grid(16, 16, 16)", "T.grid(16, 8, 16)")
    half = tvm.script.from_source(text)
    outcome = ev.evaluate_modules(wl, {"half": half})["half"]
    assert outcome.status is Status.INCORRECT
    assert outcome.unwritten == 16 * 8
    assert "never written" in outcome.message


def test_an_adaptive_limit_stops_a_script_far_slower_than_any_before_it_never_a_baseline():
    wl = workload("matmul(m=384,n=384,k=384)")
    adaptive = MeasureConfig(repeat=3, min_repeat_ms=1.0, limit_factor=2.0, limit_floor_s=0.01)
    identity = workload_identity(wl)
    with Evaluator("llvm", cache=False, config=adaptive, builders=1) as ev:
        assert ev.limits.limit(identity, "run", adaptive) == adaptive.run_timeout_s
        # As if every kernel before it had run in 5 ms: the unscheduled kernel (~0.1-0.5 s a
        # call, five calls) is stopped at 2 x 5 ms, and the message says why.
        ev.limits.observe(identity, "run", 0.005)
        [slow] = ev.evaluate(wl, ['block "C" -> b0'])
        assert slow.status is Status.TIMEOUT and slow.stage in ("load", "verify", "time")
        assert "adaptive: 2x the slowest run of this workload so far" in slow.message
        assert ev.limits.slowest(identity, "build") is not None  # its build finished, counted
        # The same kernel as a baseline gets the configured limit, and what it took counts.
        unscheduled = ev.evaluate_modules(wl, {"unscheduled": wl.mod})["unscheduled"]
        assert unscheduled.ok and ev.limits.slowest(identity, "run") > 0.05
        ev.config = replace(adaptive, limit_factor=5.0)
        [again] = ev.evaluate(wl, ['block "C" -> b0'])
        assert again.ok
        # Off (the default), the same history stops nothing.
        ev.limits.observe(identity, "run", 0.005)
        ev.config = replace(adaptive, limit_factor=0.0)
        assert ev.limits.limit(identity, "run", ev.config) == adaptive.run_timeout_s


def test_a_build_far_slower_than_any_before_it_is_stopped_at_its_own_factor():
    """``build_limit_factor`` stops a build at that many times the slowest so far, whatever
    ``limit_factor`` says for runs; the timeout's message names the factor."""
    wl = workload("matmul(m=64,n=64,k=64)")
    config = MeasureConfig(repeat=1, min_repeat_ms=0.0, limit_factor=1e6,
                           build_limit_factor=0.001, limit_floor_s=0.01)
    identity = workload_identity(wl)
    with Evaluator("llvm", cache=False, config=config, builders=1) as ev:
        ev.limits.observe(identity, "build", 0.001)   # as if every build before took 1 ms
        ev.limits.observe(identity, "run", 10.0)
        assert ev.limits.limit(identity, "build", config) == 0.01
        assert ev.limits.limit(identity, "run", config) == config.run_timeout_s
        [slow] = ev.evaluate(wl, ['block "C" -> b0'])
        assert slow.status is Status.TIMEOUT and slow.stage == "build"
        assert "adaptive: 0.001x the slowest build of this workload so far" in slow.message
        ev.config = replace(config, build_limit_factor=None)   # unset: limit_factor, 120 s
        [again] = ev.evaluate(wl, ['block "C" -> b0'])
        assert again.ok


def test_a_kernel_far_slower_than_the_fastest_so_far_is_timed_once_and_not_cached(tmp_path):
    wl = workload("matmul(m=128,n=128,k=128)")
    # min_repeat_ms 0.1: one run of the kernel lasts a repeat, as the cutoff asks.
    config = MeasureConfig(repeat=5, min_repeat_ms=0.1, cutoff_factor=4.0)
    identity = workload_identity(wl)
    cache = Cache(str(tmp_path / "m.sqlite"))
    with Evaluator("llvm", cache=cache, config=config, builders=1) as ev:
        # Nothing timed yet: no cutoff, every repeat; its median becomes the fastest so far.
        [first] = ev.evaluate(wl, ['block "C" -> b0'])
        assert first.ok and len(first.repeats) == 5 and first.message == ""
        assert ev.limits.fastest(identity) == first.latency_s
        assert ev.limits.cutoff(identity, config) == pytest.approx(4.0 * first.latency_s)
        # As if a kernel of 1 ns had been timed: the next one is past 4 ns, timed once, and
        # says so; the measurement is a real one, but it is not cached.
        ev.limits.observe_latency(identity, 1e-9)
        [cut] = ev.evaluate(wl, ['block "C" -> b1'])
        assert cut.ok and len(cut.repeats) == 1 and cut.latency_s == cut.repeats[0] > 4e-9
        assert "timed once, not 5 times" in cut.message
        [again] = ev.evaluate(wl, ['block "C" -> b1'])
        assert not again.cached and len(again.repeats) == 1
        # A baseline is never cut, and the first script's full outcome was cached.
        base = ev.evaluate_modules(wl, {"unscheduled": wl.mod})["unscheduled"]
        assert base.ok and len(base.repeats) == 5
        [hit] = ev.evaluate(wl, ['block "C" -> b0'])
        assert hit.cached and len(hit.repeats) == 5
    # Off (the default), the same history cuts nothing.
    with Evaluator("llvm", cache=False, config=MeasureConfig(repeat=5, min_repeat_ms=1.0),
                   builders=1) as ev:
        ev.limits.observe_latency(identity, 1e-9)
        assert ev.limits.cutoff(identity, ev.config) == 0.0
        [full] = ev.evaluate(wl, ['block "C" -> b1'])
        assert full.ok and len(full.repeats) == 5


def test_a_kernel_past_its_time_limit_times_out_and_the_next_one_runs(tmp_path):
    wl = workload("matmul(m=384,n=384,k=384)")
    slow = MeasureConfig(repeat=3, min_repeat_ms=1.0, run_timeout_s=0.05)
    cache = Cache(str(tmp_path / "m.sqlite"))
    with Evaluator("llvm", cache=cache, config=slow, builders=1) as ev:
        # Unscheduled, the kernel takes ~0.1-0.5 s: past the 0.05 s limit.
        [outcome] = ev.evaluate(wl, ['block "C" -> b0'])
        assert outcome.status is Status.TIMEOUT and outcome.stage in ("verify", "time")
        assert len(cache) == 0  # a timeout depends on the load: not remembered
        ev.config = FAST
        [again] = ev.evaluate(workload("matmul(m=16,n=16,k=16)"), ['block "C" -> b0'])
        assert again.ok and len(cache) == 1


def test_a_worker_killed_by_a_signal_is_a_runtime_error_and_is_replaced():
    # 512^3 unscheduled (about 0.1 s a run): under a loaded machine a 384^3 kernel (42 ms) was
    # verified and timed before the killer thread was scheduled, and the test saw it correct.
    wl = workload("matmul(m=512,n=512,k=512)")
    with Evaluator("llvm", cache=False, config=FAST, builders=1) as ev:
        def assassin():
            deadline = time.monotonic() + 120
            while ev.runner.stage not in ("verify", "time") and time.monotonic() < deadline:
                time.sleep(0.005)
            os.kill(ev.runner.pid, signal.SIGSEGV)

        killer = threading.Thread(target=assassin)
        killer.start()
        [outcome] = ev.evaluate(wl, ['block "C" -> b0'])
        killer.join()
        assert outcome.status is Status.RUNTIME_ERROR
        assert outcome.signal == "SIGSEGV" and outcome.stage in ("verify", "time")
        [again] = ev.evaluate(workload("matmul(m=16,n=16,k=16)"), ['block "C" -> b0'])
        assert again.ok


def test_a_corrupted_build_is_a_runtime_error_at_load(ev):
    import tempfile

    from codegen.measure.evaluator import _Item
    from codegen.measure.protocol import WorkloadData

    wl = workload("matmul(m=16,n=16,k=16)")
    payload = WorkloadData.of(wl)
    item = _Item('block "C" -> b0', script='block "C" -> b0')
    ev._build(payload, item, tempfile.mkdtemp(), 0)
    artifact = item.artifact
    with open(artifact.library, "r+b") as f:  # keep the ELF header, scramble the rest
        f.seek(64)
        f.write(os.urandom(4096))
    assert ev._prepare(payload) is None
    outcome = ev._measure(payload, artifact, 0.0)
    assert outcome.status is Status.RUNTIME_ERROR and outcome.stage == "load"


def test_memory_limit_kills_the_worker_not_the_caller():
    with Worker() as probe:
        probe.call(PingJob(), timeout=60)
        base = probe._rss_mb()
    # 3 buffers of 64 MiB each, far above the limit of base + 100 MiB.
    wl = workload("elementwise(m=4096,n=4096,ops=add)")
    with Worker(memory_limit_mb=int(base) + 100) as w:
        with pytest.raises(JobCrashed, match="memory"):
            w.call(ReferenceJob(WorkloadData.of(wl), MeasureConfig()), timeout=120)
        assert w.call(PingJob(), timeout=60).pid == w.pid  # restarted


def test_cuda_scripts_compile_to_cubin_without_a_gpu():
    wl, scripts = sampled("matmul(m=64,n=64,k=64)", 2, target="cuda", rules="cuda")
    _, softmax_scripts = sampled("softmax(m=32,n=128)", 1, target="cuda", rules="cuda")
    with Evaluator("cuda", cache=False, config=FAST, builders=1) as ev:
        outcomes = ev.evaluate(wl, scripts)
        [soft] = ev.evaluate(workload("softmax(m=32,n=128)"), softmax_scripts)
        if ev._device_info().present:
            pytest.skip("a GPU is present: the gpu-marked tests cover running")
    for outcome in [*outcomes, soft]:
        assert outcome.status is Status.BUILT, outcome.summary()
        assert outcome.build_s > 0


def test_cubin_is_a_real_cuda_binary(tmp_path):
    from codegen.apply import apply
    from codegen.measure.build import build

    wl, [script] = sampled("matmul(m=64,n=64,k=64)", 1, target="cuda", rules="cuda")
    artifact = build(apply(script, wl, "cuda"), "cuda", str(tmp_path))
    data = open(artifact.cubin, "rb").read()
    assert data[:4] == b"\x7fELF" and len(data) > 1000
    assert os.path.getsize(artifact.library) > 0


def test_cache_returns_the_same_outcome_without_measuring(tmp_path):
    wl, scripts = sampled("matmul(m=32,n=32,k=32)", 2)
    path = str(tmp_path / "m.sqlite")
    with Evaluator("llvm", cache=path, config=FAST, builders=1) as ev:
        first = ev.evaluate(wl, scripts + ["nonsense"])
    with Evaluator("llvm", cache=path, config=FAST, builders=1) as ev:
        second = ev.evaluate(wl, [dragon_dsl.format(s) + "\n" for s in scripts])
        assert all(w.proc is None for w in ev._all[:-1])  # no build worker ever started
    for a, b in zip(first, second, strict=False):
        assert b.cached and not a.cached
        assert b.latency_s == a.latency_s and b.repeats == a.repeats
    assert len(Cache(path)) == 2  # parse errors are not measurements


def test_a_corrupt_cache_file_is_kept_aside_and_replaced(tmp_path):
    path = tmp_path / "m.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.warns(UserWarning, match="moved it to"):
        cache = Cache(str(path))
    assert len(cache) == 0
    [aside] = list(tmp_path.glob("m.sqlite.corrupt-*"))
    assert aside.read_bytes() == b"this is not sqlite" * 100


def test_outcome_json_round_trip():
    outcome = Outcome(Status.CORRECT, "time", latency_s=1e-3, spread_s=1e-5, repeats=[1e-3])
    assert Outcome.from_json(outcome.to_json()) == outcome
    assert Outcome.from_dict({**outcome.as_dict(), "new_field": 1}) == outcome


def test_compare_tolerances_per_dtype():
    ref = np.linspace(1, 2, 100, dtype="float32")
    assert compare([ref * (1 + 5e-4)], [ref]).ok
    assert not compare([ref * (1 + 5e-3)], [ref]).ok
    half = ref.astype("float16")
    assert compare([half * np.float16(1.005)], [half]).ok
    ints = np.arange(10, dtype="int32")
    assert not compare([ints + np.array([0] * 9 + [1], "int32")], [ints]).ok
    holes = ref.copy()
    holes[:3] = poison((3,), "float32")
    result = compare([holes], [ref])
    assert not result.ok and result.unwritten == 3


def test_rpc_tracker_measures_on_the_remote_device():
    from codegen.measure.remote import LocalTracker

    wl, scripts = sampled("matmul(m=32,n=32,k=32)", 1)
    with LocalTracker(key="cpu-test", port=9300) as tracker:
        with Evaluator("llvm", cache=False, config=FAST, rpc=tracker.rpc, builders=1) as ev:
            [outcome] = ev.evaluate(wl, scripts)
            assert ev.device == "rpc:cpu-test"
    assert outcome.ok and outcome.latency_s > 0
