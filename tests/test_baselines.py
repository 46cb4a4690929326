"""Baselines: each builds and computes the right result; the MetaSchedule memo round-trips.

The default run stubs out tune_tir (a real tune spends 1-2 minutes importing TVM's tensor
intrinsics and starting worker processes); the real tunes are marked slow or gpu.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings

import numpy as np
import pytest

from codegen.search import baselines as bl
from codegen.workloads import workload

LLVM = {"kind": "llvm", "num-cores": 2}
CUDA = "nvidia/nvidia-h100"
MATMUL = "matmul(m=64,n=64,k=64)"


def _run_llvm(mod, inputs: list[np.ndarray], out_shape) -> np.ndarray:
    import tvm

    lib = tvm.compile(mod, target=tvm.target.Target(LLVM))
    dev = tvm.cpu(0)
    out = tvm.runtime.empty(out_shape, "float32", dev)
    lib["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], out)
    return out.numpy()


def _check_matmul(mod) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    np.testing.assert_allclose(_run_llvm(mod, [a, b], (64, 64)), a @ b, rtol=1e-4, atol=1e-4)


def test_unscheduled_llvm_is_the_workload_and_computes_matmul():
    import tvm_ffi

    wl = workload(MATMUL)
    mod = bl.unscheduled(wl, LLVM)
    assert tvm_ffi.structural_equal(mod, wl.mod)
    _check_matmul(mod)


def test_rule_based_llvm_matmul_is_unavailable_with_a_reason():
    with pytest.raises(bl.BaselineUnavailable, match=r"no DLight CPU rule .* matches matmul"):
        bl.rule_based(workload(MATMUL), LLVM)


def test_rule_based_llvm_softmax_and_gemv_compute_the_right_result():
    import tvm_ffi

    rng = np.random.default_rng(0)
    wl = workload("softmax(m=64,n=128)")
    mod = bl.rule_based(wl, LLVM)
    assert not tvm_ffi.structural_equal(mod, wl.mod)
    x = rng.standard_normal((64, 128), dtype=np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(_run_llvm(mod, [x], (64, 128)), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-6)

    mod = bl.rule_based(workload("gemv(m=256,k=256)"), LLVM)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    v = rng.standard_normal((256,), dtype=np.float32)
    np.testing.assert_allclose(_run_llvm(mod, [a, v], (256,)), a @ v, rtol=1e-4, atol=1e-4)


def test_dlight_leaves_the_workload_module_untouched():
    import tvm_ffi

    wl = workload(MATMUL)
    before = tvm_ffi.structural_hash(wl.mod)
    fallback = bl.unscheduled(wl, CUDA)
    default = bl.rule_based(wl, CUDA)
    assert tvm_ffi.structural_hash(wl.mod) == before
    # The Matmul rule, not the Fallback, schedules a matmul.
    assert not tvm_ffi.structural_equal(fallback, default)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("spec", [MATMUL, "softmax(m=64,n=128)", "layer_norm(m=64,n=128)"])
@pytest.mark.parametrize("make", [bl.unscheduled, bl.rule_based], ids=["unscheduled", "default"])
def test_cuda_baselines_compile_to_cubin(spec, make):
    import tvm
    from tvm.support import nvcc

    target = tvm.target.Target(CUDA)
    executable = tvm.compile(make(workload(spec), CUDA), target=target)
    source = next(m.inspect_source() for m in executable.mod.imports if m.kind == "cuda")
    assert "threadIdx.x" in source
    with target:
        cubin = nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc", arch="sm_90a")
    assert len(bytes(cubin)) > 0


def test_metaschedule_on_cuda_without_a_runner_is_unavailable(tmp_path):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("a local GPU can measure")
    with pytest.raises(bl.BaselineUnavailable, match="no cuda device: pass runner="):
        bl.metaschedule_best(workload(MATMUL), CUDA, trials=8, cache_dir=str(tmp_path))


# ---- the memo, with tune_tir replaced by a fixed schedule ------------------------------------

@pytest.fixture
def fake_tune(monkeypatch):
    """Replace the tuning run by a fixed tiled schedule; counts the calls."""
    calls = []

    def tune(mod, tgt, rules, trials, work_dir, seed, builder, runner, cost_model):
        from tvm.s_tir.schedule import Schedule

        calls.append(trials)
        sch = Schedule(mod)
        i, j, k = sch.get_loops(sch.get_sblock("C"))
        i0, i1 = sch.split(i, [8, 8])
        j0, j1 = sch.split(j, [4, 16])
        sch.reorder(i0, j0, k, i1, j1)
        return (sch, 1.5e-5), trials

    monkeypatch.setattr(bl, "_tune", tune)
    return calls


def test_memo_hit_returns_the_same_script_without_tuning(tmp_path, fake_tune):
    import tvm_ffi

    wl = workload(MATMUL)
    first = bl.metaschedule_best(wl, LLVM, trials=8, cache_dir=str(tmp_path))
    assert not first.cached and fake_tune == [8]
    again = bl.metaschedule_best(wl, LLVM, trials=8, cache_dir=str(tmp_path))
    assert again.cached and fake_tune == [8]
    assert (again.script, again.latency, again.trials) == (first.script, 1.5e-5, 8)
    assert tvm_ffi.structural_equal(again.mod, first.mod)
    _check_matmul(again.mod)
    # Another budget is another key.
    bl.metaschedule_best(wl, LLVM, trials=16, cache_dir=str(tmp_path))
    assert fake_tune == [8, 16]
    assert len(list(tmp_path.glob("*.json"))) == 2


@pytest.mark.parametrize("damage", ["{ not json", '{"version": 1, "script": "tile nowhere"}',
                                    '{"version": 999}'])
def test_a_corrupt_memo_is_warned_about_and_recomputed(tmp_path, fake_tune, damage):
    wl = workload(MATMUL)
    first = bl.metaschedule_best(wl, LLVM, trials=8, cache_dir=str(tmp_path))
    (path,) = tmp_path.glob("*.json")
    path.write_text(damage)
    with pytest.warns(UserWarning, match="unusable baseline memo"):
        again = bl.metaschedule_best(wl, LLVM, trials=8, cache_dir=str(tmp_path))
    assert not again.cached and fake_tune == [8, 8]
    assert again.script == first.script
    assert json.loads(path.read_text())["script"] == first.script  # rewritten whole
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


def test_baselines_collects_modules_and_reasons(tmp_path, fake_tune):
    import tvm

    got = bl.baselines(workload(MATMUL), LLVM, trials=8, cache_dir=str(tmp_path))
    assert list(got) == ["unscheduled", "default", "metaschedule"]
    assert isinstance(got["unscheduled"], tvm.IRModule)
    assert isinstance(got["default"], bl.BaselineUnavailable)
    assert isinstance(got["metaschedule"], tvm.IRModule)


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DRAGON_CACHE_DIR", str(tmp_path))
    assert bl.default_cache_dir() == os.path.join(str(tmp_path), "baselines")


# ---- real tuning ------------------------------------------------------------------------------

def _round_trips(best, wl, target) -> bool:
    import tvm_ffi
    from tvm.s_tir.schedule import Schedule

    import dragon_dsl

    sch = Schedule(wl.mod)
    dragon_dsl.to_trace(best.script, workload=wl, target=target).apply_to_schedule(
        sch, remove_postproc=False)
    return tvm_ffi.structural_equal(sch.mod, best.mod)


@pytest.mark.parametrize("set_by_user", [None, logging.INFO])
def test_metaschedule_console_shows_warnings_only_unless_the_user_set_a_level(set_by_user):
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    before = logger.level
    logger.setLevel(set_by_user or logging.NOTSET)
    try:
        with bl.console_warnings_only():
            assert logger.level == (set_by_user or logging.WARNING)
            logger.setLevel(logging.DEBUG)  # what tune_tir leaves
        assert logger.level == (set_by_user or logging.NOTSET)  # the next call as quiet
    finally:
        logger.setLevel(before)


@pytest.fixture
def no_level_set():
    """A user who set no level on MetaSchedule's logger, whatever an earlier test in this
    process left there (a bare tune_tir leaves DEBUG, which reads as the user's choice)."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    before = logger.level
    logger.setLevel(logging.NOTSET)
    yield
    logger.setLevel(before)


@pytest.mark.slow
def test_metaschedule_best_llvm_tunes_round_trips_and_memoises(tmp_path, capsys,
                                                               no_level_set):
    wl = workload(MATMUL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fresh cache must not warn
        best = bl.metaschedule_best(wl, LLVM, trials=8, cache_dir=str(tmp_path / "memo"),
                                    work_dir=str(tmp_path / "work"))
        bl.metaschedule_best(wl, LLVM, trials=4, cache_dir=str(tmp_path / "memo"), seed=1)
    # Tuned twice: MetaSchedule's progress went to its log files, not the user's terminal.
    printed = capsys.readouterr().out
    assert "[INFO]" not in printed and "Evolve iter" not in printed, printed[:400]
    assert any((tmp_path / "work" / "logs").iterdir())
    assert not best.cached and 1 <= best.trials <= 8
    assert 0 < best.latency < 1
    assert best.script.rstrip().endswith("postproc auto llvm")
    assert _round_trips(best, wl, LLVM)
    _check_matmul(best.mod)
    hit = bl.metaschedule_best(wl, LLVM, trials=8, cache_dir=str(tmp_path / "memo"))
    assert hit.cached and hit.script == best.script and hit.latency == best.latency


@pytest.mark.gpu
def test_metaschedule_best_cuda_with_a_local_gpu(tmp_path):
    wl = workload(MATMUL)
    best = bl.metaschedule_best(wl, CUDA, trials=8, cache_dir=str(tmp_path))
    assert 0 < best.latency < 1
    assert _round_trips(best, wl, CUDA)
