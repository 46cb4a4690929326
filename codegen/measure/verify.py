"""Numerical correctness: fresh random inputs, the unscheduled kernel as the reference, poisoned
output buffers, and tolerances per dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..workloads.inspect import blocks, index_extents, main_func

if TYPE_CHECKING:
    from ..workloads.workload import WorkloadLike

__all__ = ["Comparison", "Param", "TOLERANCES", "compare", "make_inputs", "params_of", "poison"]

# (rtol, atol) per output dtype; atol is scaled by the reference's mean magnitude (at least 1),
# so a sum over thousands of terms is judged relative to its size.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-3, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]
    dtype: str
    output: bool
    index_extent: int | None = None  # indices into an axis of this extent (a gather's)


def params_of(workload: WorkloadLike) -> list[Param]:
    """The kernel's parameters, with the outputs being those some block writes (the last
    parameter when no block says)."""
    func = main_func(workload)
    written = [buffer for block in blocks(func) for buffer in block.writes]
    indices = index_extents(func)
    out = []
    for param in func.params:
        shape = tuple(int(d) for d in param.shape)
        is_output = any(param.same_as(w) for w in written)
        out.append(Param(str(param.name), shape, str(param.dtype), is_output,
                         indices.get(str(param.name))))
    if not any(p.output for p in out):
        out[-1] = Param(out[-1].name, out[-1].shape, out[-1].dtype, True)
    return out


def make_inputs(params: list[Param], seed: int) -> list[np.ndarray]:
    """Random non-zero inputs: magnitudes in [0.25, 1] with random signs (small integers for
    integer dtypes), so that a kernel that skips or zeroes a term cannot pass by luck; indices
    (``Param.index_extent``) are random within the axis they index."""
    rng = np.random.default_rng(seed)
    arrays = []
    for p in params:
        if p.output:
            arrays.append(poison(p.shape, p.dtype))
        elif p.index_extent is not None:
            arrays.append(rng.integers(0, p.index_extent, size=p.shape).astype(p.dtype))
        elif np.issubdtype(np.dtype(p.dtype), np.integer):
            low = 1 if np.dtype(p.dtype).kind == "u" else -8
            values = rng.integers(low, 9, size=p.shape)
            values[values == 0] = 1
            arrays.append(values.astype(p.dtype))
        else:
            signs = rng.choice(np.array([-1.0, 1.0]), size=p.shape)
            arrays.append((signs * rng.uniform(0.25, 1.0, size=p.shape)).astype(p.dtype))
    return arrays


def poison(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An output buffer filled with a value no correct kernel leaves behind: NaN for floats,
    the most negative value for integers."""
    if np.issubdtype(np.dtype(dtype), np.floating):
        return np.full(shape, np.nan, dtype=dtype)
    return np.full(shape, np.iinfo(np.dtype(dtype)).min, dtype=dtype)


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs_error: float
    max_rel_error: float
    unwritten: int
    message: str


def compare(outputs: list[np.ndarray], references: list[np.ndarray]) -> Comparison:
    """Compare a kernel's outputs with the reference's, element by element."""
    worst_abs = worst_rel = 0.0
    unwritten = 0
    failures = []
    for index, (out, ref) in enumerate(zip(outputs, references, strict=True)):
        if out.shape != ref.shape:
            return Comparison(False, float("inf"), float("inf"), 0,
                              f"output {index} has shape {out.shape}, expected {ref.shape}")
        hole = poison((), str(ref.dtype))
        if np.issubdtype(ref.dtype, np.floating):
            left = np.isnan(out) & ~np.isnan(ref)
        else:
            left = (out == hole) & (ref != hole)
        unwritten += int(left.sum())
        o, r = out.astype(np.float64), ref.astype(np.float64)
        diff = np.abs(o - r)
        diff[np.isnan(diff) & np.isnan(r) & np.isnan(o)] = 0.0
        diff[np.isnan(diff)] = np.inf
        if diff.size:
            worst_abs = max(worst_abs, float(diff.max()))
            worst_rel = max(worst_rel, float((diff / np.maximum(np.abs(r), 1e-12)).max()))
        rtol, atol = TOLERANCES.get(str(ref.dtype), (0.0, 0.0))
        scale = max(1.0, float(np.nanmean(np.abs(r)))) if r.size else 1.0
        bad = diff > atol * scale + rtol * np.abs(np.nan_to_num(r))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            failures.append(f"output {index}: {int(bad.sum())} of {bad.size} elements differ "
                            f"(first at {first}: got {o[first]:g}, expected {r[first]:g})")
    message = "; ".join(failures)
    if unwritten:
        message = f"{unwritten} output elements were never written; " + message
    return Comparison(not failures, worst_abs, worst_rel, unwritten, message.rstrip("; "))
