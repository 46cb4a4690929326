"""``dragon optimize MODEL``: every task of a whole Relax model, a MetaSchedule database, and
the model measured end to end.

    dragon optimize 'model(name=bert,preset=tiny)' --budget 200
    dragon optimize my_model.json --database my_model.database --json

MODEL is a model spec without ``task=`` (the project's zoo, ``codegen.workloads.model_zoo``)
or a Relax IRModule file: ``tvm.ir.save_json`` output (``.json``) or TVMScript defining one
``@I.ir_module`` class (``.py``), legalized and fused as the zoo's models are.  Each task is
optimized as ``dragon optimize`` optimizes a kernel (``training.optimize.model``); the best
scripts go to a MetaSchedule JSON database (``--database``) that TVM's
``MetaScheduleApplyDatabase`` reads.  Exit codes: 0 the database holds at least one schedule
and both end-to-end builds ran correctly, 1 otherwise, 2 usage errors.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from codegen.cli.workloads import MAX_SCRIPT_BYTES
from codegen.measure import Evaluator
from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    config_from_args,
    format_latency,
    text_table,
)
from dragon_dsl.files import write_atomic
from training.cli.common import load_model

__all__ = ["check_writable", "format_model_report", "is_whole_model", "load_whole_model",
           "run_optimize_model"]


def check_writable(path: str, *, folder: bool = False, flag: str = "--out") -> None:
    """A UsageError now, not after the run, when ``path`` cannot be written
    (``dragon_dsl.files.unwritable``)."""
    from dragon_dsl.files import unwritable

    problem = unwritable(path, folder=folder)
    if problem:
        raise UsageError(f"{flag} {problem}")


def is_whole_model(arg: str) -> bool:
    """A model spec without ``task=``, or a ``.json`` file (a ``.py`` file is a model when it
    defines a Relax function, see ``load_whole_model``)."""
    if re.fullmatch(r"\s*model\((.*)\)\s*", arg):
        return not re.search(r"(^|[(,])\s*task\s*=", arg)
    return arg.endswith(".json") or (arg.endswith(".py") and _defines_relax(arg))


def _defines_relax(path: str) -> bool:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")[:1_000_000]
    except OSError:
        return False
    return "@R.function" in text


def load_whole_model(arg: str) -> tuple[str, Any, list]:
    """The label, the prepared Relax module and the tasks of MODEL; UsageError naming what is
    wrong with it."""
    from codegen.workloads.model_zoo import MODELS
    from codegen.workloads.models import (
        import_model,
        model_spec,
        module_tasks,
        parse_model_spec,
    )
    from codegen.workloads.relax_files import load_module_file

    if arg.strip().startswith("model("):
        try:
            kw = parse_model_spec(arg, task=False)
        except ValueError as exc:
            raise UsageError(f"{arg}: {exc}") from None
        name, preset = kw["name"], kw["preset"]
        seq = kw.get("seq", MODELS[name].presets[preset].seq)
        batch = kw.get("batch", 1)
        mod = import_model(name, preset, batch, seq)
        tasks = module_tasks(mod, spec_of=lambda i: model_spec(name, preset, i, batch, seq))
        label = f"{name}-{preset}" + ("" if batch == 1 else f"-b{batch}") + \
            ("" if "seq" not in kw else f"-s{seq}")
        return label, mod, tasks
    path = Path(arg)
    if not path.is_file():
        raise UsageError(f"cannot read the Relax module {arg}: "
                         f"{'not a regular file' if path.exists() else 'no such file'}")
    if path.stat().st_size > 64 * MAX_SCRIPT_BYTES:
        raise UsageError(f"cannot read {arg}: larger than {64 * MAX_SCRIPT_BYTES} bytes")
    try:
        mod = load_module_file(arg)
        tasks = module_tasks(mod, spec_of=lambda i: f"module(path={arg},task={i})")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not tasks:
        raise UsageError(f"{arg}: the module has no PrimFunc to tune")
    return path.stem, mod, tasks


def format_model_report(result) -> str:
    """The tasks, then the end-to-end rows, for people: speedups are ties when within the two
    timings' spread (``codegen.measured.compare``), with one line when any is."""
    from codegen.measured import busy_warning, compare

    budget = f", budget {result.budget}" if result.budget is not None else ""
    lines = [f"{result.model} on {result.target} ({result.device}): {len(result.tasks)} tasks"
             f"{budget}, {result.wall_s:.0f} s", ""]
    rows = [["task", "weight", "unscheduled", "best", "speedup", "measurements", "in database",
             "MetaSchedule best"]]
    comparisons = []
    for i, t in enumerate(result.tasks):
        comparison = t.result.comparison("unscheduled")
        comparisons.append(comparison)
        kept = t.result.winner not in (None, "best")  # a baseline was faster: keep it
        rows.append([f"{i} {t.name}", str(t.weight),
                     format_latency(t.unscheduled_s), format_latency(t.result.latency_s),
                     "-" if comparison is None else str(comparison),
                     str(t.result.measurements),
                     "yes" if t.in_database else
                     (f"no ({t.result.winner} faster)" if kept else "no"),
                     format_latency(t.metaschedule_best_s)])
    lines += text_table(rows)
    lines += ["", f"database: {result.database} ({result.records} of {len(result.tasks)} tasks "
                  "scheduled)", ""]
    if not result.end_to_end:
        lines.append("end to end: not measured (--e2e-rounds 0)")
        warning = busy_warning(comparisons)
        return "\n".join([*lines, warning] if warning else lines)
    lines.append("end to end (median of interleaved runs):")
    spent = {"before": "0", "dragon": str(result.measurements),
             "metaschedule": str(result.metaschedule_measurements)}
    names = {"before": "before (default build)", "dragon": "dragon",
             "metaschedule": "MetaSchedule, equal measurements"}
    rows = [["build", "latency", "speedup", "measurements", "status"]]
    for name, e in result.end_to_end.items():
        comparison = compare(result.end_to_end.get("before"), e)
        if name != "before":
            comparisons.append(comparison)
        rows.append([names.get(name, name), format_latency(e.latency_s),
                     "-" if comparison is None else
                     (str(comparison) if name != "before" else f"{comparison.speedup:.2f}x"),
                     spent.get(name, "-"),
                     "correct" if e.ok else
                     f"{e.status}: {(e.message.splitlines() or [''])[0]}"[:120]])
    lines += ["  " + ln for ln in text_table(rows)]
    warning = busy_warning(comparisons)
    return "\n".join([*lines, warning] if warning else lines)


def run_optimize_model(args, target, config, sampling, measure, path: str,
                       cost_model=None, corpus=None) -> int:
    """What ``dragon optimize`` runs for a whole model (flags parsed and checked)."""
    from training.optimize.kernel import OptimizeError
    from training.optimize.model import ModelOptimizeConfig, optimize_model

    if args.refine:
        raise UsageError("--refine: a whole model has no one script to refine")
    model_config = config_from_args(ModelOptimizeConfig, args)

    def outputs(label: str) -> tuple[str, str]:
        """--out and --database, checked writable (before the model is loaded when given)."""
        out = args.out or f"{label}.optimize.json"
        if Path(out).is_dir() or not Path(out).resolve().parent.is_dir():
            raise UsageError(f"--out {out}: not a file in an existing directory")
        check_writable(out)
        database = args.database or str(Path(out).with_suffix("")) + ".database"
        if Path(database).exists() and not Path(database).is_dir():
            raise UsageError(f"--database {database}: not a directory")
        check_writable(database, folder=True, flag="--database")
        return out, database

    if args.out is not None:
        outputs("model")
    elif args.database is not None:
        check_writable(args.database, folder=True, flag="--database")
    label, mod, tasks = load_whole_model(args.workload)
    out, database = outputs(label)

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    with Evaluator(target, config=measure, cache=False, builders=args.builders) as ev, \
            contextlib.redirect_stdout(sys.stderr):
        try:
            result = optimize_model(None, None, label, mod, tasks, database=database,
                                    evaluator=ev, config=config, model_config=model_config,
                                    sampling=sampling, measure=measure,
                                    progress=not args.quiet, say=say,
                                    loader=lambda: load_model(path), cost_model=cost_model,
                                    corpus=corpus)
        except OptimizeError as exc:
            raise UsageError(f"--budget: {exc}") from None
    lost = None
    try:
        write_atomic(out, json.dumps(result.as_dict(), indent=2))
    except OSError as exc:  # checked writable at the start; the disk filled since
        lost = f"could not write --out {out}: {exc.strerror or exc}"
    if args.json:
        print(json.dumps({**result.as_dict(), "out": None if lost else out}, indent=2))
    else:
        print(format_model_report(result) + ("" if lost else f"\nwritten to {out}"))
    if lost:
        print(f"dragon: {lost}; the result is printed on stdout (add --json for all of it)",
              file=sys.stderr)
        return ExitCode.FINDINGS
    ok = result.records > 0 and all(e.ok for e in result.end_to_end.values())
    return ExitCode.OK if ok else ExitCode.FINDINGS
