"""The dedicated statements: for each, how its arguments and options map onto the inputs,
attrs and decision of a TVM instruction.

A statement is one ``Statement`` row.  Each argument or option names where it lives in the
instruction (``In(i)``, ``Attr(i)``, ``Rest(i)`` for variadic inputs, ``Decision()``) and a
``Codec`` that converts exactly one TVM type; a codec that meets a value of another type
refuses, and the encoder falls back to the general form ``@Kind(...)``, so nothing is ever
approximated.  Adding a statement means: a grammar rule ``s_<op>``, a row here, and (only when
the generic layout does not fit) a ``print_<op>`` in the printer; ``tests/test_meta.py`` fails
when one is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .ast import Imm, IndexMapValue, Ref, Word
from .errors import DragonError

__all__ = ["INSPECTING_OPS", "PLAIN_ANNOTATION_KEYS", "STATEMENTS", "STATEMENTS_BY_KIND",
           "Codec", "NoFit", "Statement", "annotation_key"]

# Statements that change nothing in the kernel: they fetch blocks and loops, or draw a
# decision that only a later statement uses.  A script of these alone (and ``postproc``) is
# the unscheduled kernel; MetaSchedule never writes one.
INSPECTING_OPS = frozenset({
    "block", "loops", "children", "producers", "consumers", "output_blocks", "sample_tile",
    "sample_partitioned_tile", "sample_categorical", "sample_compute_location", "postproc",
})

# Annotation keys that MetaSchedule writes without the "meta_schedule." prefix; written bare,
# they mean themselves.  Any other bare key means "meta_schedule.<key>".
PLAIN_ANNOTATION_KEYS = frozenset({
    "software_pipeline_stage", "software_pipeline_order", "software_pipeline_async_stages",
    "permuted_layout", "warp_execution", "vector_bytes", "pragma_auto_unroll_max_step",
    "pragma_unroll_explicit", "double_buffer_scope", "pragma_import_c", "layout_free_buffers",
})


def annotation_key(bare: str) -> str:
    """The TVM annotation key a bare key in a script stands for."""
    return bare if bare in PLAIN_ANNOTATION_KEYS else "meta_schedule." + bare


class NoFit(DragonError):
    """A value is not of the one type a codec converts (the general form must be used).  An
    internal signal of the encoder: it never reaches a caller."""


@dataclass(frozen=True)
class Codec:
    """Converts one TVM-side type to its script spelling and back."""

    name: str
    to_script: Callable[[Any], Any]
    to_inst: Callable[[Any], Any]
    want: str | None = None  # for references: "block", "loop", "var" or "block|loop"


def _check(cond: bool) -> None:
    if not cond:
        raise NoFit


def _same(value):
    return value


def _ref(want: str) -> Codec:
    def to_script(v):
        _check(isinstance(v, Ref))
        return v

    return Codec(f"ref:{want}", to_script, _same, want)


def _imm(dtype: str) -> Codec:
    def to_script(v):
        _check(isinstance(v, Imm) and v.dtype == dtype and isinstance(v.value, int))
        return v.value

    return Codec(f"imm:{dtype}", to_script, lambda v: Imm(dtype, int(v)))


def _imm_bool(dtype: str) -> Codec:
    def to_script(v):
        _check(isinstance(v, Imm) and v.dtype == dtype and v.value in (0, 1))
        return bool(v.value)

    return Codec(f"flag:{dtype}", to_script, lambda v: Imm(dtype, int(bool(v))))


def _str(v):
    _check(isinstance(v, str))
    return v


def _pod_bool(v):
    _check(isinstance(v, bool))
    return v


def _pod_int(v):
    _check(isinstance(v, int) and not isinstance(v, bool))
    return v


def _pod_ints(v):
    _check(isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool)
                                        for x in v))
    return v


def _refs(v):
    _check(isinstance(v, tuple) and all(isinstance(x, Ref) for x in v))
    return v


def _factor(v):
    _check(v is None or isinstance(v, Ref) or
           (isinstance(v, Imm) and v.dtype == "int32" and isinstance(v.value, int)))
    return v.value if isinstance(v, Imm) else v


def _factor_back(v):
    return Imm("int32", v) if isinstance(v, int) and not isinstance(v, bool) else v


def _index_map(v):
    _check(isinstance(v, IndexMapValue))
    return v


def _buffer_kind(v):
    _check(isinstance(v, Imm) and v.dtype == "int32" and v.value in (0, 1))
    return Word(("read", "write")[v.value])


def _ann_value(v):
    # Bare integers in annotations are int32 IntImms (what MetaSchedule writes); lists hold
    # plain integers; other immediates keep their typed spelling.
    if isinstance(v, Imm):
        return v.value if v.dtype == "int32" and isinstance(v.value, int) else v
    if isinstance(v, tuple):
        return _pod_ints(v)
    _check(isinstance(v, str | Ref | float) and not isinstance(v, bool))
    return v


def _ann_back(v):
    return Imm("int32", v) if isinstance(v, int) and not isinstance(v, bool) else v


def _probs(v):
    _check(isinstance(v, tuple) and all(isinstance(x, Imm) and x.dtype == "float32"
                                        for x in v))
    return v


REF_BLOCK = _ref("block")
REF_LOOP = _ref("loop")
REF_ANY = _ref("block|loop")
STR = Codec("str", _str, _same)
I32 = _imm("int32")
FLAG32 = _imm_bool("int32")   # an int32 IntImm used as a flag (ComputeAt, Fuse)
FLAG = _imm_bool("bool")      # a bool IntImm (Blockize, Tensorize, TransformLayout)
BOOL = Codec("bool", _pod_bool, _same)
INT = Codec("int", _pod_int, _same)
INTS = Codec("ints", _pod_ints, _same)
REFS = Codec("refs", _refs, _same, "block")
FACTOR = Codec("factor", _factor, _factor_back, "var")
INDEX_MAP = Codec("index_map", _index_map, _same)
OPT_INDEX_MAP = Codec("index_map?", lambda v: v if v is None else _index_map(v), _same)
BUFFER_KIND = Codec("buffer_kind", _buffer_kind, lambda v: Imm("int32", ("read", "write")
                                                                .index(v)))
ANN_VALUE = Codec("ann_value", _ann_value, _ann_back, "block|loop|var")
PROBS = Codec("probs", _probs, _same)


def _loop_or_blocks(v):
    return v if isinstance(v, Ref) else _refs(v)


LOOP_OR_BLOCKS = Codec("loop|blocks", _loop_or_blocks, _same, "loop|block")


@dataclass(frozen=True)
class In:
    index: int


@dataclass(frozen=True)
class Attr:
    index: int


@dataclass(frozen=True)
class Rest:
    """Inputs from ``index`` to the end, as one list argument (or spread, see Statement.spread)."""

    index: int


@dataclass(frozen=True)
class Decision:
    pass


@dataclass(frozen=True)
class Slot:
    where: In | Attr | Rest | Decision
    codec: Codec


@dataclass(frozen=True)
class Option:
    where: In | Attr | Rest | Decision
    codec: Codec
    default: Any = None
    required: bool = False
    # A default that depends on the statement (e.g. uniform probabilities).
    default_of: Callable[[list[Any]], Any] | None = None


@dataclass(frozen=True)
class Statement:
    """One dedicated statement."""

    op: str
    kind: str
    args: tuple[Slot, ...] = ()
    options: dict[str, Option] = field(default_factory=dict)
    outputs: str = "none"  # "none", "one", "many" (one or more), "any" (zero or more)
    spread: bool = False  # a Rest argument is written as separate names (reorder a b c)
    # Attrs computed from the statement (``n`` of a tile is the number of results).
    derived: dict[int, Callable[[list[Any], list[str]], Any]] = field(default_factory=dict)


def _n_targets(args, targets):
    return Imm("int32", len(targets))


def _uniform(args):
    n = len(args[0])
    return tuple(Imm("float32", 1.0 / n) for _ in range(n)) if n else ()


def _s(op, kind, *args, options=None, outputs="none", spread=False, derived=None):
    return Statement(op, kind, tuple(args), options or {}, outputs, spread, derived or {})


_PRESERVE_ITERS = {"preserve_unit_iters": Option(Attr(0), BOOL, True),
                   "disable_predication": Option(Attr(1), BOOL, False)}
_AT = {"preserve_unit_loops": Option(Attr(0), FLAG32, True), "index": Option(Attr(1), I32, -1)}

STATEMENTS: dict[str, Statement] = {s.op: s for s in [
    _s("block", "GetSBlock", Slot(Attr(0), STR), options={"func": Option(Attr(1), STR, "main")},
       outputs="one"),
    _s("loops", "GetLoops", Slot(In(0), REF_BLOCK), outputs="any"),
    _s("children", "GetChildBlocks", Slot(In(0), REF_ANY), outputs="any"),
    _s("producers", "GetProducers", Slot(In(0), REF_BLOCK), outputs="any"),
    _s("consumers", "GetConsumers", Slot(In(0), REF_BLOCK), outputs="any"),
    _s("output_blocks", "GetOutputBlocks", Slot(In(0), REF_BLOCK), outputs="any"),
    _s("sample_tile", "SamplePerfectTile", Slot(In(0), REF_LOOP), Slot(Decision(), INTS),
       options={"max_inner": Option(Attr(1), I32, 64)}, outputs="many",
       derived={0: _n_targets}),
    _s("sample_partitioned_tile", "SamplePartitionedTile", Slot(In(0), REF_LOOP),
       Slot(Decision(), INTS),
       options={"partition_pos": Option(Attr(1), I32, required=True),
                "innerpart_factor": Option(Attr(2), I32, required=True)},
       outputs="many", derived={0: _n_targets}),
    _s("sample_categorical", "SampleCategorical", Slot(Attr(0), INTS), Slot(Decision(), INT),
       options={"probs": Option(Attr(1), PROBS, default_of=_uniform)}, outputs="one"),
    _s("sample_compute_location", "SampleComputeLocation", Slot(In(0), REF_BLOCK),
       Slot(Decision(), INT), outputs="one"),
    _s("split", "Split", Slot(In(0), REF_LOOP), Slot(Rest(1), FACTOR),
       options=_PRESERVE_ITERS, outputs="many"),
    _s("loop_partition", "LoopPartition", Slot(In(0), REF_LOOP), Slot(Rest(1), FACTOR),
       options={"preserve_unit_iters": Option(Attr(0), FLAG32, True)}, outputs="many"),
    _s("fuse", "Fuse", Slot(Rest(0), _ref("loop")),
       options={"preserve_unit_iters": Option(Attr(0), FLAG32, True)}, outputs="one",
       spread=True),
    _s("merge", "Merge", Slot(Rest(0), _ref("loop")), outputs="one", spread=True),
    _s("reorder", "Reorder", Slot(Rest(0), _ref("loop")), spread=True),
    _s("add_unit_loop", "AddUnitLoop", Slot(In(0), REF_ANY), outputs="one"),
    _s("parallel", "Parallel", Slot(In(0), REF_LOOP)),
    _s("vectorize", "Vectorize", Slot(In(0), REF_LOOP)),
    _s("unroll", "Unroll", Slot(In(0), REF_LOOP)),
    _s("bind", "Bind", Slot(In(0), REF_LOOP), Slot(Attr(0), STR)),
    _s("annotate", "Annotate", Slot(In(0), REF_ANY), Slot(Attr(0), STR), Slot(In(1), ANN_VALUE)),
    _s("unannotate", "Unannotate", Slot(In(0), REF_ANY), Slot(Attr(0), STR)),
    _s("compute_at", "ComputeAt", Slot(In(0), REF_BLOCK), Slot(In(1), REF_LOOP), options=_AT),
    _s("reverse_compute_at", "ReverseComputeAt", Slot(In(0), REF_BLOCK), Slot(In(1), REF_LOOP),
       options=_AT),
    _s("compute_inline", "ComputeInline", Slot(In(0), REF_BLOCK)),
    _s("reverse_compute_inline", "ReverseComputeInline", Slot(In(0), REF_BLOCK)),
    _s("cache_read", "CacheRead", Slot(In(0), REF_BLOCK), Slot(Attr(0), I32), Slot(Attr(1), STR),
       options={"consumers": Option(In(1), REFS, ())}, outputs="one"),
    _s("cache_write", "CacheWrite", Slot(In(0), REF_BLOCK), Slot(Attr(0), I32),
       Slot(Attr(1), STR), options={"consumers": Option(In(1), REFS, ())}, outputs="one"),
    _s("reindex", "ReIndex", Slot(In(0), REF_BLOCK), Slot(Attr(1), BUFFER_KIND),
       Slot(Attr(0), I32), outputs="one"),
    _s("read_at", "ReadAt", Slot(In(0), REF_LOOP), Slot(In(1), REF_BLOCK), Slot(Attr(0), I32),
       Slot(Attr(1), STR), outputs="one"),
    _s("write_at", "WriteAt", Slot(In(0), REF_LOOP), Slot(In(1), REF_BLOCK), Slot(Attr(0), I32),
       Slot(Attr(1), STR), outputs="one"),
    _s("decompose_reduction", "DecomposeReduction", Slot(In(0), REF_BLOCK),
       Slot(In(1), REF_LOOP), outputs="one"),
    _s("rfactor", "RFactor", Slot(In(0), REF_LOOP), Slot(Attr(0), I32), outputs="one"),
    _s("blockize", "Blockize", Slot(In(0), LOOP_OR_BLOCKS),
       options={"preserve_unit_iters": Option(Attr(0), FLAG, True)}, outputs="one"),
    _s("tensorize", "Tensorize", Slot(In(0), REF_ANY), Slot(Attr(0), STR),
       options={"preserve_unit_iters": Option(Attr(1), FLAG, True)}),
    _s("storage_align", "StorageAlign", Slot(In(0), REF_BLOCK), Slot(Attr(0), I32),
       Slot(Attr(1), I32), Slot(Attr(2), I32), Slot(Attr(3), I32)),
    _s("set_scope", "SetScope", Slot(In(0), REF_BLOCK), Slot(Attr(0), I32), Slot(Attr(1), STR)),
    _s("transform_layout", "TransformLayout", Slot(In(0), REF_BLOCK), Slot(Attr(1), BUFFER_KIND),
       Slot(Attr(0), I32), Slot(In(1), INDEX_MAP),
       options={"pad_value": Option(Attr(2), OPT_INDEX_MAP, None),
                "assume_injective": Option(Attr(3), FLAG, True)}),
    _s("transform_block_layout", "TransformBlockLayout", Slot(In(0), REF_BLOCK),
       Slot(Attr(0), INDEX_MAP)),
]}

STATEMENTS_BY_KIND: dict[str, Statement] = {s.kind: s for s in STATEMENTS.values()}

# Statements that are not one row of STATEMENTS: handled by the codec itself.
SPECIAL_OPS = ("tile", "partitioned_tile", "postproc", "general")
