"""``dragon optimize`` (training.optimize.kernel): real short searches on llvm with a few-second SFT
model (``conftest.sft_model``): the kernels timed are counted, duplicates are free, the best
script's speedups come from one re-timing beside the baselines, the budget stops the search,
a MetaSchedule script can be refined, and a broken one is refused with its line."""

from __future__ import annotations

import json

import pytest

import dragon_dsl
from codegen.measure import Outcome, Status
from codegen.workloads import workload
from dragon_dsl.cli import main
from training.optimize.kernel import (
    OptimizeConfig,
    OptimizeError,
    RefineError,
    measure_start,
    optimize,
)
from training.sampling import SamplingConfig, load

SPEC = "softmax(m=32,n=64)"       # DLight has a CPU rule for it: both baselines exist
SAMPLING = SamplingConfig(max_new_tokens=128)
FAST = ["--repeat", "2", "--min-repeat-ms", "1", "--max-new-tokens", "128", "--builders", "1",
        "-q"]


@pytest.fixture(scope="module")
def wl():
    return workload(SPEC)


@pytest.fixture(scope="module")
def model(sft_model):
    return load(str(sft_model / "final"))


@pytest.fixture(scope="module")
def evaluator(llvm_evaluator):
    """The session's llvm Evaluator without a cache (conftest); how many times a kernel is
    repeated is no part of what these tests count."""
    return llvm_evaluator


@pytest.fixture(scope="module")
def result(model, wl, evaluator):
    return optimize(*model, wl, "llvm", config=OptimizeConfig(k=2, rounds=1),
                    sampling=SAMPLING, evaluator=evaluator)


def test_every_kernel_timed_is_counted_once(result):
    assert [b.name for b in result.start.baselines] == ["unscheduled", "default"]
    assert all(b.outcome is not None and b.outcome.ok for b in result.start.baselines)
    assert result.start.measurements == 2
    assert [r.attempts for r in result.rounds] == [2, 2] and result.stopped == "rounds"
    # Each distinct script is measured once, in the round that first wrote it.
    assert sum(r.measured for r in result.rounds) == len(result.candidates)
    assert len({c.script for c in result.candidates}) == len(result.candidates)
    assert all(c.script == dragon_dsl.format(c.script) for c in result.candidates)
    retimed = len(result.final)  # the best and both baselines, when a script was correct
    assert retimed in (0, 3)
    assert result.measurements == 2 + len(result.candidates) + retimed
    assert result.spent == {"baselines": 2, "given": 0, "sampled": len(result.candidates),
                            "retimed": retimed}
    # Where the wall clock went, phase by phase (nothing carried over, no search asked).
    assert list(result.seconds) == ["start", "model", "search", "retime"]
    assert all(t >= 0 for t in result.seconds.values()) and result.seconds["model"] > 0


def test_the_best_is_correct_and_its_speedups_come_from_one_retiming(result):
    assert result.ok, [c.outcome.summary() for c in result.candidates]
    best = result.best
    assert best.outcome.ok and best.source == "sample"
    # The answer is what the re-timing measured fastest: the script only when it beat both.
    fastest = min(o.latency_s for o in result.final.values())
    assert result.final["best" if result.winner == "best" else result.winner].latency_s == \
        fastest
    assert result.improved == (result.winner == "best")
    assert result.best_script == (best.script if result.winner == "best" else None)
    assert best.latency_s == min(c.latency_s for c in result.candidates if c.outcome.ok)
    assert set(result.final) == {"best", "unscheduled", "default"}
    assert all(o.ok and not o.cached for o in result.final.values())
    assert result.latency_s == result.final["best"].latency_s
    for name in ("unscheduled", "default"):
        assert result.speedup(name) == pytest.approx(
            result.final[name].latency_s / result.final["best"].latency_s)
    # Round 1 refined the best of round 0, with its measured latency in the prompt.
    first, second = result.rounds
    assert first.prompt == "construction" and first.prompt_latency_s is None
    assert second.prompt == "refinement" and second.prompt_latency_s == first.best_s
    assert second.best_s == best.latency_s <= first.best_s
    data = json.loads(json.dumps(result.as_dict()))
    assert data["measurements"] == result.measurements and data["best"]["script"] == best.script


def test_the_budget_stops_the_search_early(model, wl, evaluator):
    # 2 baselines + 3 reserved for the final re-timing + 1: room for one sampled script.
    config = OptimizeConfig(k=2, rounds=3, budget=6)
    result = optimize(*model, wl, "llvm", config=config, sampling=SAMPLING, evaluator=evaluator)
    assert result.stopped == "budget" and len(result.rounds) == 1
    assert result.rounds[0].attempts == 1 and len(result.candidates) == 1
    assert result.measurements == 2 + 1 + len(result.final) <= 6
    with pytest.raises(OptimizeError, match="Expected budget >= 6 but got budget=5"):
        measure_start(wl, evaluator, config=OptimizeConfig(budget=5))


def test_with_a_cached_evaluator_the_end_is_still_timed_now(model, wl, evaluator, tmp_path):
    from codegen.measure.cache import Cache

    config = OptimizeConfig(k=1, rounds=0)
    # The session's Evaluator with a cache of its own for this test (its worker processes
    # started once a run): what a cache changes is what the Evaluator looks up, not where.
    assert evaluator.cache is None
    evaluator.cache = Cache(str(tmp_path / "cache.sqlite"))
    try:
        first = optimize(*model, wl, "llvm", config=config, sampling=SAMPLING,
                         evaluator=evaluator)
        again = optimize(*model, wl, "llvm", config=config, sampling=SAMPLING,
                         evaluator=evaluator)
    finally:
        evaluator.cache.close()
        evaluator.cache = None
    assert [c.script for c in again.candidates] == [c.script for c in first.candidates]
    assert all(c.outcome.cached for c in again.candidates)
    assert again.ok and not any(o.cached for o in again.final.values())


@pytest.fixture(scope="module")
def metaschedule_script(datagen_dir):
    """A correct script of the workload from the fixture's real MetaSchedule search."""
    from training.datagen.records import RecordStore

    return next(r.script for r in RecordStore(str(datagen_dir)).all_records()
                if r.workload == SPEC and r.status == "correct")


def test_refining_a_metaschedule_script(model, wl, evaluator, metaschedule_script):
    result = optimize(*model, wl, "llvm", config=OptimizeConfig(k=2, rounds=0),
                      sampling=SAMPLING, refine=metaschedule_script, evaluator=evaluator)
    given = result.start.given
    assert given.source == "given" and given.outcome.ok
    assert given.script == dragon_dsl.format(metaschedule_script)
    assert result.start.measurements == 3  # the baselines and the script to refine
    [round0] = result.rounds
    assert round0.prompt == "refinement" and round0.prompt_latency_s == given.latency_s
    sampled = [c for c in result.candidates if c.source == "sample"]
    assert result.measurements == 3 + len(sampled) + len(result.final)
    assert result.ok and result.best.latency_s <= given.latency_s
    assert result.improved == (result.best.source == "sample" and result.winner == "best")


def test_a_script_that_does_not_apply_is_refused_with_its_line(wl, evaluator):
    text = 'block "T_softmax_exp" -> b0\nloops b0 -> i\n'  # the block has two loops
    with pytest.raises(RefineError) as info:
        measure_start(wl, evaluator, refine=text)
    assert info.value.line == 2 and "apply error" in info.value.reason


def test_the_command_writes_a_script_that_checks(sft_model, metaschedule_script, tmp_path,
                                                 capsys):
    old = tmp_path / "old.dragon"
    old.write_text(metaschedule_script)
    out = tmp_path / "best.dragon"
    code = main(["optimize", SPEC, "--model", str(sft_model), "-k", "1", "--rounds", "0",
                 "--refine", str(old), "--out", str(out), "--json", *FAST])
    stdout, stderr = capsys.readouterr()
    report = json.loads(stdout)
    assert report["ok"]
    if report["winner"] != "best":  # a baseline was faster at the end: nothing is written
        assert code == 1 and report["out"] is None and not out.exists(), stderr
        return
    assert code == 0 and report["out"] == str(out), stderr
    assert out.read_text() == report["best"]["script"] == report["best_script"]
    # The baselines and the script to refine, each new kernel (sampled, or carried over from
    # the kept corpus: --transfer's default), then the final re-timing of three.
    assert report["measurements"] == 3 + sum(c["source"] in ("sample", "corpus")
                                             for c in report["candidates"]) + 3
    assert set(report["speedup"]) == {"unscheduled", "default"}
    assert main(["check", str(out), "--workload", SPEC, "--target", "llvm"]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


@pytest.mark.parametrize("text,where", [
    ('block "T_softmax_exp" -> b0\nloops b0 ->\n', ":2:12: error: unexpected end of line"),
    ('block "T_softmax_exp" -> b0\nloops b0 -> i\n', ":2:1: apply error:"),
])
def test_the_command_refuses_a_broken_script_to_refine(sft_model, tmp_path, capsys, text,
                                                        where):
    old = tmp_path / "old.dragon"
    old.write_text(text)
    code = main(["optimize", SPEC, "--model", str(sft_model), "--refine", str(old),
                 "--out", str(tmp_path / "best.dragon"), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and f"--refine {old}{where}" in err, err
    assert not (tmp_path / "best.dragon").exists()


def test_the_report_shows_the_rounds_the_script_and_what_was_timed(result):
    from training.cli.optimize import format_report

    text = format_report(result, "best.dragon")
    assert text.startswith(f"{SPEC} on llvm (")
    assert "baselines, timed first: unscheduled " in text
    assert result.best.script.rstrip() in text and "re-timed together:" in text
    assert f"{result.speedup('unscheduled'):.2f}x" in text
    assert f"kernels timed: {result.measurements} = 2 baseline(s) + " in text
    assert "\nwritten to best.dragon" in text


def test_the_report_without_a_correct_script_or_a_rule_based_default():
    """Assembled from outcomes: the cases a tiny model rarely produces."""
    from codegen.measure import Outcome, Status
    from codegen.measured import Row
    from training.cli.optimize import format_report
    from training.optimize.kernel import Candidate, OptimizeResult, Round, Start

    start = Start((Row("unscheduled", Outcome(Status.CORRECT, latency_s=2e-3)),
                   Row("default", None, "no DLight CPU rule matches")), None, 1)
    wrong = Candidate("postproc auto llvm\n", Outcome(Status.INCORRECT, "verify", "max err"), 0)
    failed = OptimizeResult(SPEC, "llvm", "cpu", OptimizeConfig(k=1, rounds=0), start,
                            (Round(0, "construction", None, 1, 1, 0, None, None),), (wrong,),
                            None, {}, 2, "rounds")
    assert not failed.ok and failed.latency_s is None and failed.speedup("unscheduled") is None
    text = format_report(failed, None)
    assert "default unavailable" in text and "no correct script" in text
    assert json.loads(json.dumps(failed.as_dict()))["best"] is None
    fast = Candidate("postproc auto llvm\n", Outcome(Status.CORRECT, latency_s=1e-3), 0)
    found = OptimizeResult(SPEC, "llvm", "cpu", OptimizeConfig(k=1, rounds=0), start,
                           (Round(0, "construction", None, 1, 1, 1, 1e-3, 1e-3),), (fast,),
                           fast, {"best": Outcome(Status.CORRECT, latency_s=1.1e-3),
                                  "unscheduled": Outcome(Status.CORRECT, latency_s=2.2e-3)},
                           4, "rounds")
    assert found.ok and found.speedup("unscheduled") == pytest.approx(2.0)
    assert found.speedup("default") is None
    assert "no DLight CPU rule matches" in format_report(found, None)


# ---- never worse than a baseline -----------------------------------------------------------

SLOW_SPEC = "dense(m=96,n=160,k=192,bias=0,act=none)"
SLOW_SCRIPT = 'block "T_matmul_NT" -> b0\n'


class _SlowAtTheEnd:
    """An evaluator whose scripts look fast at their first timing and are slower than
    ``baselines`` (name -> latency) when re-timed beside them: the search's favourite loses."""

    def __init__(self, target="llvm", *, baselines=None, retimed=3e-3, **kwargs):
        from codegen.targets import as_target

        self.target, self.device, self.cache = as_target(target), "fake cpu", None
        self.baselines = baselines or {"unscheduled": 2e-3, "default": 2.5e-3}
        self.retimed, self.seen = retimed, set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        pass

    def evaluate_modules(self, workload, modules):
        return {name: Outcome(Status.CORRECT, latency_s=self.baselines[name],
                              spread_s=0.01 * self.baselines[name]) for name in modules}

    def evaluate(self, workload, scripts):
        out = []
        for text in scripts:
            latency = self.retimed if text in self.seen else 1e-3
            self.seen.add(text)
            out.append(Outcome(Status.CORRECT, latency_s=latency, spread_s=0.01 * latency))
        return out


@pytest.fixture()
def slow_samples(monkeypatch):
    """Sampling that writes one correct script, whatever the prompt."""
    from types import SimpleNamespace

    import training.sampling.schedule_aware as aware

    monkeypatch.setattr(aware, "sample_schedule_aware",
                        lambda model, tok, prompt, wl, target, config:
                        [SimpleNamespace(text=SLOW_SCRIPT, applies=True)] * config.n)


def _start(ev, names=("unscheduled", "default")):
    from codegen.measured import Baselines
    from training.optimize.kernel import measure_start

    return measure_start(SLOW_SPEC, ev, made=Baselines({n: object() for n in names}))


@pytest.mark.parametrize("retimed,winner", [(3e-3, "unscheduled"), (2.2e-3, "unscheduled")])
def test_a_script_slower_than_a_baseline_when_retimed_is_not_the_answer(slow_samples, retimed,
                                                                        winner):
    ev = _SlowAtTheEnd(retimed=retimed)
    result = optimize(None, None, SLOW_SPEC, config=OptimizeConfig(k=2, rounds=0),
                      evaluator=ev, start=_start(ev))
    assert result.ok and result.best.script == SLOW_SCRIPT  # correct, fastest at first
    assert result.speedup("unscheduled") < 1
    assert result.winner == winner and result.best_script is None and not result.improved
    assert result.comparison("unscheduled").verdict == "slower"
    data = json.loads(json.dumps(result.as_dict()))
    assert data["winner"] == winner and data["best_script"] is None
    assert data["comparison"]["unscheduled"]["verdict"] == "slower"
    from training.cli.optimize import format_report

    text = format_report(result, None)
    assert f"no script beat the {winner} kernel when re-timed: keep it; no script written" \
        in text and "(slower)" in text


def test_the_best_script_wins_only_when_faster_than_every_baseline(slow_samples):
    ev = _SlowAtTheEnd(baselines={"unscheduled": 2e-3, "default": 1.5e-3}, retimed=1.8e-3)
    result = optimize(None, None, SLOW_SPEC, config=OptimizeConfig(k=1, rounds=0),
                      evaluator=ev, start=_start(ev))
    assert result.speedup("unscheduled") > 1 and result.winner == "default"
    assert result.best_script is None
    ev = _SlowAtTheEnd(retimed=1.2e-3)
    won = optimize(None, None, SLOW_SPEC, config=OptimizeConfig(k=1, rounds=0), evaluator=ev,
                   start=_start(ev))
    assert won.winner == "best" and won.best_script == SLOW_SCRIPT and won.improved
    assert str(won.comparison("unscheduled")) == "1.67x"


def test_the_command_writes_no_script_slower_than_a_baseline(slow_samples, monkeypatch,
                                                             tmp_path, capsys):
    import codegen.measure
    import training.cli.optimize as cli

    monkeypatch.setattr(codegen.measure, "Evaluator", _SlowAtTheEnd)
    monkeypatch.setattr(cli, "load_model", lambda path: (None, None))
    out = tmp_path / "best.dragon"
    code = main(["optimize", SLOW_SPEC, "-k", "4", "--rounds", "0", "--out", str(out),
                 "--json", "-q"])
    stdout, stderr = capsys.readouterr()
    report = json.loads(stdout)
    assert code == 1, stderr
    assert report["winner"] == "unscheduled" and report["best_script"] is None
    assert report["out"] is None and not out.exists()
    assert report["speedup"]["unscheduled"] < 1  # what the search believed, kept for the record


@pytest.mark.parametrize("e2e_rounds", [1, 0])
def test_the_whole_model_path_writes_no_record_a_baseline_beat(slow_samples, monkeypatch,
                                                               tmp_path, e2e_rounds):
    from types import SimpleNamespace

    import codegen.model_build
    import training.optimize.model
    from codegen.measured import Baselines
    from training.optimize.model import ModelOptimizeConfig, optimize_model

    monkeypatch.setattr(training.optimize.model, "make_baselines", lambda wl, target: Baselines(
        {"unscheduled": object(), "default": object()}))
    measured = []

    def measure_models(*args, **kwargs):
        measured.append(kwargs["rounds"])
        return {}

    monkeypatch.setattr(codegen.model_build, "measure_models", measure_models)
    # Faster than the unscheduled kernel, slower than the default when re-timed.
    ev = _SlowAtTheEnd(baselines={"unscheduled": 2e-3, "default": 1.5e-3}, retimed=1.8e-3)
    task = SimpleNamespace(workload=SLOW_SPEC, spec=SLOW_SPEC, name="dense", weight=1)
    result = optimize_model(None, None, "fake", None, [task],
                            database=str(tmp_path / "db"), evaluator=ev,
                            config=OptimizeConfig(k=1, rounds=0),
                            model_config=ModelOptimizeConfig(metaschedule=False,
                                                             e2e_rounds=e2e_rounds))
    [done] = result.tasks
    assert done.result.speedup("unscheduled") > 1 and done.result.winner == "default"
    assert result.records == 0 and not done.in_database
    assert done.as_dict()["winner"] == "default"
    from training.cli.optimize_model import format_model_report

    assert "no (default faster)" in format_model_report(result)
    assert measured == ([e2e_rounds] if e2e_rounds else [])  # 0 measures no build


# ---- the best is the fastest by construction ------------------------------------------------

# Distinct correct scripts for SLOW_SPEC with latencies that differ by far more than any noise:
# the fastest of round 0 is neither its first nor its last script.
LATENCY_OF = {f'block "T_matmul_NT" -> b{i}\n': latency
              for i, latency in enumerate([3e-3, 1e-3, 2e-3, 1.5e-3, 0.5e-3, 4e-3])}
ROUNDS = [list(LATENCY_OF)[:3], list(LATENCY_OF)[3:]]


class _ByConstruction(_SlowAtTheEnd):
    """Each script always times at its ``LATENCY_OF`` latency; the baselines at 5 ms."""

    def __init__(self, target="llvm", **kwargs):
        super().__init__(target, baselines={"unscheduled": 5e-3, "default": 5e-3})

    def evaluate(self, workload, scripts):
        return [Outcome(Status.CORRECT, latency_s=LATENCY_OF[t], spread_s=0.0) for t in scripts]


def test_the_best_is_the_fastest_candidate_and_round_one_refines_it(monkeypatch):
    from types import SimpleNamespace

    import training.sampling.schedule_aware as aware

    prompts = []

    def sample(model, tok, prompt, wl, target, config):
        prompts.append(prompt)
        return [SimpleNamespace(text=t, applies=True) for t in ROUNDS[len(prompts) - 1]]

    monkeypatch.setattr(aware, "sample_schedule_aware", sample)
    ev = _ByConstruction()
    result = optimize(None, None, SLOW_SPEC, config=OptimizeConfig(k=3, rounds=1),
                      evaluator=ev, start=_start(ev))
    first, second = result.rounds
    assert (first.round_best_s, first.best_s) == (1e-3, 1e-3)
    # The refinement prompt shows round 0's fastest script and its latency, no other script.
    assert second.prompt == "refinement" and second.prompt_latency_s == 1e-3
    assert ROUNDS[0][1] in prompts[1]
    assert ROUNDS[0][0] not in prompts[1] and ROUNDS[0][2] not in prompts[1]
    assert (second.round_best_s, second.best_s) == (0.5e-3, 0.5e-3)
    assert result.best.script == ROUNDS[1][1] and result.best.round == 1
    assert result.winner == "best" and result.best_script == ROUNDS[1][1]
    assert result.speedup("unscheduled") == pytest.approx(10.0)


def test_a_sample_that_does_not_apply_is_counted_never_timed(monkeypatch):
    """On CUDA a sample whose closing ``postproc auto`` was refused cannot build: timing it
    would spend a kernel of the budget on a known failure."""
    from types import SimpleNamespace

    import training.sampling.schedule_aware as aware

    texts = list(LATENCY_OF)[:3]
    monkeypatch.setattr(aware, "sample_schedule_aware", lambda model, tok, prompt, wl, target,
                        config: [SimpleNamespace(text=t, applies=t != texts[1]) for t in texts])
    timed = []

    class Recording(_ByConstruction):
        def evaluate(self, workload, scripts):
            timed.extend(scripts)
            return super().evaluate(workload, scripts)

    ev = Recording()
    result = optimize(None, None, SLOW_SPEC, config=OptimizeConfig(k=3, rounds=0),
                      evaluator=ev, start=_start(ev))
    (only,) = result.rounds
    assert timed[:2] == [texts[0], texts[2]] and texts[1] not in timed  # then the best again
    assert (only.attempts, only.measured, only.round_best_s) == (3, 2, 2e-3)
