"""The ``dragon`` command line.

Exit codes (``dragon_dsl.cli_kit.ExitCode``): 0 success (or clean), 1 findings (check found
problems, fmt --check found unformatted files, a file failed to encode/decode), 2 usage errors
(bad arguments, unreadable files).  ``-`` reads standard input.  Other packages add
subcommands through the ``dragon.commands`` entry-point group: each entry is a function
``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

from .cli_kit import ExitCode, UsageError, read_source

__all__ = ["UsageError", "main", "read_source"]


def _workload(spec: str | None):
    """Resolve --workload through the ``dragon.workloads`` entry point (codegen provides it),
    so that the language package depends on nothing above it."""
    if spec is None:
        return None
    resolvers = list(metadata.entry_points(group="dragon.workloads"))
    if not resolvers:
        raise UsageError("--workload needs a workload library (the codegen package)")
    try:
        return resolvers[0].load()(spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# ---- check ---------------------------------------------------------------------------

def cmd_check(args) -> int:
    from .api import check

    wl = _workload(args.workload)
    results, failed = [], False
    for path in args.files:
        diagnostics = check(read_source(path), workload=wl, target=args.target)
        failed |= bool(diagnostics)
        results.append((path, diagnostics))
    if args.json:
        print(json.dumps([{"file": p, "ok": not d, "diagnostics": [x.as_dict() for x in d]}
                          for p, d in results], indent=2))
    else:
        for path, diagnostics in results:
            name = "<stdin>" if path == "-" else path
            for d in diagnostics:
                print(f"{name}:{d}")
            if not diagnostics and not args.quiet:
                print(f"{name}: ok")
    return ExitCode.FINDINGS if failed else ExitCode.OK


# ---- fmt -----------------------------------------------------------------------------

def cmd_fmt(args) -> int:
    from .api import format as format_script
    from .errors import DragonError

    status = ExitCode.OK
    for path in args.files:
        text = read_source(path)
        try:
            canonical = format_script(text)
        except DragonError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            status = ExitCode.FINDINGS
            continue
        if args.check:
            if canonical != text:
                print(f"{path}: not canonical (run `dragon fmt {path}`)")
                status = ExitCode.FINDINGS
        elif path == "-" or args.stdout:
            sys.stdout.write(canonical)
        elif canonical != text:
            Path(path).write_text(canonical, encoding="utf-8")
            print(f"{path}: formatted")
    return status


# ---- encode / decode -----------------------------------------------------------------

def cmd_encode(args) -> int:
    from .api import from_trace
    from .errors import DragonError

    try:
        data = json.loads(read_source(args.trace))
    except json.JSONDecodeError as exc:
        print(f"{args.trace}: not JSON: {exc}", file=sys.stderr)
        return ExitCode.FINDINGS
    wl = _workload(args.workload)
    try:
        trace = data if wl is None else _replay_tvm_json(data, wl)
        text = from_trace(trace, postproc=args.postproc, postproc_set=args.postproc_set)
    except DragonError as exc:
        print(f"{args.trace}: {exc}", file=sys.stderr)
        return ExitCode.FINDINGS
    sys.stdout.write(text)
    return ExitCode.OK


def _replay_tvm_json(data, wl):
    """TVM's own trace JSON (as a MetaSchedule database stores it, with plain numbers) gets its
    types back by replaying it on the workload, as TVM does."""
    from tvm.s_tir.schedule import Schedule, Trace

    from .errors import TraceError
    from .tvm_support import as_module, tvm_message

    sch = Schedule(as_module(wl))
    try:
        Trace.apply_json_to_schedule(data, sch)
    except Exception as exc:  # noqa: BLE001  TVM's error types
        raise TraceError(f"TVM cannot replay this trace on the workload: {tvm_message(exc)}") \
            from None
    return sch.trace


def cmd_decode(args) -> int:
    from .api import to_trace
    from .errors import DragonError
    from .tvm_bridge import trace_json

    wl = _workload(args.workload)
    try:
        trace = to_trace(read_source(args.script), workload=wl, target=args.target)
    except DragonError as exc:
        print(f"{args.script}: {exc}", file=sys.stderr)
        return ExitCode.FINDINGS
    json.dump(trace_json(trace), sys.stdout, indent=None if args.compact else 1)
    sys.stdout.write("\n")
    return ExitCode.OK


# ---- wiring --------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dragon", description="Dragon: scripts for TVM MetaSchedule traces.",
        epilog="Exit codes: " + ", ".join(f"{int(c)} {c.name.lower()}" for c in ExitCode)
        + ".  FILE '-' reads stdin.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("check", help="check scripts: syntax, semantics, and (with "
                       "--workload) that they apply")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--workload", help="workload spec, e.g. 'matmul(m=64,n=64,k=64)'")
    p.add_argument("--target", help="target (tag, JSON, 'llvm' or 'cuda'); needed for "
                   "`postproc auto`")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-q", "--quiet", action="store_true", help="print only findings")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("fmt", help="rewrite scripts in canonical form")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--check", action="store_true", help="only report files that would change")
    p.add_argument("--stdout", action="store_true", help="print instead of rewriting files")
    p.set_defaults(func=cmd_fmt)

    p = sub.add_parser("encode", help="trace JSON to a script: the typed form `dragon decode` "
                       "writes, or with --workload TVM's own (a MetaSchedule database's)")
    p.add_argument("trace", metavar="TRACE.json")
    p.add_argument("--workload", help="replay TVM's untyped trace JSON on this workload")
    p.add_argument("--postproc", choices=["explicit", "auto"], default="explicit")
    p.add_argument("--postproc-set", choices=["llvm", "cuda", "cuda-tensorcore", "hexagon"],
                   help="postprocessor set for --postproc auto (inferred when omitted)")
    p.set_defaults(func=cmd_encode)

    p = sub.add_parser("decode", help="script to TVM trace JSON")
    p.add_argument("script", metavar="SCRIPT")
    p.add_argument("--workload", help="workload spec (needed for `postproc auto`)")
    p.add_argument("--target", help="target (needed for `postproc auto`)")
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    p.set_defaults(func=cmd_decode)

    for entry in metadata.entry_points(group="dragon.commands"):
        entry.load()(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.USAGE
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"dragon: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
