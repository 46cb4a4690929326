"""``dragon datagen --out DIR``: training data from MetaSchedule search.

    dragon datagen --preset tiny --out data/tiny
    dragon datagen --workload 'matmul(m=512,n=512,k=512)' --trials 64 --out data/mm
    dragon datagen --preset paper --out data/paper --ray-address auto
    dragon datagen --from-database tune_logs/ --out data/imported

Every candidate MetaSchedule measures goes through ``codegen.measure`` (isolated workers,
verified against the unscheduled kernel, timed, cached in ``DIR/cache.sqlite``) and becomes a
record; the construction and refinement datasets and their card are then built from the
records.  Rerunning the same command continues a run that was stopped.  Exit codes
(``ExitCode``): 0 done, 1 some task failed (recorded; the data of the others is written),
2 usage errors (a DIR that holds another run, a bad spec).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

from codegen.measure import Evaluator
from codegen.search.tune import SearchConfig
from codegen.targets import default_rules, target_dict
from codegen.workloads import sample_workloads
from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
    given_flags,
    parse_target,
)
from dragon_dsl.configs import layered
from training.cli.common import add_measure_arguments, measure_from_args
from training.datagen.examples import ExampleConfig
from training.datagen.records import DataError, RecordStore
from training.datagen.tasks import PRESETS, tasks_for

__all__ = ["register"]



def _tasks(args) -> tuple[list, dict[str, Any], Any, list[str], str]:
    """The run's tasks, the settings that define the run, its preset, the specs appended to it
    and what this command's ``--append`` added (``_with_appended``)."""
    chosen = PRESETS[args.preset] if args.preset else None
    try:  # the preset's search settings under the flags given
        search = layered(SearchConfig, {n: p.search for n, p in PRESETS.items()}, args.preset,
                         None, given_flags(SearchConfig, args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    target = args.target or (chosen.target if chosen else {"kind": "llvm", "num-cores": 2})
    tgt = parse_target(target)
    rules = args.rules or default_rules(tgt)
    if args.workload:
        specs = list(args.workload)
    elif args.sample is not None:
        try:
            specs = sample_workloads(args.sample, seed=args.workload_seed)
        except ValueError as exc:  # WorkloadError: a count that is not in 1..available
            raise UsageError(f"--sample {args.sample}: {exc}") from None
        if not specs:
            raise UsageError(f"Expected --sample >= 1 but got --sample {args.sample}")
    elif chosen:
        specs = chosen.specs(seed=args.workload_seed)
    else:
        raise UsageError("name the workloads: --preset, --workload SPEC or --sample N")
    if args.limit:
        specs = specs[:args.limit]
    specs, appended, note = _with_appended(args, specs)
    if args.grow is not None and args.grow < 0:
        raise UsageError(f"Expected --grow >= 0 but got --grow {args.grow}")
    time_limit = args.time_limit_s or (chosen.time_limit_s if chosen else 1800.0)
    try:
        tasks = tasks_for(specs, target, rules, search, time_limit)
    except ValueError as exc:  # WorkloadError
        raise UsageError(str(exc)) from None
    settings = {"preset": args.preset, "target": target_dict(tgt), "rules": rules,
                "search": dataclasses.asdict(search), "time_limit_s": time_limit,
                "holdout_families": list(chosen.holdout_families) if chosen else []}
    return tasks, settings, chosen, appended, note


def _with_appended(args, specs: list[str]) -> tuple[list[str], list[str], str]:
    """The command's specs followed by those appended to the run in ``--out`` (earlier
    ``--append``s, kept in its manifest, then this command's), the appended ones, and what
    ``--append`` added, to say once the manifest took it."""
    from codegen.workloads import canonical_spec
    from training.datagen.generate import appended_specs
    from training.datagen.tasks import expand_models

    try:
        specs = [canonical_spec(s) for s in specs]
    except ValueError as exc:  # WorkloadError
        raise UsageError(str(exc)) from None
    try:
        appended = appended_specs(args.out)
        new = expand_models(list(args.append or ()))
    except DataError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # WorkloadError, or a model spec that names no model
        raise UsageError(f"--append: {exc}") from None
    seen = set(specs) | set(appended)
    added = [s for s in dict.fromkeys(new) if s not in seen]
    note = ""
    if args.append:
        note = (f"--append: {len(added)} workload{'s' * (len(added) != 1)} added to the run's "
                "list" + (f" ({len(new) - len(added)} of those named were in it already)"
                          if len(added) < len(new) else ""))
    appended += added
    return specs + appended, appended, note


def _check_families(families: list[str] | None) -> None:
    from codegen.workloads import FAMILIES

    known = [*FAMILIES, "model"]
    unknown = [f for f in families or () if f not in known]
    if unknown:
        raise UsageError(f"--grow-families: no family {', '.join(map(repr, unknown))}; "
                         f"expected some of {', '.join(known)}")


def _estimated_work(task) -> float:
    """The order of ``--cheapest-first``: a task's estimated work (``work_estimate``)."""
    from training.datagen.tasks import work_estimate

    return work_estimate(task.workload, task.target)


def _measure_config(args, chosen):
    return measure_from_args(args, chosen.extra.get("measure", {}) if chosen else None)


def _rpc(args) -> dict[str, str] | None:
    """Where kernels run when not on the worker's own device: TVM's RPC tracker or server."""
    if args.rpc_tracker and args.rpc_server:
        raise UsageError("give --rpc-tracker (with --rpc-key) or --rpc-server, not both")
    if args.rpc_tracker:
        if not args.rpc_key:
            raise UsageError("--rpc-tracker needs --rpc-key (the device key servers register)")
        return {"tracker": args.rpc_tracker, "key": args.rpc_key}
    if args.rpc_server:
        return {"server": args.rpc_server}
    return None


def _pool(args, settings):
    from training.datagen.pool import LocalPool
    from training.datagen.ray_pool import RayPool

    if args.workers < 1:
        raise UsageError(f"Expected --workers >= 1 but got --workers {args.workers}")
    if args.ray_address:
        from training.datagen.ray_pool import RayUnreachable, check_address

        try:  # Ray itself retries an address nobody answers for ever, deaf to Ctrl-C
            check_address(args.ray_address)
        except RayUnreachable as exc:
            raise UsageError(f"--ray-address {exc}") from None
        return RayPool(args.ray_address, settings, retries=args.retries,
                       cpus_per_task=args.cpus_per_task)
    return LocalPool(args.workers, settings, retries=args.retries)


def cmd_datagen(args) -> int:
    from dragon_dsl.files import unwritable
    from training.datagen.generate import check_manifest, generate
    from training.datagen.runner import RunnerSettings

    out = args.out
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"{out} exists and is not a directory")
    problem = unwritable(out, folder=True)  # now, not after hours of search
    if problem:
        raise UsageError(f"--out {problem}")
    if args.from_database:
        if args.append:
            raise UsageError("--append adds workloads to a search run; --from-database imports "
                             "the workloads its database holds")
        return _from_database(args)
    tasks, settings, chosen, appended, note = _tasks(args)
    _check_families(args.grow_families)
    _example_config(args, settings["holdout_families"])
    measure = _measure_config(args, chosen)
    settings["measure"] = measure.fingerprint()
    if args.ray_address:  # builds on the node running the task, on the CPUs it reserved
        builders = args.builders or max(1, int(args.cpus_per_task))
    else:
        builders = args.builders or max(1, (os.cpu_count() or 1) // max(1, args.workers))
    runner = RunnerSettings(measure, builders=builders,
                            cache=os.path.join(os.path.abspath(out), "cache.sqlite"),
                            rpc=_rpc(args))
    if note:  # the manifest takes the longer list now, or the run is refused before any search
        try:
            check_manifest(out, settings, tasks, appended)
        except DataError as exc:
            raise UsageError(str(exc)) from None
        _say(note)
    pool = _pool(args, runner)
    print(f"datagen: {len(tasks)} workloads on {settings['target']['kind']} "
          f"({settings['rules']} rules), {settings['search']['trials']} trials each -> {out}",
          file=sys.stderr)
    try:
        report = generate(tasks, out, pool, settings=settings, retry_failed=args.retry_failed,
                          progress=not args.quiet, grow=args.grow,
                          order=_estimated_work if args.cheapest_first else None,
                          appended=appended, families=args.grow_families)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:  # the disk filled or the folder was taken away during the run
        print(f"dragon: cannot write to --out {out}: {exc.strerror or exc} "
              f"({exc.filename or out}); the tasks committed before stay, and the same "
              "command continues the run",
              file=sys.stderr)
        return ExitCode.FINDINGS
    print(f"datagen: {report.ran} tasks run ({report.failed} failed), {report.skipped} already "
          f"done; {report.records} candidates measured ({report.correct} correct) in "
          f"{report.seconds:.0f} s", file=sys.stderr)
    status = ExitCode.FINDINGS if report.failed else ExitCode.OK
    if args.pack:
        shards = RecordStore(out).pack()
        if shards:
            print(f"datagen: the committed tasks packed into {', '.join(shards)}",
                  file=sys.stderr)
    if not args.records_only:
        _build(args, out, settings.get("holdout_families", []))
    return status


def _example_config(args, holdout: list[str]):
    """The selection flags, checked before any search (a bad one is a usage error now, not
    after an hour of measuring)."""
    given = args.holdout_families not in (None, ())  # the flag's default is ()
    overrides = {} if given else {"holdout_families": tuple(holdout)}
    return config_from_args(ExampleConfig, args, **overrides)


def _build(args, out: str, holdout: list[str]) -> None:
    from training.datagen.build import build_datasets

    report = build_datasets(out, _example_config(args, holdout), progress=not args.quiet)
    print(report, file=sys.stderr)
    if args.json:
        print(json.dumps(report.examples.summary(), indent=1, sort_keys=True))


def _from_database(args) -> int:
    """Import a MetaSchedule database: one committed task per workload, re-measured unless
    ``--as-is``."""
    from training.datagen.from_database import database_records
    from training.datagen.generate import check_manifest

    out = args.out
    source = os.path.abspath(args.from_database)
    if not os.path.exists(source):
        raise UsageError(f"--from-database {args.from_database}: no such file or directory")
    _example_config(args, [])
    measure = None if args.as_is else _measure_config(args, None)
    settings = {"from_database": source, "as_is": bool(args.as_is), "target": args.target,
                "measure": measure.fingerprint() if measure else None,
                "holdout_families": []}
    store = RecordStore(out)
    imported = correct = changed = 0
    try:
        os.makedirs(out, exist_ok=True)
        check_manifest(out, settings, [])
        done = set(store.done())
    except DataError as exc:  # another run's DIR
        raise UsageError(str(exc)) from None
    try:
        evaluator = None
        if measure is not None:
            tgt = parse_target(args.target or {"kind": "llvm", "num-cores": 2})
            evaluator = Evaluator(tgt, config=measure, builders=args.builders,
                                  cache=os.path.join(os.path.abspath(out), "cache.sqlite"))
        try:
            groups = database_records(source, measure=evaluator, specs=args.workload or (),
                                      skip=done, progress=None if args.quiet else _say)
            for group in groups:
                store.commit(group.summary(), group.records)
                imported += len(group.records)
                correct += sum(r.correct for r in group.records)
                changed += sum(r.message.startswith("not as-is") for r in group.records)
        finally:
            if evaluator is not None:
                evaluator.close()
    except DataError as exc:
        print(f"dragon: {exc}", file=sys.stderr)
        return ExitCode.FINDINGS
    print(f"datagen: {imported} records imported ({correct} correct, "
          f"{'as-is, unverified' if args.as_is else 'measured again'}) from {source}",
          file=sys.stderr)
    if changed:
        print(f"datagen: {changed} record(s) not as-is: TVM's replay changed a decision, so "
              "the database's latency belongs to another schedule; recorded as apply_error "
              "(import without --as-is to measure what they replay to)", file=sys.stderr)
    if not args.records_only:
        _build(args, out, [])
    return ExitCode.FINDINGS if changed else ExitCode.OK


def _say(message: str) -> None:
    print(f"datagen: {message}", file=sys.stderr, flush=True)


def register(subparsers) -> None:
    """Add ``dragon datagen`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "datagen", help="build training data from MetaSchedule search",
        description="Search workloads with MetaSchedule (evolutionary search, XGBoost cost "
                    "model), measuring every candidate with our verified measurement; write "
                    "the records, then construction and refinement datasets (Hugging Face "
                    "datasets) with their card.  Rerun the same command to continue a run.",
        **examples("dragon datagen --preset tiny --out data/tiny",
                   "dragon datagen --workload 'matmul(m=512,n=512,k=512)' --trials 64 "
                   "--out data/mm",
                   "dragon datagen --preset paper --out data/paper --ray-address auto",
                   "dragon datagen --from-database tune_logs/ --out data/imported",
                   "dragon datagen --preset tiny --sample 1000 --out corpus/llvm --grow 10 "
                   "--cheapest-first --append 'model(name=bert,preset=base)'"))
    p.add_argument("--out", required=True, metavar="DIR", help="where records, datasets and "
                   "the card go; rerunning with the same DIR continues the run")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="; ".join(f"{k}: {v.description}" for k, v in PRESETS.items()))
    p.add_argument("--workload", action="append", metavar="SPEC",
                   help="a workload to search (repeatable; instead of the preset's)")
    p.add_argument("--sample", type=int, metavar="N",
                   help="search N workloads drawn from real-model shapes")
    p.add_argument("--workload-seed", type=int, default=0,
                   help="seed of the drawn workloads (default: 0)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N workloads")
    p.add_argument("--append", action="append", metavar="SPEC",
                   help="add this workload to the run's list (repeatable; a whole model, "
                        "'model(name=bert,preset=base)', adds each of its tasks); kept in the "
                        "run's manifest, so later runs of the same command include it")
    p.add_argument("--target", help="a target tag or JSON (default: the preset's, else llvm)")
    p.add_argument("--rules", help="the MetaSchedule rule set (default: the target's)")
    p.add_argument("--time-limit-s", type=float,
                   help="seconds of search per workload; the round in progress finishes "
                        "(default: the preset's, else 1800)")
    add_config_arguments(p, SearchConfig, layered=True)
    add_measure_arguments(p, preset=True)
    p.add_argument("--workers", type=int, default=1,
                   help="tasks run at once on this machine (default: 1)")
    p.add_argument("--builders", type=int,
                   help="build processes per worker (default: cores / workers)")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="run the tasks on a Ray cluster ('auto', 'HOST:PORT', or 'local' to "
                        "start one here) instead of local workers")
    p.add_argument("--cpus-per-task", type=float, default=1.0,
                   help="Ray CPUs each task reserves (default: 1)")
    p.add_argument("--rpc-tracker", metavar="HOST:PORT",
                   help="measure on devices behind TVM's RPC tracker (codegen.measure.remote)")
    p.add_argument("--rpc-key", help="the device key of --rpc-tracker's servers")
    p.add_argument("--rpc-server", metavar="HOST:PORT", help="measure on one RPC server")
    p.add_argument("--retries", type=int, default=1,
                   help="times a crashed or overrunning task is retried before it is recorded "
                        "as failed (default: 1)")
    p.add_argument("--grow", type=int, metavar="N",
                   help="run only N of the workloads not yet done, then stop (the run's "
                        "workload list stays whole: the same command grows it by N more); 0 "
                        "searches nothing and builds the datasets from the records kept")
    p.add_argument("--cheapest-first", action="store_true",
                   help="run the workloads not yet done in order of their estimated work "
                        "(FLOPs of the unscheduled kernel, float16 on a CPU costing more), not "
                        "in the list's order: a corpus grown a few workloads a session gets "
                        "the most measured workloads from its hours")
    p.add_argument("--grow-families", nargs="+", metavar="FAMILY",
                   help="run only the workloads of these operator families this time (with "
                        "--grow: the families a corpus has fewest of; the run's list stays "
                        "whole)")
    p.add_argument("--pack", action="store_true",
                   help="after the run, move the committed tasks' records into compressed "
                        "shards of 100 tasks (OUT/shards/*.jsonl.gz, read as before): for a "
                        "corpus kept in version control")
    p.add_argument("--retry-failed", action="store_true",
                   help="run again the tasks an earlier run recorded as failed")
    p.add_argument("--records-only", action="store_true",
                   help="measure and record; do not build the datasets")
    p.add_argument("--from-database", metavar="DIR",
                   help="import a MetaSchedule JSON database (tune_tir's work_dir) instead of "
                        "searching")
    p.add_argument("--as-is", action="store_true",
                   help="with --from-database: take the database's latencies as they are "
                        "(unverified: verified=false) instead of measuring every script again "
                        "(--workload SPEC names the workloads the database holds)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true",
                   help="print the datasets' summary (examples per task and split) as JSON")
    add_config_arguments(p, ExampleConfig)
    p.set_defaults(func=cmd_datagen)
