"""Inst records <-> Programs: the encoder (dedicated statements where they fit exactly, the
general form otherwise, canonical names) and the decoder (with semantic checks)."""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from .ast import Dict, Expr, Imm, IndexMapValue, Program, Ref, Stmt, map_refs, refs_in
from .errors import DslSemanticError, UnsupportedError
from .grammar import reserved_words
from .statements import STATEMENTS, STATEMENTS_BY_KIND, Attr, In, NoFit, Rest, Statement
from .tvm_bridge import ALL_KINDS, OUTPUT_TYPES, Inst

__all__ = ["ALL_KINDS", "POSTPROC_SETS", "decode_program", "encode_insts", "same_value"]

POSTPROC_SETS = ("llvm", "cuda", "cuda-tensorcore", "hexagon")
_DEFAULT_MAX_INNER = 64


# ---- value utilities -------------------------------------------------------------------

def same_value(a, b) -> bool:
    """Equality that keeps types apart (True vs 1, int vs Imm) and compares floats by bits."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, Imm):
        return a.dtype == b.dtype and same_value(a.value, b.value)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Dict):
        return same_value(a.items, b.items)
    return a == b


def _index_var_names(value) -> set[str]:
    names: set[str] = set()
    if isinstance(value, IndexMapValue):
        names.update(p.name for p in value.params)
        if value.inverse is not None:
            names |= _index_var_names(value.inverse)
    elif isinstance(value, tuple):
        for v in value:
            names |= _index_var_names(v)
    elif isinstance(value, Dict):
        for k, v in value.items:
            names |= _index_var_names(k) | _index_var_names(v)
    return names


# ---- encoding --------------------------------------------------------------------------

_IDENT_BAD = re.compile(r"[^A-Za-z0-9_]")


class _Namer:
    """Canonical names: a block fetched by name is called by that name; other blocks, loops
    and expression variables are b<N>, l<N>, v<N> with one counter per kind."""

    def __init__(self, avoid: set[str]) -> None:
        self.taken = set(avoid) | set(reserved_words())
        self.counters = {"block": 0, "loop": 0, "var": 0}
        self.script_name: dict[str, str] = {}

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def define(self, tvm_name: str, output_type: str | None, hint: str | None = None) -> str:
        if hint and output_type == "loop" and hint in self.taken:
            hint = None  # a loop name already used: a numbered name reads better than i_2
        if hint:
            base = _IDENT_BAD.sub("_", hint) or "b"
            if base[0].isdigit():
                base = "_" + base
        else:
            prefix = {"block": "b", "loop": "l", "var": "v"}.get(output_type or "", "x")
            while True:
                base = f"{prefix}{self.counters.get(output_type or '', 0)}"
                self.counters[output_type or ""] = self.counters.get(output_type or "", 0) + 1
                if base not in self.taken:
                    break
        name = self.fresh(base)
        self.script_name[tvm_name] = name
        return name

    def rename(self, value):
        return map_refs(value, lambda r: Ref(self.script_name[r.name]))


def _get(inst: Inst, where, used: dict[str, set]):
    if isinstance(where, In):
        if where.index >= len(inst.inputs):
            raise NoFit
        used["in"].add(where.index)
        return inst.inputs[where.index]
    if isinstance(where, Attr):
        if where.index >= len(inst.attrs):
            raise NoFit
        used["attr"].add(where.index)
        return inst.attrs[where.index]
    if isinstance(where, Rest):
        used["in"].update(range(where.index, len(inst.inputs)))
        return tuple(inst.inputs[where.index:])
    used["decision"].add(0)
    if inst.decision is None:
        raise NoFit
    return inst.decision


def _encode_statement(spec: Statement, inst: Inst, targets: list[str]) -> Stmt | None:
    used: dict[str, set] = {"in": set(), "attr": set(), "decision": set()}
    try:
        args: list[Any] = []
        for slot in spec.args:
            value = _get(inst, slot.where, used)
            if isinstance(slot.where, Rest):
                converted = tuple(slot.codec.to_script(v) for v in value)
                if spec.spread:
                    if not converted:  # the grammar spells one name or more
                        raise NoFit
                    args.extend(converted)
                else:
                    args.append(converted)
            else:
                args.append(slot.codec.to_script(value))
        options = {}
        for key, opt in spec.options.items():
            value = opt.codec.to_script(_get(inst, opt.where, used))
            default = opt.default_of(args) if opt.default_of else opt.default
            if opt.required or not same_value(value, default):
                options[key] = value
        for index, derive in spec.derived.items():
            if index >= len(inst.attrs) or not same_value(inst.attrs[index],
                                                          derive(args, targets)):
                raise NoFit
            used["attr"].add(index)
        if used["in"] != set(range(len(inst.inputs))) or \
                used["attr"] != set(range(len(inst.attrs))) or \
                bool(used["decision"]) != (inst.decision is not None):
            raise NoFit
        if not _count_ok(spec.outputs, len(targets)):
            raise NoFit
        if spec.kind in ("SamplePerfectTile", "SamplePartitionedTile") and \
                len(args[1]) != len(targets):
            raise NoFit
    except NoFit:
        return None
    return Stmt(spec.op, args, options, list(targets))


def _count_ok(outputs: str, n: int) -> bool:
    return {"none": n == 0, "one": n == 1, "many": n >= 1, "any": True}[outputs]


def _general(inst: Inst, targets: list[str]) -> Stmt:
    stmt = Stmt("@" + inst.kind, [list(inst.inputs), list(inst.attrs)], {}, list(targets))
    if inst.decision is not None:
        stmt.options["decision"] = inst.decision
    return stmt


def _count_uses(insts: list[Inst]) -> dict[str, int]:
    uses: dict[str, int] = {}
    for inst in insts:
        for value in [*inst.inputs, *inst.attrs, inst.decision]:
            for ref in refs_in(value):
                uses[ref.name] = uses.get(ref.name, 0) + 1
    return uses


# Sampling kind -> (merged statement, number of int32 attrs after ``n``).
_TILES = {"SamplePerfectTile": ("tile", 1), "SamplePartitionedTile": ("partitioned_tile", 2)}


def _child_hints(parent: str | None, n: int, nice: set[str]) -> list[str | None]:
    """Loops split from a loop named after the workload are numbered after it (i -> i0..i3)."""
    if parent is None or parent not in nice:
        return [None] * n
    return [f"{parent}{k}" for k in range(n)]


def _tile(insts: list[Inst], i: int, uses: dict[str, int], namer: _Namer,
          nice: set[str]) -> Stmt | None:
    """A tile sample immediately consumed, whole and in order, by the Split after it."""
    if i + 1 >= len(insts):
        return None
    sample, split = insts[i], insts[i + 1]
    if sample.kind not in _TILES or split.kind != "Split":
        return None
    op, n_extra = _TILES[sample.kind]
    if not (len(sample.inputs) == 1 and isinstance(sample.inputs[0], Ref)
            and isinstance(sample.decision, tuple) and len(sample.attrs) == 1 + n_extra
            and same_value(sample.attrs[0], Imm("int32", len(sample.outputs)))
            and all(isinstance(a, Imm) and a.dtype == "int32" for a in sample.attrs[1:])
            and len(sample.decision) == len(sample.outputs)
            and all(isinstance(d, int) and not isinstance(d, bool) for d in sample.decision)):
        return None
    if split.inputs[:1] != sample.inputs or \
            tuple(split.inputs[1:]) != tuple(Ref(n) for n in sample.outputs):
        return None
    stmt = _encode_statement(STATEMENTS["split"], split, ["_"] * len(split.outputs))
    if stmt is None:
        return None
    options = {}
    if op == "partitioned_tile":
        options["partition_pos"] = sample.attrs[1].value
        options["innerpart_factor"] = sample.attrs[2].value
    elif sample.attrs[1].value != _DEFAULT_MAX_INNER:
        options["max_inner"] = sample.attrs[1].value
    options.update(stmt.options)
    loop = namer.rename(sample.inputs[0])
    hints = _child_hints(loop.name, len(split.outputs), nice)
    targets = [namer.define(n, "loop", h) for n, h in zip(split.outputs, hints, strict=True)]
    if any(uses.get(n, 0) != 1 for n in sample.outputs):  # later statements use the factors
        options["factors"] = tuple(namer.define(n, "var") for n in sample.outputs)
    return Stmt(op, [loop, sample.decision], options, targets)


_SIMPLE = re.compile(r"[A-Za-z][A-Za-z0-9]{0,5}\Z")


def encode_insts(insts: list[Inst], *, postproc: str = "explicit",
                 postproc_set: str | None = None,
                 loop_names: dict[int, list[str]] | None = None) -> Program:
    """Encode Inst records (as read from a trace) into a Program with canonical names.

    ``loop_names`` maps the index of a GetLoops instruction to the workload's names of those
    loops: short plain names (``i``, ``co``, ``rh``) are used for them, and the loops a tile
    or split makes of such a loop are numbered after it (``i0..i3``).
    """
    if postproc not in ("explicit", "auto"):
        raise ValueError(f"Expected postproc='explicit' or 'auto' but got postproc={postproc!r}")
    avoid: set[str] = set()
    for inst in insts:
        for value in [*inst.inputs, *inst.attrs]:
            avoid |= _index_var_names(value)
    namer = _Namer(avoid)
    nice: set[str] = set()  # loops named after the workload's loops
    uses = _count_uses(insts)
    statements: list[Stmt] = []
    i = 0
    while i < len(insts):
        inst = insts[i]
        if inst.kind not in ALL_KINDS:  # the decoder would refuse @Kind: say so now
            raise UnsupportedError(f"instruction {i}: the language has no form for the "
                                   f"instruction kind {inst.kind!r}", kind=inst.kind)
        if inst.kind == "EnterPostproc" and not (inst.inputs or inst.attrs or inst.outputs) \
                and inst.decision is None:
            if postproc == "auto":
                if postproc_set not in POSTPROC_SETS:
                    raise ValueError(f"Expected postproc_set in {POSTPROC_SETS} for "
                                     f"postproc='auto' but got postproc_set={postproc_set!r}")
                statements.append(Stmt("postproc", [postproc_set]))
                break
            statements.append(Stmt("postproc"))
            i += 1
            continue
        tile = _tile(insts, i, uses, namer, nice)
        if tile is not None:
            statements.append(tile)
            i += 2
            continue
        renamed = Inst(inst.kind, [namer.rename(v) for v in inst.inputs],
                       [namer.rename(v) for v in inst.attrs], [],
                       namer.rename(inst.decision), inst.output_type)
        hint = inst.attrs[0] if inst.kind == "GetSBlock" and inst.attrs and \
            isinstance(inst.attrs[0], str) else None
        hints = [hint] * len(inst.outputs)
        if inst.kind == "GetLoops" and loop_names and len(loop_names.get(i, ())) == \
                len(inst.outputs):
            hints = [h if _SIMPLE.match(h) else None for h in loop_names[i]]
        elif inst.kind == "Split" and inst.inputs and isinstance(inst.inputs[0], Ref):
            hints = _child_hints(namer.script_name.get(inst.inputs[0].name), len(inst.outputs),
                                 nice)
        targets = [namer.define(n, inst.output_type, h) for n, h in zip(inst.outputs, hints,
                                                                          strict=True)]
        if inst.kind == "GetLoops":
            nice.update(t for t, h in zip(targets, hints, strict=True) if h == t)
        spec = STATEMENTS_BY_KIND.get(inst.kind)
        stmt = _encode_statement(spec, renamed, targets) if spec else None
        statements.append(stmt if stmt is not None else _general(renamed, targets))
        i += 1
    return Program(statements)


# ---- decoding --------------------------------------------------------------------------

@dataclass
class _Binding:
    type: str | None
    line: int | None


@dataclass
class Decoded:
    """The result of decoding: instructions, the ``postproc auto`` set if any, and the
    semantic errors found (decoding goes on past an error so that all are reported)."""

    insts: list[Inst] = field(default_factory=list)
    postproc_set: str | None = None
    errors: list[DslSemanticError] = field(default_factory=list)


class _Decoder:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.lines = (program.source or "").split("\n")
        self.env: dict[str, _Binding] = {}
        self.out = Decoded()
        self.counter = 0

    def error(self, message: str, line=None, column=None, expected=None) -> DslSemanticError:
        source_line = self.lines[line - 1] if line and line <= len(self.lines) else None
        return DslSemanticError(message, line=line, column=column, source_line=source_line,
                                expected=expected)

    # -- references --
    def resolve(self, value, want: str | None, stmt: Stmt):
        for ref in refs_in(value):
            line, column = ref.line or stmt.line, ref.column or stmt.column
            binding = self.env.get(ref.name)
            if binding is None:
                close = sorted(self.env, key=lambda n: _distance(n, ref.name))[:3]
                raise self.error(f"{ref.name!r} is not defined", line, column,
                                 [repr(c) for c in close])
            if want and binding.type and binding.type not in want.split("|") and \
                    not (isinstance(value, Expr | IndexMapValue)):
                raise self.error(
                    f"{stmt.op} expects a {want.replace('|', ' or ')} here, but "
                    f"{ref.name!r} is a {binding.type} (defined on line {binding.line})",
                    line, column)
        return value

    def bind(self, stmt: Stmt, output_type: str | None) -> list[str]:
        names = []
        for k, name in enumerate(stmt.targets):
            line, column = (stmt.target_positions[k] if k < len(stmt.target_positions)
                            else (stmt.line, stmt.column))
            if name in self.env:
                raise self.error(f"{name!r} is already defined on line {self.env[name].line}",
                                 line, column)
            if name in reserved_words():
                raise self.error(f"{name!r} is a keyword and cannot name a result", line,
                                 column)
            self.env[name] = _Binding(output_type, line)
            names.append(name)
        return names

    # -- statements --
    def run(self) -> Decoded:
        statements = self.program.statements
        for index, stmt in enumerate(statements):
            before = len(self.out.insts)
            try:
                self.statement(stmt, index == len(statements) - 1)
                for inst in self.out.insts[before:]:
                    inst.line, inst.column = stmt.line, stmt.column
            except DslSemanticError as exc:
                self.out.errors.append(exc)
                for name in stmt.targets:  # keep going without cascading errors
                    self.env.setdefault(name, _Binding(None, stmt.line))
        return self.out

    def statement(self, stmt: Stmt, last: bool) -> None:
        if self.out.postproc_set is not None:
            raise self.error("nothing may follow `postproc auto`", stmt.line, stmt.column)
        if stmt.op == "postproc":
            if stmt.args:
                self.out.postproc_set = stmt.args[0]
            self.out.insts.append(Inst("EnterPostproc", [], []))
            return
        if stmt.op in ("tile", "partitioned_tile"):
            self.tile(stmt)
            return
        if stmt.op.startswith("@"):
            self.general(stmt)
            return
        spec = STATEMENTS.get(stmt.op)
        if spec is None:  # the parser only builds known statements
            raise self.error(f"unknown statement {stmt.op!r}", stmt.line, stmt.column)
        self.out.insts.append(self.table_inst(spec, stmt))

    def general(self, stmt: Stmt) -> None:
        kind = stmt.op[1:]
        if kind not in ALL_KINDS:
            close = sorted(ALL_KINDS, key=lambda n: _distance(n, kind))[:3]
            raise self.error(f"unknown instruction kind {kind!r}", stmt.line, stmt.column,
                             ["@" + c for c in close])
        inputs, attrs = stmt.args
        for v in [*inputs, *attrs, stmt.options.get("decision")]:
            self.resolve(v, None, stmt)
        output_type = OUTPUT_TYPES.get(kind)
        if stmt.targets and output_type is None:
            raise self.error(f"@{kind} has no results", stmt.line, stmt.column)
        outputs = self.bind(stmt, output_type)
        self.out.insts.append(Inst(kind, list(inputs), list(attrs), outputs,
                                   stmt.options.get("decision"), output_type))

    def table_inst(self, spec: Statement, stmt: Stmt) -> Inst:
        inputs: dict[int, Any] = {}
        attrs: dict[int, Any] = {}
        decision = None
        args = list(stmt.args)

        def put(where, value):
            nonlocal decision
            if isinstance(where, In):
                inputs[where.index] = value
            elif isinstance(where, Attr):
                attrs[where.index] = value
            elif isinstance(where, Rest):
                for k, v in enumerate(value):
                    inputs[where.index + k] = v
            else:
                decision = value

        position = 0
        for slot in spec.args:
            if isinstance(slot.where, Rest) and spec.spread:
                values, position = tuple(args[position:]), len(args)
                put(slot.where, tuple(self.resolve(slot.codec.to_inst(v), slot.codec.want, stmt)
                                      for v in values))
                continue
            value = args[position]
            position += 1
            if isinstance(slot.where, Rest):
                put(slot.where, tuple(self.resolve(slot.codec.to_inst(v), slot.codec.want, stmt)
                                      for v in value))
            else:
                put(slot.where, self.resolve(slot.codec.to_inst(value), slot.codec.want, stmt))
        for key, opt in spec.options.items():
            if key in stmt.options:
                value = stmt.options[key]
            elif opt.required:
                raise self.error(f"{stmt.op} needs the option {key}=", stmt.line, stmt.column)
            else:
                value = opt.default_of(args) if opt.default_of else opt.default
            put(opt.where, self.resolve(opt.codec.to_inst(value), opt.codec.want, stmt))
        self.check_counts(spec, stmt, args)
        for index, derive in spec.derived.items():
            attrs[index] = derive(args, stmt.targets)
        output_type = OUTPUT_TYPES.get(spec.kind)
        outputs = self.bind(stmt, output_type)
        return Inst(spec.kind, [inputs[i] for i in sorted(inputs)],
                    [attrs[i] for i in sorted(attrs)], outputs, decision, output_type)

    def check_counts(self, spec: Statement, stmt: Stmt, args: list) -> None:
        n = len(stmt.targets)
        if not _count_ok(spec.outputs, n):
            want = {"none": "no results", "one": "exactly one result",
                    "many": "at least one result"}[spec.outputs]
            raise self.error(f"{stmt.op} gives {want}, but {n} names follow '->'",
                             stmt.line, stmt.column)
        if spec.kind in ("SamplePerfectTile", "SamplePartitionedTile"):
            if len(args[1]) != n:
                raise self.error(f"{stmt.op} samples {len(args[1])} factors but binds {n} names",
                                 stmt.line, stmt.column)
            self.check_factors(stmt, args[1])
        if spec.kind == "SampleCategorical":
            candidates, choice = args[0], args[1]
            if not 0 <= choice < len(candidates):
                raise self.error(f"sample_categorical picks index {choice}, but there are "
                                 f"{len(candidates)} candidates", stmt.line, stmt.column)
            probs = stmt.options.get("probs")
            if probs is not None and len(probs) != len(candidates):
                raise self.error("probs must have one entry per candidate", stmt.line,
                                 stmt.column)

    def check_factors(self, stmt: Stmt, factors) -> None:
        """A sampled tile's factors are the sizes of its loops: each at least 1."""
        for factor in factors:
            if isinstance(factor, int) and factor < 1:
                raise self.error(f"{stmt.op} factor {factor} must be positive (a factor is the "
                                 "extent of one of the loops it makes)", stmt.line, stmt.column)

    def tile(self, stmt: Stmt) -> None:
        loop, factors = stmt.args
        self.resolve(loop, "loop", stmt)
        if len(factors) != len(stmt.targets):
            raise self.error(f"tile splits into {len(factors)} factors but binds "
                             f"{len(stmt.targets)} names", stmt.line, stmt.column)
        if not factors:
            raise self.error("tile needs at least one factor", stmt.line, stmt.column)
        self.check_factors(stmt, factors)
        self.counter += 1
        hidden = [f"%tile{self.counter}.{k}" for k in range(len(factors))]
        named = stmt.options.get("factors")
        if named is not None and len(named) != len(factors):
            raise self.error(f"tile names {len(named)} factors but samples {len(factors)}",
                             stmt.line, stmt.column)
        if stmt.op == "tile":
            kind = "SamplePerfectTile"
            extra = [stmt.options.get("max_inner", _DEFAULT_MAX_INNER)]
        else:
            kind = "SamplePartitionedTile"
            extra = [stmt.options["partition_pos"], stmt.options["innerpart_factor"]]
        self.out.insts.append(Inst(
            kind, [loop], [Imm("int32", len(factors))] + [Imm("int32", v) for v in extra],
            hidden, tuple(factors), "var"))
        sample_keys = ("max_inner", "factors", "partition_pos", "innerpart_factor")
        split = Stmt("split", [loop, tuple(Ref(h) for h in hidden)],
                     {k: v for k, v in stmt.options.items() if k not in sample_keys},
                     stmt.targets, stmt.target_positions, stmt.line, stmt.column)
        for h in hidden:
            self.env[h] = _Binding("var", stmt.line)
        self.out.insts.append(self.table_inst(STATEMENTS["split"], split))
        if named is not None:  # bind the user's names to the sampled factors
            for name in named:
                if name in self.env:
                    raise self.error(f"{name!r} is already defined on line "
                                     f"{self.env[name].line}", stmt.line, stmt.column)
            sample = self.out.insts[-2]
            sample.outputs = list(named)
            self.out.insts[-1].inputs[1:] = [Ref(n) for n in named]
            for name, h in zip(named, hidden, strict=True):
                self.env[name] = _Binding("var", stmt.line)
                del self.env[h]


def _distance(a: str, b: str) -> int:
    """Edit distance, for "did you mean" lists."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def decode_program(program: Program) -> Decoded:
    """Decode a Program into Inst records, collecting semantic errors."""
    return _Decoder(program).run()


