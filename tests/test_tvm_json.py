"""TVM's own trace JSON (``Trace.as_json()``, a MetaSchedule database record's trace):
``dragon decode`` writes it and TVM applies it; ``dragon encode`` reads it back, given the
workload, to the same JSON."""

from __future__ import annotations

import json
import os

import pytest
import tvm_ffi
from tvm.s_tir.schedule import Schedule, Trace

import dragon_dsl
from codegen import workload
from codegen.targets import import_tensor_intrinsics, postproc_set
from dragon_dsl.replay import replay_tvm_json
from dragon_dsl.tvm_bridge import _tree_index_map_json

from .test_golden import HERE, PAIRS
from .traces import FAMILY_MATRIX, RULES, matrix_trace, target_of


def _number(obj):
    """How a file holds TVM's IntImm and FloatImm: as their values."""
    return obj.value


def as_trees(value):
    """TVM's trace JSON with each index map (a JSON graph in a string) written as a tree: the
    graph also records which expression nodes happen to be shared in memory, which carries no
    meaning and which a script does not keep (``tvm_bridge.trace_json`` does the same); a
    database also indents it."""
    import tvm

    if isinstance(value, str) and value.startswith("{"):
        return _tree_index_map_json(tvm.ir.load_json(value))
    if isinstance(value, list):
        return [as_trees(v) for v in value]
    return value


def _applied(trace, mod):
    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def _golden(name: str):
    """A MetaSchedule-sampled pair: (workload, target, rule set, trace, script)."""
    spec, target, rules, _ = PAIRS[name]
    script = (HERE / "pairs" / f"{name}.dragon").read_text()
    return workload(spec), target, rules, dragon_dsl.to_trace(script), script


def assert_tvm_applies(wl, trace, script: str) -> None:
    """What ``decode`` writes, through a JSON file, is what TVM's replay accepts, and it
    schedules the workload as the trace does."""
    import_tensor_intrinsics()
    data = json.loads(json.dumps(dragon_dsl.to_tvm_json(script)))
    assert as_trees(data) == as_trees(json.loads(json.dumps(trace.as_json(), default=_number)))
    sch = Schedule(wl.mod)
    Trace.apply_json_to_schedule(data, sch)
    assert tvm_ffi.structural_equal(sch.mod, _applied(trace, wl.mod))


def assert_round_trip(wl, target, rules, trace) -> None:
    """decode(encode(x)) == x for TVM's own JSON x (index maps compared as trees), with
    explicit and with regenerated post-processing."""
    x = json.loads(json.dumps(trace.as_json(), default=_number))
    replayed = replay_tvm_json(x, wl)
    for postproc in ("explicit", "auto"):
        encoded = dragon_dsl.encode(replayed, postproc=postproc, postproc_set=postproc_set(rules),
                                    workload=wl, target=target, typed=False)
        if postproc == "auto":
            assert encoded.postproc == "verified", encoded.note
        assert as_trees(dragon_dsl.to_tvm_json(encoded.text, workload=wl, target=target)) == \
            as_trees(x)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_tvm_applies_what_decode_writes(name):
    wl, _, _, trace, script = _golden(name)
    assert_tvm_applies(wl, trace, script)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_encode_then_decode_gives_back_tvm_json(name):
    wl, target, rules, trace, _ = _golden(name)
    assert_round_trip(wl, target, rules, trace)


@pytest.mark.parametrize("name", ["matmul_llvm", "conv2d_layout_rewrite_llvm"])
def test_decode_writes_what_a_metaschedule_database_holds(name, tmp_path):
    """A JSON database's tuning record holds the same trace JSON (its index maps indented),
    and ``encode`` reads the record's trace."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    wl, target, _, trace, script = _golden(name)
    db = ms.database.JSONDatabase(os.fspath(tmp_path / "workloads.json"),
                                  os.fspath(tmp_path / "records.json"), allow_missing=True)
    db.commit_tuning_record(ms.database.TuningRecord(
        trace, db.commit_workload(wl.mod), [1.0], tvm.target.Target(target), None))
    [line] = (tmp_path / "records.json").read_text().splitlines()
    record = json.loads(line)[1][0]
    assert as_trees(record) == as_trees(dragon_dsl.to_tvm_json(script))
    encoded = dragon_dsl.encode(replay_tvm_json(record, wl), workload=wl, typed=False)
    assert as_trees(dragon_dsl.to_tvm_json(encoded.text)) == as_trees(record)


@pytest.mark.slow
@pytest.mark.parametrize("rules", RULES)
@pytest.mark.parametrize("family", sorted(FAMILY_MATRIX))
def test_tvm_json_on_every_family_and_rule_set(family, rules):
    wl, trace = matrix_trace(family, rules)
    if trace is None:
        pytest.skip("MetaSchedule cannot search this pair (tests/traces.py UNSEARCHABLE)")
    assert_tvm_applies(wl, trace, dragon_dsl.from_trace(trace))
    assert_round_trip(wl, target_of(rules), rules, trace)
