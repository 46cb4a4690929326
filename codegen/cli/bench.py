"""``dragon apply`` and ``dragon bench``: a script on a real kernel.

``dragon apply SCRIPT --workload SPEC`` prints the scheduled TVMScript, or the statement that
does not fit the kernel.  ``dragon bench SCRIPT... --workload SPEC`` builds, verifies and times
each script and the baselines (``codegen.bench.bench``), and prints one table.  Exit codes
(``ExitCode``): 0 ok, 1 a script failed (apply) or no script was correct (bench), 2 usage
errors.
"""

from __future__ import annotations

import json
import sys

from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
    format_latency,
    format_ratio,
    read_source,
)

from ..measure.config import MeasureConfig
from ..measured import BASELINES, UNTUNED, busy_warning

__all__ = ["format_table", "register"]


def _inputs(args, measure: bool = False) -> tuple:
    """The workload and target the flags name; UsageError when they name none, or (with
    ``measure``) a target this machine cannot measure on (num-cores it does not have)."""
    from ..measure.devices import create
    from ..targets import as_target
    from .workloads import cli_workload

    try:
        wl, target = cli_workload(args.workload), as_target(args.target)
        if measure:
            create(target)
        return wl, target
    except (ValueError, TypeError) as exc:  # a bad workload spec or target
        raise UsageError(str(exc)) from None


# ---- apply ---------------------------------------------------------------------------------

def cmd_apply(args) -> int:
    from ..measure.protocol import Applied, ApplyJob, WorkloadData
    from ..measure.worker import Worker, WorkerError
    from ..targets import target_dict

    if not args.timeout > 0:
        raise UsageError(f"Expected --timeout > 0 but got --timeout {args.timeout}")
    if args.memory_limit_mb < 1:
        raise UsageError(f"Expected --memory-limit-mb >= 1 but got --memory-limit-mb "
                         f"{args.memory_limit_mb}")
    text = read_source(args.script)
    wl, target = _inputs(args)
    name = "<stdin>" if args.script == "-" else args.script
    try:
        # TVM's schedule primitives can abort the process, hang, or take gigabytes.
        with Worker(memory_limit_mb=args.memory_limit_mb) as worker:
            reply = worker.call(ApplyJob(WorkloadData.of(wl), text, target_dict(target)),
                                timeout=args.timeout)
    except WorkerError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return ExitCode.FINDINGS
    if not isinstance(reply, Applied):
        where = f"{reply.line}:{reply.column}: " if reply.line else ""
        print(f"{name}:{where}{reply.status.value.replace('_', ' ')}: {reply.message}",
              file=sys.stderr)
        return ExitCode.FINDINGS
    print(reply.tvmscript)
    return ExitCode.OK


# ---- bench ---------------------------------------------------------------------------------


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def format_table(report) -> str:
    """The bench table: one row per baseline or script, speedups against each baseline (a tie
    when within the two timings' spread: ``1.03x (tie, spread 8%)``)."""
    names = report.baselines
    header = ["", "outcome", "max abs err", "median", "IQR"] + [f"vs {b}" for b in names]
    table = [header]
    for row in report.rows:
        o = row.outcome
        if o is None:  # a baseline that does not exist here
            table.append([row.name, "unavailable", "-", "-", "-"] + ["-"] * len(names))
            continue
        # A baseline beside itself is 1.00x by definition, not a tie the spread decides.
        speedups = [report.comparison(row.name, b) if b != row.name else
                    format_ratio(report.speedup(row.name, b)) for b in names]
        table.append([row.name, o.status.value + (" (cached)" if o.cached else ""),
                      _err(o.max_abs_error), format_latency(o.latency_s),
                      format_latency(o.spread_s)]
                     + [str(s) if s else "-" for s in speedups])
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_bench(args) -> int:
    from ..bench import bench

    def progress(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr, flush=True)

    names = [] if args.baselines == "none" else [b.strip() for b in args.baselines.split(",")]
    unknown = sorted(set(names) - set(BASELINES))
    if unknown:
        raise UsageError(f"Expected baselines from {list(BASELINES)} but got {unknown}")
    if not names and not args.scripts:
        raise UsageError("nothing to measure: give scripts, baselines, or both")
    if "metaschedule" in names and args.trials < 1:
        raise UsageError(f"Expected --trials >= 1 for the metaschedule baseline but got "
                         f"--trials {args.trials}")
    if args.builders is not None and args.builders < 1:
        raise UsageError(f"Expected --builders >= 1 but got --builders {args.builders}")
    config = config_from_args(MeasureConfig, args)
    scripts = {path: read_source(path) for path in args.scripts}
    wl, target = _inputs(args, measure=True)
    report = bench(wl, scripts, target, baselines=names, trials=args.trials, config=config,
                   cache=False if args.no_cache else None, builders=args.builders,
                   progress=progress)
    warning = busy_warning(report.comparisons)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        if warning:
            print(warning, file=sys.stderr)
    else:
        print(f"{report.workload} on {report.target} ({report.device}); "
              f"median of {config.repeat} repeats")
        print(format_table(report))
        for row in report.rows:
            message = row.unavailable if row.outcome is None else \
                ("" if row.outcome.ok else row.outcome.summary())
            if message:
                print(f"  {row.name}: {message}")
        if warning:
            print(warning)
    outcomes = [r.outcome for r in report.scripts]
    return ExitCode.OK if any(o and o.ok for o in outcomes) or not outcomes \
        else ExitCode.FINDINGS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "apply", help="apply a script to a workload and print the scheduled TVMScript",
        description="Apply a script to a workload (in a worker process) and print the "
                    "scheduled TVMScript, or the statement the kernel refuses.",
        **examples("dragon apply examples/bert_ffn_llvm_0.dragon "
                   "--workload 'dense(m=128,n=3072,k=768,bias=1,act=gelu)'",
                   "printf 'block \"C\" -> C\\n' | dragon apply - "
                   "--workload 'matmul(m=64,n=64,k=64)'"))
    p.add_argument("script", help="a .dragon file, or - for standard input")
    p.add_argument("--workload", required=True, help="a workload spec or TVMScript file")
    p.add_argument("--target", default="llvm",
                   help="llvm, llvm-host (this CPU's vector units), cuda, a tag or a JSON dict")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds the worker may take (default: 300)")
    p.add_argument("--memory-limit-mb", type=int, default=MeasureConfig.memory_limit_mb,
                   help="the worker is killed above this resident memory, in MiB "
                        f"(default: {MeasureConfig.memory_limit_mb})")
    p.set_defaults(func=cmd_apply)

    p = subparsers.add_parser(
        "bench", help="build, verify and time scripts against baselines",
        description="Build, verify and time scripts and baselines on one device in one "
                    "session; print a table of medians and speedups.",
        **examples("dragon bench examples/bert_ffn_llvm_*.dragon --workload "
                   "'dense(m=128,n=3072,k=768,bias=1,act=gelu)' --baselines unscheduled,default",
                   "dragon bench --workload 'matmul(m=256,n=256,k=256)' "
                   "--baselines unscheduled,metaschedule --trials 16 --json"))
    p.add_argument("scripts", nargs="*", help=".dragon files (- for standard input)")
    p.add_argument("--workload", required=True, help="a workload spec or TVMScript file")
    p.add_argument("--target", default="llvm",
                   help="llvm, llvm-host (this CPU's vector units), cuda, a tag or a JSON dict")
    p.add_argument("--baselines", default=",".join(UNTUNED),
                   help=f"comma-separated, from {','.join(BASELINES)}, or none "
                        f"(default: {','.join(UNTUNED)})")
    p.add_argument("--trials", type=int, default=64,
                   help="MetaSchedule trial budget (default: 64)")
    add_config_arguments(p, MeasureConfig, aliases={"run_timeout_s": ("--timeout",)})
    p.add_argument("--builders", type=int, default=None,
                   help="parallel build workers (default: one per core)")
    p.add_argument("--no-cache", action="store_true", help="measure again, ignoring the cache")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_bench)
