"""Live schedules held in a worker process (``training.sampling.live_worker``): the view the
statement grammar reads there is the live schedule's own, isolated sampling writes the same
scripts as in-process sampling, and a worker that dies costs the one sample whose statement
killed it while the rest of the batch is replayed in a new worker and completes."""

from __future__ import annotations

import os
import signal

import pytest
import torch

import dragon_dsl
from codegen.measure.worker_main import CRASH_ON
from codegen.search import sample_traces
from codegen.workloads import workload
from dragon_dsl.live import LiveSchedule
from dragon_dsl.live_view import LiveView
from training.grammars.constraints import (
    annotation_keys,
    annotation_values,
    categorical_lists,
    expand_ranges,
)
from training.grammars.statement import statement_grammar
from training.prompts.templates import construction_prompt
from training.sampling import (
    SamplingConfig,
    ScheduleAwareConfig,
    live_worker,
    schedule_aware_generate,
)
from training.sampling.live_worker import HolderCrashed, LivePool, LiveWorker

from .tiny_models import small_model, small_tokenizer

SPECS = ["matmul(m=128,n=128,k=128)", "softmax(m=32,n=64)"]


@pytest.fixture
def holders(monkeypatch):
    """Shared holders of this test only (started with its environment), killed after it."""
    made: dict = {}
    monkeypatch.setattr(live_worker, "_SHARED", made)
    yield made
    for holder in made.values():
        holder.kill()


@pytest.mark.parametrize("spec,target,rules", [("matmul(m=128,n=128,k=128)", "llvm", "llvm"),
                                               ("softmax(m=64,n=128)", "cuda", "cuda")])
def test_the_view_from_the_worker_gives_the_live_schedules_grammar(spec, target, rules):
    wl = workload(spec)
    kwargs = dict(postproc_set=rules, categorical=categorical_lists(wl, target, rules) or (),
                  annotations=annotation_keys(wl, target, rules) or (),
                  annotation_values=annotation_values(wl, target, rules))
    holder = LiveWorker(target)
    try:
        for trace in sample_traces(wl.mod, target, rules, 2, seed=3):
            script = expand_ranges(dragon_dsl.from_trace(trace, postproc="auto",
                                                         postproc_set=rules, workload=wl))
            live = LiveSchedule(wl, target)
            key, view = holder.open(wl)
            for line in script.splitlines():
                assert statement_grammar(view, **kwargs) == statement_grammar(live, **kwargs), \
                    line
                live.step(line)
                view = holder.step(key, line)
                assert isinstance(view, LiveView), view
            assert view.postproc_set == rules and view.statements == live.statements
            refused = holder.step(key, "parallel i")  # nothing may follow postproc
            assert not isinstance(refused, LiveView) and "postproc" in refused.message
    finally:
        holder.kill()


def test_a_crash_costs_its_row_and_the_others_are_replayed(monkeypatch):
    monkeypatch.setenv(CRASH_ON, "tile j [8, 16] -> j0, j1")
    wl = workload("matmul(m=128,n=128,k=128)")
    holder = LiveWorker("llvm")
    try:
        a, _ = holder.open(wl)
        b, _ = holder.open(wl)
        for key in (a, b):
            for line in ['block "C" -> C', "loops C -> i, j, k"]:
                assert isinstance(holder.step(key, line), LiveView)
        before = holder.step(b, "tile i [4, 32] -> i0, i1")
        with pytest.raises(HolderCrashed, match="crashed applying `tile j") as crash:
            holder.step(a, "tile j [8, 16] -> j0, j1")
        assert "exited with status 255" in str(crash.value)
        # What the worker wrote as it died is in the message; the job before it wrote nothing.
        assert str(crash.value).endswith("InternalError: Check failed: (planted) is false: "
                                         "Cannot find type info for type_index=999")
        after = holder.step(b, "parallel i0")  # replayed in a new worker first
        assert isinstance(after, LiveView)
        assert after.statements == before.statements + 1
        assert after.names("loop") == before.names("loop")
        assert holder.crashes == 1
        # Killed between requests (the memory limit, a person): nothing fails, b is replayed.
        os.kill(holder.worker.pid, signal.SIGKILL)
        holder.worker.proc.wait()
        again = holder.step(b, "sample_categorical [1, 2] 0 -> v0")
        assert isinstance(again, LiveView) and again.statements == after.statements + 1
        assert holder.crashes == 1
    finally:
        holder.kill()


def test_statements_sent_before_a_crash_are_sent_again(monkeypatch):
    """Requests wait in the worker's pipe (``submit``): when it dies on one row's statement,
    the statements of other rows sent after it are lost with it, and are sent again (each row
    replayed in the new worker first) when their results are asked for; nobody else fails."""
    monkeypatch.setenv(CRASH_ON, "tile j [8, 16] -> j0, j1")
    wl = workload("matmul(m=128,n=128,k=128)")
    holder = LiveWorker("llvm")
    try:
        a, _ = holder.open(wl)
        b, _ = holder.open(wl)
        c, _ = holder.open(wl)
        for key in (a, b, c):
            for line in ['block "C" -> C', "loops C -> i, j, k"]:
                assert isinstance(holder.step(key, line), LiveView)
        sent = [holder.submit(b, "tile i [4, 32] -> i0, i1"),
                holder.submit(a, "tile j [8, 16] -> j0, j1"),   # the worker dies here
                holder.submit(c, "tile k [2, 64] -> k0, k1"),   # lost with it
                ]
        first = holder.result(sent[0])
        assert isinstance(first, LiveView) and first.names("loop")[-2:] == ["i0", "i1"]
        with pytest.raises(HolderCrashed, match="crashed applying `tile j"):
            holder.result(sent[1])
        third = holder.result(sent[2])  # replayed in a new worker, then applied there
        assert isinstance(third, LiveView), third
        assert third.statements == 3 and third.names("loop") == ["i", "j", "k0", "k1"]
        assert holder.crashes == 1 and holder.rows.keys() == {b, c}
        after = holder.step(b, "parallel i0")  # b too lives on in the new worker
        assert isinstance(after, LiveView) and after.statements == first.statements + 1
    finally:
        holder.kill()


def test_a_pool_spreads_rows_and_answers_each_from_its_own_worker():
    wl = workload("matmul(m=128,n=128,k=128)")
    pool = LivePool("llvm", workers=2)
    try:
        keys = [pool.open(wl)[0] for _ in range(4)]
        assert [len(h.rows) for h in pool.holders] == [2, 2]
        assert len({h.worker.pid for h in pool.holders}) == 2
        tickets = [pool.submit(k, 'block "C" -> C') for k in keys]
        views = [pool.result(t) for t in reversed(tickets)]  # any order
        assert all(isinstance(v, LiveView) and v.names("block") == ["C"] for v in views)
        refused = pool.step(keys[1], "loops C -> i, j")  # C has three loops
        assert not isinstance(refused, LiveView) and "3" in refused.message
        pool.close(keys[:2])
        assert sum(len(h.rows) for h in pool.holders) == 2
    finally:
        pool.kill()
    with pytest.raises(ValueError, match="workers >= 1"):
        LivePool("llvm", workers=0)


@pytest.fixture(scope="module")
def tokenizer():
    return small_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return small_model(tokenizer)


def generate(model, tokenizer, config: ScheduleAwareConfig, n: int = 6, seed: int = 5):
    wls = [workload(s) for s in SPECS for _ in range(n)]
    torch.manual_seed(seed)
    with torch.random.fork_rng():
        return schedule_aware_generate(model, tokenizer,
                                       [construction_prompt(w, "llvm") for w in wls], wls,
                                       "llvm", sampling=SamplingConfig(max_new_tokens=128),
                                       config=config)


def test_isolated_sampling_writes_the_in_process_scripts(model, tokenizer, holders):
    # seed 7: refusals happen (6 of them; the narrower grammar left seed 5 with none)
    inside = generate(model, tokenizer, ScheduleAwareConfig(isolate=False), seed=7)
    isolated = generate(model, tokenizer, ScheduleAwareConfig(isolate=True), seed=7)
    assert sum(r.resampled for r in inside) > 0  # refusals happen, and must match too
    for a, b in zip(inside, isolated, strict=True):
        assert (a.text, a.tokens, a.resampled, a.applies, a.error, a.finish_reason) == \
            (b.text, b.tokens, b.resampled, b.applies, b.error, b.finish_reason)
        assert a.logprobs == b.logprobs
        assert isinstance(b.live, LiveView) and b.live.statements == a.live.statements


def test_a_crashing_statement_fails_its_sample_and_the_batch_completes(model, tokenizer,
                                                                      holders, monkeypatch):
    # Which statements each row asks the holder to apply, refused ones included.
    asked: dict[int, list[str]] = {}
    submit = LivePool.submit

    def recording(self, key, statement):
        asked.setdefault(key, []).append(statement)
        return submit(self, key, statement)

    monkeypatch.setattr(LivePool, "submit", recording)
    clean = generate(model, tokenizer, ScheduleAwareConfig())
    assert all(r.applies for r in clean)
    rows = [asked.get(key, []) for key in range(len(clean))]  # a new holder keys rows 0, 1, ..
    # A statement that one row only asks for, after some statements of its own.
    victim, statement = next(
        (i, s) for i, asked_i in enumerate(rows) for s in asked_i[2:]
        if sum(s in other for other in rows) == 1)

    monkeypatch.setenv(CRASH_ON, statement)
    for holder in holders.values():
        holder.kill()
    holders.clear()  # a new worker, started with the hook
    crashed = generate(model, tokenizer, ScheduleAwareConfig())
    [holder] = holders.values()
    assert holder.crashes == 1
    for i, (a, b) in enumerate(zip(clean, crashed, strict=True)):
        if i == victim:
            assert not b.applies and b.finish_reason == "error"
            assert b.error.startswith(f"the schedule holder crashed applying `{statement}`"), \
                b.error
            assert "exited with status 255" in b.error
            assert "Cannot find type info for type_index=999" in b.error  # TVM's own words
            assert a.text.startswith(b.text)  # the script up to the statement that crashed
        else:  # the others, replayed in the new worker, complete as they did without a crash
            assert b.applies and b.finish_reason == "end" and b.text == a.text, (i, b.error)
            assert dragon_dsl.check(b.text, workload=workload(SPECS[i // 6]),
                                    target="llvm") == []
