"""The public functions: parse, format, from_trace, to_trace, check."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ast import Dict, Expr, IndexMapValue, Program
from .codec import decode_program, encode_insts
from .errors import DragonError, DslSemanticError, DslSyntaxError, TraceError
from .limits import Limits
from .parser import parse
from .printer import format_program
from .tvm_bridge import Inst, insts_from_json, insts_from_trace, trace_from_insts

__all__ = ["Diagnostic", "Encoded", "NeedsWorkload", "check", "encode", "format", "from_trace",
           "infer_postproc_set", "parse", "to_schedule", "to_trace", "to_tvm_json"]


def format(text_or_program: str | bytes | Program, *,  # noqa: A001  (the API's name)
           limits: Limits | None = None) -> str:
    """The canonical text of a script.

    >>> format('loops C ->i,j\\nblock "C"->C')
    'loops C -> i, j\\nblock "C" -> C\\n'
    """
    program = text_or_program if isinstance(text_or_program, Program) else \
        parse(text_or_program, limits=limits)
    try:
        return format_program(program)
    except RecursionError:
        raise DslSyntaxError("expressions are nested too deeply") from None


def infer_postproc_set(insts: list[Inst], target: Any = None) -> str:
    """Which postprocessor set a trace was searched with, from the target when given, else
    from the trace: tensor-core intrinsics mean cuda-tensorcore, thread bindings cuda."""
    if target is not None:
        from .tvm_support import as_target

        if as_target(target).kind.name != "cuda":
            return "llvm"
    tensor_core = bound = False
    for inst in insts:
        if inst.kind == "EnterPostproc":
            break
        key = inst.attrs[0] if inst.kind == "Annotate" and inst.attrs else None
        if inst.kind == "Tensorize" or key in ("meta_schedule.auto_tensorize",):
            tensor_core = True
        if inst.kind == "Bind" or (isinstance(key, str) and "thread_extent" in key):
            bound = True
    if tensor_core:
        return "cuda-tensorcore"
    return "cuda" if bound or target is not None else "llvm"


def _insts(trace) -> list[Inst]:
    if isinstance(trace, list | tuple):  # trace JSON, as written by trace_json
        return insts_from_json(trace)
    if not hasattr(trace, "insts") or not hasattr(trace, "get_decision"):
        from .tvm_bridge import json_preview

        raise TraceError(f"Expected a Trace or trace JSON [instructions, decisions] but got "
                         f"trace={json_preview(trace)}")
    return insts_from_trace(trace)


@dataclass(frozen=True)
class Encoded:
    """What ``encode`` wrote, and how it wrote the post-processing (the instructions after
    EnterPostproc).

    ``postproc`` is ``"none"`` (the trace has none), ``"explicit"`` (written instruction by
    instruction), ``"verified"`` (``postproc auto SET``, and regenerating it for the workload
    and target gives back the trace's instructions exactly) or ``"trusted"`` (``postproc auto
    SET`` without that check).  ``note`` says why ``postproc="auto"`` was not honoured.
    """

    text: str
    postproc: str
    note: str = ""


def encode(trace, *, postproc: str = "explicit", postproc_set: str | None = None,
           workload: Any = None, target: Any = None, trust_postproc: bool = False,
           typed: bool = True) -> Encoded:
    """A TVM Trace (or its typed JSON form) as a canonical script, saying how its
    post-processing was written.

    Given the workload, the trace must replay on it exactly (TraceError naming the first
    instruction TVM refuses or whose decision it would change), and loops are named after the
    workload's loops (``i``, ``j``, ``k``, and ``i0..i3`` for the tiles of ``i``); otherwise
    ``l<N>``.  ``postproc="auto"`` replaces the instructions after EnterPostproc by
    ``postproc auto SET`` (SET is ``postproc_set``, else ``infer_postproc_set``) when
    regenerating them for the workload and target gives them back exactly; without a workload
    and target that cannot be checked, and the instructions stay explicit unless
    ``trust_postproc`` (for traces straight from MetaSchedule, whose post-processing is
    MetaSchedule's by construction).  ``typed=False`` says the trace came from TVM's untyped
    JSON (``dragon_dsl.replay.replay_tvm_json``), which records no types: the regenerated
    post-processing is then compared with it without types.

    >>> encode([[["EnterPostproc", [], [], []]], []], postproc="auto").postproc
    'explicit'
    """
    insts = _insts(trace)
    if postproc not in ("explicit", "auto"):
        raise ValueError(f"Expected postproc='explicit' or 'auto' but got postproc={postproc!r}")
    has_postproc = any(i.kind == "EnterPostproc" for i in insts)
    loop_names = None
    if workload is not None:
        from .replay import replay_exactly

        loop_names = replay_exactly(trace if not isinstance(trace, list | tuple)
                                    else _build(insts), workload)

    def explicit(note: str = "") -> Encoded:
        text = format_program(encode_insts(insts, postproc="explicit", loop_names=loop_names))
        return Encoded(text, "explicit" if has_postproc else "none", note)

    if postproc == "explicit" or not has_postproc:
        return explicit()
    if postproc_set is None:
        postproc_set = infer_postproc_set(insts, target)
    text = format_program(encode_insts(insts, postproc="auto", postproc_set=postproc_set,
                                       loop_names=loop_names))
    if workload is None or target is None:
        if trust_postproc:
            return Encoded(text, "trusted")
        return explicit("the post-processing was kept explicit: checking that `postproc "
                        "auto` gives it back needs the workload and the target")
    from .tvm_bridge import trace_json, tvm_json

    as_json = trace_json if typed else tvm_json
    expected = list(trace) if isinstance(trace, list | tuple) else as_json(trace)
    try:
        if as_json(to_trace(text, workload=workload, target=target)) == expected:
            return Encoded(text, "verified")
    except DragonError:
        pass
    return explicit(f"the post-processing was kept explicit: it is not what MetaSchedule's "
                    f"{postproc_set!r} postprocessors generate for this workload and target")


def from_trace(trace, *, postproc: str = "explicit", postproc_set: str | None = None,
               workload: Any = None, target: Any = None) -> str:
    """A TVM Trace (or its typed JSON form) as a canonical script, for traces straight from
    MetaSchedule: like ``encode(..., trust_postproc=True).text``, except that a trace that does
    not replay on ``workload`` still encodes (its loops named ``l<N>``).

    Given the workload, loops are named after the workload's loops (``i``, ``j``, ``k``, and
    ``i0..i3`` for the tiles of ``i``); otherwise ``l<N>``.
    ``postproc="auto"`` replaces the instructions after EnterPostproc by ``postproc auto SET``.
    SET is ``postproc_set`` when given, else inferred (``infer_postproc_set``).  Given a
    workload and target, the elision is verified by regenerating the postprocessing, and the
    explicit form is kept when it does not reproduce the trace exactly; without them it is
    trusted (``encode`` says which happened, and by default keeps unverified post-processing
    explicit).
    """
    insts = _insts(trace)
    if postproc == "auto" and postproc_set is None:
        postproc_set = infer_postproc_set(insts, target)
    loop_names = None
    if workload is not None and not isinstance(trace, list | tuple):
        from .replay import loop_names_of

        loop_names = loop_names_of(trace, workload)
    text = format_program(encode_insts(insts, postproc=postproc, postproc_set=postproc_set,
                                       loop_names=loop_names))
    if postproc == "auto" and workload is not None and target is not None and \
            any(i.kind == "EnterPostproc" for i in insts):
        from .tvm_bridge import trace_json

        expected = trace_json(trace) if not isinstance(trace, list | tuple) else trace
        try:
            regenerated = to_trace(text, workload=workload, target=target)
            if trace_json(regenerated) == expected:
                return text
        except DragonError:
            pass
        return format_program(encode_insts(insts, postproc="explicit", loop_names=loop_names))
    return text


def _decode(text: str | bytes | Program, limits: Limits | None = None):
    program = text if isinstance(text, Program) else parse(text, limits=limits)
    decoded = decode_program(program)
    if decoded.errors:
        raise decoded.errors[0]
    return program, decoded


class NeedsWorkload(DslSemanticError):
    """``postproc auto`` cannot be decoded without the workload and target (``dragon decode``
    says which flags to give; the API says which arguments)."""


def to_trace(text: str | bytes | Program, *, workload: Any = None, target: Any = None,
             limits: Limits | None = None):
    """Decode a script into the exact TVM Trace it stands for.

    ``workload`` and ``target`` are needed only for ``postproc auto``.
    """
    program, decoded = _decode(text, limits)
    trace = _build(decoded.insts)
    if decoded.postproc_set is None:
        return trace
    if workload is None or target is None:
        stmt = program.statements[-1]
        lines = (program.source or "").split("\n")
        raise NeedsWorkload(
            f"`postproc auto {decoded.postproc_set}` needs the workload and target to "
            "regenerate the postprocessing: pass workload= and target=",
            line=stmt.line, column=stmt.column,
            source_line=lines[stmt.line - 1] if stmt.line and stmt.line <= len(lines) else None)
    from .replay import apply_insts, regenerate_postproc

    apply_insts(decoded.insts, trace, workload, program.source)
    return regenerate_postproc(trace, workload, target, decoded.postproc_set)


def to_tvm_json(text: str | bytes | Program, *, workload: Any = None, target: Any = None,
                limits: Limits | None = None):
    """Decode a script into TVM's own trace JSON (``tvm_bridge.tvm_json``): what
    ``Trace.as_json()`` gives, with plain numbers, ready for ``json.dump``; what
    ``Trace.apply_json_to_schedule`` reads and a MetaSchedule JSON database record holds.

    ``workload`` and ``target`` are needed only for ``postproc auto``.  TVM's JSON records no
    types; ``trace_json(to_trace(...))`` is the typed form.

    >>> to_tvm_json('block "C" -> C')
    [[['GetSBlock', [], ['C', 'main'], ['b0']]], []]
    """
    from .tvm_bridge import tvm_json

    return tvm_json(to_trace(text, workload=workload, target=target, limits=limits))


def to_schedule(text: str | bytes | Program, *, workload: Any, target: Any = "llvm",
                limits: Limits | None = None):
    """Replay a script on a workload: the ``tvm.s_tir.schedule.Schedule`` it produces.

    Raises ``DslSyntaxError`` for text that is not a script and ``DslSemanticError`` (with
    line and column) at the statement the workload refuses.  ``target`` matters only for
    ``postproc auto``, whose postprocessing is regenerated for it and replayed as
    MetaSchedule replays a database record.

    >>> import tvm
    >>> from tvm import te
    >>> a = te.placeholder((8,), name="A")
    >>> b = te.compute((8,), lambda i: a[i] * 2.0, name="B")
    >>> sch = to_schedule('block "B" -> B', workload=te.create_prim_func([a, b]))
    >>> sch.get(sch.get_sblock("B")).name_hint
    'B'
    """

    from .replay import apply_insts, regenerate_postproc
    from .tvm_support import schedule_of

    program, decoded = _decode(text, limits)
    trace = _build(decoded.insts)
    sch = apply_insts(decoded.insts, trace, workload, program.source)
    if decoded.postproc_set is None:
        return sch
    try:
        full = regenerate_postproc(trace, workload, target, decoded.postproc_set)
        sch = schedule_of(workload)
        full.apply_to_schedule(sch, remove_postproc=False)
    except DragonError:
        raise
    except Exception as exc:  # noqa: BLE001  TVM's replay raises what its checks raise
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        raise DragonError(f"the script applied, but its trace does not replay with "
                          f"postprocessing as MetaSchedule replays a record: "
                          f"{lines[-1] if lines else type(exc).__name__}") from None
    return sch


def _build(insts: list[Inst]):
    try:
        return trace_from_insts(insts)
    except DragonError:
        raise
    except Exception as exc:  # noqa: BLE001  TVM rejects a malformed value
        from .tvm_support import tvm_message

        raise TraceError(f"TVM cannot build this trace: {tvm_message(exc)}") from None


@dataclass(frozen=True)
class Diagnostic:
    """One finding of ``check``: fields for tools, ``str()`` for people."""

    stage: str  # "syntax", "semantic" or "apply"
    message: str
    line: int | None = None
    column: int | None = None
    expected: list[str] = field(default_factory=list)
    snippet: str = ""
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.line}:{self.column}: " if self.line is not None else ""
        text = f"{where}{self.severity}: {self.message}"
        if self.expected:
            text += "\n  expected one of: " + ", ".join(self.expected)
        if self.snippet:
            text += "\n" + "\n".join("  " + ln for ln in self.snippet.splitlines())
        return text

    def as_dict(self) -> dict:
        return {"stage": self.stage, "severity": self.severity, "message": self.message,
                "line": self.line, "column": self.column, "expected": self.expected}


def _diagnostic(exc: DragonError, stage: str) -> Diagnostic:
    return Diagnostic(stage, getattr(exc, "reason", str(exc)), getattr(exc, "line", None),
                      getattr(exc, "column", None), list(getattr(exc, "expected", [])),
                      getattr(exc, "snippet", ""))


def _has_expressions(value) -> bool:
    """Whether a value holds an expression or index map: the only values TVM's constructors
    check (operand dtypes), so the only reason ``check`` needs TVM without a workload."""
    if isinstance(value, Expr | IndexMapValue):
        return True
    if isinstance(value, tuple):
        return any(_has_expressions(v) for v in value)
    if isinstance(value, Dict):
        return any(_has_expressions(k) or _has_expressions(v) for k, v in value.items)
    return False


def check(text: str | bytes, *, workload: Any = None, target: Any = None,
          limits: Limits | None = None) -> list[Diagnostic]:
    """Everything wrong with a script: syntax, then semantics (undefined names, wrong arity,
    types), then, given a workload, whether it applies to it.  Empty when clean.

    Without a workload, TVM is imported only for scripts with expressions or index maps (whose
    operand dtypes TVM checks), so a check of most scripts takes milliseconds.

    >>> [d.message for d in check('loops C -> i')]
    ["'C' is not defined"]
    """
    try:
        program = parse(text, limits=limits)
    except DslSyntaxError as exc:
        return [_diagnostic(exc, "syntax")]
    decoded = decode_program(program)
    if decoded.errors:
        return [_diagnostic(e, "semantic") for e in decoded.errors]
    try:
        format_program(program)  # what cannot be printed back is reported, not raised later
    except (DragonError, RecursionError) as exc:
        return [Diagnostic("syntax", str(exc) if isinstance(exc, DragonError)
                           else "expressions are nested too deeply")]
    if workload is None and not any(
            _has_expressions(v) for inst in decoded.insts
            for v in (*inst.inputs, *inst.attrs, inst.decision)):
        return []
    try:
        _build(decoded.insts)
    except DragonError as exc:
        return [_diagnostic(exc, "semantic")]
    if workload is None:
        return []
    from .live import apply_script

    # Statement by statement, as the schedule-aware sampler applies a script: what it rolls
    # back is what is reported here.
    if decoded.postproc_set is not None and target is None:
        return [Diagnostic("apply", "`postproc auto` needs a target to check against")]
    try:
        apply_script(program.source or "", workload, target)
    except DragonError as exc:
        return [_diagnostic(exc, "apply")]
    return []
