"""Guard regions around every kernel argument, so that verification sees what a kernel does
outside its buffers.

All the arguments of the verification run live in one allocation on the device:
``[guard][arg 0][guard][arg 1]...[guard]``, each argument aligned as TVM expects.  After the
run, any guard byte that changed is an out-of-bounds write, and any input byte that changed is a
write into an input.  Verification runs the kernel twice, with two fills of the guards:

- ``POISON``: 0xFF bytes, NaN in every float dtype and -1 in integers, so that an out-of-bounds
  read that reaches an output poisons it;
- a seeded random fill: bytes below 0x40 (finite, small values in every float dtype), different
  in every guard region.  NaN arithmetic carries a NaN's bit pattern unchanged, so a kernel that
  reads a poisoned guard and writes the result out of bounds can leave a poisoned guard exactly
  as it was; no computation of the inputs gives back random bytes of another region.

The timed run uses ordinary tensors: the guards cost nothing there and the timed build is not
instrumented.

Views into the allocation are handed to TVM through DLPack with their own data pointers (TVM's
calling convention wants ``byte_offset == 0``), so this works on any device whose memory TVM
can address from this process (CPU, CUDA); not over RPC.

>>> import numpy as np, tvm
>>> args = GuardedArgs([np.ones(3, "float32"), np.zeros(2, "int8")], tvm.cpu())
>>> args.tensors[1].numpy().tolist(), args.check(outputs=[1]).clean
([0, 0], True)
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

__all__ = ["FILLS", "GUARD_BYTE", "POISON", "GuardReport", "GuardedArgs", "guard_size"]

GUARD_BYTE = 0xFF
POISON = None  # the fill of 0xFF bytes; any other fill is the seed of a random one
# The two fills every verification runs with: poison, then random bytes (seed 1).
FILLS: tuple[int | None, ...] = (POISON, 1)
_RANDOM_BELOW = 0x40  # every float dtype reads bytes below 0x40 as finite values
_ALIGN = 256  # bytes; TVM's kernels assume 64-byte aligned buffers, CUDA prefers 256


def guard_size(nbytes: int) -> int:
    """Bytes of guard after a buffer of ``nbytes``: an eighth of it, from 4 KiB to 1 MiB."""
    size = min(max(4096, nbytes // 8), 1 << 20)
    return -(-size // _ALIGN) * _ALIGN


@dataclass(frozen=True)
class GuardReport:
    """What the kernel did outside its outputs: bytes changed in guards, per argument index
    (the guard after it; index -1 is the guard before the first), and inputs it wrote."""

    out_of_bounds: dict[int, int] = field(default_factory=dict)
    inputs_written: dict[int, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.out_of_bounds and not self.inputs_written

    def message(self, names: list[str]) -> str:
        parts = []
        for index, count in sorted(self.out_of_bounds.items()):
            where = f"before {names[0]}" if index < 0 else f"past the end of {names[index]}"
            parts.append(f"wrote {count} bytes {where}")
        parts += [f"wrote into the input {names[i]} ({count} bytes changed)"
                  for i, count in sorted(self.inputs_written.items())]
        return "; ".join(parts)

    @property
    def bytes_changed(self) -> int:
        return sum(self.out_of_bounds.values()) + sum(self.inputs_written.values())


class GuardedArgs:
    """``arrays`` copied into one guarded allocation on ``dev``, the guards filled with ``fill``
    (``POISON``, or the seed of a random fill); ``tensors`` are the views the kernel is called
    with, valid while this object lives."""

    def __init__(self, arrays: list[np.ndarray], dev, fill: int | None = POISON) -> None:
        import tvm

        self.arrays = [np.ascontiguousarray(a) for a in arrays]
        first = guard_size(0)
        self.offsets, position = [], first
        self.guards = [(0, first)]  # (start, end) of every guard region
        for a in self.arrays:
            self.offsets.append(position)
            end = position + a.nbytes
            guard_end = -(-(end + guard_size(a.nbytes)) // _ALIGN) * _ALIGN
            self.guards.append((end, guard_end))
            position = guard_end
        if fill is POISON:
            self.before = np.full(position, GUARD_BYTE, dtype=np.uint8)
        else:
            rng = np.random.default_rng(fill)
            self.before = rng.integers(0, _RANDOM_BELOW, size=position, dtype=np.uint8)
        for a, offset in zip(self.arrays, self.offsets, strict=True):
            self.before[offset:offset + a.nbytes] = a.reshape(-1).view(np.uint8)
        self.base = tvm.runtime.empty((position,), "uint8", dev)
        self.base.copyfrom(self.before)
        self.tensors = [_view(self.base, offset, a.shape, str(a.dtype))
                        for a, offset in zip(self.arrays, self.offsets, strict=True)]

    def results(self) -> list[np.ndarray]:
        """Every argument as it is now (copied back from the device)."""
        after = self.base.numpy()
        return [after[o:o + a.nbytes].view(a.dtype).reshape(a.shape)
                for a, o in zip(self.arrays, self.offsets, strict=True)]

    def check(self, outputs: list[int]) -> GuardReport:
        """Guard bytes and input bytes the run changed; ``outputs`` are the argument indices
        the kernel may write."""
        after = self.base.numpy()
        out_of_bounds = {}
        for index, (start, end) in enumerate(self.guards):
            changed = int(np.count_nonzero(after[start:end] != self.before[start:end]))
            if changed:
                out_of_bounds[index - 1] = changed
        written = {}
        for index, (a, offset) in enumerate(zip(self.arrays, self.offsets, strict=True)):
            if index in outputs:
                continue
            region = slice(offset, offset + a.nbytes)
            changed = int(np.count_nonzero(after[region] != self.before[region]))
            if changed:
                written[index] = changed
        return GuardReport(out_of_bounds, written)


# ---- DLPack views with their own data pointer ------------------------------------------------

class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}  # kDLInt, kDLUInt, kDLFloat, kDLBool
_KEEP: dict[int, tuple] = {}  # structs a consumer still points into, freed by the deleter


@_DELETER
def _free(address):
    _KEEP.pop(address, None)


class _Capsule:
    """An object TVM's ``from_dlpack`` accepts, describing memory at ``data`` (no copy)."""

    def __init__(self, data: int, shape: tuple[int, ...], dtype: np.dtype, device) -> None:
        self.data, self.shape, self.dtype, self.device = data, shape, dtype, device

    def __dlpack_device__(self):
        return (self.device.dlpack_device_type(), self.device.index)

    def __dlpack__(self, **_):
        shape = (ctypes.c_int64 * max(1, len(self.shape)))(*self.shape)
        managed = _Managed()
        managed.dl_tensor = _Tensor(
            self.data, _Device(*self.__dlpack_device__()), len(self.shape),
            _DataType(_CODES[self.dtype.kind], self.dtype.itemsize * 8, 1), shape, None, 0)
        managed.deleter = _free
        address = ctypes.addressof(managed)
        _KEEP[address] = (managed, shape)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        return new(address, b"dltensor", None)


def _view(base, offset: int, shape: tuple[int, ...], dtype: str):
    import tvm

    capsule = _Capsule(base.data_ptr() + offset, tuple(int(d) for d in shape), np.dtype(dtype),
                       base.device)
    return tvm.runtime.from_dlpack(capsule)  # valid while ``base`` lives (GuardedArgs keeps it)
