"""A script's schedule as it is written: each statement applied to a live TVM schedule as soon
as it is complete.

``LiveSchedule`` holds a workload's ``Schedule``, the names the script has bound (with their kind
and TVM random variable) and the encoder's naming state.  ``step`` applies one statement: the
decoder's checks (names defined, of the right kind, never bound twice), the count and factor
checks, then TVM itself; a refused statement raises ``DslSemanticError`` at its line and leaves
the state as it was, so a caller may try another statement in its place.  The queries (blocks
that exist, the loops of a block and their extents, which names are still alive, how many
buffers a block reads) are what a schedule-aware sampler narrows the next statement by
(``training.grammars.statement``), and ``dragon check --workload`` reports through ``step``
too: what the sampler rolls back is what the checker reports.

``expected_results`` gives the names the encoder would bind (``block "C" -> C``, ``loops C ->
i, j, k``, ``tile i [..] -> i0, i1``, then ``l<N>``, ``b<N>``, ``v<N>``): the canonical naming
that training scripts use, so that a sampler can write them for the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from .ast import Program, Ref, Stmt
from .codec import _Decoder, _Namer
from .errors import DragonError, DslSemanticError
from .statements import INSPECTING_OPS
from .tvm_bridge import OUTPUT_TYPES, Inst, value_to_tvm
from .tvm_support import Unchecked, as_module, schedule_of, tvm_message

__all__ = ["DRAWING_OPS", "MOVE_OPS", "LiveSchedule", "Loop", "apply_script", "output_kind"]

# The statements that move a block under a loop (``LiveSchedule.move_targets``).
MOVE_OPS = ("compute_at", "reverse_compute_at")
# Answers an annotation leaves true (``LiveSchedule._memo``'s keys start with these).
_KEPT_BY_ANNOTATE = frozenset({"alive", "rfactor", "compute_inline", "reverse_compute_inline",
                               *MOVE_OPS})
# Statements that draw what a later one uses: a value, a compute location.
DRAWING_OPS = ("sample_categorical", "sample_compute_location")

# The encoder's test for a workload loop name it keeps (``i``, ``co``, ``rh``).
_SIMPLE = re.compile(r"[A-Za-z][A-Za-z0-9]{0,5}\Z")
_OUTPUT_OF = {"block": "block", "loops": "loop", "children": "block", "producers": "block",
              "consumers": "block", "output_blocks": "block", "tile": "loop",
              "partitioned_tile": "loop", "sample_tile": "var", "sample_partitioned_tile": "var",
              "sample_categorical": "var", "sample_compute_location": "loop", "split": "loop",
              "loop_partition": "loop", "fuse": "loop", "merge": "loop", "add_unit_loop": "loop",
              "cache_read": "block", "cache_write": "block", "reindex": "block",
              "read_at": "block", "write_at": "block", "decompose_reduction": "block",
              "rfactor": "block", "blockize": "block"}


@dataclass(frozen=True)
class Loop:
    """One loop of a block, outermost first: its name in the workload and its extent (None when
    it is not a constant)."""

    name: str
    extent: int | None


class LiveSchedule:
    """A workload's schedule, advanced one statement at a time.

    >>> from codegen.workloads import workload                                # doctest: +SKIP
    >>> live = LiveSchedule(workload("matmul(m=16,n=16,k=16)").mod)           # doctest: +SKIP
    >>> live.step('block "C" -> C'); live.expected_results("loops", "C")      # doctest: +SKIP
    ['i', 'j', 'k']
    """

    def __init__(self, workload: Any, target: Any = None, *, source: str | None = None,
                 keep_tile_order: bool = False) -> None:

        self.mod = as_module(workload)
        self.target = target
        # "fast": TVM's sentence without the module printed above it ("detail"), which costs
        # about 1.3 ms of every refusal, and the grammar tries inlines and moves on copies
        self.sch = schedule_of(self.mod, error_render_level="fast")
        self.rvs: dict[str, Any] = {}     # script name -> the schedule's random variable
        self.kinds: dict[str, str] = {}   # script name -> "block", "loop" or "var"
        self.postproc_set: str | None = None
        self.in_postproc = False
        self.statements = 0
        self.changes = 0                  # statements applied that change the kernel
        self._decoder = _Decoder(Program([], source=source))
        self._namer = _Namer(set())
        self._nice: set[str] = set()      # loops named after the workload's loops
        # `sample_compute_location` results: a loop, or the markers of "root" and "inline",
        # which TVM resolves only in `compute_at`; always in scope.
        self._locations: dict[str, tuple[str, int]] = {}  # name -> (block, decision)
        # The loops a tile or split made: each one's loop and place among its pieces,
        # outermost 0; with keep_tile_order a reorder that puts a piece above an outer one of
        # the same loop is refused (the sampler's rule, not the language's: _check_tile_order).
        self._piece_of: dict[str, tuple[str, int]] = {}
        self.keep_tile_order = keep_tile_order
        self._annotated: set[tuple[str, str]] = set()  # (name, TVM key) the script annotated
        self._drawn: str | None = None   # what the last statement drew (``just_drawn``)
        self._memo: dict[tuple, Any] = {}  # answers about the kernel, until a change

    # ---- stepping -------------------------------------------------------------------------

    def fork(self) -> LiveSchedule:
        """An independent copy (the schedule copy keeps the random variables valid)."""
        other = object.__new__(LiveSchedule)
        other.__dict__.update(self.__dict__)
        other.sch = self.sch.copy()
        other.rvs, other.kinds, other._nice = dict(self.rvs), dict(self.kinds), set(self._nice)
        other._locations = dict(self._locations)
        other._piece_of = dict(self._piece_of)
        other._annotated = set(self._annotated)
        other._memo = {}
        other._decoder = _copy_decoder(self._decoder)
        other._namer = _copy_namer(self._namer)
        other._relocate()
        return other

    def _relocate(self) -> None:
        """A schedule copy maps TVM's "root" and "inline" location markers to nothing: sample
        each compute location again, with its decision, on this schedule."""
        for name, (block, decision) in self._locations.items():
            if decision < 0 and block in self.rvs:
                try:
                    self.rvs[name] = self.sch.sample_compute_location(self.rvs[block],
                                                                      decision=decision)
                except Exception:  # noqa: BLE001  the block is gone: so is the location
                    pass

    def step(self, stmt: Stmt | str, source_line: str | None = None) -> list[str]:
        """Apply one statement (a ``Stmt`` or the text of one line); returns the names it binds.

        Raises ``DslSemanticError`` (with the statement's line and column) when the script's
        names or counts are wrong or TVM refuses the statement; the state is then unchanged."""
        if isinstance(stmt, str):
            from .parser import parse

            program = parse(stmt)
            if len(program.statements) != 1:
                raise DslSemanticError(f"expected one statement but got "
                                       f"{len(program.statements)}")
            source_line = source_line or stmt.rstrip("\n")
            stmt = program.statements[0]
        # Applied to this schedule (its random variables, location markers included, stay as
        # TVM made them); a copy taken first is put back if the statement is refused.
        backup = self.fork()
        if source_line is not None:
            self._decoder.lines = [""] * ((stmt.line or 1) - 1) + [source_line]
        try:
            bound = self._apply(stmt)
        except Exception as exc:  # noqa: BLE001  TVM also raises ValueError, TypeError, ...
            error = exc if isinstance(exc, DslSemanticError) else self._error(
                stmt, str(exc) if isinstance(exc, DragonError)
                else f"the workload refuses {stmt.op}: {tvm_message(exc)}")
            memo = self._memo  # still true of the state put back (its copy shares the loops)
            self.__dict__.update(backup.__dict__)
            self._memo = memo
            raise error from None
        self._decoder.lines = backup._decoder.lines
        self.statements += 1
        if stmt.op not in INSPECTING_OPS:
            self.changes += 1
            # An annotation moves no loop and no block: what TVM takes (compute_at, inlines,
            # rfactor) and which names are alive hold; the nodes it rewrote are looked up again.
            self._memo = {k: v for k, v in self._memo.items() if k[0] in _KEPT_BY_ANNOTATE} \
                if stmt.op in ("annotate", "unannotate") else {}
        return bound

    def _apply(self, stmt: Stmt) -> list[str]:
        if self.postproc_set is not None:
            raise self._error(stmt, "nothing may follow `postproc auto`")
        decoder = self._decoder
        before = len(decoder.out.insts)
        decoder.statement(stmt, last=False)
        insts = decoder.out.insts[before:]
        decoder.out.insts = decoder.out.insts[:before]  # a live schedule keeps no trace copy
        canonical = self._canonical(stmt)
        for inst in insts:
            inst.line, inst.column = stmt.line, stmt.column
            self._run(inst, stmt)
        for name in stmt.targets + list(stmt.options.get("factors") or ()):
            self.kinds[name] = self._decoder.env[name].type or "var"
        for name in canonical:
            self._namer.taken.add(name)
        self._namer.taken.update(stmt.targets)
        if stmt.op in ("tile", "split"):
            origin = stmt.args[0].name if isinstance(stmt.args[0], Ref) else str(stmt.args[0])
            self._piece_of.update((t, (origin, i)) for i, t in enumerate(stmt.targets))
        if stmt.op == "reorder" and self.keep_tile_order:
            self._check_tile_order(stmt)
        if stmt.op in ("annotate", "unannotate") and isinstance(stmt.args[0], Ref):
            held = (stmt.args[0].name, str(stmt.args[1]))
            (self._annotated.add if stmt.op == "annotate" else self._annotated.discard)(held)
        if stmt.op == "sample_compute_location":
            block = stmt.args[0].name if isinstance(stmt.args[0], Ref) else str(stmt.args[0])
            self._locations.update({t: (block, int(stmt.args[1])) for t in stmt.targets})
        self._drawn = stmt.targets[0] if stmt.op in DRAWING_OPS and stmt.targets else None
        if stmt.op == "postproc":
            self.in_postproc = True
            if stmt.args:
                self._postproc(stmt, str(stmt.args[0]))
        return list(stmt.targets)

    def _run(self, inst: Inst, stmt: Stmt) -> None:
        from .live_apply import ApplyError, apply_inst

        env = self.rvs
        try:
            inputs = [value_to_tvm(v, env) for v in inst.inputs]
            attrs = [value_to_tvm(v, env) for v in inst.attrs]
            decision = value_to_tvm(inst.decision, env) if inst.decision is not None else None
        except KeyError as exc:  # the decoder binds every name it resolves; defensive
            raise self._error(stmt, f"{exc.args[0]!r} is not defined") from None
        self._check(inst, inputs, decision, stmt)
        try:
            outputs = apply_inst(self.sch, inst.kind, inputs, attrs, decision)
        except ApplyError as exc:
            hint = ""
            if inst.kind == "GetSBlock":
                hint = f" (the kernel's blocks now: {', '.join(self.block_names())})"
            raise self._error(stmt, f"the workload refuses {stmt.op} ({inst.kind}): "
                                    f"{exc.tvm_reason}{hint}") from None
        except DragonError as exc:
            raise self._error(stmt, str(exc)) from None
        if len(outputs) != len(inst.outputs):
            raise self._error(stmt, f"{stmt.op} gives {len(outputs)} results but "
                                    f"{len(inst.outputs)} names follow '->'")
        for name, rv in zip(inst.outputs, outputs, strict=True):
            env[name] = rv

    def _check(self, inst: Inst, inputs: list, decision, stmt: Stmt) -> None:
        """What TVM would not say clearly: counts of ``loops``/``children`` and tile factors."""
        import tvm

        if inst.kind in ("GetLoops", "GetChildBlocks"):
            try:
                found = (self.loops(inputs[0]) if inst.kind == "GetLoops"
                         else self._children(inputs[0]))
            except Exception as exc:  # noqa: BLE001
                raise self._error(stmt, f"the workload refuses {stmt.op}: {tvm_message(exc)}") \
                    from None
            if len(found) != len(inst.outputs):
                what = (f"block {self._q.get(inputs[0]).name_hint!r} has {len(found)} loops"
                        if inst.kind == "GetLoops" else f"it has {len(found)} child blocks")
                names = ", ".join(f.name if isinstance(f, Loop) else f for f in found)
                raise self._error(stmt, f"`{stmt.op}` names {len(inst.outputs)} but {what} "
                                        f"({names})")
        if inst.kind == "RFactor":
            self._check_rfactor(inputs[0], stmt)
        if inst.kind == "SamplePerfectTile" and decision is not None:
            try:
                loop = self._q.get(inputs[0])
            except Exception as exc:  # noqa: BLE001
                raise self._error(stmt, f"the workload refuses {stmt.op}: {tvm_message(exc)}") \
                    from None
            if isinstance(loop.extent, tvm.tirx.IntImm):
                factors = [int(f) for f in decision]
                product = 1
                for f in factors:
                    product *= f
                if product != int(loop.extent.value):
                    raise self._error(stmt, f"tile factors {factors} multiply to {product}, but "
                                            f"the loop {loop.loop_var.name!r} has extent "
                                            f"{int(loop.extent.value)}")

    def _check_rfactor(self, loop_rv, stmt: Stmt) -> None:
        """A block rfactored once is not rfactored again: TVM applies the second one, but it
        leaves two ``NAME_rf`` blocks that MetaSchedule's postprocessors refuse (so no script
        after it could end), and MetaSchedule's own scripts never write it."""
        try:
            blocks = [self._q.get(b).name_hint for b in self._q.get_child_blocks(loop_rv)]
        except Exception:  # noqa: BLE001  TVM's own refusal says it better
            return
        existing = set(self.block_names())
        done = [b for b in blocks if f"{b}_rf" in existing]
        if done:
            raise self._error(stmt, f"block {done[0]!r} was rfactored already ({done[0]}_rf "
                                    "exists); a second rfactor leaves two blocks of that name, "
                                    "which postproc refuses")

    def _postproc(self, stmt: Stmt, postproc_set: str) -> None:
        """``postproc auto SET``: MetaSchedule's postprocessors on the schedule so far."""
        from .tvm_support import as_target, postprocessors, uses_tensor_intrinsics

        if self.target is None:
            raise self._error(stmt, "`postproc auto` needs a target to check against")
        found = postprocessors(self.mod, self.target, postproc_set,
                               intrinsics=uses_tensor_intrinsics(self.sch.trace))
        self.sch.enter_postproc()
        for postproc in found:
            try:
                ok = postproc.apply(self.sch)
            except Exception as exc:  # noqa: BLE001
                raise self._error(stmt, f"postprocessor {type(postproc).__name__} fails: "
                                        f"{tvm_message(exc)}") from None
            if not ok:
                raise self._error(stmt, f"postprocessor {type(postproc).__name__} of the "
                                        f"{postproc_set!r} set rejects this schedule")
        if as_target(self.target).kind.name == "cuda":
            blocks: list[tuple[str, bool]] = []
            _walk_blocks(self.sch.mod["main"].body, blocks)
            unbound = [name for name, bound in blocks if not bound and name != "root"]
            if unbound:
                # VerifyGPUCode checks kernels, and finds none to check: the build would run
                # these blocks on the host, on device memory.
                raise self._error(stmt, f"block {unbound[0]!r} runs under no GPU thread after "
                                        f"the {postproc_set!r} postprocessors (no loop around "
                                        "it bound to blockIdx or threadIdx), so the CUDA build "
                                        "has no kernel for it; bind its loops (RewriteUnbound"
                                        "Block leaves a block annotated tiling_structure to "
                                        "the schedule that tiles it)")
        self.postproc_set = postproc_set

    def _check_tile_order(self, stmt: Stmt) -> None:
        """Raises when the reorder just applied left a piece of a tiled loop above an outer
        piece of the same loop.  TVM takes it, but no MetaSchedule script in the kept corpus
        writes it (0 of 15,568 reorders), and it can race: the RL run's one wrong kernel left
        ``ff3`` above ``ff2``, so ``reverse_compute_at`` copied back the 65 channels between
        an iteration's 2 and each thread of the parallel loop copied channels others were
        still accumulating (docs/rl-kl)."""
        named = [a.name for a in stmt.args if isinstance(a, Ref)]
        origins = {self._piece_of[n][0] for n in named if n in self._piece_of}
        for origin in sorted(origins):
            pieces = sorted((i, n) for n, (o, i) in self._piece_of.items()
                            if o == origin and self.alive(n))
            srefs = {n: self.sch.get_sref(self.rvs[n]) for _, n in pieces}
            for (_, outer), (_, inner) in pairwise(pieces):
                if _is_above(srefs[inner], srefs[outer]):
                    raise self._error(stmt, f"`{inner}` would be above `{outer}`: the pieces "
                                            f"of `{origin}` out of order, which MetaSchedule "
                                            "never writes and which can race once parallel")

    def _error(self, stmt: Stmt, message: str) -> DslSemanticError:
        return self._decoder.error(message, stmt.line, stmt.column)

    # ---- canonical names ------------------------------------------------------------------

    def expected_results(self, op: str, target: str | None = None, n: int | None = None,
                         *, factors: bool = False) -> list[str]:
        """The names the encoder gives the results of ``op`` on ``target`` (a block string for
        ``block``, else a name in scope) with ``n`` results, without binding them.  ``loops``
        and the block getters count their results themselves."""
        return self._names(_copy_namer(self._namer), set(self._nice), op, target, n, factors)

    def _canonical(self, stmt: Stmt) -> list[str]:
        target = stmt.args[0] if stmt.args else None
        target = target.name if isinstance(target, Ref) else target
        if stmt.op.startswith("@") or stmt.op == "postproc":
            return []
        names = self._names(self._namer, self._nice, stmt.op,
                            target if isinstance(target, str) else None, len(stmt.targets),
                            bool(stmt.options.get("factors")))
        return names

    def _names(self, namer: _Namer, nice: set[str], op: str, target: str | None, n: int | None,
               factors: bool) -> list[str]:
        def loops(name: str) -> list[Loop]:
            return self.loops(self.rvs[name]) if name in self.rvs else []

        def related(op: str, name: str) -> list[str]:
            return self.related(op, name) if name in self.rvs else []

        return result_names(namer, nice, op, target, n, factors, loops, related)

    # ---- queries --------------------------------------------------------------------------

    @property
    def _q(self) -> Unchecked:
        """The schedule for queries: its own random variables need no argument checks."""
        return Unchecked(self.sch)

    def alive(self, name: str) -> bool:
        """Whether ``name`` is bound and what it stands for still exists (a split loop, an
        inlined block do not)."""
        rv = self.rvs.get(name)
        if rv is None:
            return False
        if self.kinds.get(name) == "var":
            return True
        if name in self._locations and self._locations[name][1] < 0:
            return True  # TVM's "root" or "inline" marker: no statement behind it
        key = ("alive", name)  # only a change removes what a name stands for
        if key not in self._memo:
            try:
                self._q.get(rv)  # raises when the statement it stood for is gone
                self._memo[key] = True
            except Exception:  # noqa: BLE001  TVM: the sref was removed, or points to nothing
                self._memo[key] = False
        return self._memo[key]

    def names(self, kind: str) -> list[str]:
        """The names in scope of a kind ("block", "loop", "var") that are alive, in binding
        order.  Compute locations are not loops here (``locations``): TVM takes them only in
        ``compute_at``/``reverse_compute_at``, and other primitives can crash on its markers."""
        return [n for n, k in self.kinds.items()
                if k == kind and n not in self._locations and self.alive(n)]

    def pieces(self) -> list[str]:
        """The loops alive that a ``tile`` or ``split`` made, in binding order.  MetaSchedule
        tiles the loops a block has (or a fusion of them) and never tiles a tile's pieces
        again (none of the kept corpus' 10,805 tiles does)."""
        return [n for n in self.names("loop") if n in self._piece_of]

    def locations(self) -> list[str]:
        """The results of ``sample_compute_location`` whose location still exists."""
        return [n for n in self._locations if self.alive(n)]

    def annotated(self) -> dict[str, list[str]]:
        """Name alive -> the annotation keys (TVM's, ``meta_schedule.parallel``) this script
        put on it and has not taken off.  Annotating one again changes at most its value, and
        MetaSchedule's scripts never do it before ``postproc`` (the statement grammar, which
        leaves such names out, admits every statement of theirs: tests/test_schedule_aware.py
        walks every family under every rule set)."""
        out: dict[str, list[str]] = {}
        for name, key in sorted(self._annotated):
            if name in self.kinds and self.alive(name):
                out.setdefault(name, []).append(key)
        return out

    def annotations_on(self) -> dict[str, list[str]]:
        """Block or loop in scope -> the annotation keys (TVM's) it carries now, from this
        script or the workload: what ``unannotate`` may take off (TVM refuses any other)."""
        out: dict[str, list[str]] = {}
        for name in self.names("block") + self.names("loop"):
            try:
                keys = list(self._q.get(self.rvs[name]).annotations.keys())
            except Exception:  # noqa: BLE001  a location mark
                continue
            if keys:
                out[name] = [str(k) for k in keys]
        return out

    def just_drawn(self) -> str | None:
        """The value or location the last statement drew (``DRAWING_OPS``), else None.
        MetaSchedule's scripts use each in the very next statement (an ``annotate`` of
        ``unroll_explicit``, a ``compute_at``; all of the kept corpus' 31,730)."""
        return self._drawn

    def bound_blocks(self) -> list[str]:
        """The blocks a live name already holds.  ``block "NAME"`` for one of them binds a
        second name to the same block and changes nothing; MetaSchedule's scripts never write
        it before ``postproc`` (none of the kept corpus' scripts do)."""
        return [self._q.get(self.rvs[n]).name_hint for n in self.names("block")]

    def block_names(self) -> list[str]:
        """The blocks of the current module (what ``block "NAME"`` may fetch), root first."""
        found: list[tuple[str, bool]] = []
        _walk_blocks(self._q.mod["main"].body, found)
        return list(dict.fromkeys(name for name, _ in found))

    def loops(self, block_rv) -> list[Loop]:
        """The loops above a block (a name or random variable), outermost first."""
        import tvm

        rv = self.rvs[block_rv] if isinstance(block_rv, str) else block_rv
        found = []
        for loop_rv in self._q.get_loops(rv):
            loop = self._q.get(loop_rv)
            extent = int(loop.extent.value) if isinstance(loop.extent, tvm.tirx.IntImm) else None
            found.append(Loop(str(loop.loop_var.name), extent))
        return found

    def extent(self, loop: str) -> int | None:
        """A loop's extent, None when it is not a constant."""
        import tvm

        try:
            node = self._q.get(self.rvs[loop])
        except Exception:  # noqa: BLE001  a compute location marker (root, inline)
            return None
        return int(node.extent.value) if isinstance(node.extent, tvm.tirx.IntImm) else None

    def related(self, op: str, block: str) -> list[str]:
        """The blocks ``children``/``consumers``/``producers``/``output_blocks`` of ``block``
        give."""
        rv = self.rvs[block]
        get = {"children": self._q.get_child_blocks, "consumers": self._q.get_consumers,
               "producers": self._q.get_producers,
               "output_blocks": self._q.get_output_blocks}[op]
        return [str(self._q.get(b).name_hint) for b in get(rv)]

    def _children(self, rv) -> list[str]:
        return [str(self._q.get(b).name_hint) for b in self._q.get_child_blocks(rv)]

    def rfactor_rank(self, loop: str) -> int | None:
        """The rank of the buffer a reduction under ``loop`` writes (``rfactor``'s factor axis is
        at most that); None when no block under the loop writes one, or TVM does not factor
        the loop (tried on a copy of the schedule, factor axis 0: a loop that is not a
        reduction's, say; the pooling samples spent retries there)."""
        try:
            blocks = self._q.get_child_blocks(self.rvs[loop])
            ranks = [len(w.source.shape) for b in blocks for w in self._q.get(b).writes]
        except Exception:  # noqa: BLE001  a location marker, or a loop that is gone
            return None
        return max(ranks) if ranks and self._takes("rfactor", loop, (0,)) else None

    def inline_ops(self, block: str) -> list[str]:
        """Which of ``compute_inline`` and ``reverse_compute_inline`` TVM takes on ``block``
        now, tried on a copy of the schedule (a reduction block takes neither, an output block
        no ``compute_inline``); kept until a statement changes the kernel."""
        return [op for op in ("compute_inline", "reverse_compute_inline")
                if self._takes(op, block, ())]

    def move_targets(self, op: str, block: str) -> list[str]:
        """The places in scope ``compute_at`` (``reverse_compute_at``) may move ``block`` to: a
        loop that is not one of its own, holds every consumer (producer) of it, and where TVM
        takes the move (tried on a copy of the schedule: a strided pooling window, say, is
        refused), or a location ``sample_compute_location`` drew for it that TVM still takes
        (a statement since may have split its loop).  ``compute_at`` of a block that writes an
        output of the kernel is refused.  Kept until a statement changes the kernel."""
        key = ("moves", op, block, len(self.kinds))  # names are only added between changes
        if key not in self._memo:
            sch, rv = self._q, self.rvs[block]
            drawn = [n for n, (b, _) in self._locations.items() if b == block and self.alive(n)]
            related = sch.get_consumers(rv) if op == "compute_at" else sch.get_producers(rv)
            loops = []
            if related and not (op == "compute_at" and self._writes_output(rv)):
                above = set.intersection(*({sch.get(lp) for lp in sch.get_loops(other)}
                                           for other in related))
                above -= {sch.get(lp) for lp in sch.get_loops(rv)}
                loops = [n for n, node in self._loop_nodes().items()
                         if node in above and self._takes(op, block, (n,))]
            self._memo[key] = loops + [n for n in drawn
                                       if n not in loops and self._reaches(op, block, n)]
        return list(self._memo[key])

    def _reaches(self, op: str, block: str, location: str) -> bool:
        """Whether TVM moves ``block`` to a location drawn for it: a drawn loop can be out of
        reach since (the block moved deeper).  The root and inline marks are taken as they
        are (TVM 0.27 leaves the block where it is for both, a reduction included); a
        schedule's copy holds no mark, so they are not tried on one."""
        if self._locations[location][1] < 0:
            return True
        return self._takes(op, block, (location,))

    def _loop_nodes(self) -> dict[str, Any]:
        """Loop name in scope -> its TVM loop (hashed by identity), until a change."""
        key = ("loops", len(self.kinds))
        if key not in self._memo:
            self._memo[key] = {n: self._q.get(self.rvs[n]) for n in self.names("loop")}
        return self._memo[key]

    def _takes(self, op: str, name: str, args: tuple[str | int, ...]) -> bool:
        """Whether TVM applies ``op`` to the block or loop ``name`` (then the loops named, or
        the integers, in ``args``) now."""
        key = (op, name, args)
        if key not in self._memo:
            try:
                getattr(Unchecked(self._q.copy()), op)(self.rvs[name], *(
                    self.rvs[a] if isinstance(a, str) else a for a in args))
                self._memo[key] = True
            except Exception:  # noqa: BLE001  TVM's ScheduleError: the op is refused
                self._memo[key] = False
        return self._memo[key]

    def _writes_output(self, rv) -> bool:
        try:
            outputs = self._q.get_output_blocks(self._q.get_sblock("root"))
        except Exception:  # noqa: BLE001  no block named root: narrow nothing
            return False
        node = self._q.get(rv)
        return any(self._q.get(b).same_as(node) for b in outputs)

    def buffers(self, block: str) -> tuple[int, int]:
        """How many buffers ``block`` reads and writes."""
        node = self._q.get(self.rvs[block])
        return len(node.reads), len(node.writes)


def _is_above(upper, lower) -> bool:
    """Whether schedule node ``upper`` encloses ``lower`` (StmtSRefs)."""
    node = lower.parent
    while node is not None:
        if node.same_as(upper):
            return True
        node = node.parent
    return False


def apply_script(text: str, workload: Any, target: Any = None, *,
                 keep_tile_order: bool = False) -> LiveSchedule:
    """Apply a whole script statement by statement: the ``LiveSchedule`` it leaves, or the
    ``DslSemanticError`` (line, column, caret) of the first statement refused, as the
    schedule-aware sampler would refuse it (which also keeps tiles in order:
    ``keep_tile_order``).  ``dragon check --workload`` reports through this."""
    from .parser import parse

    program = parse(text)
    live = LiveSchedule(workload, target, source=program.source or text,
                        keep_tile_order=keep_tile_order)
    for stmt in program.statements:
        live.step(stmt)
    return live


def result_names(namer: _Namer, nice: set[str], op: str, target: str | None, n: int | None,
                 factors: bool, loops: Callable[[str], list[Loop]],
                 related: Callable[[str, str], list[str]]) -> list[str]:
    """The names the encoder gives ``op``'s results (``namer`` and ``nice`` advance), with the
    loops and related blocks of ``target`` read through ``loops`` and ``related``: a live
    schedule asks TVM, a ``live_view.LiveView`` its recorded answers."""
    if op == "block":
        return [namer.define("_", "block", target)]
    if op == "loops":
        found = loops(target) if target is not None else []
        names = [namer.define("_", "loop", lp.name if _SIMPLE.match(lp.name) else None)
                 for lp in found]
        nice.update(t for t, lp in zip(names, found, strict=True) if lp.name == t)
        return names
    if n is None and op in ("children", "consumers", "producers", "output_blocks"):
        n = len(related(op, target)) if target is not None else 0
    n = 1 if n is None else n
    kind = _OUTPUT_OF.get(op, "var")
    if op in ("tile", "partitioned_tile", "split"):
        hints = [f"{target}{k}" for k in range(n)] if target in nice else [None] * n
        names = [namer.define("_", "loop", h) for h in hints]
        if factors:
            names += [namer.define("_", "var") for _ in range(n)]
        return names
    return [namer.define("_", kind) for _ in range(n)]


def output_kind(op: str) -> str | None:
    """The kind of name a statement binds (None: it binds none)."""
    if op.startswith("@"):
        return OUTPUT_TYPES.get(op[1:])
    return _OUTPUT_OF.get(op)


def _walk_blocks(stmt, found: list[tuple[str, bool]], bound: bool = False) -> None:
    """Every block in program order, root included, with whether a loop bound to a GPU thread
    (blockIdx, threadIdx) encloses it."""
    from tvm import s_tir, tirx

    if isinstance(stmt, s_tir.SBlockRealize):
        found.append((str(stmt.block.name_hint), bound))
        _walk_blocks(stmt.block.body, found, bound)
    elif isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _walk_blocks(child, found, bound)
    else:
        if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
            bound = True
        for attr in ("body", "then_case", "else_case"):
            child = getattr(stmt, attr, None)
            if child is not None:
                _walk_blocks(child, found, bound)


def _copy_namer(namer: _Namer) -> _Namer:
    other = object.__new__(_Namer)
    other.taken = set(namer.taken)
    other.counters = dict(namer.counters)
    other.script_name = dict(namer.script_name)
    return other


def _copy_decoder(decoder: _Decoder) -> _Decoder:
    other = object.__new__(_Decoder)
    other.__dict__.update(decoder.__dict__)
    other.env = dict(decoder.env)
    other.out = type(decoder.out)(list(decoder.out.insts), decoder.out.postproc_set,
                                  list(decoder.out.errors))
    return other
