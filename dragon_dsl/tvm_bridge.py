"""The TVM side of the codec: Trace <-> a list of plain ``Inst`` records, and TVM values <->
the script values of ``dragon_dsl.ast``.

Every TVM type that a trace holds keeps its identity here: POD int vs IntImm (and its dtype)
vs bool, FloatImm vs float, String, Array, Map, IndexMap with its variable names and dtypes,
and random variables wired by identity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .ast import Dict, Expr, Imm, IndexMapValue, IndexVar, Ref, refs_in
from .errors import TraceError, UnsupportedError

__all__ = [
    "ALL_KINDS",
    "Inst",
    "OUTPUT_TYPES",
    "insts_from_json",
    "insts_from_trace",
    "plain_json",
    "trace_from_insts",
    "trace_json",
    "tvm_json",
]

# Every schedule instruction kind TVM 0.27 registers (tests check this against TVM).
ALL_KINDS = (
    "AddUnitLoop Annotate AnnotateBufferAccess Bind Blockize CacheIndex CacheInplace CacheRead "
    "CacheWrite ComputeAt ComputeInline DecomposePadding DecomposeReduction EnterPostproc Fuse "
    "FuseReductionEpilogue GetChildBlocks GetConsumers GetLoops GetOutputBlocks GetProducers "
    "GetSBlock LoopPartition Merge PadEinsum Parallel RFactor ReIndex ReadAt ReindexCacheRead "
    "ReindexCacheWrite Reorder ReorderBlockIterVar ReverseComputeAt ReverseComputeInline "
    "RollingBuffer SampleCategorical SampleComputeLocation SamplePartitionedTile "
    "SamplePerfectTile SetScope Split StorageAlign Tensorize TransformBlockLayout "
    "TransformLayout Unannotate Unroll UnsafeHideBufferAccess UnsafeSetDType Vectorize WriteAt"
).split()

# The type of every output of each instruction kind: "block", "loop" or "var".
OUTPUT_TYPES: dict[str, str] = {
    **dict.fromkeys(
        ["GetSBlock", "GetChildBlocks", "GetProducers", "GetConsumers", "GetOutputBlocks",
         "CacheRead", "CacheWrite", "CacheInplace", "CacheIndex", "ReIndex", "ReindexCacheRead",
         "ReindexCacheWrite", "ReadAt", "WriteAt", "DecomposeReduction", "DecomposePadding",
         "RFactor", "Blockize"], "block"),
    **dict.fromkeys(
        ["GetLoops", "Split", "LoopPartition", "Fuse", "Merge", "AddUnitLoop",
         "SampleComputeLocation"], "loop"),
    **dict.fromkeys(["SamplePerfectTile", "SamplePartitionedTile", "SampleCategorical"], "var"),
}


@dataclass
class Inst:
    """One instruction with its inputs, attrs and decision as script values.

    ``outputs`` are names; ``output_type`` the kind of random variable they are.
    """

    kind: str
    inputs: list[Any]
    attrs: list[Any]
    outputs: list[str] = field(default_factory=list)
    decision: Any = None
    output_type: str | None = None
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)


# ---- TVM -> values ---------------------------------------------------------------------

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "FloorDiv": "floordiv",
           "FloorMod": "floormod", "Div": "div", "Mod": "mod", "Min": "min", "Max": "max"}


def _tvm():
    import tvm
    from tvm.s_tir.schedule import LoopRV, SBlockRV

    return tvm, SBlockRV, LoopRV


class _Names:
    """Random variables by object identity, named the way TVM's JSON names them."""

    def __init__(self) -> None:
        self.by_handle: dict[int, str] = {}

    def add(self, obj, kind: str) -> str:
        name = f"{kind[0]}{len(self.by_handle)}"  # b0, l1, v2: one counter, as in TVM
        self.by_handle[obj.__chandle__()] = name
        return name

    def get(self, obj) -> str | None:
        return self.by_handle.get(obj.__chandle__())


def _expr_from_tvm(obj, params: dict[int, IndexVar], names, kind: str):
    tvm, _, _ = _tvm()
    if isinstance(obj, tvm.tirx.Var):
        handle = obj.__chandle__()
        if handle in params:
            return params[handle]
        name = names(obj)
        if name is None:
            raise UnsupportedError(f"{kind}: an expression uses the free variable "
                                   f"{obj.name!r}", kind=kind)
        return Ref(name)
    if isinstance(obj, tvm.tirx.IntImm):
        return Imm(str(obj.ty), int(obj.value))
    if isinstance(obj, tvm.tirx.FloatImm):
        return Imm(str(obj.ty), float(obj.value))
    if isinstance(obj, tvm.tirx.Cast):
        return Expr("cast", (_expr_from_tvm(obj.value, params, names, kind),), str(obj.ty))
    op = _BINARY.get(type(obj).__name__)
    if op is None:
        raise UnsupportedError(
            f"{kind}: the language has no form for the expression node "
            f"{type(obj).__name__} ({obj})", kind=kind)
    return Expr(op, (_expr_from_tvm(obj.a, params, names, kind),
                     _expr_from_tvm(obj.b, params, names, kind)))


def _index_map_from_tvm(obj, names, kind: str, default: str | None = None) -> IndexMapValue:
    params = {}
    for var in obj.initial_indices:
        params[var.__chandle__()] = IndexVar(str(var.name), str(var.ty))
    results = tuple(_expr_from_tvm(e, params, names, kind) for e in obj.final_indices)
    plist = tuple(params.values())
    if len({p.name for p in plist}) != len(plist):
        raise UnsupportedError(f"{kind}: an index map binds two variables of one name",
                               kind=kind)
    if default is None:
        dtypes = [p.dtype for p in plist] + _imm_dtypes(results)
        default = "int64" if dtypes.count("int64") > dtypes.count("int32") else "int32"
    inverse = None
    if obj.inverse_index_map is not None:
        if obj.inverse_index_map.inverse_index_map is not None:
            raise UnsupportedError(f"{kind}: an inverse index map with an inverse of its own",
                                   kind=kind)
        inverse = _index_map_from_tvm(obj.inverse_index_map, names, kind, default)
    return IndexMapValue(plist, results, default, inverse)


def _imm_dtypes(values) -> list[str]:
    found = []
    for v in values:
        if isinstance(v, Imm):
            found.append(v.dtype)
        elif isinstance(v, Expr):
            found.extend(_imm_dtypes(v.args))
    return found


def value_from_tvm(obj, names, kind: str):
    """A TVM input, attr or decision as a script value; ``names(obj)`` names an RV or None."""
    tvm, SBlockRV, LoopRV = _tvm()
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, SBlockRV | LoopRV | tvm.tirx.Var):
        name = names(obj)
        if name is None:
            raise TraceError(f"{kind}: uses a random variable that no earlier instruction "
                             f"defines")
        return Ref(name)
    if isinstance(obj, tvm.tirx.IntImm):
        return Imm(str(obj.ty), int(obj.value))
    if isinstance(obj, tvm.tirx.FloatImm):
        return Imm(str(obj.ty), float(obj.value))
    if isinstance(obj, tvm.tirx.IndexMap):
        return _index_map_from_tvm(obj, names, kind)
    if isinstance(obj, tvm.ir.Expr):
        return _expr_from_tvm(obj, {}, names, kind)
    if isinstance(obj, tvm.ir.Array | list | tuple):
        return tuple(value_from_tvm(v, names, kind) for v in obj)
    if isinstance(obj, tvm.ir.Map | dict):
        items = tuple((value_from_tvm(k, names, kind), value_from_tvm(v, names, kind))
                      for k, v in obj.items())
        if any(isinstance(k, tuple | Dict) for k, _ in items):
            raise UnsupportedError(f"{kind}: the language has no form for a Map keyed by a "
                                   "list or Map", kind=kind)
        return Dict(items)
    raise UnsupportedError(f"{kind}: the language has no form for a {type(obj).__name__}",
                           kind=kind)


def _output_type(obj) -> str:
    tvm, SBlockRV, LoopRV = _tvm()
    if isinstance(obj, SBlockRV):
        return "block"
    if isinstance(obj, LoopRV):
        return "loop"
    if isinstance(obj, tvm.tirx.Var):
        return "var"
    raise UnsupportedError(f"an instruction output of type {type(obj).__name__}")


def insts_from_trace(trace) -> list[Inst]:
    """A TVM Trace as Inst records; random variables are named b<N>, l<N>, v<N> like TVM."""
    names = _Names()
    insts = []
    for inst in trace.insts:
        kind = str(inst.kind.name)
        inputs = [value_from_tvm(v, names.get, kind) for v in inst.inputs]
        attrs = [value_from_tvm(v, names.get, kind) for v in inst.attrs]
        decision = trace.get_decision(inst)
        decision = None if decision is None else value_from_tvm(decision, names.get, kind)
        types = {_output_type(o) for o in inst.outputs}
        if len(types) > 1:
            raise UnsupportedError(f"{kind}: outputs of mixed types", kind=kind)
        output_type = types.pop() if types else OUTPUT_TYPES.get(kind)
        outputs = [names.add(o, output_type or "var") for o in inst.outputs]
        insts.append(Inst(kind, inputs, attrs, outputs, decision, output_type))
    return insts


# ---- values -> TVM ---------------------------------------------------------------------

def value_to_tvm(value, env: dict[str, Any], params: dict[str, Any] | None = None):
    """A script value as the TVM object an instruction holds."""
    tvm, _, _ = _tvm()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, IndexVar):
        if params is None:
            raise TypeError(f"index variable {value.name!r} outside an index map")
        return params[value.name]
    if isinstance(value, Imm):
        if value.dtype.startswith(("float", "bfloat")):
            return tvm.tirx.FloatImm(value.dtype, float(value.value))
        return tvm.tirx.IntImm(value.dtype, int(value.value))
    if isinstance(value, tuple):
        return [value_to_tvm(v, env, params) for v in value]
    if isinstance(value, Dict):
        return {value_to_tvm(k, env, params): value_to_tvm(v, env, params)
                for k, v in value.items}
    if isinstance(value, IndexMapValue):
        variables = {p.name: tvm.tirx.Var(p.name, p.dtype) for p in value.params}
        results = [value_to_tvm(r, env, variables) for r in value.results]
        inverse = value_to_tvm(value.inverse, env) if value.inverse is not None else None
        return tvm.tirx.IndexMap(list(variables.values()), results, inverse)
    if isinstance(value, Expr):
        args = [value_to_tvm(a, env, params) for a in value.args]
        if value.op == "cast":
            return tvm.tirx.Cast(value.dtype, args[0])
        node = {v: k for k, v in _BINARY.items()}[value.op]
        return getattr(tvm.tirx, node)(*args)
    raise TypeError(f"Expected a script value but got {type(value).__name__}")


def new_rv(output_type: str, name: str):
    tvm, SBlockRV, LoopRV = _tvm()
    if output_type == "block":
        return SBlockRV()
    if output_type == "loop":
        return LoopRV()
    return tvm.tirx.Var(name, "int32")  # TVM's ExprRVs are int32 variables


def trace_from_insts(insts: list[Inst]):
    """Build a TVM Trace from Inst records (names resolve to earlier outputs)."""
    from tvm.s_tir.schedule import Instruction, InstructionKind, Trace

    env: dict[str, Any] = {}
    tvm_insts, decisions = [], {}
    for inst in insts:
        inputs = [value_to_tvm(v, env) for v in inst.inputs]
        attrs = [value_to_tvm(v, env) for v in inst.attrs]
        outputs = []
        for name in inst.outputs:
            rv = new_rv(inst.output_type or OUTPUT_TYPES.get(inst.kind, "block"), name)
            env[name] = rv
            outputs.append(rv)
        made = Instruction(InstructionKind.get(inst.kind), inputs, attrs, outputs)
        tvm_insts.append(made)
        if inst.decision is not None:
            decisions[made] = value_to_tvm(inst.decision, env)
    return Trace(tvm_insts, decisions)


# ---- typed JSON ------------------------------------------------------------------------

def _jsonable(obj):
    tvm, _, _ = _tvm()
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj if not isinstance(obj, str) else str(obj)
    if isinstance(obj, tvm.tirx.IntImm):
        return {"IntImm": [str(obj.ty), int(obj.value)]}
    if isinstance(obj, tvm.tirx.FloatImm):
        return {"FloatImm": [str(obj.ty), float(obj.value)]}
    if isinstance(obj, tvm.tirx.IndexMap):
        return _tree_index_map_json(obj)
    if isinstance(obj, tvm.ir.Expr):  # an expression attr (TVM itself cannot write these)
        return {"Expr": tvm.ir.save_json(obj)}
    if isinstance(obj, tvm.ir.Array | list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, tvm.ir.Map | dict):
        return {"Map": [[_jsonable(k), _jsonable(v)] for k, v in obj.items()]}
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _tree_index_map_json(obj) -> str:
    # TVM's JSON graph of an IndexMap also records which immutable expression nodes happen to
    # be shared in memory.  That sharing carries no meaning (structural equality ignores it,
    # and applying the map gives the same IR), so the comparison form writes every map as a
    # tree.  Free variables are the trace's random variables, already named v<N> by as_json.
    tvm, _, _ = _tvm()
    value = _index_map_from_tvm(obj, lambda var: str(var.name), "IndexMap")
    env = {ref.name: tvm.tirx.Var(ref.name, "int32") for ref in refs_in(value)}
    return tvm.ir.save_json(value_to_tvm(value, env))


def trace_json(trace, remove_postproc: bool = False):
    """The comparison and file form of a trace: ``Trace.as_json()`` with IntImm/FloatImm written
    as ``{"IntImm": [dtype, value]}`` and Maps as ``{"Map": [[k, v], ...]}`` so that it survives
    ``json.dumps``/``json.loads`` with every type intact, and IndexMaps as tree-shaped JSON
    graphs (see ``_tree_index_map_json``)."""
    from tvm.s_tir.schedule import _ffi_api

    # The FFI call, not Trace.as_json: the latter already turns IndexMaps into graph strings.
    return _jsonable(_ffi_api.TraceAsJSON(trace, remove_postproc))


# ---- TVM's own JSON --------------------------------------------------------------------

def tvm_json(trace, remove_postproc: bool = False):
    """TVM's own JSON of a trace, as a file holds it: ``Trace.as_json()`` with IntImm and
    FloatImm as plain numbers (a bool IntImm as a JSON boolean), which
    ``Trace.apply_json_to_schedule`` reads and a MetaSchedule JSON database record holds.
    It records no types: TVM's replay on a schedule of the workload restores them.  Index maps
    are JSON graphs written as trees, as in ``trace_json``; for a trace decoded from a script
    that is exactly ``Trace.as_json()``.

    >>> from tvm.s_tir.schedule import Instruction, InstructionKind, Trace
    >>> tvm_json(Trace([Instruction(InstructionKind.get("EnterPostproc"), [], [], [])], {}))
    [[['EnterPostproc', [], [], []]], []]
    """
    from tvm.s_tir.schedule import _ffi_api

    return _plain_ffi(_ffi_api.TraceAsJSON(trace, remove_postproc))


def _plain_ffi(obj):
    tvm, _, _ = _tvm()
    if obj is None or isinstance(obj, bool | int | float | str):
        return str(obj) if isinstance(obj, str) else obj
    if isinstance(obj, tvm.tirx.IntImm):
        return bool(obj.value) if str(obj.ty) == "bool" else int(obj.value)
    if isinstance(obj, tvm.tirx.FloatImm):
        return float(obj.value)
    if isinstance(obj, tvm.tirx.IndexMap):
        return _tree_index_map_json(obj)
    if isinstance(obj, tvm.ir.Map | dict):
        return {str(k): _plain_ffi(v) for k, v in obj.items()}
    if isinstance(obj, tvm.ir.Array | list | tuple):
        return [_plain_ffi(v) for v in obj]
    raise TypeError(f"TVM's trace JSON cannot hold a {type(obj).__name__}")


def plain_json(value):
    """TVM's trace JSON (``Trace.as_json()``) as plain Python: IntImm and FloatImm as their
    values, a bool IntImm as a bool."""
    if isinstance(value, str | bool | int | float) or value is None:
        return str(value) if isinstance(value, str) else value
    if hasattr(value, "items"):
        return {str(k): plain_json(v) for k, v in value.items()}
    if hasattr(value, "value"):
        return bool(value.value) if str(getattr(value, "ty", "")) == "bool" else value.value
    return [plain_json(v) for v in value]


def _json_imm(kind: str, form: str, body) -> Imm:
    """``{"IntImm": [dtype, value]}`` or ``{"FloatImm": [...]}``, checked as the parser checks
    a literal, so that what a trace file holds can be written as a script."""
    from .parser import _FLOAT_MAX, _SUFFIX_DTYPES, _int_range

    if not (isinstance(body, list) and len(body) == 2 and isinstance(body[0], str)):
        raise TraceError(f"{kind}: expected {{{form!r}: [dtype, value]}} but got {body!r:.80}")
    dtype, value = body
    known = dtype in _SUFFIX_DTYPES.values()
    family = r"u?int[0-9]+|bool" if form == "IntImm" else r"b?float[0-9]+"
    if not re.fullmatch(family, dtype):
        raise TraceError(f"{kind}: an {form} of dtype {dtype[:40]!r}")
    if form == "IntImm":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TraceError(f"{kind}: an IntImm's value must be an integer, not {value!r:.40}")
        if known and not dtype.startswith("float"):
            low, high = _int_range(dtype)
            if not low <= value <= high:
                raise TraceError(f"{kind}: {str(value)[:40]} is out of the range of {dtype}")
        return Imm(dtype, value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"{kind}: a FloatImm's value must be a number, not {value!r:.40}")
    value = float(value)
    if dtype in _FLOAT_MAX and not abs(value) <= _FLOAT_MAX[dtype] and value == value:
        raise TraceError(f"{kind}: {value} is out of the range of {dtype}")
    return Imm(dtype, value)


def _from_json_value(obj, names: dict[str, str], kind: str, is_input: bool):
    tvm, _, _ = _tvm()
    if isinstance(obj, dict):
        if set(obj) == {"IntImm"}:
            return _json_imm(kind, "IntImm", obj["IntImm"])
        if set(obj) == {"FloatImm"}:
            return _json_imm(kind, "FloatImm", obj["FloatImm"])
        if set(obj) == {"Map"} and isinstance(obj["Map"], list):
            pairs = []
            for pair in obj["Map"]:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise TraceError(f"{kind}: a Map's entries must be [key, value] pairs")
                key = _from_json_value(pair[0], names, kind, is_input)
                if isinstance(key, tuple | Dict):
                    raise TraceError(f"{kind}: a Map keyed by a list or Map, which the "
                                     "language cannot write")
                pairs.append((key, _from_json_value(pair[1], names, kind, is_input)))
            return Dict(tuple(pairs))
        raise TraceError(f"{kind}: unexpected JSON object {str(obj)[:80]}")
    if isinstance(obj, list):
        return tuple(_from_json_value(v, names, kind, is_input) for v in obj)
    if isinstance(obj, str):
        if obj.startswith("{") and obj.endswith("}"):
            try:
                index_map = tvm.ir.load_json(obj)
            except Exception as exc:  # noqa: BLE001  TVM raises its own error types
                raise TraceError(f"{kind}: an index map's JSON does not load: "
                                 f"{str(exc)[:200]}") from None
            if not isinstance(index_map, tvm.tirx.IndexMap):
                raise TraceError(f"{kind}: expected an index map's JSON but got a "
                                 f"{type(index_map).__name__}")
            return _index_map_from_tvm(index_map, lambda var: names.get(str(var.name)), kind)
        if not is_input:
            return obj
        if obj == "None":
            return None
        if len(obj) >= 2 and obj[0] == obj[-1] == '"':
            return obj[1:-1]
        if obj not in names:
            raise TraceError(f"{kind}: uses {obj[:80]!r}, which no earlier instruction defines")
        return Ref(obj)
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    raise TraceError(f"{kind}: unexpected JSON value {obj!r:.80}")


_OUTPUT_PREFIXES = {"b": "block", "l": "loop", "v": "var"}


def insts_from_json(data) -> list[Inst]:
    """Inst records from ``trace_json`` output (after a trip through a JSON file).  Anything
    else (another shape, an unknown instruction kind, a value TVM could not hold) is a
    TraceError that names the instruction."""
    if not (isinstance(data, list | tuple) and len(data) == 2
            and all(isinstance(part, list | tuple) for part in data)):
        raise TraceError(f"trace JSON must be [instructions, decisions] but got "
                         f"{json_preview(data)}")
    json_insts, json_decisions = data
    decisions = {}
    for entry in json_decisions:
        try:
            index, decision = entry
            if isinstance(index, dict):
                index = index["IntImm"][1]
            if isinstance(index, bool) or not isinstance(index, int):
                raise TypeError(f"the index {index!r:.40} is not an integer")
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            raise TraceError(f"trace JSON must be [instructions, decisions] with decisions "
                             f"[index, decision]: {exc}") from None
        decisions[index] = decision
    names: dict[str, str] = {}
    insts = []
    for i, entry in enumerate(json_insts):
        try:
            kind, inputs, attrs, outputs = entry
        except (TypeError, ValueError):
            raise TraceError(f"instruction {i}: expected [kind, inputs, attrs, outputs] but got "
                             f"{str(entry)[:80]}") from None
        if not isinstance(kind, str) or kind not in ALL_KINDS:
            raise TraceError(f"instruction {i}: unknown instruction kind {str(kind)[:80]!r}")
        if not (isinstance(inputs, list) and isinstance(attrs, list)
                and isinstance(outputs, list) and all(isinstance(o, str) for o in outputs)):
            raise TraceError(f"instruction {i} ({kind}): expected lists of inputs, attrs and "
                             "output names")
        try:
            inputs = [_from_json_value(v, names, kind, True) for v in inputs]
            attrs = [_from_json_value(v, names, kind, False) for v in attrs]
            decision = decisions.get(i)
            decision = None if decision is None else \
                _from_json_value(decision, names, kind, False)
        except TraceError as exc:
            raise TraceError(f"instruction {i}: {exc}") from None
        except (TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
            raise TraceError(f"instruction {i} ({kind}): a malformed value: "
                             f"{str(exc)[:200]}") from None
        types = {_OUTPUT_PREFIXES.get(name[:1]) for name in outputs}
        if outputs and (len(types) != 1 or OUTPUT_TYPES.get(kind) not in types or
                        not all(name[1:].isdigit() for name in outputs)):
            want = OUTPUT_TYPES.get(kind)
            raise TraceError(f"instruction {i} ({kind}): " + (
                "has no results" if want is None else
                f"its results are {want}s, named {want[0]}<N>") +
                f", but the JSON names {', '.join(outputs)[:80]}")
        for name in outputs:
            names[name] = name
        output_type = types.pop() if outputs else OUTPUT_TYPES.get(kind)
        insts.append(Inst(kind, inputs, attrs, list(outputs), decision, output_type))
    return insts


def json_preview(data) -> str:
    """A short description of a JSON value, for messages."""
    if data is None or isinstance(data, bool | int | float):
        return f"{data!r:.40}"
    return f"a {type(data).__name__} ({str(data)[:40]})"
