"""Issue 24, ``dragon datagen`` and ``dragon optimize`` (a kernel and a whole model), workload
specs and config files under hostile use: every failure is exit 2 (or 1) with one line
``dragon: MESSAGE`` naming what is wrong, no traceback, no work before the line, and no result
lost when an output cannot be written.  Evaluators and samplers are faked where a real run is
not what is tested (``tests/test_optimize.py``'s ``_SlowAtTheEnd``)."""

from __future__ import annotations

import json
import os

import pytest

from codegen.measure import Outcome, Status
from dragon_dsl.cli import main

from .test_optimize import SLOW_SCRIPT, SLOW_SPEC, _SlowAtTheEnd

UNWRITABLE = "/proc/dragon-hostile"   # not even root can create anything under /proc


def _one_line(stderr: str, *needles: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("dragon: ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def samples(monkeypatch):
    """Sampling that writes one correct script and counts its calls."""
    from types import SimpleNamespace

    import training.sampling.schedule_aware as aware

    calls = []

    def sample(model, tok, prompt, wl, target, config):
        calls.append(config)
        return [SimpleNamespace(text=SLOW_SCRIPT, applies=True)] * config.n

    monkeypatch.setattr(aware, "sample_schedule_aware", sample)
    return calls


@pytest.fixture()
def fake_optimize(monkeypatch, samples):
    """``dragon optimize`` on ``_SlowAtTheEnd`` (or the evaluator class set in ``made``) with
    no model; ``made`` lists the evaluators built."""
    import codegen.measure
    import training.cli.optimize as cli

    made = []

    def evaluator(*args, **kwargs):
        ev = made_class[0](*args, **kwargs)
        made.append(ev)
        return ev

    made_class = [_SlowAtTheEnd]
    monkeypatch.setattr(codegen.measure, "Evaluator", evaluator)
    monkeypatch.setattr(cli, "load_model", lambda path: (None, None))
    return made, made_class


# ---- 1. --as-is records whose replay changes a decision -----------------------------------------

def _database(folder, decision) -> str:
    """A MetaSchedule JSON database of one matmul record whose tile decision is ``decision``."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from codegen.targets import as_target
    from codegen.workloads import workload

    wl = workload("matmul(m=16,n=16,k=16)")
    sch = Schedule(wl.mod, seed=1)
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(i, sch.sample_perfect_tile(i, n=4))
    os.makedirs(folder, exist_ok=True)
    records = os.path.join(folder, "database_tuning_record.json")
    db = ms.database.JSONDatabase(os.path.join(folder, "database_workload.json"), records)
    db.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, db.commit_workload(wl.mod), [1e-5],
        as_target({"kind": "llvm", "num-cores": 2}), None))
    with open(records, encoding="utf-8") as f:
        line = json.loads(f.read())
    line[1][0][1] = [[2, decision]]
    with open(records, "w", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return str(folder)


def test_an_as_is_record_whose_replay_changes_a_decision_is_not_stored_correct(tmp_path,
                                                                               capsys):
    from training.datagen.records import RecordStore

    db = _database(tmp_path / "db", [10**12, 1, 1, 1])
    out = tmp_path / "out"
    code = main(["datagen", "--from-database", db, "--as-is", "--out", str(out),
                 "--workload", "matmul(m=16,n=16,k=16)", "--records-only", "--quiet"])
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    [record] = list(RecordStore(str(out)).all_records())
    assert record.status != "correct" and record.latency_s is None
    assert "decision" in record.message and "1000000000000" in record.message
    assert "not as-is" in stderr, stderr
    assert code == 1


def test_an_as_is_record_that_replays_exactly_is_kept(tmp_path, capsys):
    from training.datagen.records import RecordStore

    db = _database(tmp_path / "db", [1, 1, 8, 2])
    out = tmp_path / "out"
    code = main(["datagen", "--from-database", db, "--as-is", "--out", str(out),
                 "--workload", "matmul(m=16,n=16,k=16)", "--records-only", "--quiet"])
    assert code == 0, capsys.readouterr().err
    [record] = list(RecordStore(str(out)).all_records())
    assert record.status == "correct" and record.latency_s == pytest.approx(1e-5)


# ---- 2. outputs that cannot be written ----------------------------------------------------------

def test_optimize_refuses_an_unwritable_out_before_measuring(fake_optimize, capsys):
    made, _ = fake_optimize
    code = main(["optimize", SLOW_SPEC, "-k", "1", "--rounds", "0", "-q",
                 "--out", "/proc/best.dragon"])
    assert code == 2
    _one_line(capsys.readouterr().err, "/proc/best.dragon")
    assert made == []


def test_optimize_prints_the_script_when_writing_fails_at_the_end(fake_optimize, monkeypatch,
                                                                   tmp_path, capsys):
    import dragon_dsl.files

    def fail(path, text):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(dragon_dsl.files, "write_atomic", fail)
    _, made_class = fake_optimize

    class Wins(_SlowAtTheEnd):
        def __init__(self, *a, **k):
            super().__init__(*a, retimed=1.2e-3)

    made_class[0] = Wins
    out = tmp_path / "best.dragon"
    code = main(["optimize", SLOW_SPEC, "-k", "1", "--rounds", "0", "--transfer", "0", "-q",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert SLOW_SCRIPT.strip() in captured.out  # the result is not lost
    line = _one_line(captured.err, str(out), "Permission denied")
    assert "could not" in line
    assert code == 1


def test_a_whole_model_refuses_an_unwritable_database_before_loading(fake_optimize, tmp_path,
                                                                     capsys, monkeypatch):
    import training.cli.optimize_model as cli

    monkeypatch.setattr(cli, "load_whole_model",
                        lambda arg: pytest.fail("the model was loaded before the check"))
    code = main(["optimize", "model(name=bert,preset=tiny)", "-q",
                 "--out", str(tmp_path / "r.json"), "--database", f"{UNWRITABLE}/db"])
    assert code == 2
    _one_line(capsys.readouterr().err, UNWRITABLE)


def test_a_whole_model_refuses_an_unwritable_out_before_loading(fake_optimize, capsys,
                                                                monkeypatch):
    import training.cli.optimize_model as cli

    monkeypatch.setattr(cli, "load_whole_model",
                        lambda arg: pytest.fail("the model was loaded before the check"))
    code = main(["optimize", "model(name=bert,preset=tiny)", "-q",
                 "--out", f"{UNWRITABLE}/r.json"])
    assert code == 2
    _one_line(capsys.readouterr().err, UNWRITABLE)


@pytest.mark.parametrize("where", ["unwritable", "under a file"])
def test_datagen_refuses_an_unwritable_out_before_any_search(where, tmp_path, capsys,
                                                             monkeypatch):
    import training.datagen.generate as generate

    monkeypatch.setattr(generate, "generate",
                        lambda *a, **k: pytest.fail("the search started before the check"))
    if where == "under a file":
        (tmp_path / "file").write_text("x")
        out = str(tmp_path / "file" / "out")
    else:
        out = f"{UNWRITABLE}/out"
    code = main(["datagen", "--workload", "matmul(m=16,n=16,k=16)", "--trials", "2",
                 "--out", out, "--quiet"])
    assert code == 2
    _one_line(capsys.readouterr().err, out)


# ---- 3. a Ray address nobody answers ------------------------------------------------------------

def test_datagen_gives_up_on_a_ray_address_nobody_answers(tmp_path, capsys, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init retries forever"))
    code = main(["datagen", "--workload", "matmul(m=16,n=16,k=16)", "--trials", "2",
                 "--out", str(tmp_path / "out"), "--quiet", "--ray-address", "127.0.0.1:1"])
    assert code == 2
    _one_line(capsys.readouterr().err, "127.0.0.1:1")


# ---- 4. YAML alias bombs and long messages ------------------------------------------------------

BOMB = """\
tasks:
  - &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  - &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  - &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  - &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  - &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  - &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
  - &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
  - [*g,*g,*g,*g,*g,*g,*g,*g,*g]
"""

def test_a_yaml_alias_bomb_is_refused_in_one_short_line(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    code = main(["sft", "--config", str(path), "--validate"])
    stderr = capsys.readouterr().err
    assert code == 2
    line = _one_line(stderr, str(path), "alias")
    assert len(stderr) < 2000, len(stderr)
    assert line


def test_config_error_messages_are_bounded(tmp_path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text("learning_rate: [" + ",".join(["1"] * 200_000) + "]\n")
    code = main(["sft", "--config", str(path), "--validate"])
    stderr = capsys.readouterr().err
    assert code == 2
    _one_line(stderr, "learning_rate")
    assert len(stderr) < 2000, len(stderr)


# ---- 5. tracebacks ------------------------------------------------------------------------------

def test_optimize_refuses_a_seed_torch_cannot_take_before_measuring(fake_optimize, tmp_path,
                                                                    capsys):
    made, _ = fake_optimize
    code = main(["optimize", SLOW_SPEC, "-k", "1", "--rounds", "0", "-q",
                 "--seed", "99999999999999999999999", "--out", str(tmp_path / "b.dragon")])
    assert code == 2
    _one_line(capsys.readouterr().err, "--seed")
    assert made == []


@pytest.mark.parametrize("spec,needle", [("model(name=bert,preset=tiny,seq=100000)", "seq"),
                                         ("model(name=bert,preset=tiny,batch=100000)", "batch"),
                                         ("model(name=resnet,preset=tiny,seq=100000)", "seq")])
def test_a_model_too_long_for_its_positions_is_refused(spec, needle, fake_optimize, tmp_path,
                                                       capsys):
    code = main(["optimize", spec, "-q", "--out", str(tmp_path / "r.json")])
    assert code == 2
    _one_line(capsys.readouterr().err, needle, "100000")


def test_datagen_refuses_a_negative_sample_in_one_line(tmp_path, capsys):
    code = main(["datagen", "--sample", "-5", "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 2
    _one_line(capsys.readouterr().err, "-5")


# ---- 6. misleading ------------------------------------------------------------------------------

class _CannotRun(_SlowAtTheEnd):
    """An evaluator on which the unscheduled kernel fails: ``STATUS`` with ``MESSAGE``."""

    STATUS, STAGE, MESSAGE = Status.BUILD_ERROR, "build", "int32 overflow in the index 1e10"

    def evaluate_modules(self, workload, modules):
        return {name: Outcome(self.STATUS, self.STAGE, self.MESSAGE) for name in modules}


def test_optimize_stops_before_sampling_when_the_unscheduled_kernel_cannot_build(
        fake_optimize, samples, tmp_path, capsys):
    _, made_class = fake_optimize
    made_class[0] = _CannotRun
    code = main(["optimize", SLOW_SPEC, "-k", "1", "--rounds", "0", "-q",
                 "--out", str(tmp_path / "b.dragon")])
    assert code == 2
    _one_line(capsys.readouterr().err, "unscheduled", "int32 overflow")
    assert samples == []


def test_optimize_on_a_device_that_cannot_run_says_so_before_sampling(fake_optimize, samples,
                                                                      tmp_path, capsys):
    class NoGPU(_CannotRun):
        STATUS, STAGE, MESSAGE = Status.RUNTIME_ERROR, "run", "CUDA: no CUDA-capable device"

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.device = "cuda (no GPU)"

    _, made_class = fake_optimize
    made_class[0] = NoGPU
    code = main(["optimize", SLOW_SPEC, "-k", "1", "--rounds", "0", "-q",
                 "--out", str(tmp_path / "b.dragon")])
    stderr = capsys.readouterr().err
    assert code == 2
    line = _one_line(stderr, "no GPU", "nothing")
    assert "sampled" not in line
    assert samples == []


def test_a_slower_best_is_never_called_faster():
    from training.cli.optimize import format_report
    from training.optimize.kernel import OptimizeConfig, optimize

    from .test_optimize import _start

    ev = _SlowAtTheEnd(baselines={"unscheduled": 1e-3, "default": 1e-3}, retimed=2.27e-3)
    from types import SimpleNamespace

    import training.sampling.schedule_aware as aware

    saved = aware.sample_schedule_aware
    aware.sample_schedule_aware = lambda m, t, p, wl, tg, c: [
        SimpleNamespace(text=SLOW_SCRIPT, applies=True)]
    try:
        result = optimize(None, None, SLOW_SPEC, config=OptimizeConfig(k=1, rounds=0),
                          evaluator=ev, start=_start(ev))
    finally:
        aware.sample_schedule_aware = saved
    text = format_report(result, None)
    assert "0.44x" in text and "0.44x faster" not in text and "slower" in text


def test_a_model_load_error_shows_its_whole_reason(monkeypatch):
    import training.sampling
    from dragon_dsl.cli_kit import UsageError
    from training.cli.common import load_model

    def load(path):
        raise ValueError("Validation error for field 'hidden_size':\n"
                         "  hidden_size (30) must be a multiple of num_attention_heads (4)")

    monkeypatch.setattr(training.sampling, "load", load)
    with pytest.raises(UsageError) as info:
        load_model("somewhere")
    message = str(info.value)
    assert "hidden_size" in message and "multiple of num_attention_heads" in message
    assert "\n" not in message

    monkeypatch.setattr(training.sampling, "load",
                        lambda path: (_ for _ in ()).throw(ValueError("x" * 100_000)))
    with pytest.raises(UsageError) as info:
        load_model("somewhere")
    assert len(str(info.value)) < 1000


@pytest.mark.parametrize("spec", ["model(name=nope)", "model(name=nope,preset=tiny)",
                                  "model(name=nope,preset=tiny,task=0)"])
def test_an_unknown_model_name_is_named_with_the_known_ones(spec):
    from codegen.workloads.models import parse_model_spec

    with pytest.raises(ValueError) as info:
        parse_model_spec(spec, task="task=" in spec)
    message = str(info.value)
    assert "nope" in message and "bert" in message and "gpt2" in message
    assert "Expected keys" not in message


def test_the_readme_says_what_makes_runs_rl_tiny_before_optimize_uses_it():
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md"),
                  encoding="utf-8").read()
    section = readme[readme.index("## Optimizing a kernel: `dragon optimize`"):]
    section = section[:section.index("\n## ", 10)]
    before = section[:section.index("--model runs/rl-tiny")]
    assert "dragon rl" in before and "runs/rl-tiny" in before


def test_a_missing_model_directory_says_what_makes_one(tmp_path, capsys):
    code = main(["optimize", SLOW_SPEC, "--model", str(tmp_path / "rl-tiny"), "-q"])
    assert code == 2
    _one_line(capsys.readouterr().err, "rl-tiny", "dragon rl", "built-in model")
