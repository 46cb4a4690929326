"""The ``dragon`` command line.

Exit codes (``dragon_dsl.cli_kit.ExitCode``): 0 success (or clean), 1 findings (check found
problems, fmt --check found unformatted files, a file failed to encode/decode), 2 usage errors
(bad arguments, unreadable or oversized input; with several files, the others are still
processed and reported), 130 interrupted.  ``-`` reads standard input.  Every failure is one
``dragon: ...`` or ``FILE:LINE:COL: ...`` message, never a traceback.  Input is bounded by
``dragon_dsl.limits.Limits`` (``--max-bytes`` and friends).

Other packages add subcommands through the ``dragon.commands`` entry-point group: each entry
is a function ``register(subparsers)``.  They are loaded only when the command line names one
of them (or asks for the full help), so that ``check``, ``fmt``, ``encode`` and ``decode``
start in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import metadata

from . import cli_kit
from .cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    parse_target,
    read_source,
)
from .limits import Limits

__all__ = ["BUILTIN_COMMANDS", "UsageError", "build_parser", "main", "read_source"]

BUILTIN_COMMANDS = ("check", "fmt", "encode", "decode")
# The Limits fields that bound what is read and parsed (the others bound `check --workload`).
_INPUT_LIMITS = ("max_bytes", "max_names", "max_list", "max_depth")


def _entry_points(group: str) -> list:
    return list(metadata.entry_points(group=group))


def _workload(spec: str | None):
    """Resolve --workload through the ``dragon.workloads`` entry point (codegen provides it),
    so that the language package depends on nothing above it."""
    if spec is None:
        return None
    resolvers = _entry_points("dragon.workloads")
    if not resolvers:
        raise UsageError("--workload needs a workload library (the codegen package)")
    try:
        return resolvers[0].load()(spec)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _located(name: str, exc: BaseException) -> str:
    """``FILE:LINE:COL: reason`` (with what was expected and the caret) for located errors,
    ``FILE: message`` for the others."""
    line = getattr(exc, "line", None)
    if line is None:
        return f"{name}: {exc}"
    text = f"{name}:{line}:{getattr(exc, 'column', None) or 1}: {exc.reason}"  # type: ignore[attr-defined]
    if getattr(exc, "expected", None):
        text += "\n  expected one of: " + ", ".join(exc.expected)  # type: ignore[attr-defined]
    snippet = getattr(exc, "snippet", "")
    if snippet:
        text += "\n" + "\n".join("  " + ln for ln in snippet.splitlines())
    return text


def _limits(args) -> Limits:
    return config_from_args(Limits, args)


# ---- check ---------------------------------------------------------------------------

def cmd_check(args) -> int:
    from .api import Diagnostic, check

    limits = _limits(args)
    if args.workload is None and args.target is not None:
        parse_target(args.target)  # a bad --target is a usage error even when nothing needs it
    results: list[tuple[str, list[Diagnostic] | None, str]] = []
    texts: dict[int, str] = {}
    for path in args.files:
        try:
            text = read_source(path, max_bytes=limits.max_bytes)
        except UsageError as exc:
            print(f"dragon: {exc}", file=sys.stderr)
            results.append((path, None, str(exc)))
            continue
        found = check(text, limits=limits)
        if not found and args.workload is not None:
            texts[len(results)] = text
        results.append((path, found, ""))
    if args.workload is not None:  # also for nothing to apply: a bad spec is a usage error
        applied = _check_on_workload(list(texts.values()), args, limits)
        for index, on_workload in zip(texts, applied, strict=True):
            results[index] = (results[index][0], on_workload, "")
    if args.json:
        print(json.dumps([{"file": p, "ok": d == [],
                           "diagnostics": [x.as_dict() for x in d or []],
                           **({"error": e} if e else {})} for p, d, e in results], indent=2))
    else:
        for path, diagnostics, _ in results:
            for finding in diagnostics or []:
                print(f"{_name(path)}:{finding}")
            if diagnostics == [] and not args.quiet:
                print(f"{_name(path)}: ok")
    if any(d is None for _, d, _ in results):
        return ExitCode.USAGE
    return ExitCode.FINDINGS if any(d for _, d, _ in results) else ExitCode.OK


def _check_on_workload(texts: list[str], args, limits: Limits) -> list:
    """The apply stage of ``check`` in a worker process, within ``--workload-timeout-s`` and
    ``--workload-memory-mb`` (TVM's schedule primitives can abort, hang or take gigabytes):
    through the ``dragon.check_workload`` entry point, which codegen provides."""
    from .api import Diagnostic
    from .parser import parse

    checkers = _entry_points("dragon.check_workload")
    if not checkers:
        raise UsageError("--workload needs a workload library (the codegen package)")
    results: list[list[Diagnostic] | None] = [None] * len(texts)
    pending = []
    for i, text in enumerate(texts):
        last = parse(text, limits=limits).statements[-1:]
        if args.target is None and last and last[0].op == "postproc" and last[0].args:
            results[i] = [Diagnostic("apply", "`postproc auto` needs a target to check "
                                              "against (--target)", last[0].line,
                                     last[0].column)]
        else:
            pending.append(i)
    try:  # with nothing pending too: a bad spec or target is a usage error all the same
        found = checkers[0].load()([texts[i] for i in pending], args.workload, args.target,
                                   timeout_s=limits.workload_timeout_s,
                                   memory_mb=limits.workload_memory_mb)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for i, diagnostics in zip(pending, found, strict=True):
        results[i] = diagnostics
    return results


# ---- fmt -----------------------------------------------------------------------------

def cmd_fmt(args) -> int:
    from .api import format as format_script
    from .errors import DragonError
    from .files import write_atomic

    limits = _limits(args)
    status = ExitCode.OK
    unreadable = False
    for path in args.files:
        try:
            text = read_source(path, max_bytes=limits.max_bytes)
        except UsageError as exc:
            print(f"dragon: {exc}", file=sys.stderr)
            unreadable = True
            continue
        try:
            canonical = format_script(text, limits=limits)
        except DragonError as exc:
            print(_located(_name(path), exc), file=sys.stderr)
            status = ExitCode.FINDINGS
            continue
        if args.check:
            if canonical != text:
                print(f"{_name(path)}: not canonical (run `dragon fmt {path}`)")
                status = ExitCode.FINDINGS
        elif path == "-" or args.stdout:
            sys.stdout.write(canonical)
        elif canonical != text:
            try:
                write_atomic(path, canonical)
            except OSError as exc:
                print(f"dragon: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
                unreadable = True
                continue
            print(f"{path}: formatted")
    return ExitCode.USAGE if unreadable else status


# ---- encode / decode -----------------------------------------------------------------

def _load_json(text: str, limits: Limits):
    """The JSON value of a trace file; a UsageError-free TraceError when it is not JSON, nests
    deeper than the limit allows, or has an integer Python refuses to read."""
    from .errors import TraceError

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"not JSON: {exc}") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise TraceError(f"not a trace: {str(exc).split(';')[0]}") from None
    except RecursionError:
        raise TraceError(f"JSON nests more than {limits.max_depth} deep (--max-depth)") \
            from None
    # A trace is [instructions, decisions], an instruction [kind, inputs, attrs, outputs]:
    # four levels above the values, which nest at most max_depth deep.
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > limits.max_depth + 4:
            raise TraceError(f"JSON nests more than {limits.max_depth} deep (--max-depth)")
        if isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
    return data


def _typed(data) -> bool:
    """Whether trace JSON can be read without a workload: the typed form ``dragon decode
    --typed`` writes (sampled traces always hold ``{"IntImm": ...}`` objects there, and TVM's
    own JSON never holds any object), a trace with no numbers (both forms write it alike), or
    something that is no trace at all (reported as such)."""
    if not (isinstance(data, list) and len(data) == 2
            and all(isinstance(part, list) for part in data)):
        return True
    numbers = False
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            return True
        if isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            numbers = True
    return not numbers


def cmd_encode(args) -> int:
    from .api import encode
    from .errors import DragonError
    from .replay import replay_tvm_json
    from .tvm_bridge import insts_from_json

    limits = _limits(args)
    name = _name(args.trace)
    text = read_source(args.trace, max_bytes=limits.max_bytes)
    wl = _workload(args.workload)
    target = parse_target(args.target)
    try:
        data = _load_json(text, limits)
        typed = _typed(data)
        if not typed and wl is None:
            insts_from_json(data)  # a malformed trace is reported as such, in either form
    except DragonError as exc:
        print(_located(name, exc), file=sys.stderr)
        return ExitCode.FINDINGS
    if not typed and wl is None:
        # TVM gives its JSON types only by replaying it on a schedule of the workload.
        raise UsageError(f"{name} is TVM's own trace JSON, which records no types (an IntImm "
                         "and a plain int are both a number): pass --workload, on which TVM's "
                         "replay restores them (or encode the typed form, `dragon decode "
                         "--typed`)")
    try:
        trace = data if typed else replay_tvm_json(data, wl)
        encoded = encode(trace, postproc=args.postproc, postproc_set=args.postproc_set,
                         workload=wl, target=target, typed=typed)
    except DragonError as exc:
        print(_located(name, exc), file=sys.stderr)
        return ExitCode.FINDINGS
    if encoded.note:
        print(f"dragon: note: {name}: {encoded.note}", file=sys.stderr)
    sys.stdout.write(encoded.text)
    return ExitCode.OK


def cmd_decode(args) -> int:
    from .api import NeedsWorkload, to_trace
    from .errors import DragonError
    from .tvm_bridge import trace_json, tvm_json

    limits = _limits(args)
    name = _name(args.script)
    text = read_source(args.script, max_bytes=limits.max_bytes)
    wl = _workload(args.workload)
    target = parse_target(args.target)
    try:
        trace = to_trace(text, workload=wl, target=target, limits=limits)
    except NeedsWorkload as exc:
        raise UsageError(f"{name}:{exc.line}:{exc.column}: `{exc.source_line or 'postproc auto'}`"
                         " needs --workload and --target to regenerate the post-processing") \
            from None
    except DragonError as exc:
        print(_located(name, exc), file=sys.stderr)
        return ExitCode.FINDINGS
    as_json = trace_json if args.typed else tvm_json
    json.dump(as_json(trace), sys.stdout, indent=None if args.compact else 1)
    sys.stdout.write("\n")
    return ExitCode.OK


# ---- wiring --------------------------------------------------------------------------

def _version() -> str:
    try:
        return metadata.version("little-dragon")
    except metadata.PackageNotFoundError:
        return "unknown"


def _sub(sub, name: str, *, help: str, description: str, examples: list[str]):  # noqa: A002
    return sub.add_parser(name, help=help, description=description, **cli_kit.examples(*examples))


def build_parser(*, plugins: bool = True) -> argparse.ArgumentParser:
    """The ``dragon`` parser; ``plugins=False`` leaves out the subcommands of the
    ``dragon.commands`` entry points (the built-in ones start faster without them)."""
    parser = argparse.ArgumentParser(
        prog="dragon", description="Dragon: scripts for TVM MetaSchedule traces.",
        epilog="Exit codes: " + ", ".join(f"{int(c)} {c.name.lower()}" for c in ExitCode)
        + ".  FILE '-' reads stdin.  `dragon COMMAND --help` shows a command's flags and "
        "examples.")
    parser.add_argument("--version", action="version", version=f"dragon {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _sub(sub, "check", help="check scripts: syntax, semantics, and (with --workload) that "
             "they apply",
             description="Check scripts: syntax and semantics, and with --workload that they "
                         "apply to the kernel (in a worker process, within --workload-timeout-s "
                         "and --workload-memory-mb).  Exit 0 clean, 1 findings, 2 unreadable "
                         "input or bad flags (the other files are still checked).",
             examples=["dragon check script.dragon",
                       "dragon check *.dragon --workload 'matmul(m=128,n=128,k=128)' "
                       "--target llvm --json"])
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--workload", help="workload spec, e.g. 'matmul(m=64,n=64,k=64)'")
    p.add_argument("--target", help="target (tag, JSON, 'llvm' or 'cuda'); needed for "
                   "'postproc auto'")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-q", "--quiet", action="store_true", help="print only findings")
    add_config_arguments(p, Limits)
    p.set_defaults(func=cmd_check)

    p = _sub(sub, "fmt", help="rewrite scripts in place in canonical form",
             description="Rewrite each FILE in place in its canonical form (atomically; a file "
                         "already canonical is left alone).  '-' and --stdout print instead; "
                         "--check only reports.",
             examples=["dragon fmt script.dragon", "dragon fmt --check examples/*.dragon",
                       "cat script.dragon | dragon fmt -"])
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--check", action="store_true", help="only report files that would change")
    p.add_argument("--stdout", action="store_true", help="print instead of rewriting files")
    add_config_arguments(p, Limits, only=_INPUT_LIMITS)
    p.set_defaults(func=cmd_fmt)

    p = _sub(sub, "encode", help="trace JSON to a script",
             description="Trace JSON to a script.  Either form is read, without being told "
                         "which: TVM's own ('dragon decode' by default, Trace.as_json(), a "
                         "MetaSchedule database record's trace), which records no types and so "
                         "needs --workload (TVM's replay on it restores them, and must be "
                         "exact); or the typed form ('dragon decode --typed'), which needs "
                         "nothing.  --postproc auto writes 'postproc auto SET' only where "
                         "regenerating the post-processing for --workload and --target gives "
                         "it back exactly; otherwise it stays explicit and a note on stderr "
                         "says why.",
             examples=["dragon encode typed.json",
                       "dragon encode trace.json --workload 'matmul(m=128,n=128,k=128)' "
                       "--target llvm --postproc auto"])
    p.add_argument("trace", metavar="TRACE.json")
    p.add_argument("--workload", help="the trace's workload: names loops after it, checks that "
                   "the trace replays exactly; needed for TVM's own (untyped) trace JSON")
    p.add_argument("--target", help="target, to verify --postproc auto")
    p.add_argument("--postproc", choices=["explicit", "auto"], default="explicit",
                   help="write the post-processing instruction by instruction, or as "
                   "'postproc auto SET' where verified (default: explicit)")
    p.add_argument("--postproc-set", choices=["llvm", "cuda", "cuda-tensorcore", "hexagon"],
                   help="postprocessor set for --postproc auto (inferred when omitted)")
    add_config_arguments(p, Limits, only=_INPUT_LIMITS)
    p.set_defaults(func=cmd_encode)

    p = _sub(sub, "decode", help="script to TVM trace JSON",
             description="Decode a script into the exact TVM trace it stands for, as TVM's own "
                         "JSON (Trace.as_json(), what Trace.apply_json_to_schedule reads and a "
                         "MetaSchedule database record holds), or with --typed as the typed "
                         "form, which keeps every value's TVM type.  'dragon encode' reads "
                         "both.",
             examples=["dragon decode script.dragon > trace.json",
                       "dragon decode script.dragon --typed > typed.json",
                       "dragon decode script.dragon --workload 'matmul(m=128,n=128,k=128)' "
                       "--target llvm --compact"])
    p.add_argument("script", metavar="SCRIPT")
    p.add_argument("--workload", help="workload spec (needed for 'postproc auto')")
    p.add_argument("--target", help="target (needed for 'postproc auto')")
    p.add_argument("--typed", action="store_true", help="write the typed form "
                   '({"IntImm": [dtype, value]} and friends) instead of TVM\'s JSON')
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    add_config_arguments(p, Limits, only=_INPUT_LIMITS)
    p.set_defaults(func=cmd_decode)

    if plugins:
        for entry in _entry_points("dragon.commands"):
            try:
                entry.load()(sub)
            except Exception as exc:  # noqa: BLE001  a broken or half-installed package
                print(f"dragon: note: the '{entry.name}' subcommands are unavailable: "
                      f"{type(exc).__name__}: {exc}", file=sys.stderr)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand the arguments name (the first one not starting with '-')."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(plugins=_command(argv) not in BUILTIN_COMMANDS)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help and --version
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
    except BrokenPipeError:  # `dragon ... | head`: the reader is gone; nothing left to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # and no second error when stdout is flushed
        return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
