"""The next statement a script may have, read off its live schedule (llguidance Lark).

The schedule-aware sampler (``training.sampling.schedule_aware``) keeps, per script, a
``dragon_dsl.live.LiveSchedule`` and, for the statement being written, a grammar of one line
built here from that state.  It admits, in canonical layout:

- names in scope only, of the kind each argument takes (a block, a loop, a variable), and
  only those that still exist (a loop that was split, a block that was inlined, are gone);
- results named as the encoder names them (``block "C" -> C``, ``loops C -> i, j, k``, then
  ``l<N>``, ``b<N>``, ``v<N>``): the names are written for the model, never chosen by it;
- ``block "NAME"`` for the blocks the module has now (cache blocks included) that no name in
  scope holds yet: fetching a block again changes nothing, and MetaSchedule's scripts never
  do it before ``postproc`` (the RL model learned to pad its scripts with such lines);
- ``loops B`` binding exactly the loops B has, and only for a block that has loops;
  ``consumers``/``producers``/``children`` binding exactly the blocks TVM returns (none
  too: MetaSchedule's multi-level tiling writes ``consumers C`` of a block without any);
- ``tile L [..]`` with as many factors as MetaSchedule's design space tiles a loop of the
  kernel into (``tile_lengths``; else 2 to 5), whose product is L's current extent (given
  ``tile_max_inner``, the last within sample_perfect_tile's bound on the innermost factor, 64
  unless the design writes ``max_inner=``, and only such a bound written), and never of a
  loop that a tile or split made (MetaSchedule never tiles a piece again);
- buffer indices within the block's reads (``cache_read``) or writes (``cache_write``,
  ``set_scope``), and a storage scope of the target (``scopes_of``), never another string;
- ``reorder`` without a loop right after itself (TVM refuses any repeat); one that leaves a
  piece of a tiled loop above an outer piece of the same loop is refused when applied
  (``LiveSchedule(keep_tile_order=True)``, the sampler's schedules) and sampled again:
  MetaSchedule never writes it, and behind a cache write and a parallel loop it races;
- ``sample_categorical`` over the candidate lists MetaSchedule's rules offer for the workload
  and target, with an index inside the list, and ``annotate`` with the keys those rules write
  (``tiling_structure`` only on a block with loops: MultiLevelTiling reads it to tile one),
  never on a name that this script already annotated with that key (``unannotate`` frees it):
  the RL model padded its scripts with ``annotate root parallel=32`` again and again, and no
  MetaSchedule script annotates one name with one key twice; ``unannotate`` only of a key the
  name carries now (``annotations_on``: TVM refuses any other);
- only the statements MetaSchedule's design spaces for the workload write (``ops``,
  ``constraints.script_ops``: never ``blockize`` on llvm), ``parallel``, ``vectorize`` and
  ``unroll_explicit`` on the root block only, ``unannotate`` only of the keys MetaSchedule
  takes off (``random_compute_producer``, ``schedule_rule``), and a value or location just
  drawn used by the very next statement (a location never again): the RL model padded its
  pooling scripts with each;
- ``postproc auto SET`` for the target's postprocessor set, only as the last statement and
  only once a statement changed the kernel (``LiveSchedule.changes``: not a fetch or a draw
  alone); a script of ``block`` lines and ``postproc`` is the unscheduled kernel, which
  MetaSchedule never writes (none of the corpus' 16,439 records) and the built-in model wrote
  on most pooling kernels;
- ``compute_inline``, ``compute_at``, ``sample_compute_location`` ... of a block under loops
  only: TVM refuses each of them on the root block; ``compute_inline`` and
  ``reverse_compute_inline`` only of a block TVM inlines now (``inline_ops``: never a
  reduction), ``compute_at`` and ``reverse_compute_at`` only to a loop above every consumer
  (producer) of the block that is not its own, or a location drawn for it that TVM still
  takes (``move_targets``); ``rfactor`` only of a loop TVM factors (``rfactor_rank``).

Statements MetaSchedule rarely writes before ``postproc`` (``tensorize``, ``transform_layout``,
``reindex`` ...) start with a name in scope of the kind they take (``FALLBACK_OPS``) and keep
the rest of their syntax from the whole-script grammar (but the one name a single-result
statement binds is the encoder's, ``ONE_RESULT_OPS``), which the sampler applies at
the same time (the general form ``@Kind(...)`` is not admitted: MetaSchedule's scripts need it
only after ``postproc``, and arbitrary instructions can crash TVM in-process); their other
names and meaning are checked when the statement is
applied, and a statement TVM refuses is rolled back and sampled again.  What this grammar
admits is a subset of ``dragon_dsl.parse``; what it adds to the language's rules are the
canonical names and layout (the form training data has), nothing a checker would report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dragon_dsl.live import MOVE_OPS, LiveSchedule
from dragon_dsl.live_view import LiveView
from dragon_dsl.printer import annotation_key_text
from dragon_dsl.statements import STATEMENTS, annotation_key

__all__ = ["CPU_SCOPES", "FALLBACK_OPS", "GENERAL_KINDS", "GPU_SCOPES", "THREAD_AXES",
           "scopes_of", "statement_grammar"]

TILE_LENGTHS = (2, 3, 4, 5)
# The innermost-factor bound of a tile that writes no ``max_inner=`` (sample_perfect_tile's).
DEFAULT_MAX_INNER = STATEMENTS["sample_tile"].options["max_inner"].default
SPLIT_LENGTHS = (2, 3, 4, 5)
THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread.x", "vthread.y", "vthread.z")
# Instruction kinds without a statement of their own that MetaSchedule's rules write before
# `postproc` (the tensor-core rules pad einsums); no other general form is admitted.
GENERAL_KINDS = ("PadEinsum",)
# Statements whose arguments after the first this grammar does not narrow: their syntax comes
# from the whole-script grammar, their meaning from applying them.  The first argument is a name
# in scope of the kind the statement takes ("loop", "block", or "any" of both), so that a model
# whose mass sits on a refused line (a block fetched again) is not led by the shared first token
# (`block` -> `blockize`) into a name that cannot exist, refused until the sample is closed: the
# built-in model ended most pooling scripts that way, with nothing changed.
FALLBACK_OPS = {"partitioned_tile": "loop", "sample_tile": "loop",
                "sample_partitioned_tile": "loop", "loop_partition": "loop", "merge": "loop",
                "add_unit_loop": "any", "reindex": "block", "read_at": "loop",
                "write_at": "loop", "blockize": "loop", "tensorize": "any",
                "storage_align": "block", "transform_layout": "block",
                "transform_block_layout": "block", "output_blocks": "block"}
# The single-result statements among them: the name they bind is written for the model.
ONE_RESULT_OPS = ("merge", "add_unit_loop", "reindex", "read_at", "write_at", "blockize")
CPU_SCOPES = ("global", "local")
GPU_SCOPES = ("global", "shared", "shared.dyn", "local", "warp", "wmma.matrix_a",
              "wmma.matrix_b", "wmma.accumulator", "m16n8k8.matrixA", "m16n8k8.matrixB",
              "m16n8k8.matrixC")


def _lit(text: str) -> str:
    return json.dumps(text)


def _alts(items: Iterable[str]) -> str:
    items = list(dict.fromkeys(items))
    return "(" + " | ".join(items) + ")" if items else ""


class _Rules:
    def __init__(self, ops: Iterable[str] | None = None) -> None:
        self.rules: dict[str, str] = {}
        self.stmts: list[str] = []
        self.ops = None if ops is None else {*ops, "postproc"}

    def add(self, name: str, body: str) -> str:
        self.rules.setdefault(name, body)
        return name

    def stmt(self, op: str, body: str) -> None:
        """A statement of ``op`` (skipped when ``op`` is not among the ops admitted)."""
        if body and (self.ops is None or op in self.ops):
            self.stmts.append(body)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _factorizations(rules: _Rules, extent: int, n: int, max_inner: int | None = None
                    ) -> str | None:
    """Rule ``tf_E_n`` (``tf_E_n_M``): ordered factorizations of E into n factors, the last
    at most ``max_inner`` (None: any), in canonical spacing; None when there is none."""
    name = f"tf_{extent}_{n}" + (f"_{max_inner}" if max_inner is not None else "")
    if name not in rules.rules:
        if n == 1:
            if max_inner is not None and extent > max_inner:
                return None
            rules.add(name, _lit(str(extent)))
        else:
            alts = [(d, _factorizations(rules, extent // d, n - 1, max_inner))
                    for d in _divisors(extent)]
            rules.add(name, " | ".join(f'{_lit(f"{d}, ")} {rest}'
                                       for d, rest in alts if rest is not None))
    return name


def _factorizations_inner_first(rules: _Rules, extent: int, n: int,
                                max_inner: int | None = None) -> str | None:
    """Rule ``ti_E_n`` (``ti_E_n_M``): the factorizations of ``_factorizations`` written
    innermost first (``training.prompts.flip_tiles``): the first factor at most ``max_inner``,
    the rest any ordered factorization of what is left (a set that reads the same reversed)."""
    if n == 1:
        return _factorizations(rules, extent, 1, max_inner)
    name = f"ti_{extent}_{n}" + (f"_{max_inner}" if max_inner is not None else "")
    if name not in rules.rules:
        alts = [(d, _factorizations(rules, extent // d, n - 1)) for d in _divisors(extent)
                if max_inner is None or d <= max_inner]
        if not alts:
            return None
        rules.add(name, " | ".join(f'{_lit(f"{d}, ")} {rest}' for d, rest in alts))
    return name


def _innermost_bound(bounds: Sequence[int]) -> int | None:
    """The largest innermost factor a tile may have under MetaSchedule's ``bounds`` for its loop
    (None: no bound, when none is known or one of them is 0 or less: no bound in TVM)."""
    if not bounds or any(b <= 0 for b in bounds):
        return None
    return max(bounds)


def _names(names: Sequence[str]) -> str:
    return _lit(", ".join(names))


def _annotated(key: str, targets: dict[str, Sequence[str]] | None, refs: dict[str, Any]
               ) -> tuple[str | None, list[str]]:
    """The rule and names ``annotate`` may put ``key`` on: the root block, blocks, loops, or
    either (``refs``: kind -> (rule, names))."""
    kinds = set((targets or {}).get(key, ("block", "loop")))
    if kinds == {"root"}:
        return refs["root"]
    if kinds <= {"block", "root"}:
        return refs["block"]
    if kinds == {"loop"}:
        return refs["loop"]
    return refs["any"]


def statement_grammar(live: LiveSchedule | LiveView, *, postproc_set: str,
                      categorical: Sequence[Sequence[int]] = (),
                      annotations: Sequence[str] = (),
                      annotation_values: dict[str, Sequence[str]] | None = None,
                      annotation_targets: dict[str, Sequence[str]] | None = None,
                      tile_lengths: Mapping[str, Sequence[int]] | None = None,
                      tile_max_inner: Mapping[str, Sequence[int]] | None = None,
                      storage_scopes: Sequence[str] | None = None,
                      ops: Iterable[str] | None = None,
                      unannotate_keys: Sequence[str] | None = None,
                      tile_order: str = "outer") -> str:
    """One statement line (ending with ``\\n``) that may come next in ``live``'s script
    (a live schedule, or a ``LiveView`` of one held in another process).

    ``postproc_set``: the target's postprocessor set, which ``postproc auto`` must name.
    ``categorical``: the candidate lists ``sample_categorical`` may draw from (see
    ``training.grammars.constraints.categorical_lists``); empty: any list of integers.
    ``annotations``: the keys ``annotate`` may write (``constraints.annotation_keys``);
    empty: any key.  ``annotation_values``: per key, the values it may take
    (``training.grammars.constraints.annotation_values``; ``var`` is any variable in scope).
    ``annotation_targets``: per key, what it may annotate, ``"root"`` (the root block),
    ``"block"`` and/or ``"loop"`` (``constraints.annotation_targets``); a key not there may
    annotate either.
    ``tile_lengths``: per loop name, the numbers of factors a ``tile`` of it may have
    (``constraints.tile_lengths``); a loop not named there takes any length named there;
    None: any of ``TILE_LENGTHS`` for every loop.
    ``tile_max_inner``: per loop name, MetaSchedule's bounds on a tile's innermost factor
    (``constraints.tile_max_inner``); a tile's last factor is at most the largest, and
    ``max_inner=`` may name only a bound there other than the default; a loop not named takes
    the bounds of any; None: no bound, and any ``max_inner=``.
    ``storage_scopes``: the scopes ``cache_read``, ``cache_write`` and ``set_scope`` may name;
    None: ``scopes_of(postproc_set)``.
    ``ops``: the statements (their first word; ``@Kind`` for a general form) that may come,
    ``constraints.script_ops``; None: any.  ``unannotate_keys``: the keys ``unannotate`` may
    take off (``constraints.unannotate_keys``); None: any the name carries.
    ``tile_order``: ``"inner"`` writes a tile's factors innermost first, as a model of prompt
    format 3 does (``training.prompts.flip_tiles`` turns its line into Dragon's).

    A location the last statement drew (``sample_compute_location``) is used by this one, as
    MetaSchedule's scripts always do (the RL model drew locations it never used, and moved
    blocks to old ones again), when TVM takes the move; so is a value drawn
    (``sample_categorical``) where only an annotation can use it (no ``split`` admitted:
    MetaSchedule's GPU scripts fetch loops before splitting by it), and a value is drawn only
    where a statement could use it.
    """
    if live.postproc_set is not None:
        return 'start: ""'  # the script is complete: nothing may follow
    r = _Rules(ops)
    drawn = live.just_drawn()
    uses: list[tuple[str, str]] = []  # the statements that use ``drawn``
    blocks, loops, variables = live.names("block"), live.names("loop"), live.names("var")
    bref = r.add("bref", _alts(_lit(b) for b in blocks)) if blocks else None
    lref = r.add("lref", _alts(_lit(lp) for lp in loops)) if loops else None
    anyref = r.add("anyref", _alts(_lit(n) for n in blocks + loops)) if blocks or loops else None
    vref = r.add("vref", _alts(_lit(v) for v in variables)) if variables else None
    r.add("INT", "/-?[0-9]{1,9}/")
    r.add("UINT", "/[0-9]{1,9}/")
    r.add("BOOL", '"true" | "false"')
    r.add("STRING", r'/"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/')

    def one(op: str, target: str | None = None, n: int | None = None) -> str:
        return _lit(" -> " + ", ".join(live.expected_results(op, target, n)))

    # Blocks under loops: the root block (and a block without loops) is never tiled, and
    # cannot be inlined, moved or given a compute location; TVM refuses each, and a model that
    # leaned on such a line spent its retries there until the sample was closed.
    movable = [b for b in blocks if live.loops(b)]

    # getters
    bound = set(live.bound_blocks())  # fetching a block again changes nothing
    unbound = [b for b in live.block_names() if b not in bound]
    if unbound:
        r.stmt("block", _alts(f'{_lit(f"block {json.dumps(b)} -> ")} '
                     f'{_lit(live.expected_results("block", b)[0])}' for b in unbound))
    for b in blocks:
        loop_names = live.expected_results("loops", b)
        if loop_names:  # `loops B` of a block without loops binds nothing and changes nothing
            r.stmt("loops", _lit(f"loops {b} -> " + ", ".join(loop_names)))
        for op in ("consumers", "producers", "children"):
            try:
                n = len(live.related(op, b))
            except Exception:  # noqa: BLE001  e.g. producers of the root block
                continue
            names = live.expected_results(op, b, n)
            r.stmt(op, _lit(f"{op} {b}" + (" -> " + ", ".join(names) if names else "")))

    # Tiles and splits.  The names a tile or split binds depend only on the number of factors,
    # unless the loop is named after a workload loop (i -> i0, i1): loops are grouped by what
    # their alternatives share, which keeps the grammar (and its compile time) small.
    tiles: dict[tuple, list[str]] = {}
    splits: dict[tuple, list[str]] = {}
    pieces = set(live.pieces())
    any_length = sorted({k for ks in (tile_lengths or {}).values() for k in ks}) or TILE_LENGTHS
    any_bound = tuple(sorted({b for bs in (tile_max_inner or {}).values() for b in bs}))
    for lp in loops:
        extent = live.extent(lp) if lp not in pieces else None  # a piece is not tiled again
        bounds = (tile_max_inner or {}).get(lp, any_bound)
        for k in (tile_lengths or {}).get(lp, any_length):
            names = tuple(live.expected_results("tile", lp, k))
            named = tuple(live.expected_results("tile", lp, k, factors=True)[k:])
            if extent is not None:
                tiles.setdefault((extent, k, names, named, bounds), []).append(lp)
        for k in SPLIT_LENGTHS:
            splits.setdefault((k, tuple(live.expected_results("split", lp, k))), []).append(lp)
    for (extent, k, names, named, bounds), group in tiles.items():
        factors = (_factorizations_inner_first if tile_order == "inner" else _factorizations)(
            r, extent, k, _innermost_bound(bounds))
        if factors is None:
            continue
        if tile_max_inner is None:
            option = '(" max_inner=" UINT)?'
        else:  # only a bound MetaSchedule's rules write (the default is left unwritten)
            written = [b for b in bounds if b != DEFAULT_MAX_INNER]
            option = f'(" max_inner=" {_alts(_lit(str(b)) for b in written)})?' if written else ""
        head = f'"tile " {_alts(_lit(lp) for lp in group)} " [" {factors}'
        r.stmt("tile", f'{head} "]" {option} {_names_after(names)} '
               f'({_lit(" factors " + ", ".join(named))})?')
    if lref:
        factor = "(" + " | ".join(x for x in ['"none"', vref, "UINT"] if x) + ")"
        for (k, names), group in splits.items():
            items = ' ", " '.join([factor] * k)
            r.stmt("split", f'"split " {_alts(_lit(lp) for lp in group)} " [" {items} "]" '
                   f'{_split_options()} {_names_after(names)}')
        r.stmt("fuse", f'"fuse " {lref} (" " {lref})* (" preserve_unit_iters=" BOOL)? '
                       f'{one("fuse")}')
        # TVM refuses a loop twice; the pooling samples spent retries on `reorder l1 l1`.  No
        # loop right after itself (a rule per loop, after which any other loop may come): any
        # repeat at all needs the subsets of loops as states (llguidance's regex intersection
        # of one negation per loop ran out of fuel on twelve loops).
        for i in range(len(loops)):
            r.add(f"ro{i}", _alts(f"{_lit(other)} (\" \" ro{j})?"
                                  for j, other in enumerate(loops) if j != i))
        firsts = [f'{_lit(lp + " ")} ro{i}' for i, lp in enumerate(loops) if len(loops) > 1]
        if firsts:
            r.stmt("reorder", f'"reorder " {_alts(firsts)}')
        for op in ("parallel", "vectorize", "unroll"):
            r.stmt(op, f'"{op} " {lref}')
        r.stmt("bind", f'"bind " {lref} " " {_alts(_lit(json.dumps(a)) for a in THREAD_AXES)}')
    if anyref:
        value = "(" + " | ".join(x for x in [anyref, vref, "INT", "STRING",
                                             '"[" INT (", " INT)* "]"'] if x) + ")"
        key = _alts(_lit(k) for k in annotations) if annotations else "(ANNKEY | STRING)"
        if not annotations:
            r.add("ANNKEY", r"/[a-z_][a-z0-9_]*/")
        if annotation_values:
            held = live.annotated()
            roots = [b for b, hint in zip(blocks, live.bound_blocks(), strict=True)
                     if hint == "root"]
            rootref = r.add("rootref", _alts(_lit(b) for b in roots)) if roots else None
            refs = {"root": (rootref, roots), "block": (bref, blocks), "loop": (lref, loops),
                    "any": (anyref, blocks + loops)}
            for i, (k, texts) in enumerate(annotation_values.items()):
                options = [_lit(t) for t in texts if t != "var"]
                if "var" in texts and vref:
                    options.append(vref)
                on, names = _annotated(k, annotation_targets, refs)
                if k == "tiling_structure" and on == bref:
                    # read by MultiLevelTiling on the block it tiles: a block without loops
                    # (the root) is never tiled, and MetaSchedule never annotates one
                    names = movable
                    on = r.add("tiledref", _alts(_lit(b) for b in names)) if names else None
                # a name this script already annotated with the key: again changes at most
                # the value, and MetaSchedule never writes that (live.annotated)
                free = [n for n in names if annotation_key(k) not in held.get(n, ())]
                if on and len(free) < len(names):
                    on = r.add(f"annref{i}", _alts(_lit(n) for n in free)) if free else None
                if options and on:
                    r.stmt("annotate", f'"annotate " {on} {_lit(" " + k + "=")} '
                                       f'{_alts(options)}')
                if on and "var" in texts:
                    uses.append(("annotate", f'"annotate " {on} {_lit(f" {k}={drawn}")}'))
        else:
            r.stmt("annotate", f'"annotate " {anyref} " " {key} "=" {value}')
            uses.append(("annotate", f'"annotate " {anyref} " " {key} {_lit(f"={drawn}")}'))
    # `unannotate` only of a key the name carries now (TVM refuses any other; a pooling
    # sample took `random_compute_producer` off a loop that never had it), and that
    # MetaSchedule takes off (the RL model took `parallel` off the root to put it back)
    for n, keys in live.annotations_on().items():
        keys = [annotation_key_text(k) for k in keys]
        keys = [k for k in keys if unannotate_keys is None or k in unannotate_keys]
        r.stmt("unannotate", f'{_lit(f"unannotate {n} ")} {_alts(_lit(k) for k in keys)}')
    mref = r.add("mref", _alts(_lit(b) for b in movable)) if movable else None
    # Moves and inlines TVM takes: a block goes under a loop above all its consumers
    # (producers), or to a location drawn for it; inlined only where TVM inlines it (never a
    # reduction).  Offered any place, the held-out pooling kernels spent their retries on
    # `compute_inline` of the pooling reduction and moves across blocks.
    # A drawn location is a place only right after it was drawn: moving the block there
    # again, or to a location drawn earlier, MetaSchedule never does.
    at_options = '(" preserve_unit_loops=" BOOL)? (" index=" INT)?'
    earlier = set(live.locations()) - {drawn}
    for b in movable:
        for op in MOVE_OPS:
            places = [p for p in live.move_targets(op, b) if p not in earlier]
            if places:
                r.stmt(op, f'{_lit(f"{op} {b} ")} {_alts(_lit(p) for p in places)} {at_options}')
            if op == "compute_at" and drawn in places:
                uses.append((op, _lit(f"{op} {b} {drawn}")))
    # No `decompose_reduction`: `postproc auto` decomposes every reduction itself
    # (RewriteReductionBlock), MetaSchedule's scripts never write it before, and a reduction
    # decomposed earlier can leave RewriteParallelVectorizeUnroll refusing the closing
    # `postproc` (a conv2d sample of the 1,000-sample test: parallel root, decomposed at `xx`).
    if lref:
        # factor_axis within the rank of what the loop's blocks write: TVM 0.27 crashes the
        # process (a segfault in RFactor) on an axis out of range, and the sampler applies
        # statements in-process.
        for lp in loops:
            rank = live.rfactor_rank(lp)
            if rank is not None:
                axes = _alts(_lit(str(a)) for a in range(rank + 1))
                r.stmt("rfactor", f'{_lit(f"rfactor {lp} ")} {axes} {one("rfactor")}')
    for op in ("compute_inline", "reverse_compute_inline"):
        r.stmt(op, _alts(_lit(f"{op} {b}") for b in movable if op in live.inline_ops(b)))
    if mref:
        drawn_name = one("sample_compute_location")
        r.stmt("sample_compute_location",
               f'"sample_compute_location " {mref} " " ("-2" | "-1" | UINT) {drawn_name}')
    if bref:
        consumers = f'(" consumers=[" {bref} (", " {bref})* "]")?'
        scope = r.add("scope", _alts(_lit(json.dumps(sc)) for sc in (
            storage_scopes if storage_scopes is not None else scopes_of(postproc_set))))
        for b in blocks:
            reads, writes = live.buffers(b)
            for op, count in (("cache_read", reads), ("cache_write", writes)):
                if count:
                    r.stmt(op, f'{_lit(f"{op} {b} ")} {_alts(_lit(str(i)) for i in range(count))} '
                           f'" " {scope} {consumers} {one(op)}')
            if writes:
                r.stmt("set_scope", f'{_lit(f"set_scope {b} ")} '
                       f'{_alts(_lit(str(i)) for i in range(writes))} " " {scope}')
    # sample_categorical, when a statement could use what it draws: an annotation, or (on a
    # GPU) a split's factor, which MetaSchedule writes after fetching the loops
    split_takes_it = r.ops is None or "split" in r.ops  # its loop may be fetched later
    name = one("sample_categorical")
    if split_takes_it or any(op == "annotate" for op, _ in uses):
        lists = [f'{_lit("sample_categorical [" + ", ".join(map(str, values)) + "] ")} '
                 f'{_alts(_lit(str(i)) for i in range(len(values)))} {name}'
                 for values in dict.fromkeys(tuple(v) for v in categorical)]
        r.stmt("sample_categorical", _alts(lists) if lists else
               f'"sample_categorical [" INT (", " INT)* "] " UINT {name}')
    # what is left to the whole-script grammar and to applying it
    r.add("REST", r"/[^\n]*/")
    refs = {"loop": lref, "block": bref, "any": anyref}
    for op, kind in FALLBACK_OPS.items():
        if not refs[kind]:
            continue
        if op in ONE_RESULT_OPS:
            # the one name it binds is the encoder's (a model that wrote `-> b1`, a name already
            # bound, was refused): the rest of the line is one lexeme ending with it
            tail = r.add(f"TAIL_{op.upper()}", f"/( [^\\n]*)?{_regex_text(one(op))}/ "
                                               "& ~/.*->.*->.*/")
            r.stmt(op, f'{_lit(op + " ")} {refs[kind]} {tail}')
        else:
            r.stmt(op, f'{_lit(op + " ")} {refs[kind]} (" " REST)?')
    for k in GENERAL_KINDS:
        r.stmt(f"@{k}", f'{_lit(f"@{k}(")} REST')
    if live.changes:
        # A script of fetches and draws alone is the unscheduled kernel: none of MetaSchedule's
        # does that, and a model that ends one (the built-in model did on most pooling kernels)
        # spends an attempt on the baseline.  Forced closings (the token budget) still end it.
        r.stmt("postproc", _lit(f"postproc auto {postproc_set}"))

    if drawn is not None:
        using = _Rules(r.ops)
        kind = "location" if drawn in live.locations() else "var"
        for op, body in uses if kind == "location" or not split_takes_it else ():
            if (op == "compute_at") == (kind == "location"):
                using.stmt(op, body)
        if using.stmts:
            r.stmts = using.stmts
    body = "\n    | ".join(r.stmts)
    lines = ['start: stmt "\\n"', f"stmt: {body}"]
    lines += [f"{k}: {v}" for k, v in r.rules.items()]
    return "\n".join(lines) + "\n"


def scopes_of(postproc_set: str) -> tuple[str, ...]:
    """The storage scopes a cache or ``set_scope`` may name for a target's postprocessor set:
    TVM refuses a string that is not a scope (the pooling samples wrote buffer names there),
    and a CPU has no shared or tensor-core memory (MetaSchedule's llvm scripts name only
    ``global``)."""
    return CPU_SCOPES if postproc_set == "llvm" else GPU_SCOPES


def _regex_text(text: str) -> str:
    """``text`` (a JSON string literal, or a bare name) as a literal inside ``/.../``."""
    if text.startswith('"'):
        text = json.loads(text)
    return "".join(c if c.isalnum() or c == "_" else f"\\{c}" if c in ".^$|?*+()[]{}\\/-"
                   else c for c in text)


def _names_after(names: Sequence[str]) -> str:
    return _lit(" -> " + ", ".join(names))


def _split_options() -> str:
    return '(" preserve_unit_iters=" BOOL)? (" disable_predication=" BOOL)?'
