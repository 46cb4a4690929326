"""``Workload``: a named tensor program (a spec and its IRModule) and its identity.

It has a module of its own so that the spec parser (``specs``) and the model importer
(``models``), which build workloads, both depend on it and not on each other.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    import tvm

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """A named tensor program: its spec and its IRModule (one PrimFunc, ``main``).

    >>> from codegen.workloads import workload
    >>> workload("matmul(m=16,n=16,k=16)").identity == workload("matmul(k=16,n=16,m=16)").identity
    True
    """

    spec: str
    mod: Any

    @functools.cached_property
    def identity(self) -> str:
        """16 hex digits of the module's structural hash, the same in every process."""
        import tvm_ffi

        return f"{tvm_ffi.structural_hash(self.mod) & 0xFFFF_FFFF_FFFF_FFFF:016x}"

    @functools.cached_property
    def text_hash(self) -> str:
        """16 hex digits of the printed TVMScript: unlike the identity, it sees the block,
        buffer and loop names a script refers to (part of the measurement cache key)."""
        return hashlib.sha256(self.mod.script().encode()).hexdigest()[:16]

    def __str__(self) -> str:
        return self.spec


if TYPE_CHECKING:
    # What a ``workload`` parameter takes: a Workload, or an IRModule or PrimFunc (``as_module``).
    WorkloadLike: TypeAlias = Workload | tvm.IRModule | tvm.tirx.PrimFunc
