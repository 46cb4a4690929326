"""``dragon apply`` and ``dragon bench``: a script on a real kernel.

``dragon apply SCRIPT --workload SPEC`` prints the scheduled TVMScript, or the statement that
does not fit the kernel.  ``dragon bench SCRIPT... --workload SPEC`` builds, verifies and times
each script and the baselines, and prints one table.  Exit codes: 0 ok, 1 a script failed
(apply) or no script was correct (bench), 2 usage errors.
"""

from __future__ import annotations

import contextlib
import json
import sys

from dragon_dsl.cli import UsageError, read_source

__all__ = ["register"]

EXIT_OK, EXIT_FINDINGS = 0, 1  # usage errors raise UsageError: exit 2
BASELINES = ("unscheduled", "default", "metaschedule")


def _load(spec: str):
    from .workloads import workload

    return workload(spec)


# ---- apply ---------------------------------------------------------------------------------

def cmd_apply(args) -> int:
    from dragon_dsl.replay import as_target

    from .jobs import encode_workload
    from .targets import target_spec
    from .workers import JobCrashed, JobFailed, JobTimeout, Worker

    try:
        text = read_source(args.script)
        wl = _load(args.workload)
        spec = target_spec(as_target(args.target))
    except (ValueError, TypeError) as exc:  # a bad workload spec or target
        raise UsageError(str(exc)) from None
    name = "<stdin>" if args.script == "-" else args.script
    try:
        with Worker() as worker:  # TVM's schedule primitives can abort the process
            reply = worker.call({"job": "apply", "workload": encode_workload(wl),
                                 "script": text, "target": spec}, timeout=args.timeout)
    except (JobTimeout, JobCrashed, JobFailed) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    if reply["status"] != "applied":
        where = f"{reply['line']}:{reply['column']}: " if reply.get("line") else ""
        print(f"{name}:{where}{reply['status'].replace('_', ' ')}: {reply['message']}",
              file=sys.stderr)
        return EXIT_FINDINGS
    print(reply["tvmscript"])
    return EXIT_OK


# ---- bench ---------------------------------------------------------------------------------

def _baseline_modules(wl, target, names: list[str], trials: int, progress) -> tuple[dict, dict]:
    from . import baselines

    modules, missing = {}, {}
    for name in names:
        progress(f"baseline {name} ...")
        try:
            if name == "unscheduled":
                modules[name] = baselines.unscheduled(wl, target)
            elif name == "default":
                modules[name] = baselines.rule_based(wl, target)
            else:
                # tune_tir logs its task table to stdout; keep stdout for the result
                with contextlib.redirect_stdout(sys.stderr):
                    best = baselines.metaschedule_best(wl, target, trials=trials)
                modules[f"metaschedule({trials})"] = best.mod
        except baselines.BaselineUnavailable as exc:
            missing[name if name != "metaschedule" else f"metaschedule({trials})"] = str(exc)
    return modules, missing


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} us"


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def format_table(rows: list[tuple[str, object]], baseline_names: list[str]) -> str:
    """The bench table: one row per script or baseline, speedups against each baseline."""
    latency = {name: getattr(o, "latency_s", None) for name, o in rows}
    header = ["", "outcome", "max abs err", "median", "IQR"] + \
        [f"vs {b}" for b in baseline_names]
    table = [header]
    for name, outcome in rows:
        if isinstance(outcome, str):  # a baseline that does not exist here
            table.append([name, "unavailable", "-", "-", "-"] + ["-"] * len(baseline_names))
            continue
        status = outcome.status.value + (" (cached)" if outcome.cached else "")
        speedups = []
        for b in baseline_names:
            mine, theirs = outcome.latency_s, latency.get(b)
            speedups.append(f"{theirs / mine:.2f}x" if mine and theirs else "-")
        table.append([name, status, _err(outcome.max_abs_error), _ms(outcome.latency_s),
                      _ms(outcome.spread_s)] + speedups)
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_bench(args) -> int:
    from dragon_dsl.replay import as_target

    from .evaluate import Evaluator
    from .measure import MeasureConfig

    def progress(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr, flush=True)

    try:
        scripts = {path: read_source(path) for path in args.scripts}
        wl = _load(args.workload)
        target = as_target(args.target)
    except (ValueError, TypeError) as exc:  # a bad workload spec or target
        raise UsageError(str(exc)) from None
    names = [] if args.baselines == "none" else [b.strip() for b in args.baselines.split(",")]
    unknown = sorted(set(names) - set(BASELINES))
    if unknown:
        raise UsageError(f"Expected baselines from {list(BASELINES)} but got {unknown}")
    config = MeasureConfig(repeat=args.repeat, run_timeout_s=args.timeout)
    with Evaluator(target, config=config, cache=False if args.no_cache else None,
                   builders=args.builders) as ev:
        modules, missing = _baseline_modules(wl, target, names, args.trials, progress)
        progress(f"building and measuring {len(scripts)} script(s) and {len(modules)} "
                 f"baseline(s) on {ev.device} ...")
        base = ev.evaluate_modules(wl, modules) if modules else {}
        outcomes = ev.evaluate(wl, list(scripts.values()))
        device = ev.device
    rows: list[tuple[str, object]] = [*base.items(), *missing.items(),
                                      *zip(scripts, outcomes, strict=True)]
    if args.json:
        print(json.dumps({"workload": wl.spec, "target": str(target.kind.name),
                          "device": device,
                          "rows": [{"name": n, **(o.as_dict() if not isinstance(o, str)
                                                  else {"status": "unavailable", "message": o})}
                                   for n, o in rows]}, indent=2))
    else:
        print(f"{wl.spec} on {target.kind.name} ({device}); median of {args.repeat} repeats")
        print(format_table(rows, list(base)))
        for name, o in rows:
            message = o if isinstance(o, str) else ("" if o.ok else o.summary())
            if message:
                print(f"  {name}: {message}")
    return EXIT_OK if any(o.ok for o in outcomes) or not outcomes else EXIT_FINDINGS


def register(subparsers) -> None:
    p = subparsers.add_parser("apply", help="apply a script to a workload and print the "
                              "scheduled TVMScript")
    p.add_argument("script", help="a .dragon file, or - for standard input")
    p.add_argument("--workload", required=True, help="a workload spec or TVMScript file")
    p.add_argument("--target", default="llvm", help="llvm, cuda, a tag or a JSON dict")
    p.add_argument("--timeout", type=float, default=300.0)
    p.set_defaults(func=cmd_apply)

    p = subparsers.add_parser("bench", help="build, verify and time scripts against baselines")
    p.add_argument("scripts", nargs="*", help=".dragon files (- for standard input)")
    p.add_argument("--workload", required=True, help="a workload spec or TVMScript file")
    p.add_argument("--target", default="llvm", help="llvm, cuda, a tag or a JSON dict")
    p.add_argument("--baselines", default="unscheduled,default",
                   help=f"comma-separated, from {','.join(BASELINES)}, or none")
    p.add_argument("--trials", type=int, default=64, help="MetaSchedule trial budget")
    p.add_argument("--repeat", type=int, default=9, help="timed repeats per kernel")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to run one kernel")
    p.add_argument("--builders", type=int, default=None, help="parallel build workers")
    p.add_argument("--no-cache", action="store_true", help="measure again, ignoring the cache")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_bench)
