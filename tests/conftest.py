"""Shared test set-up: Hypothesis profiles, MetaSchedule search spaces kept for the whole
session (the first design-space generation in a process costs 15 to 25 s), one small
`dragon datagen` output and one small SFT run for the training tests, two Evaluators, and
``dragon_cmd``, which runs a command in this process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

# Profiles are chosen by DRAGON_HYPOTHESIS_PROFILE: "ci" (the default run), "thorough".
settings.register_profile(
    "ci", max_examples=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("DRAGON_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread_per_worker():
    """Under pytest-xdist, torch computes on one thread in each worker: two workers each
    running a thread per core oversubscribed 2 cores (the thousand-sample test took 6x longer).
    Kernels are timed in the Evaluators' own processes, which this does not touch."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
    yield


# The measurement settings of the shared Evaluators: 3 repeats of at least 1 ms.
FAST_REPEAT, FAST_MIN_REPEAT_MS = 3, 1.0
# Build processes of an Evaluator in the tests: one.  A build worker's first build costs about
# 10 s of CPU (TVM's import, then its tensor intrinsics, which applying `postproc auto` imports),
# each later one a fraction of a second; on 2 cores, beside another xdist worker, a second
# builder costs those seconds again and saves none.  Tests of parallel builds set their own.
BUILDERS = 1


@pytest.fixture(scope="session")
def llvm_evaluator():
    """An ``Evaluator`` on ``llvm`` without a cache (3 repeats of at least 1 ms, 1 builder),
    for the tests that only measure with it (test_evaluate, test_measure_integrity,
    test_optimize): its worker processes start once a run, not once a file.  Tests that kill
    workers, time out, or need a cache or other settings start their own."""
    from codegen.measure import Evaluator, MeasureConfig

    config = MeasureConfig(repeat=FAST_REPEAT, min_repeat_ms=FAST_MIN_REPEAT_MS)
    with Evaluator("llvm", cache=False, config=config, builders=BUILDERS) as ev:
        yield ev


@pytest.fixture(scope="session")
def llvm2_evaluator():
    """The same on ``{"kind": "llvm", "num-cores": 2}``, the target of the datagen tests
    (test_datagen, test_datagen_database)."""
    from codegen.measure import Evaluator, MeasureConfig

    config = MeasureConfig(repeat=FAST_REPEAT, min_repeat_ms=FAST_MIN_REPEAT_MS)
    with Evaluator({"kind": "llvm", "num-cores": 2}, cache=False, config=config,
                   builders=BUILDERS) as ev:
        yield ev


def built_once(tmp_path_factory, name: str, build):
    """``build(folder)``'s result, a path, built once for the whole run: under pytest-xdist
    (``make test`` runs two workers) the first worker to ask builds it in the run's shared
    temporary folder while the others wait on a lock, then all read the same files.  Tests
    only read what it holds (the hostile tests check that nothing writes into it)."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not done.exists():
            if folder.exists():  # a worker that failed halfway
                import shutil

                shutil.rmtree(folder)
            folder.mkdir()
            done.write_text(str(build(folder)))
    from pathlib import Path

    return Path(done.read_text())


@pytest.fixture(scope="session")
def datagen_dir(tmp_path_factory):
    """A small `dragon datagen` output from a real search (``tests/tiny_datagen.py``), shared
    by the training tests."""
    from .tiny_datagen import write_datagen

    return built_once(tmp_path_factory, "datagen", write_datagen)


@pytest.fixture(scope="session")
def sft_model(datagen_dir, tmp_path_factory):
    """An SFT run directory: a very small model trained 8 steps on ``datagen_dir`` (a few
    seconds), checkpointed at steps 4 and 8; its final/ model is step 8's."""
    from training.train import SFTRunConfig, run_sft

    def train(folder):
        out = folder / "run"
        run_sft(SFTRunConfig(data=str(datagen_dir), out=str(out), model="tiny", hidden_size=32,
                             layers=1, heads=2, vocab_size=400, max_steps=8,
                             learning_rate=1e-2, lr_scheduler="constant", batch_size=4,
                             max_length=768, logging_steps=4, eval_steps=0,
                             max_eval_examples=4, save_steps=4, keep_best=False),
                progress=False)
        return out

    return built_once(tmp_path_factory, "sft", train)


@pytest.fixture
def dragon_cmd(capsys, monkeypatch):
    """``dragon_cmd(args, stdin=None)`` runs ``dragon ARGS`` in this process
    (``dragon_dsl.cli.main``, stdin and output redirected) and returns a
    ``subprocess.CompletedProcess`` (text), as a test that ran the installed command would see
    it.  A fresh interpreter pays TVM's import and the first design-space generation again
    (10 to 25 s a call): each command keeps its own tests of the installed command in a
    process of its own (test_cli, test_hostile, test_datagen, test_eval_models, test_sft), and
    the tests of what a command does, not of its process, call it here."""
    def run(args, stdin=None):
        import io

        from dragon_dsl.cli import main

        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["dragon", *map(str, args)], code, out, err)

    return run


# The longest files first (their seconds in `make test --durations` on 2 cores): under
# pytest-xdist (`--dist loadfile --no-loadscope-reorder`, the Makefile's) a worker takes the next
# whole file in collection order when it is almost done with its own, so the long files start
# early and the short ones fill in at the end.  (xdist's own order, by the number of tests in a
# file, undid this one and left long files for last.)  A file not named keeps its place after.
LONGEST_FIRST = ["test_sampling.py", "test_evaluate.py", "test_datagen.py", "test_optimize.py",
                 "test_datagen_database.py", "test_eval_models.py", "test_roundtrip.py",
                 "test_rl.py", "test_schedule_aware.py", "test_measure_integrity.py",
                 "test_workers.py", "test_reward.py", "test_hostile_train.py",
                 "test_live_worker.py", "test_hostile.py", "test_models.py", "test_cli_bench.py",
                 "test_eval_http.py"]


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept within
