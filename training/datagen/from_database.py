"""Records from a MetaSchedule JSON database: ``dragon datagen --from-database DIR``.

A database is the pair of files ``tune_tir``/``tune_relax`` (and ``codegen.search.search``)
write to their work directory, ``database_workload.json`` and
``database_tuning_record.json``; ``DIR`` holds one pair, or subfolders that do (searched
recursively).  Each tuning record becomes one ``Record`` (``source="database"``, ``round=0``,
``index``: its order in the file), grouped by workload and target: a ``DatabaseGroup`` per
group, which the driver commits as one task of a ``RecordStore``.

Two modes, chosen by ``measure``:

* **as-is** (``measure=None``): the latency is the mean of MetaSchedule's ``run_secs``; a record
  MetaSchedule could not run (``run_secs`` of 1e10) keeps its place with status
  ``runtime_error``.  Nobody compared these kernels' outputs with the reference, so every record
  has ``verified=False`` and ``device="unknown"``.
* **re-measured** (``measure=`` an ``Evaluator``): every script goes through our measurement
  stack (built, verified against the unscheduled kernel, timed, cached), so the records are
  exactly like those of a search.

What is data and what is an error:

* the input cannot be read as a database (no such path, no pair of files, a line that is not
  JSON or is cut short, a line of the wrong shape, a workload TVM cannot decode, a record of a
  workload the file does not have): ``DataError`` naming the file and line, raised before the
  first group is yielded, so nothing of a damaged database is committed;
* one trace that does not replay on its workload (or that the language cannot write): a record
  with status ``apply_error`` (stage ``apply`` or ``encode``), its message and ``script=None``;
  the other records of the group are unaffected.

A workload has no spec in a database.  Its record carries the TVMScript text
(``workload_script``; ``codegen.workloads.script_workload`` rebuilds it) and the label
``database(name=<PrimFunc name>,hash=<identity>)``, family ``database``; a workload whose
TVMScript is exactly that of one of the ``specs`` passed in takes that spec and its family
instead (and shares measurement-cache entries with searches of that spec).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dragon_dsl
from codegen.measure.outcomes import Outcome, Status
from codegen.measure.timing import median_and_spread
from codegen.targets import (
    as_target,
    default_rules,
    import_tensor_intrinsics,
    postproc_set,
    schedule_of,
    target_dict,
    tvm_message,
)
from codegen.workloads import script_workload, workload
from dragon_dsl.errors import DragonError
from training.datagen.records import DataError, Record, TaskSummary
from training.datagen.runner import DATABASE_FILES
from training.datagen.tasks import family_of
from training.prompts.templates import target_name

if TYPE_CHECKING:
    from codegen.measure import Evaluator
    from codegen.targets import TargetLike

__all__ = ["DatabaseGroup", "DatabasePair", "database_records", "find_databases"]

# MetaSchedule's latency for a candidate that did not run (codegen.search.tune.FAILED_RUN_SECS).
_FAILED_RUN_SECS = 1e10


@dataclass(frozen=True)
class DatabasePair:
    """The two files of one MetaSchedule JSON database."""

    workloads: str                 # .../database_workload.json
    records: str                   # .../database_tuning_record.json


@dataclass
class DatabaseGroup:
    """The records of one workload (on one target) of one database: one task for the driver."""

    key: str                       # names the task's files; stable across reruns
    workload: str                  # the workload's label (or matched spec)
    target: str                    # "llvm" or "cuda"
    records: list[Record]
    database: str                  # the tuning-record file the records came from
    mode: str = "as-is"            # "as-is", or "measured" (re-measured by an Evaluator)
    seconds: float = 0.0

    def summary(self) -> TaskSummary:
        """The task summary to commit with the records."""
        correct = [r.latency_s for r in self.records if r.correct and r.latency_s is not None]
        return TaskSummary(
            key=self.key, workload=self.workload, target=self.target, status="done",
            records=len(self.records), correct=len(correct),
            best_latency_s=min(correct) if correct else None, seconds=round(self.seconds, 3),
            extra={"database": self.database, "mode": self.mode})


def find_databases(path: str) -> list[DatabasePair]:
    """The databases in ``path``: a folder holding a pair, folders below it that do, or one
    file of a pair.  A DataError when there is none, or a folder has only half of one.

    >>> find_databases("/no/such/dir")
    Traceback (most recent call last):
    ...
    training.datagen.records.DataError: /no/such/dir: no such file or directory
    """
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file or directory")
    if os.path.isfile(path):
        if os.path.basename(path) not in DATABASE_FILES:
            raise DataError(f"{path}: not a MetaSchedule database file (expected a folder "
                            f"with {' and '.join(DATABASE_FILES)})")
        path = os.path.dirname(path) or "."
    pairs = []
    for folder, dirs, files in os.walk(path):
        dirs.sort()
        present = [name for name in DATABASE_FILES if name in files]
        if len(present) == 1:
            missing = next(n for n in DATABASE_FILES if n not in present)
            raise DataError(f"{os.path.join(folder, present[0])}: its database has no "
                            f"{missing} beside it")
        if present:
            pairs.append(DatabasePair(*(os.path.join(folder, n) for n in DATABASE_FILES)))
    if not pairs:
        raise DataError(f"{path}: no MetaSchedule database ({' and '.join(DATABASE_FILES)}) "
                        f"in it or below it")
    return pairs


def database_records(path: str, *, measure: Evaluator | None = None,
                     target: TargetLike | None = None,
                     specs: Iterable[str] = (), skip: Collection[str] = (),
                     progress: Callable[[str], None] | None = None) -> Iterator[DatabaseGroup]:
    """The records of every database in ``path``, one ``DatabaseGroup`` per workload and
    target, in file order.

    ``measure``: a ``codegen.measure.Evaluator`` to re-measure every script with (its target's
    kind must be the records'), or None to take MetaSchedule's latencies as they are.
    ``target``: the target of records that carry none (default: the evaluator's, else llvm).
    ``specs``: workload specs to name database workloads by (see the module docstring).
    ``skip``: group keys already committed; they are neither replayed nor measured.
    ``progress(message)`` hears of each group.  Every file is read and checked before the
    first group is yielded (see the module docstring for what is a DataError).

    >>> for group in database_records("tune_dir"):               # doctest: +SKIP
    ...     store.commit(group.summary(), group.records)
    """
    pairs = find_databases(path)
    fallback = as_target(target if target is not None else
                         (measure.target if measure is not None else "llvm"))
    named = _spec_index(specs)
    loaded = [_load(pair, fallback) for pair in pairs]   # every DataError before any group
    if measure is not None:
        for pair, groups in zip(pairs, loaded, strict=True):
            for group in groups:
                if group.target.kind.name != measure.target.kind.name:
                    raise DataError(f"{pair.records}:{group.lines[0].number}: the records are "
                                    f"for {group.target.kind.name}, the evaluator measures on "
                                    f"{measure.target.kind.name}")
    mode = _mode(measure)
    for pair, groups in zip(pairs, loaded, strict=True):
        for group in groups:
            wl, family = _workload(group, named)
            key = _key(pair, group, mode, family)
            if key in skip:
                continue
            if progress is not None:
                progress(f"{wl.spec}: {len(group.lines)} record(s) from {pair.records}")
            start = time.perf_counter()
            records = _records(group, wl, family, measure)
            yield DatabaseGroup(key, wl.spec, records[0].target, records, pair.records,
                                "as-is" if measure is None else "measured",
                                time.perf_counter() - start)


# ---- reading and checking the files ---------------------------------------------------------

@dataclass
class _Line:
    number: int                    # 1-based line of the tuning-record file
    trace: list
    run_secs: list[float] | None
    target: Any                    # tvm Target


@dataclass
class _Group:
    shash: str                     # MetaSchedule's structural hash of the workload
    mod: Any                       # its IRModule
    where: str                     # file:line of the workload
    target: Any
    target_json: str
    lines: list[_Line] = field(default_factory=list)


def _json_lines(path: str) -> Iterator[tuple[int, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") \
            from None
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except RecursionError:
            raise DataError(f"{path}:{number}: nested too deeply to be a MetaSchedule "
                            f"record") from None
        except ValueError as exc:
            cut = number == len(lines) and not text.endswith("\n")
            why = "the last line is cut short (a partial write)" if cut else \
                f"not JSON ({exc})"
            raise DataError(f"{path}:{number}: {why}") from None


def _load(pair: DatabasePair, fallback) -> list[_Group]:
    """Both files read and checked: the groups, in order of their first record."""
    from tvm.s_tir import meta_schedule as ms


    workloads = []
    for number, obj in _json_lines(pair.workloads):
        where = f"{pair.workloads}:{number}"
        if not (isinstance(obj, list) and len(obj) == 2 and all(isinstance(x, str) for x in obj)):
            raise DataError(f"{where}: not a MetaSchedule workload (expected [structural "
                            f"hash, module], got {_preview(obj)})")
        try:
            mod = ms.database.Workload.from_json(obj).mod
        except Exception as exc:  # noqa: BLE001  TVM's decoder raises its own error types
            raise DataError(f"{where}: TVM cannot decode the workload's module "
                            f"({tvm_message(exc)})") from None
        funcs = list(mod.functions.values())
        if len(funcs) != 1 or type(funcs[0]).__name__ != "PrimFunc":
            raise DataError(f"{where}: expected a module of one PrimFunc, got "
                            f"{[gv.name_hint for gv in mod.functions]}")
        workloads.append((obj[0], mod, where))
    groups: dict[tuple[int, str], _Group] = {}
    targets: dict[str, Any] = {}
    for number, obj in _json_lines(pair.records):
        where = f"{pair.records}:{number}"
        line, index, target_json = _record_line(obj, number, where, fallback, targets)
        if index >= len(workloads):
            raise DataError(f"{where}: workload {index}, but {pair.workloads} has "
                            f"{len(workloads)}")
        group = groups.get((index, target_json))
        if group is None:
            shash, mod, wl_where = workloads[index]
            group = groups[(index, target_json)] = _Group(shash, mod, wl_where, line.target,
                                                          target_json)
        group.lines.append(line)
    return list(groups.values())


def _record_line(obj, number: int, where: str, fallback, targets: dict[str, Any]):
    """One tuning record: [workload index, [trace, run_secs, target, args_info]]."""
    import tvm


    shape = "[workload index, [trace, run_secs, target, args_info]]"
    if not (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[0], int)
            and obj[0] >= 0 and isinstance(obj[1], list) and len(obj[1]) >= 2):
        raise DataError(f"{where}: not a MetaSchedule tuning record (expected {shape}, got "
                        f"{_preview(obj)})")
    trace, run_secs = obj[1][0], obj[1][1]
    raw_target = obj[1][2] if len(obj[1]) > 2 else None
    if not (isinstance(trace, list) and len(trace) == 2
            and all(isinstance(part, list) for part in trace)):
        raise DataError(f"{where}: the trace is not [instructions, decisions] "
                        f"({_preview(trace)})")
    if run_secs is not None and not (
            isinstance(run_secs, list)
            and all(isinstance(s, int | float) and not isinstance(s, bool) for s in run_secs)):
        raise DataError(f"{where}: run_secs is not a list of numbers ({_preview(run_secs)})")
    key = json.dumps(raw_target, sort_keys=True)
    if key not in targets:
        try:
            targets[key] = fallback if raw_target is None else tvm.target.Target(raw_target)
        except Exception as exc:  # noqa: BLE001  TVM's target parser raises its own types
            raise DataError(f"{where}: not a target ({tvm_message(exc)})") from None
    tgt = targets[key]
    line = _Line(number, trace, [float(s) for s in run_secs] if run_secs is not None else None,
                 tgt)
    return line, obj[0], json.dumps(target_dict(tgt), sort_keys=True)


def _preview(obj: Any, limit: int = 80) -> str:
    text = json.dumps(obj)
    return text if len(text) <= limit else text[:limit] + "..."


# ---- naming the workloads and the groups ----------------------------------------------------

def _spec_index(specs: Iterable[str]) -> dict[str, Any]:
    """Workloads of the given specs by their TVMScript's hash."""
    out = {}
    for spec in specs:
        wl = workload(spec)
        out[wl.text_hash] = wl
    return out


def _workload(group: _Group, named: dict[str, Any]):
    """The codegen Workload the group's scripts are written for, and its family."""
    func_name, func = next(iter((gv.name_hint, f) for gv, f in group.mod.functions.items()))
    symbol = func.attrs.get("global_symbol", func_name) if func.attrs is not None else func_name
    wl = script_workload(group.mod.script(), where=group.where)
    match = named.get(wl.text_hash)
    if match is not None:
        return match, family_of(match.spec)
    label = f"database(name={symbol},hash={wl.identity})"
    return type(wl)(label, wl.mod), "database"


def _mode(measure: Evaluator | None) -> str:
    if measure is None:
        return "as-is"
    return f"measured:{measure.target_json}:{measure.device}"


def _key(pair: DatabasePair, group: _Group, mode: str, family: str) -> str:
    fields = {"database": os.path.realpath(pair.records), "workload": group.shash,
              "target": group.target_json, "mode": mode}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return f"{family}-{digest}"


# ---- records --------------------------------------------------------------------------------

def _records(group: _Group, wl, family: str, measure: Evaluator | None) -> list[Record]:
    rules = default_rules(group.target)
    pp_set = postproc_set(rules)
    scripts: list[str | None] = []
    failures: dict[int, Outcome] = {}
    for i, line in enumerate(group.lines):
        script, failure = _script(line, wl, group.target, pp_set, exact=measure is None)
        scripts.append(script)
        if failure is not None:
            failures[i] = Outcome(Status.APPLY_ERROR, *failure)
    if measure is not None:
        tgt, device = measure.target, measure.device
        texts = [s for i, s in enumerate(scripts) if i not in failures and s is not None]
        measured = iter(measure.evaluate(wl, texts) if texts else [])
        outcomes = [failures[i] if i in failures else next(measured)
                    for i in range(len(scripts))]
    else:
        tgt, device = group.target, "unknown"
        outcomes = [failures.get(i) or _as_is(line) for i, line in enumerate(group.lines)]
    base = {"workload": wl.spec, "workload_id": wl.identity, "family": family,
            "target": target_name(tgt),
            "target_json": json.dumps(target_dict(tgt), sort_keys=True), "device": device,
            "rules": rules, "source": "database", "round": 0,
            "workload_script": wl.mod.script() if family == "database" else None,
            "verified": measure is not None}
    return [Record(**base, index=i, script=script, status=o.status.value, stage=o.stage,
                   message=o.message[:2000], latency_s=o.latency_s, spread_s=o.spread_s)
            for i, (script, o) in enumerate(zip(scripts, outcomes, strict=True))]


def _script(line: _Line, wl, tgt, pp_set: str, *,
            exact: bool = False) -> tuple[str | None, tuple[str, str] | None]:
    """The record's trace replayed on the workload and written as a canonical script; or
    (stage, message) saying why not.  ``exact`` (as-is): a replay that changes a decision is
    a failure too, since TVM re-samples a decision that does not fit (a tile whose factors do
    not multiply to the loop's extent) and the record's latency is another schedule's."""
    from tvm.s_tir.schedule import Trace

    if any(isinstance(inst, list) and inst and inst[0] == "Tensorize" for inst in line.trace[0]):
        import_tensor_intrinsics()   # the intrinsics a Tensorize names must be registered
    sch = schedule_of(wl)
    try:
        Trace.apply_json_to_schedule(line.trace, sch)
    except Exception as exc:  # noqa: BLE001  TVM raises its own error types
        return None, ("apply", f"the trace does not replay on its workload: "
                               f"{tvm_message(exc)}")
    changed = _changed_decision(line.trace, sch.trace) if exact else None
    if changed:
        return None, ("apply", f"not as-is: {changed}, so MetaSchedule's latency is not this "
                               "script's (re-measure without --as-is)")
    try:
        return dragon_dsl.from_trace(sch.trace, postproc="auto", postproc_set=pp_set,
                                     workload=wl, target=tgt), None
    except DragonError as exc:
        return None, ("encode", f"the trace cannot be written as a script: {exc}")


def _changed_decision(recorded, replayed) -> str | None:
    """The first decision of the ``recorded`` trace JSON that the ``replayed`` Trace does not
    keep, said in words; None when the replay kept them all."""
    from dragon_dsl.tvm_bridge import plain_json

    insts, decisions = plain_json(replayed.as_json(remove_postproc=False))
    if len(insts) != len(recorded[0]):
        return (f"the trace has {len(recorded[0])} instructions but replays as {len(insts)}")
    now = {d[0]: d[1] for d in decisions}
    for entry in recorded[1]:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)):
            continue
        index, was = entry
        if now.get(index) != was:
            kind = insts[index][0] if 0 <= index < len(insts) else "?"
            return (f"replaying it changed the decision of instruction {index} ({kind}) from "
                    f"{_preview(was, 60)} to {_preview(now.get(index), 60)}")
    return None


def _as_is(line: _Line):
    """MetaSchedule's own measurement as an outcome (unverified)."""
    secs = line.run_secs or []
    if not secs:
        return Outcome(Status.RUNTIME_ERROR, "run", "MetaSchedule recorded no run_secs")
    if any(not (0 < s < _FAILED_RUN_SECS) for s in secs):
        return Outcome(Status.RUNTIME_ERROR, "run",
                       f"MetaSchedule recorded no successful run (run_secs {secs})")
    spread = median_and_spread(secs)[1] if len(secs) > 1 else None
    return Outcome(Status.CORRECT, latency_s=sum(secs) / len(secs), spread_s=spread)
