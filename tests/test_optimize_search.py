"""``optimize`` with a cost model and a search (training.optimize.kernel): the cost model ranks
each round's ``width`` samples and only the ``k`` it ranks first are timed; it learns from
every kernel timed; MetaSchedule's search then starts from every script the model timed, and
its kernels are counted, kept and can win.  Fakes stand in for the model, the evaluator, the
cost model and the search here, so that what is timed is known by construction; the real
search's seeding is tested in tests/test_search_seeds.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from codegen.measure import Outcome, Status
from dragon_dsl.printer import expand_ranges
from training.optimize.kernel import OptimizeConfig, optimize

SPEC = "dense(m=96,n=160,k=192,bias=0,act=none)"
SCRIPTS = [f'block "T_matmul_NT" -> b{i}\n' for i in range(8)]
LATENCY = dict(zip(SCRIPTS, [3e-3, 1e-3, 2e-3, 1.5e-3, 0.5e-3, 4e-3, 2.5e-3, 3.5e-3],
                   strict=True))


class _Evaluator:
    """Each script times at its ``LATENCY``; the baselines at 5 ms; records what it timed."""

    def __init__(self):
        from codegen.targets import as_target

        self.target, self.device, self.cache = as_target("llvm"), "fake cpu", None
        self.timed: list[str] = []

    def close(self):
        pass

    def evaluate_modules(self, workload, modules):
        return {n: Outcome(Status.CORRECT, latency_s=5e-3, spread_s=0.0) for n in modules}

    def evaluate(self, workload, scripts):
        self.timed.extend(scripts)
        return [Outcome(Status.CORRECT, latency_s=LATENCY.get(t, 4.5e-3), spread_s=0.0)
                for t in scripts]


class _CostModel:
    """Scores each script by ``prefer`` (higher: ranked first) and records its updates."""

    def __init__(self, prefer):
        self.prefer, self.updates, self.model = prefer, [], object()

    def score(self, workload, target, scripts):
        return [self.prefer(s) for s in scripts]

    def update(self, workload, target, scripts, latencies):
        self.updates.append((list(scripts), list(latencies)))


@pytest.fixture()
def samples_all(monkeypatch):
    """Sampling that writes the first ``n`` of SCRIPTS, whatever the prompt."""
    import training.sampling.schedule_aware as aware

    asked = []

    def sample(model, tok, prompt, wl, target, config):
        asked.append(config.n)
        return [SimpleNamespace(text=t, applies=True) for t in SCRIPTS[:config.n]]

    monkeypatch.setattr(aware, "sample_schedule_aware", sample)
    return asked


def _start(ev):
    from codegen.measured import Baselines
    from training.optimize.kernel import measure_start

    return measure_start(SPEC, ev, made=Baselines({"unscheduled": object(),
                                                  "default": object()}))


@pytest.mark.parametrize("prefer,expected", [
    (lambda s: -LATENCY[s], {SCRIPTS[4], SCRIPTS[1]}),    # a cost model that knows
    (lambda s: LATENCY[s], {SCRIPTS[5], SCRIPTS[7]}),     # one that has it backwards
])
def test_only_the_k_the_cost_model_ranks_first_are_timed(samples_all, prefer, expected):
    ev, cost = _Evaluator(), _CostModel(prefer)
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=2, rounds=0, width=8),
                      evaluator=ev, start=_start(ev), cost_model=cost)
    assert samples_all == [8]                              # sampled wide...
    assert set(ev.timed[:2]) == expected and len(ev.timed) == 2 + 1  # ...timed k, re-timed 1
    assert result.rounds[0].attempts == 8 and result.rounds[0].measured == 2
    assert result.measurements == 2 + 2 + 3                 # baselines, k, final re-timing
    # It learns from what was timed, with the latencies measured.
    assert cost.updates == [(ev.timed[:2], [LATENCY[t] for t in ev.timed[:2]])]
    assert result.best.script == min(expected, key=LATENCY.get)


def test_without_a_cost_model_a_width_is_refused_and_k_is_timed(samples_all):
    ev = _Evaluator()
    with pytest.raises(ValueError, match="cost model"):
        optimize(None, None, SPEC, config=OptimizeConfig(k=2, rounds=0, width=8),
                 evaluator=ev, start=_start(ev))
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=2, rounds=0), evaluator=ev,
                      start=_start(ev))
    assert samples_all == [2] and result.rounds[0].measured == 2
    with pytest.raises(ValueError, match="width >= k"):
        OptimizeConfig(k=4, width=2)
    with pytest.raises(ValueError, match="search >= 0"):
        OptimizeConfig(search=-1)


class _Search:
    """Stands in for ``codegen.search.tune.search``: records how it was called and proposes
    ``proposals`` in rounds of ``per_round``, timed by the evaluator it is given."""

    def __init__(self, proposals, per_round=2):
        self.proposals, self.per_round, self.calls = proposals, per_round, []
        self.handed: list[list] = []

    def __call__(self, workload, target, evaluator, config, *, cost_model=None, seeds=(),
                 between=None, threads=1, taught=False):
        from codegen.search.tune import Round

        self.calls.append(SimpleNamespace(trials=config.trials, cost_model=cost_model,
                                          seeds=list(seeds), per_round=config.per_round,
                                          threads=threads, taught=taught))
        todo, measured, index = list(self.proposals), 0, 0
        while todo and measured < config.trials:
            scripts = todo[:min(self.per_round, config.trials - measured)]
            todo = todo[len(scripts):]
            yield Round(index, scripts, evaluator.evaluate(workload, scripts), 0.0)
            measured, index = measured + len(scripts), index + 1
            if between is not None and measured < config.trials:
                given = list(between(config.trials - measured))
                self.handed.append(given)
                measured += len(given)


def test_the_search_starts_from_every_script_timed_and_its_kernels_count(samples_all,
                                                                         monkeypatch):
    import codegen.search.tune as tune

    fake = _Search(SCRIPTS[4:8])             # the search finds the fastest (SCRIPTS[4])
    monkeypatch.setattr(tune, "search", fake)
    ev, cost = _Evaluator(), _CostModel(lambda s: 0.0)
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=3, rounds=0, search=4),
                      evaluator=ev, start=_start(ev), cost_model=cost)
    [call] = fake.calls
    assert call.trials == 4 and call.cost_model is cost.model
    assert call.threads == 0                 # every core, as tune_tir, unless told
    assert call.taught                       # the cost model learned each seed as it was timed
    assert [s for s, _ in call.seeds] == SCRIPTS[:3]
    assert [o.latency_s for _, o in call.seeds] == [LATENCY[s] for s in SCRIPTS[:3]]
    model_round, *search_rounds = result.rounds
    assert model_round.prompt == "construction"
    assert [r.prompt for r in search_rounds] == ["search", "search"]
    assert sum(r.measured for r in search_rounds) == 4
    assert result.measurements == 2 + 3 + 4 + 3
    assert result.best.script == SCRIPTS[4] and result.best.source == "search"
    assert result.winner == "best" and result.improved
    assert result.spent == {"baselines": 2, "given": 0, "sampled": 3 + 4, "retimed": 3}


def test_what_the_model_left_untimed_goes_to_the_search(monkeypatch):
    """Samples that do not apply (on CUDA, all of an llvm-trained model's, often) are never
    timed; the kernels they were given go to the search, so n kernels are still timed."""
    import codegen.search.tune as tune
    import training.sampling.schedule_aware as aware

    monkeypatch.setattr(aware, "sample_schedule_aware", lambda model, tok, prompt, wl, target,
                        config: [SimpleNamespace(text=t, applies=i == 0)
                                 for i, t in enumerate(SCRIPTS[:config.n])])
    fake = _Search(SCRIPTS[4:8])
    monkeypatch.setattr(tune, "search", fake)
    ev = _Evaluator()
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=3, rounds=0, search=2),
                      evaluator=ev, start=_start(ev))
    [call] = fake.calls
    assert call.trials == 2 + 2                  # its own 2 and the 2 samples that did not apply
    assert result.spent == {"baselines": 2, "given": 0, "sampled": 1 + 4, "retimed": 3}


def test_without_seeding_the_search_starts_from_nothing_the_model_timed(samples_all,
                                                                          monkeypatch):
    import codegen.search.tune as tune

    fake = _Search(SCRIPTS[4:8])
    monkeypatch.setattr(tune, "search", fake)
    ev = _Evaluator()
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=3, rounds=0, search=4,
                                                              seed_search=False),
                      evaluator=ev, start=_start(ev))
    [call] = fake.calls
    assert call.seeds == [] and call.trials == 4
    assert result.measurements == 2 + 3 + 4 + 3  # the model's kernels still count


def test_the_budget_bounds_the_search(samples_all, monkeypatch):
    import codegen.search.tune as tune

    fake = _Search(SCRIPTS[3:8])
    monkeypatch.setattr(tune, "search", fake)
    ev = _Evaluator()
    # 2 baselines + 3 sampled + 3 re-timed leave 2 of a budget of 10 for the search.
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=3, rounds=0, search=5,
                                                              budget=10),
                      evaluator=ev, start=_start(ev))
    assert [c.trials for c in fake.calls] == [2]
    assert result.measurements == 10
    # The budget spent, no search is started at all.
    fake.calls.clear()
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=3, rounds=0, search=5,
                                                              budget=8),
                      evaluator=ev, start=_start(ev))
    assert fake.calls == [] and result.stopped == "budget" and result.measurements == 8


@pytest.mark.parametrize("flags,needle", [
    (["--width", "8", "-k", "2", "--cost-model", "none"],
     "--width 8: no cost model to rank the samples (--cost-model none)"),
    (["--cost-model", "{missing}"], "--cost-model {missing}: "),
    (["--cost-model", "{garbage}"], "--cost-model {garbage}: "),
    (["--transfer", "2", "--corpus", "none"],
     "--transfer 2: no corpus to carry scripts over from (--corpus none)"),
    (["--transfer", "2", "--corpus", "{empty}"], "--corpus {empty}: no records"),
    (["--transfer", "2", "--corpus", "{damaged}"], "--corpus {damaged}: "),
])
def test_a_cost_model_or_corpus_that_cannot_serve_is_refused_before_any_work(
        dragon_cmd, tmp_path, flags, needle):
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar file")
    damaged = tmp_path / "damaged"
    (damaged / "tasks").mkdir(parents=True)
    (damaged / "tasks" / "t.json").write_text("{not json")
    names = {"missing": str(tmp_path / "nothing.tar"), "garbage": str(garbage),
             "empty": str(tmp_path), "damaged": str(damaged)}
    flags = [f.format(**names) for f in flags]
    out = tmp_path / "best.dragon"
    done = dragon_cmd(["optimize", SPEC, "--out", str(out), "-q", *flags])
    assert done.returncode == 2 and needle.format(**names) in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_scripts_carried_over_from_the_corpus_are_timed_first_and_the_model_refines_them(
        monkeypatch):
    """``transfer``: the corpus' fitted scripts are round 0 ("corpus"), counted in the budget;
    the model's first round is then a refinement of the best of them."""
    import training.sampling.schedule_aware as aware
    from training.datagen.records import RecordStore
    from training.optimize import transfer

    records = list(RecordStore(str(transfer_corpus())).all_records())
    prompts = []

    def sample(model, tok, prompt, wl, target, config):
        prompts.append(prompt)
        return [SimpleNamespace(text=t, applies=True) for t in SCRIPTS[:config.n]]

    monkeypatch.setattr(aware, "sample_schedule_aware", sample)
    ev = _Evaluator()
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=2, rounds=0, transfer=3,
                                                              budget=2 + 3 + 2 + 3),
                      evaluator=ev, start=_start(ev), corpus=records)
    carried = [t.script for t in transfer.transferred(SPEC, records, ev.target, limit=3)]
    assert len(carried) == 3 and ev.timed[:3] == carried
    assert [r.prompt for r in result.rounds] == ["corpus", "refinement"]
    # the best carried over (all tie at 4.5 ms), as prompts show scripts: ranges written out
    assert expand_ranges(carried[0]).strip() in prompts[0]
    assert [c.source for c in result.candidates][:3] == ["corpus"] * 3
    assert result.measurements == 2 + 3 + 2 + 3 and result.stopped == "rounds"
    with pytest.raises(ValueError, match="corpus"):
        optimize(None, None, SPEC, config=OptimizeConfig(transfer=2), evaluator=ev,
                 start=_start(ev))
    with pytest.raises(ValueError, match="transfer >= 0"):
        OptimizeConfig(transfer=-1)


def transfer_corpus():
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "corpus" / "llvm"


@pytest.mark.parametrize("nearest,timed", [
    (0, [3, 4, 5]),    # the cost model's three
    (1, [0, 4, 5]),    # its first two and the nearest workload's fastest (the default)
    (2, [0, 1, 5]),
    (3, [0, 1, 2]),
])
def test_with_a_cost_model_width_scripts_are_carried_over_and_its_first_k_timed(
        samples_all, nearest, timed):
    """Of ``width`` carried over, the ``transfer`` the cost model ranks first are timed, but
    for ``transfer_nearest``: the first carried over (the nearest workloads' fastest) that
    it did not rank first."""
    from training.datagen.records import RecordStore
    from training.optimize import transfer

    records = list(RecordStore(str(transfer_corpus())).all_records())
    ev = _Evaluator()
    every = [t.script for t in transfer.transferred(SPEC, records, ev.target, limit=6)]
    assert len(every) == 6
    cost = _CostModel(lambda s: every.index(s) if s in every else -1)  # prefers the last ones
    optimize(None, None, SPEC, config=OptimizeConfig(k=1, rounds=0, transfer=3, width=6,
                                                     transfer_nearest=nearest),
             evaluator=ev, start=_start(ev), corpus=records, cost_model=cost)
    assert ev.timed[:3] == [every[i] for i in timed]
    assert cost.updates[0] == (ev.timed[:3], [4.5e-3] * 3)    # and it learns from them
    with pytest.raises(ValueError, match="transfer_nearest >= 0"):
        OptimizeConfig(transfer_nearest=-1)


def test_a_search_that_fails_keeps_what_it_timed_and_says_why(samples_all, monkeypatch):
    """MetaSchedule's search can raise (a design space its rules cannot generate, a trace its
    mutators cannot take); what was timed before is kept and the winner is still found."""
    import codegen.search.tune as tune

    def failing(workload, target, evaluator, config, *, cost_model=None, seeds=(),
                between=None, threads=1, taught=False):
        from codegen.search.tune import Round

        yield Round(0, SCRIPTS[4:6], evaluator.evaluate(workload, SCRIPTS[4:6]), 0.0)
        raise RuntimeError("InternalError: Check failed: producers.size() == 1 (0 vs. 1) :")

    monkeypatch.setattr(tune, "search", failing)
    ev = _Evaluator()
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=2, rounds=0, search=8),
                      evaluator=ev, start=_start(ev))
    assert result.stopped == "search failed: InternalError: Check failed: producers.size() " \
                             "== 1 (0 vs. 1) :"
    assert result.best.script == SCRIPTS[4] and result.best.source == "search"
    assert result.winner == "best" and result.measurements == 2 + 2 + 2 + 3


def test_the_report_says_where_the_best_script_came_from(samples_all, monkeypatch):
    import codegen.search.tune as tune
    from training.cli.optimize import format_report
    from training.datagen.records import RecordStore

    ev = _Evaluator()
    records = list(RecordStore(str(transfer_corpus())).all_records())
    carried = optimize(None, None, SPEC, config=OptimizeConfig(k=2, transfer=3, budget=8),
                       evaluator=ev, start=_start(ev), corpus=records)
    assert carried.best.source == "corpus" and carried.stopped == "budget"
    assert "best script (carried over from the corpus):" in format_report(carried, None)
    monkeypatch.setattr(tune, "search", _Search(SCRIPTS[4:6]))
    searched = optimize(None, None, SPEC, config=OptimizeConfig(k=1, rounds=0, search=2),
                        evaluator=ev, start=_start(ev))
    assert searched.best.source == "search"
    assert "best script (MetaSchedule's search, round 1):" in format_report(searched, None)


@pytest.mark.parametrize("argv,kind,carried", [
    ([SPEC], "llvm", 8),                                     # the kept corpus serves llvm
    ([SPEC, "--corpus", "none"], "llvm", 0),
    ([SPEC, "--target", "cuda"], "cuda", 0),                  # no kept corpus for cuda
    (["model(name=bert,preset=tiny)"], "llvm", 0),            # a model's tasks: no family
    ([SPEC, "--transfer", "3"], "llvm", 3),
    ([SPEC, "--transfer", "0"], "llvm", 0),
])
def test_transfer_defaults_to_the_kept_corpus_where_it_serves_the_target(argv, kind, carried):
    """``dragon optimize`` carries scripts over from the kept corpus unless told not to: the
    configuration measured best against MetaSchedule (docs/vs-metaschedule)."""
    from dragon_dsl.cli import build_parser
    from training.cli.optimize import is_whole_model, transfer_count

    args = build_parser().parse_args(["optimize", *argv])
    whole = is_whole_model(args.workload)
    assert transfer_count(args.transfer, args.corpus, kind, whole) == carried


def test_the_model_refines_the_best_between_the_search_rounds(monkeypatch):
    import codegen.search.tune as tune
    import training.sampling.schedule_aware as aware

    prompts = []
    refinements = iter([SCRIPTS[4], SCRIPTS[7]])   # the first is the fastest of all

    def sample(model, tok, prompt, wl, target, config):
        prompts.append(prompt)
        texts = SCRIPTS[:2] if len(prompts) == 1 else [next(refinements)]
        return [SimpleNamespace(text=t, applies=True) for t in texts]

    monkeypatch.setattr(aware, "sample_schedule_aware", sample)
    fake = _Search([SCRIPTS[2], SCRIPTS[3], SCRIPTS[5], SCRIPTS[6]])
    monkeypatch.setattr(tune, "search", fake)
    ev = _Evaluator()
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=2, rounds=0, search=6,
                                                              refine_search=1),
                      evaluator=ev, start=_start(ev))
    [call] = fake.calls
    assert call.trials == 6 and call.per_round == 2       # max(2 x 1, 6 // 4)
    # Between the search's rounds: one refinement each, handed in measured, counted.
    assert [[s for s, _ in given] for given in fake.handed] == [[SCRIPTS[4]], [SCRIPTS[7]]]
    assert [r.prompt for r in result.rounds] == ["construction", "search", "refine", "search",
                                                 "refine"]
    assert sum(r.measured for r in result.rounds[1:]) == 6
    assert result.measurements == 2 + 2 + 6 + 3
    # Each refinement prompt shows the fastest kernel so far: after the first, SCRIPTS[4].
    assert SCRIPTS[1].strip() in prompts[1] and SCRIPTS[4].strip() in prompts[2]
    assert result.best.script == SCRIPTS[4] and result.best.source == "refine"
    with pytest.raises(ValueError, match="refine_search >= 0"):
        OptimizeConfig(refine_search=-1)


@pytest.mark.parametrize("argv,kind,ranks,width", [
    ([SPEC], "llvm", True, 16),                              # the built-in cost model ranks 16
    ([SPEC, "--width", "12"], "llvm", True, 12),
    ([SPEC, "-k", "40"], "llvm", True, 40),                  # never fewer than a round's k
    ([SPEC, "--cost-model", "none"], "llvm", False, None),
    ([SPEC, "--target", "cuda"], "cuda", False, None),         # no built-in model for cuda
    (["model(name=bert,preset=tiny)"], "llvm", False, None),  # a whole model: not measured
])
def test_the_built_in_cost_model_ranks_a_kernels_samples_by_default(argv, kind, ranks, width):
    """``dragon optimize`` ranks with the built-in cost model where it was measured to help
    (a kernel on llvm: docs/vs-metaschedule), and only there."""
    from dragon_dsl.cli import build_parser
    from dragon_dsl.cli_kit import config_from_args
    from training.cli.optimize import cli_ranking, is_whole_model

    args = build_parser().parse_args(["optimize", *argv])
    args.transfer = 0  # as transfer_count leaves it (above)
    config = config_from_args(OptimizeConfig, args)
    cost_model, config = cli_ranking(args.cost_model, kind, is_whole_model(args.workload),
                                     config)
    assert (cost_model is not None) == ranks and config.width == width


def test_mutants_of_the_fastest_are_timed_last(samples_all, monkeypatch):
    """``local``: after the search (which explores), rounds of ``local_round`` kernels, each
    from mutants of the three fastest correct kernels so far (the next round's parents include
    the last round's), the ones the cost model ranks first timed, none timed before; what
    they cannot time goes to the search."""
    import codegen.search.mutate as mutate
    import codegen.search.tune as tune

    asked = []
    pools = iter([SCRIPTS[3:8], [SCRIPTS[3], SCRIPTS[6]], []])  # then one new, then none

    def mutants(workload, target, parents, count, *, seed=0, rules=None, exclude=()):
        asked.append((list(parents), count, set(exclude)))
        return [s for s in next(pools) if s not in exclude][:count]

    monkeypatch.setattr(mutate, "mutants", mutants)
    fake = _Search([SCRIPTS[5]])
    monkeypatch.setattr(tune, "search", fake)
    ev, cost = _Evaluator(), _CostModel(lambda s: -LATENCY[s])   # a cost model that knows
    result = optimize(None, None, SPEC, config=OptimizeConfig(k=3, rounds=0, width=3, local=5,
                                                              local_round=2, search=1),
                      evaluator=ev, start=_start(ev), cost_model=cost)
    call = fake.calls[0]
    assert call.trials == 1 and len(call.seeds) == 3          # the search came first
    # The first mutants are of the three fastest, fastest first; nothing timed is proposed.
    assert asked[0][0] == [SCRIPTS[1], SCRIPTS[2], SCRIPTS[0]] and asked[0][1] == 3
    assert set(SCRIPTS[:3]) | {SCRIPTS[5]} <= asked[0][2]
    # Round 1 ranks 3 of its pool (width 3) and times the two it ranks first.
    assert ev.timed[4:6] == [SCRIPTS[3], SCRIPTS[4]]
    # Round 2 mutates the new fastest; its pool has one script not timed yet; round 3 none.
    assert asked[1][0] == [SCRIPTS[4], SCRIPTS[1], SCRIPTS[3]]
    assert ev.timed[6:7] == [SCRIPTS[6]] and len(asked) == 3
    # With no mutant left to time, MetaSchedule's search takes the 2 they left.
    assert [call.trials for call in fake.calls] == [1, 2] and len(fake.calls[1].seeds) == 7
    assert [r.prompt for r in result.rounds] == ["construction", "search", "local", "local",
                                                 "search"]
    assert [r.measured for r in result.rounds] == [3, 1, 2, 1, 1]
    assert result.measurements == 2 + 3 + 1 + 3 + 1 + 3
    assert result.best.script == SCRIPTS[4] and result.best.source == "local"
    from training.cli.optimize import format_report

    report = format_report(result, None)
    assert f"best script (a mutant of the fastest kernels, round {result.best.round}):" in report
    rows = [line.split()[:3] for line in report.splitlines() if line.split()[:1] in
            (["1"], ["2"], ["4"])]
    assert rows == [["1", "search", "1"], ["2", "mutants", "of"], ["4", "search", "1"]]
    with pytest.raises(ValueError, match="local >= 0"):
        OptimizeConfig(local=-1)
    with pytest.raises(ValueError, match="local_round >= 1"):
        OptimizeConfig(local_round=0)
