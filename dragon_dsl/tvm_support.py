"""The few TVM helpers the language needs to replay a script, shared by every package above it:
modules and targets from what users pass, the short target names, TVM's own error sentence, and
a fast import of TVM's tensor intrinsics.  ``codegen.targets`` re-exports them for codegen.

>>> as_target("llvm").kind.name
'llvm'
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from .errors import DragonError

__all__ = ["TARGETS", "TargetError", "Unchecked", "as_module", "as_target",
           "import_tensor_intrinsics", "native_log", "postprocessors", "schedule_of",
           "tvm_message", "uses_tensor_intrinsics"]


class TargetError(DragonError, ValueError):
    """Not a target TVM knows: a bad tag, JSON dict or short name."""



def as_module(workload: Any):
    """An IRModule from an IRModule, a PrimFunc, or any object with a ``mod`` attribute."""
    import tvm

    mod = getattr(workload, "mod", workload)
    if isinstance(mod, tvm.tirx.PrimFunc):
        return tvm.IRModule({"main": mod})
    if isinstance(mod, tvm.IRModule):
        return mod
    raise TypeError(f"Expected an IRModule, PrimFunc or workload but got "
                    f"workload={type(workload).__name__}")


def schedule_of(workload: Any, **kwargs: Any):
    """A ``tvm.s_tir.schedule.Schedule`` of a private copy of the workload's module.  TVM's
    schedule works on the module it is given in place: annotating the root block, for one,
    rewrote the caller's module, so that the next script met a kernel with other loops (a
    sampled script corrupted the workload every later sample and measurement was given)."""
    import copy

    from tvm.s_tir.schedule import Schedule

    return Schedule(copy.deepcopy(as_module(workload)), **kwargs)


class Unchecked:
    """A ``Schedule``'s methods without TVM's Python argument checks (``type_checked``):
    for queries whose arguments are random variables the schedule itself handed out.

    Each checked call binds its signature and walks the type hints of every argument, and a
    ``Union`` argument formats an error message for each member it does not match before it
    finds the one it does: on a 28x28 conv2d those checks were 80% of what the schedule-aware
    sampler's per-statement answers cost (``LiveView.of``, 36 ms a statement).  The methods
    themselves are TVM's; a wrong argument still fails, in TVM's FFI, with its ``TypeError``.

    >>> Unchecked(schedule_of(module)).get_loops(block_rv)                  # doctest: +SKIP
    """

    __slots__ = ("sch",)
    _raw: dict[tuple[type, str], Any] = {}

    def __init__(self, sch: Any) -> None:
        self.sch = sch

    def __getattr__(self, name: str) -> Any:
        key = (type(self.sch), name)
        raw = Unchecked._raw.get(key)
        if raw is None:
            method = getattr(type(self.sch), name)
            raw = Unchecked._raw[key] = getattr(method, "__wrapped__", method)
        return raw.__get__(self.sch) if hasattr(raw, "__get__") else raw


def host_llvm() -> dict[str, Any]:
    """``llvm`` with this machine's CPU named (``mcpu``, as LLVM detects it: what clang's
    ``-mcpu=native`` picks), so that LLVM uses its vector units (AVX2, AVX-512); plain ``llvm``
    compiles for a generic x86-64 (SSE2).  The corpus and the cost model were measured on
    plain ``llvm``; ``docs/vs-metaschedule`` measures the difference."""
    from tvm.target import codegen

    target = {**TARGETS["llvm"], "mcpu": str(codegen.llvm_get_system_cpu())}
    missing = _features_not_enabled()
    if missing:  # a VM may name a CPU (znver4) whose AVX-512 its host does not pass through:
        target["mattr"] = [f"-{f}" for f in missing]  # such kernels die of SIGILL
    return target


# x86 features LLVM implies from a CPU name, spelled as Linux's /proc/cpuinfo spells them.
_X86_FEATURES = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512cd", "avx512dq",
                 "avx512vl")


def _features_not_enabled() -> list[str]:
    """The features of ``_X86_FEATURES`` this machine's kernel does not report (none off
    x86 Linux, where there is nothing to read)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")),
                         None)
    except OSError:
        return []
    if not flags or "sse2" not in flags:
        return []
    return [feat for feat in _X86_FEATURES if feat not in flags]


# Short target names: a target spec, or a function that makes one on this machine.  "cuda" is
# the H100 tag; which rules a search uses is a separate, explicit choice (the postprocessor set
# of ``postproc auto``), never derived from the arch.
TARGETS: dict[str, Any] = {
    "llvm": {"kind": "llvm", "num-cores": 2},
    "llvm-host": host_llvm,
    "cuda": "nvidia/nvidia-h100",
}


def as_target(target: Any):
    """A Target from a Target, a tag, a JSON dict or a short name (``TARGETS``)."""
    import tvm

    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, str) and target in TARGETS:
        target = TARGETS[target]() if callable(TARGETS[target]) else TARGETS[target]
    if isinstance(target, str | dict):
        try:
            return tvm.target.Target(target)
        except Exception as exc:  # noqa: BLE001  TVM's own error types
            raise TargetError(f"Expected a target tag or JSON dict but got target={target!r}: "
                              f"{tvm_message(exc)}") from None
    raise TargetError(f"Expected a Target, tag or JSON dict but got target={target!r}")


def tvm_message(exc: BaseException) -> str:
    # TVM puts the useful sentence last ("ScheduleError: ...", "ValueError: ...").
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def import_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (which every MetaSchedule TuneContext imports), six or
    so times faster than a plain import.

    The import parses hundreds of TVMScript intrinsics, and the parser asks
    ``inspect.getmodule`` about each code object; for objects without ``__module__`` that
    scans all of ``sys.modules`` every time (15-25 s per process, 90% of the import).  A file
    belongs to one module, so the answer is memoized per file for the duration of the import.
    """
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    original = inspect.getmodule
    memo: dict[str, Any] = {}

    def getmodule(obj, _filename=None):
        code = getattr(obj, "f_code", obj)
        key = _filename or getattr(code, "co_filename", None)
        if key is None or inspect.ismodule(obj) or getattr(obj, "__module__", None):
            return original(obj, _filename)
        if key not in memo:
            memo[key] = original(obj, _filename)
        return memo[key]

    inspect.getmodule = getmodule
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.getmodule = original


def uses_tensor_intrinsics(trace: Any) -> bool:
    """Whether a schedule's trace names a tensor intrinsic: a ``Tensorize``, or a block
    annotated for MetaSchedule's ``RewriteTensorize`` (``meta_schedule.auto_tensorize``), the
    only ways a schedule reaches TVM's registry of intrinsics."""
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "Tensorize":
            return True
        if kind == "Annotate" and inst.attrs and "tensorize" in str(inst.attrs[0]):
            return True
    return False


def postprocessors(mod: Any, target: Any, postproc_set: str, *, intrinsics: bool = True
                   ) -> list[Any]:
    """MetaSchedule's postprocessors of ``postproc_set`` (``"llvm"``, ``"cuda"`` ...),
    initialized for ``mod`` on ``target`` as a ``TuneContext`` initializes them.

    ``TuneContext``'s constructor imports every tensor intrinsic TVM has (seconds a process,
    ``import_tensor_intrinsics``), which a postprocessor needs only for a schedule that
    names one (``uses_tensor_intrinsics``).  With ``intrinsics=False`` the context is made
    by the constructor's own FFI call without that import: the schedule-aware sampler's
    holders and the builders, which postprocess one script after another on llvm, never pay
    it.  The postprocessors are the same objects either way (``tests/test_tvm_support.py``)."""
    from tvm.s_tir import meta_schedule as ms

    space = ms.space_generator.PostOrderApply(sch_rules=[], postprocs=postproc_set,
                                              mutator_probs={})
    if intrinsics:
        import_tensor_intrinsics()
        context = ms.TuneContext(mod=mod, target=as_target(target), space_generator=space,
                                 task_name="main", num_threads=1)
    else:
        from tvm.s_tir.meta_schedule import _ffi_api
        from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func

        context = ms.TuneContext.__new__(ms.TuneContext)
        context.__init_handle_by_constructor__(
            _ffi_api.TuneContext, as_module(mod), as_target(target), space, None, "main", 1,
            -1, get_logging_func(get_logger("tvm.s_tir.meta_schedule.tune_context")))
        _ffi_api.TuneContextInitialize(context)
    return list(context.space_generator.postprocs)


# TVM's C++ log line: "[22:42:39] /path/file.h:1261: Warning: message".
_NATIVE_LINE = re.compile(r"^\[\d{2}:\d{2}:\d{2}\] (?P<where>\S+:\d+): "
                          r"(?P<level>Warning|Error|Info|Debug): (?P<message>.*)$")
_NATIVE_LEVELS = {"Warning": logging.WARNING, "Error": logging.ERROR, "Info": logging.INFO,
                  "Debug": logging.DEBUG}
_NATIVE_SEEN: set[tuple[str, str]] = set()
LOG = logging.getLogger("tvm")


@contextlib.contextmanager
def native_log() -> Iterator[None]:
    """TVM's native log while the block runs, routed through ``logging`` (logger ``tvm``): TVM's
    C++ writes to file descriptor 2, so the descriptor is captured for the block, each kind of
    message (place and text) is logged once per process at its level, and any other output is
    written to standard error unchanged.  Legalizing a model's ``take`` prints the same warning
    once per gather, per import, per process otherwise.

    >>> with native_log():
    ...     pass
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            _route(capture.read().decode("utf-8", errors="replace"))


def _route(text: str) -> None:
    passed = []
    for line in text.splitlines(keepends=True):
        found = _NATIVE_LINE.match(line.rstrip("\n"))
        if found is None:
            passed.append(line)
            continue
        kind = (found["where"], found["message"])
        if kind not in _NATIVE_SEEN:
            _NATIVE_SEEN.add(kind)
            LOG.log(_NATIVE_LEVELS[found["level"]], "%s (%s)", found["message"], found["where"])
    if passed:
        sys.stderr.write("".join(passed))
        sys.stderr.flush()
