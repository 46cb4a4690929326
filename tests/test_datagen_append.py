"""``dragon datagen --append SPEC``: workloads added to a kept run's list (a whole model adds
each of its tasks), recorded in its manifest so that later runs of the same command include
them; a command that differs in anything else is still refused, and a damaged manifest is named.
``--grow 0 --records-only`` searches nothing, so these runs only read and write the manifest."""

from __future__ import annotations

import json

import pytest

from codegen.workloads.models import extract_tasks

LLVM = '{"kind": "llvm", "num-cores": 2}'
BASE = ["datagen", "--workload", "matmul(m=16,n=16,k=16)", "--workload", "softmax(m=16,n=32)",
        "--target", LLVM, "--trials", "8", "--per-round", "8", "--grow", "0",
        "--records-only", "--quiet"]


def _manifest(out) -> dict:
    return json.loads((out / "datagen.json").read_text())


def _ok(dragon_cmd, *args):
    done = dragon_cmd([*args])
    assert done.returncode == 0, done.stderr
    return done


def test_append_extends_the_list_and_the_same_command_keeps_it(tmp_path, dragon_cmd):
    out = tmp_path / "corpus"
    _ok(dragon_cmd, *BASE, "--out", str(out))
    first = _manifest(out)
    assert len(first["tasks"]) == 2 and "appended" not in first
    done = _ok(dragon_cmd, *BASE, "--out", str(out), "--append", "reduce(m=16,n=32)",
               "--append", "softmax(m=16,n=32)")   # already in the list: not added again
    assert "1 workload added" in done.stderr and "1 of those named" in done.stderr
    second = _manifest(out)
    assert second["tasks"][:2] == first["tasks"] and len(second["tasks"]) == 3
    assert second["appended"] == ["reduce(m=16,n=32)"]
    assert second["tasks"][2].startswith("reduce-")
    _ok(dragon_cmd, *BASE, "--out", str(out))          # the same command, without --append
    assert _manifest(out) == second
    _ok(dragon_cmd, *BASE, "--out", str(out), "--append", "reduce(m=16,n=32)")
    assert _manifest(out) == second                    # appending it again changes nothing


def test_a_whole_model_appends_each_of_its_tasks(tmp_path, dragon_cmd):
    out = tmp_path / "corpus"
    _ok(dragon_cmd, *BASE, "--out", str(out), "--append", "model(name=resnet,preset=tiny)")
    specs = [t.spec for t in extract_tasks("resnet", "tiny")]
    manifest = _manifest(out)
    assert manifest["appended"] == specs and len(manifest["tasks"]) == 2 + len(specs)
    assert all(key.startswith("model-") for key in manifest["tasks"][2:])


@pytest.mark.parametrize("change, named", [
    (["--trials", "16"], "settings"),                      # the search of the run differs
    (["--workload", "reduce(m=16,n=64)"], "tasks"),        # the command's own list differs
])
def test_an_append_to_another_run_is_refused(tmp_path, dragon_cmd, change, named):
    out = tmp_path / "corpus"
    _ok(dragon_cmd, *BASE, "--out", str(out))
    before = _manifest(out)
    done = dragon_cmd([*BASE, *change, "--out", str(out), "--append", "reduce(m=16,n=32)"])
    assert done.returncode == 2 and f"holds a datagen run with other {named}" in done.stderr
    assert _manifest(out) == before


def test_bad_appends_and_a_damaged_manifest_are_named(tmp_path, dragon_cmd):
    out = tmp_path / "corpus"
    done = dragon_cmd([*BASE, "--out", str(out), "--append", "model(name=bort,preset=tiny)"])
    assert done.returncode == 2 and "--append:" in done.stderr and "bort" in done.stderr
    _ok(dragon_cmd, *BASE, "--out", str(out))
    (out / "datagen.json").write_text('{"version": 1, "appended": "reduce(m=16,n=32)"}')
    done = dragon_cmd([*BASE, "--out", str(out)])
    assert done.returncode == 2 and "datagen.json: not a datagen manifest" in done.stderr
    assert "Traceback" not in done.stderr
    done = dragon_cmd(["datagen", "--from-database", str(tmp_path), "--out", str(tmp_path / "d"),
                       "--append", "reduce(m=16,n=32)"])
    assert done.returncode == 2 and "--append adds workloads to a search run" in done.stderr
