"""Building a scheduled kernel into a loadable artifact, for llvm (CPU) and CUDA.

A CUDA build goes as far as this machine allows without a GPU: code generation, then ``nvcc``
to a cubin for the target's arch.  The artifact keeps the cubin beside the exported library,
and the measuring process loads that cubin instead of compiling the source again.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dragon_dsl.errors import DragonError

from ..targets import as_target, tvm_message

if TYPE_CHECKING:
    from ..targets import TargetLike

__all__ = ["Artifact", "BuildError", "build", "cuda_source", "compile_cubin"]


class BuildError(DragonError):
    """Lowering, code generation or the CUDA compiler failed."""


@dataclass(frozen=True)
class Artifact:
    """A built kernel on disk: ``library`` (exported module) and, for CUDA, ``cubin``."""

    library: str
    target_kind: str
    cubin: str | None = None
    source_sha: str | None = None  # sha256 of the CUDA source the cubin was compiled from


def build(mod, target: TargetLike, out_dir: str) -> Artifact:
    """Compile ``mod`` for ``target`` into ``out_dir``."""
    import tvm

    tgt = as_target(target)
    os.makedirs(out_dir, exist_ok=True)
    try:
        executable = tvm.compile(mod, target=tgt)
    except Exception as exc:  # noqa: BLE001  TVM's lowering and codegen errors
        raise BuildError(f"TVM cannot build the kernel: {tvm_message(exc)}") from None
    library = os.path.join(out_dir, "kernel.so")
    if tgt.kind.name != "cuda":
        executable.export_library(library)
        return Artifact(library, tgt.kind.name)
    source = cuda_source(executable)
    cubin = os.path.join(out_dir, "kernel.cubin")
    with open(cubin, "wb") as f:
        f.write(compile_cubin(source, tgt))
    executable.export_library(library)
    return Artifact(library, "cuda", cubin, _sha(source))


def cuda_source(executable) -> str:
    """The CUDA C source of a module built for a CUDA target."""
    for module in executable.mod.imports:
        if module.kind == "cuda":
            return module.inspect_source()
    raise BuildError("the built module holds no CUDA kernel")


def compile_cubin(source: str, target: TargetLike) -> bytes:
    """``nvcc`` the source to a cubin for the target's arch (no GPU needed)."""
    from tvm.support import nvcc

    tgt = as_target(target)
    arch = str(tgt.export().get("arch", "")) or None
    try:
        with tgt:
            return bytes(nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc",
                                           arch=arch))
    except Exception as exc:  # noqa: BLE001  nvcc's diagnostics come as RuntimeError
        lines = [ln for ln in str(exc).splitlines() if "error" in ln.lower()]
        raise BuildError("nvcc failed: " + ("; ".join(lines[:3]) or str(exc)[-300:])) from None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


_CUBINS: dict[str, bytes] = {}


def register_cubin(artifact: Artifact) -> None:
    """Make the CUDA runtime load the artifact's cubin when it meets the artifact's source.

    TVM's CUDA runtime compiles a source module on load through the global function
    ``tvm_callback_cuda_compile``; this one answers from the cubins built by the workers and
    compiles with nvcc only for a source it has not seen.
    """
    import tvm_ffi

    if artifact.cubin and artifact.source_sha:
        with open(artifact.cubin, "rb") as f:
            _CUBINS[artifact.source_sha] = f.read()

    def compile_callback(code, *_target):
        sha = _sha(code)
        if sha not in _CUBINS:
            import tvm

            _CUBINS[sha] = compile_cubin(code, tvm.target.Target.current(allow_none=True)
                                         or "cuda")
        return bytearray(_CUBINS[sha])

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_callback, override=True)
