"""Workload-aware constraints: ``grammar/dragon.lark`` narrowed to one kernel, for llguidance.

The language's grammar admits any script; this narrows it so that a sampled script can only

- get blocks that exist: ``block "NAME" -> NAME`` for the kernel's blocks (and ``root``), the
  variable named after the block, as the encoder names it;
- tile a kernel loop by factors whose product is the loop's extent: ``tile i [..]`` for a loop
  ``i`` of extent E offers only ordered factorizations of E into 2 to 5 factors (rules over E's
  divisors, not an enumeration); loops the script derives itself (``l3``, ``b0``, ...) keep
  the plain rule;
- draw categorical decisions from the candidate lists MetaSchedule's rules offer for this
  workload, target and rule set (unroll steps, cooperative-fetch widths, thread extents), read
  from its design spaces (``categorical_lists``), with an index inside the list.

Like ``sampling_grammar`` (which it starts from) it has no name ranges and admits the canonical
layout only.  The result is
llguidance Lark (it is compiled in milliseconds per workload), not for the Lark
parser: samples are still parsed with the one grammar.  Every MetaSchedule-sampled script of
the workload stays accepted (tested), so the constraints remove only what cannot apply.

Both grammars are derived from ``grammar/dragon.lark`` rule by rule, by name
(``dragon_dsl.grammar.Grammar``): re-spacing, comments or reordered alternatives change
nothing, and a rule that is gone or changed shape raises ``GrammarError`` naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from codegen.search import search_space
from codegen.targets import default_rules
from dragon_dsl.grammar import Grammar
from dragon_dsl.printer import annotation_key_text, expand_ranges
from dragon_dsl.statements import STATEMENTS
from training.grammars.layout import canonical_lines, canonical_spacing
from training.grammars.statement import DEFAULT_MAX_INNER
from training.prompts.templates import STOP

if TYPE_CHECKING:
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["MAX_FACTORS", "annotation_keys", "annotation_targets", "annotation_values",
           "categorical_lists", "expand_ranges", "kernel_loops", "narrowing", "sampling_grammar",
           "script_ops", "tile_lengths", "tile_max_inner", "unannotate_keys", "with_end_marker",
           "workload_grammar"]

TILE_LENGTHS = (2, 3, 4, 5)
_DERIVED = re.compile(r"^[lbv][0-9]+$")


def kernel_loops(workload: WorkloadLike) -> tuple[list[str], dict[str, set[int]]]:
    """The kernel's block names, and each loop name with the extents it has in some block."""
    from codegen.workloads.inspect import blocks as kernel_blocks

    blocks, loops = [], {}
    for block in kernel_blocks(workload):
        blocks.append(block.name)
        for loop in block.loops:
            loops.setdefault(loop.name, set()).add(int(loop.extent))
    return blocks, loops


def categorical_lists(workload: WorkloadLike, target: TargetLike = "llvm",
                      rules: str | None = None) -> tuple[tuple[int, ...], ...] | None:
    """The candidate lists MetaSchedule draws categorical decisions from for ``workload`` on
    ``target`` under the rule set ``rules`` (``codegen.targets.RULE_SETS``; None: the target's
    default, ``default_rules``), in order of first use; None when MetaSchedule cannot generate
    a design space for the pair.

    They are read from the ``SampleCategorical`` instructions of the design spaces
    (``codegen.search.search_space``), not from the schedule rule objects nor from a list kept
    here: the design space is exactly the instructions MetaSchedule samples decisions for, and
    a sampled trace replays it with new decisions (postprocessors sample nothing), so the lists
    are exact for the workload, the target and the rule set, and follow TVM when it changes.
    The rule objects do not say as much: AutoBind and CrossThreadReduction derive their thread
    extents from the target (max threads per block, warp size) and the block when they apply,
    and which rules apply at all depends on the workload.  Generating the spaces is cheap next to
    sampling traces, and ``search_space`` keeps them for the process (the first one costs 15-25 s).

    >>> from codegen.workloads import workload
    >>> categorical_lists(workload("matmul(m=16,n=16,k=16)"))
    ((0, 16, 64, 512),)
    """
    try:
        space = search_space(workload.mod, target, rules or default_rules(target))
    except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
        return None
    return space.derived("categorical_lists", _categorical_lists)


def _categorical_lists(space) -> tuple[tuple[int, ...], ...]:
    lists = [tuple(int(v) for v in inst.attrs[0]) for design in space.spaces
             for inst in design.trace.insts if inst.kind.name == "SampleCategorical"]
    return tuple(dict.fromkeys(lists))


def annotation_values(workload: WorkloadLike, target: TargetLike = "llvm",
                      rules: str | None = None) -> dict[str, tuple[str, ...]] | None:
    """For each annotation key MetaSchedule's rules write for ``workload`` on ``target``, the
    values they write, as a script spells them (``32``, ``"SSRSRS"``; ``var`` stands for a
    sampled variable), read from the design spaces' ``Annotate`` instructions.  Schedule-aware
    sampling admits only these: an arbitrary ``vectorize=999999`` makes MetaSchedule's own
    postprocessors exhaust the memory.  None when no design space can be generated."""
    try:
        space = search_space(workload.mod, target, rules or default_rules(target))
    except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
        return None
    return dict(space.derived("annotation_values", _annotation_values))


def _annotation_values(space) -> dict[str, tuple[str, ...]]:
    import tvm

    values: dict[str, list[str]] = {}
    for design in space.spaces:
        for inst in design.trace.insts:
            if inst.kind.name != "Annotate":
                continue
            value = inst.inputs[1]
            if isinstance(value, tvm.tirx.Var):
                text = "var"
            elif isinstance(value, tvm.tirx.IntImm):
                text = str(int(value.value))
            elif isinstance(value, str) or type(value).__name__ == "StringImm":
                text = json.dumps(str(getattr(value, "value", value)))
            elif hasattr(value, "__len__"):  # a list of integers (software pipelines)
                text = "[" + ", ".join(str(int(getattr(v, "value", v))) for v in value) + "]"
            else:
                text = "var"
            values.setdefault(annotation_key_text(str(inst.attrs[0])), []).append(text)
    return {k: tuple(dict.fromkeys(v)) for k, v in values.items()}


def annotation_targets(workload: WorkloadLike, target: TargetLike = "llvm",
                       rules: str | None = None) -> dict[str, tuple[str, ...]] | None:
    """For each annotation key MetaSchedule's rules write for ``workload`` on ``target``, what
    they annotate with it: ``"root"`` (the root block), ``"block"``, ``"loop"`` or several,
    read from the design spaces' ``Annotate`` instructions.  Schedule-aware sampling annotates
    only these: a ``meta_schedule.parallel`` on a loop changes nothing (the postprocessor reads
    it on blocks) and crashes MetaSchedule's ``MutateParallel`` when the script seeds a search.
    None when no design space can be generated.

    >>> from codegen.workloads import workload
    >>> annotation_targets(workload("matmul(m=16,n=16,k=16)"))["parallel"]
    ('root',)
    """
    try:
        space = search_space(workload.mod, target, rules or default_rules(target))
    except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
        return None
    return dict(space.derived("annotation_targets", _annotation_targets))


def _annotation_targets(space) -> dict[str, tuple[str, ...]]:
    """``"root"`` for the root block (where ParallelizeVectorizeUnroll puts its keys)."""
    from tvm.s_tir.schedule import LoopRV

    found: dict[str, list[str]] = {}
    for design in space.spaces:
        roots: list = []
        for inst in design.trace.insts:
            if inst.kind.name == "GetSBlock" and str(inst.attrs[0]) == "root":
                roots.extend(inst.outputs)
            if inst.kind.name in ("Annotate", "Unannotate"):
                rv = inst.inputs[0]
                kind = ("loop" if isinstance(rv, LoopRV)
                        else "root" if any(rv.same_as(root) for root in roots) else "block")
                found.setdefault(annotation_key_text(str(inst.attrs[0])), []).append(kind)
    return {k: tuple(sorted(set(v))) for k, v in found.items()}


def narrowing(workload: WorkloadLike, target: TargetLike = "llvm",
              rules: str | None = None) -> dict[str, Any]:
    """``statement_grammar``'s keyword arguments that narrow a script for ``workload`` on
    ``target`` to what MetaSchedule's rules write: the candidate lists, annotation keys,
    values and targets, tile lengths, statements and keys taken off.  Each is left out
    (narrows nothing) when no design space can be generated."""
    rules = rules or default_rules(target)
    return {"categorical": categorical_lists(workload, target, rules) or (),
            "annotations": annotation_keys(workload, target, rules) or (),
            "annotation_values": annotation_values(workload, target, rules),
            "annotation_targets": annotation_targets(workload, target, rules),
            "tile_lengths": tile_lengths(workload, target, rules),
            "tile_max_inner": tile_max_inner(workload, target, rules),
            "ops": script_ops(workload, target, rules),
            "unannotate_keys": unannotate_keys(workload, target, rules)}


def tile_lengths(workload: WorkloadLike, target: TargetLike = "llvm",
                 rules: str | None = None) -> dict[str, tuple[int, ...]] | None:
    """Per loop, as a script names it (``i``, ``k``, ``rc``), how many factors MetaSchedule's
    rules tile it into for ``workload`` on ``target``: read from the ``tile`` statements of the
    design spaces written as scripts (4 for a spatial loop and 2 for a reduction under llvm's
    ``SSRSRS``).  None when no design space can be generated or none tiles.  Schedule-aware
    sampling tiles a loop named here with these lengths only, and any other loop with the
    lengths of any (``statement_grammar``): a small model that writes factors whose product
    falls short of the extent is made to finish the tile as MetaSchedule would, not to add a
    fifth factor that MetaSchedule never writes and after which it is lost.

    >>> from codegen.workloads import workload
    >>> tile_lengths(workload("matmul(m=16,n=16,k=16)"))
    {'i': (4,), 'j': (4,), 'k': (2,)}
    """
    return _per_tiled_loop(workload, target, rules, lambda line: line[
        line.index("[") + 1:line.index("]")].count(",") + 1)


def _per_tiled_loop(workload: WorkloadLike, target: TargetLike, rules: str | None,
                    value: Callable[[str], int]) -> dict[str, tuple[int, ...]] | None:
    """Per loop that a ``tile`` line of the design spaces (written as scripts) cuts, the
    distinct ``value``s of those lines, sorted; None when no design space can be generated or
    none tiles."""
    rules = rules or default_rules(target)
    try:
        space = search_space(workload.mod, target, rules)
    except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
        return None
    found: dict[str, set[int]] = {}
    for script in _design_scripts(space, workload, rules):
        for line in script.splitlines():
            if line.startswith("tile "):
                found.setdefault(line.split()[1], set()).add(value(line))
    return {loop: tuple(sorted(n)) for loop, n in found.items()} or None


_MAX_INNER = re.compile(r"\bmax_inner=(-?\d+)")


def tile_max_inner(workload: WorkloadLike, target: TargetLike = "llvm",
                   rules: str | None = None) -> dict[str, tuple[int, ...]] | None:
    """Per loop, as a script names it, the bounds MetaSchedule's rules put on the innermost
    factor of a ``tile`` of it (sample_perfect_tile's ``max_innermost_factor``: 64 unless a
    design space's ``tile`` writes ``max_inner=``; 0 or less is no bound), read from the design
    spaces written as scripts.  None when no design space can be generated or none tiles.

    MetaSchedule never draws an innermost factor above the bound: none of the kept llvm
    corpus' 5,464 construction tiles has one, while the built-in model, which writes a tile's
    factors outermost first with the remainder left for the last, ended 73 of its 154 tiling
    scripts on held-out construction tasks with one (``dense(m=2,n=51200,k=2560)``:
    ``tile j [16, 2, 2, 800]`` where MetaSchedule wrote ``[160, 32, 2, 5]``), and those ran
    2.8x slower than MetaSchedule's best against 1.7x for its other tiling scripts.
    Schedule-aware sampling keeps every tile within the bound when asked
    (``ScheduleAwareConfig.tile_bound``, ``statement_grammar``); it is not by default, since
    on 22 held-out tasks it made dense faster and conv2d slower (``bench_tile_bound.py``).

    >>> from codegen.workloads import workload
    >>> tile_max_inner(workload("matmul(m=16,n=16,k=16)"))
    {'i': (64,), 'j': (64,), 'k': (64,)}
    """
    def bound(line: str) -> int:
        given = _MAX_INNER.search(line[line.index("]"):])
        return int(given.group(1)) if given else DEFAULT_MAX_INNER

    return _per_tiled_loop(workload, target, rules, bound)


def script_ops(workload: WorkloadLike, target: TargetLike = "llvm",
               rules: str | None = None) -> tuple[str, ...] | None:
    """The statements MetaSchedule's rules write for ``workload`` on ``target`` before
    ``postproc`` (each line's first word; ``@Kind`` for a general form), read from the design
    spaces written as scripts: its evolutionary search changes their decisions, never their
    instructions.  None when no design space can be generated.  Schedule-aware sampling writes
    only these: none of the kept llvm corpus' scripts has a ``blockize``, and the RL model
    blockized pooling kernels into shapes TVM then could not build.

    >>> from codegen.workloads import workload
    >>> "tile" in script_ops(workload("matmul(m=16,n=16,k=16)"))
    True
    >>> "blockize" in script_ops(workload("matmul(m=16,n=16,k=16)"))
    False
    """
    rules = rules or default_rules(target)
    try:
        space = search_space(workload.mod, target, rules)
    except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
        return None
    scripts = _design_scripts(space, workload, rules)
    if not scripts:
        return None
    ops = [line.split("(")[0] if line.startswith("@") else line.split()[0]
           for script in scripts for line in script.split("postproc auto")[0].splitlines()]
    return tuple(dict.fromkeys(ops))


def _design_scripts(space, workload: WorkloadLike, rules: str) -> tuple[str, ...]:
    """The design spaces written as scripts, once per space and naming of its loops (writing
    them is not cheap); a design the language cannot write is left out."""
    import dragon_dsl
    from codegen.targets import postproc_set

    def write(space) -> tuple[str, ...]:
        scripts = []
        for design in space.spaces:
            try:
                scripts.append(dragon_dsl.from_trace(design.trace, postproc="auto",
                                                     postproc_set=postproc_set(rules),
                                                     workload=workload))
            except dragon_dsl.DragonError:
                continue
        return tuple(scripts)

    # Keyed by the loops' names too: spaces are shared by structure, and names are not structure.
    names = ",".join(sorted(kernel_loops(workload)[1]))
    return space.derived(f"scripts {names}", write)


def annotation_keys(workload: WorkloadLike, target: TargetLike = "llvm",
                    rules: str | None = None) -> tuple[str, ...] | None:
    """The annotation keys MetaSchedule's rules write for ``workload`` on ``target`` (before
    postprocessing), as a script spells them (``tiling_structure``, ``unroll_explicit``); read
    from the ``Annotate`` instructions of the design spaces, as ``categorical_lists`` reads its
    lists.  None when MetaSchedule cannot generate a design space for the pair.

    >>> from codegen.workloads import workload
    >>> annotation_keys(workload("matmul(m=16,n=16,k=16)"))
    ('tiling_structure', 'parallel', 'vectorize', 'unroll_explicit')
    """
    try:
        space = search_space(workload.mod, target, rules or default_rules(target))
    except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
        return None
    return space.derived("annotation_keys", _annotation_keys)


def unannotate_keys(workload: WorkloadLike, target: TargetLike = "llvm",
                    rules: str | None = None) -> tuple[str, ...] | None:
    """The annotation keys MetaSchedule's rules take off for ``workload`` on ``target``
    (``Unannotate`` in the design spaces: ``random_compute_producer``, a block's
    ``schedule_rule``); never ``parallel``, which the RL model took off the root to put it
    back.  None when no design space can be generated.

    >>> from codegen.workloads import workload
    >>> unannotate_keys(workload("softmax(m=32,n=64)"))
    ('random_compute_producer',)
    """
    try:
        space = search_space(workload.mod, target, rules or default_rules(target))
    except Exception:  # noqa: BLE001  (MetaSchedule's own errors vary by rule set)
        return None
    return space.derived("unannotate_keys", lambda space: tuple(dict.fromkeys(
        annotation_key_text(str(inst.attrs[0])) for design in space.spaces
        for inst in design.trace.insts if inst.kind.name == "Unannotate")))


def _annotation_keys(space) -> tuple[str, ...]:
    keys = [annotation_key_text(str(inst.attrs[0])) for design in space.spaces
            for inst in design.trace.insts if inst.kind.name in ("Annotate", "Unannotate")]
    return tuple(dict.fromkeys(keys))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tile_rule(extent: int, n: int, rules: dict[str, str]) -> str:
    """The rule ``tf_E_n`` for the ordered factorizations of E into n factors, added to
    ``rules`` with the rules it uses."""
    name = f"tf_{extent}_{n}"
    if name not in rules:
        if n == 1:
            rules[name] = f'"{extent}"'
        else:
            rules[name] = " | ".join(f'"{d}" "," {_tile_rule(extent // d, n - 1, rules)}'
                                     for d in _divisors(extent))
    return name


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sampling_grammar(text: str | None = None) -> str:
    """The grammar a sampler constrains by: the language's, in the printer's canonical layout,
    without name ranges or comments, with keywords kept out of names, and with numbers the
    parser takes.  Every script it admits parses and is laid out as ``dragon_dsl.format`` lays
    it out; every canonical script, with its ranges written out (``expand_ranges``), is
    admitted.  ``text``: a version of ``grammar/dragon.lark`` to derive from instead of the
    shipped one.

    - Layout (``training.grammars.layout``): one statement per line, each ended by one ``\\n``, and
      between two tokens exactly the separator the printer writes (``tile l0 [4, 8] -> l1,
      l2``, ``unroll=16``, ``@K(x;)``), never a run of spaces, a tab or a blank line: the
      vocabulary of a large model has tokens that are nothing but whitespace, which an
      untrained model would otherwise write until its budget ends.  Keywords cannot glue to
      what follows (``parallell0``, ``read4``), since a space separates them.
    - ``l3..l6`` is a range only when both ends share a prefix and the first number is smaller,
      which no context-free grammar can say; a sampler that wrote ``l6..b2`` would produce text
      the parser refuses.  Without ranges a sampled script lists names one by one (``l3, l4``),
      which parses, means the same, and prints back in canonical form with its ranges.
    - A comment opened mid-statement can never be closed (its newline ends the statement too).
    - Lark lexes a keyword as the keyword, never as a name (``reorder x vectorize``), where
      llguidance would take either.
    - Numbers: an integer-typed literal has no fraction or exponent and fits its dtype; a float
      cannot overflow its dtype (``parse`` refuses both); an integer has no leading zeros and is
      never ``-0``, as the printer writes it.
    - Results: a statement that gives one result binds one name (``block "C" -> C``), and a
      tile or split binds one name per factor (up to ``MAX_FACTORS``), as decoding requires;
      ``postproc auto`` comes last.

    Every edit names the rule it makes; a rule that is missing or not in the shape the edit
    expects raises ``dragon_dsl.GrammarError`` naming it.

    >>> Grammar.parse(sampling_grammar()).alternatives("_out")
    ['name']
    """
    g = _sampling_rules(text)
    _bound_results(g)
    canonical_spacing(g)
    return str(g)


def with_end_marker(text: str, stop: str | None = None) -> str:
    """A sampling or workload grammar whose scripts may end with the end marker a model writes
    after its script (``training.prompts.STOP``, ``<end>``): what a server that constrains by
    the grammar gets, so that a model may stop as it was taught, by the marker, or by EOS.

    >>> Grammar.parse(with_end_marker(sampling_grammar())).body("start").endswith('"<end>"?')
    True
    """
    g = Grammar.parse(text, user=_USER)
    g.replace("start", f"{g.body('start', 'the end marker after a script')} "
                       f"{_literal(STOP if stop is None else stop)}?")
    return str(g)


_USER = "training.grammars.constraints"
_POSTPROC = '"postproc" (_AUTO postproc_set)?'


def _sampling_rules(text: str | None) -> Grammar:
    """The rule edits of ``sampling_grammar``'s points but the results and the spacing
    (``_bound_results`` and ``canonical_spacing`` make those; ``workload_grammar`` narrows rules
    between the two)."""
    g = Grammar.load(user=_USER) if text is None else Grammar.parse(text, user=_USER)
    g.remove_directive("%ignore COMMENT", "sampling grammar: comments are never sampled")
    # Lark lexes a keyword as the keyword, never as a name; llguidance would take either.
    why = "sampling grammar: keywords are not names"
    words = " | ".join(_literal(w) for w in sorted(g.words()))
    name = g.body("NAME", why)
    name = name if len(g.alternatives("NAME")) == 1 else f"({name})"
    g.replace("NAME", f"{name} & ~({words})")
    for rule in ("_out", "_name_item", "factor"):
        g.drop_alternatives(rule, ["name_range"], "sampling grammar: names without ranges")
    why = "sampling grammar: numbers that fit their dtype"
    if g.body("NUMBER", why) != _NUMBER_RULE:
        raise g.mismatch("NUMBER", f"{_NUMBER_RULE}, the numbers _SAMPLED_NUMBER narrows", why)
    g.replace("NUMBER", f"/{_SAMPLED_NUMBER}/")
    why = "sampling grammar: integers as the printer writes them"
    if g.body("INT", why) != "/-?[0-9]+/":
        raise g.mismatch("INT", "`/-?[0-9]+/`, the integers _SAMPLED_INT narrows", why)
    g.replace("INT", f"/{_SAMPLED_INT}/")
    # Nothing may follow `postproc auto SET`.
    why = "sampling grammar: `postproc auto` comes last"
    canonical_lines(g)
    g.replace("start", f"{g.body('start')} (s_postproc_auto _NL)?")
    if g.body("s_postproc", why) != _POSTPROC:
        raise g.mismatch("s_postproc", _POSTPROC, why)
    g.replace("s_postproc", '"postproc"')
    g.add("s_postproc_auto", '"postproc" _AUTO postproc_set', after="s_postproc")
    return g


_NUMBER_RULE = ("/-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?(i8|i16|i32|i64|u8|u16|u32|u64|"
                "f16|f32|f64|b)|-?[0-9]+\\.[0-9]+([eE][-+]?[0-9]+)?|-?[0-9]+[eE][-+]?[0-9]+/")
# Digit counts keep each literal inside its dtype: at most 99 for int8, 9999 for int16, ...;
# float16 takes no positive exponent (65504 is its largest value), float32 at most 1e6 x 1e29.
_SAMPLED_NUMBER = "|".join([
    "-?[0-9]{1,2}i8", "[0-9]{1,2}u8", "-?[0-9]{1,4}i16", "[0-9]{1,4}u16",
    "-?[0-9]{1,9}i32", "[0-9]{1,9}u32", "-?[0-9]{1,18}i64", "[0-9]{1,19}u64", "[01]b",
    "-?[0-9]{1,4}(\\.[0-9]{1,8})?([eE]-[0-9]{1,2})?f16",
    "-?[0-9]{1,6}(\\.[0-9]{1,8})?([eE](-[0-9]{1,2}|\\+?[12]?[0-9]))?f32",
    "-?[0-9]{1,15}(\\.[0-9]{1,15})?([eE][-+]?[0-9]{1,2})?f64",
    "-?[0-9]{1,15}\\.[0-9]{1,15}([eE][-+]?[0-9]{1,2})?",
    "-?[0-9]{1,15}[eE][-+]?[0-9]{1,2}",
])
# No leading zeros, no -0: `dragon_dsl.format` writes 7 and 0, never 007 or -0.
_SAMPLED_INT = "0|-?[1-9][0-9]*"
MAX_FACTORS = 8
# The statements that bind one name per factor, and the shape their rules have: keyword, loop,
# list, options, results, and (tiles) the optional `factors` clause.
_COUNTED = ("s_tile", "s_partitioned_tile", "s_sample_tile", "s_sample_partitioned_tile",
            "s_split", "s_loop_partition")
_LISTED = re.compile(r'("[a-z_]+") name (int_list|factor_list)((?: \S+)*?) _outs'
                     r'( tile_factors\?)?')
_LISTED_SHAPE = '`"keyword" name LIST OPTIONS _outs [tile_factors?]`, LIST int_list or factor_list'


def _bound_results(g: Grammar, tile_targets: dict[int, str] | None = None) -> None:
    """Statements giving one result bind one name; tiles and splits one name per factor.
    ``tile_targets`` (k -> what may stand for a loop and its k factors) narrows `tile`."""
    why = "sampling grammar: a statement with one result binds one name"
    for op, spec in STATEMENTS.items():
        rule = f"s_{op}"
        if spec.outputs == "one":
            body = g.body(rule, why)
            if len(g.alternatives(rule)) != 1 or not body.endswith(" _outs"):
                raise g.mismatch(rule, "one alternative ending with `_outs`", why)
            g.replace(rule, f'{body.removesuffix("_outs")} "->" name')

    why = "sampling grammar: a tile or split binds one name per factor"
    for rule in _COUNTED:
        m = _LISTED.fullmatch(g.body(rule, why))
        if m is None:
            raise g.mismatch(rule, _LISTED_SHAPE, why)
        keyword, kind, options, factors = m.groups()
        item = _list_item(g, kind, why)
        targets = {k: _listing(item, k, 'name "[" ', ' "]"') for k in range(1, MAX_FACTORS + 1)}
        if rule == "s_tile" and tile_targets is not None:
            targets = tile_targets
        tail = _factors_keyword(g, why) if factors else None
        _counted_rule(g, rule, keyword, targets, options.strip(), tail)


def _list_item(g: Grammar, rule: str, why: str) -> str:
    """``INT`` for ``int_list: "[" [INT ("," INT)*] "]"``: what one factor is."""
    m = re.fullmatch(r'"\[" \[(\w+) \("," \1\)\*\] "\]"', g.body(rule, why))
    if m is None:
        raise g.mismatch(rule, '`"[" [ITEM ("," ITEM)*] "]"`', why)
    return m.group(1)


def _factors_keyword(g: Grammar, why: str) -> str:
    """The keyword of ``tile_factors: "factors" outs``."""
    m = re.fullmatch(r'("[a-z_]+") outs', g.body("tile_factors", why))
    if m is None:
        raise g.mismatch("tile_factors", '`"factors" outs`', why)
    return m.group(1)


def _listing(item: str, k: int, before: str = "", after: str = "") -> str:
    """``item "," item ...`` (k items) between ``before`` and ``after``."""
    return before + ' "," '.join([item] * k) + after


def _counted_rule(g: Grammar, rule: str, keyword: str, targets: dict[int, str], options: str,
                  factors: str | None) -> None:
    """``rule``: ``keyword``, then for some k a target of k factors, ``options``, k names and
    (with a ``factors`` keyword) an optional clause of it and k names."""
    g.replace(rule, f"{keyword} ({' | '.join(f'{rule}_{k}' for k in sorted(targets))})")
    after = rule
    for k, target in sorted(targets.items()):
        tail = f" ({factors} {_listing('name', k)})?" if factors else ""
        g.add(f"{rule}_{k}", f'{target} {options} "->" {_listing("name", k)}{tail}', after=after)
        after = f"{rule}_{k}"


_BLOCK = '"block" STRING opt_func? "->" name'
_CATEGORICAL = '"sample_categorical" int_list INT opt_probs? "->" name'


def workload_grammar(workload: WorkloadLike, target: TargetLike = "llvm",
                     rules: str | None = None) -> str:
    """The grammar narrowed to ``workload``'s blocks, loops and extents, and to the categorical
    candidates MetaSchedule offers for it on ``target`` under ``rules`` (``categorical_lists``;
    None: the target's default rule set), as llguidance Lark.

    >>> from codegen.workloads import workload
    >>> 'tf_16_2' in workload_grammar(workload("matmul(m=16,n=16,k=16)"), "llvm")
    True
    """
    blocks, loops = kernel_loops(workload)
    g = _sampling_rules(None)
    extra: dict[str, str] = {}

    by_length: dict[int, list[str]] = {k: [] for k in range(1, MAX_FACTORS + 1)}
    for loop, extents in sorted(loops.items()):
        if _DERIVED.match(loop):
            continue  # it would be mistaken for a derived loop; leave it to the plain rule
        for k in TILE_LENGTHS:
            alts = " | ".join(_tile_rule(e, k, extra) for e in sorted(extents))
            by_length[k].append(f'{_literal(loop)} "[" ({alts}) "]"')
    tile_targets = {k: "(" + " | ".join([*alts, _listing("INT", k, 'DERIVED "[" ', ' "]"')])
                    + ")" for k, alts in by_length.items()}
    extra["DERIVED"] = "/[lbv][0-9]+/"
    _bound_results(g, tile_targets)

    # The block statement's results are bound by now: `block "C" -> C`, named as the encoder
    # names it (the one function needs no `func=`).
    why = "workload grammar: the kernel's blocks"
    if g.body("s_block", why) != _BLOCK:
        raise g.mismatch("s_block", f"{_BLOCK} (`_outs` bound to one name)", why)
    names = [*dict.fromkeys([*blocks, "root"])]
    g.replace("s_block", '"block" wl_block')
    g.add("wl_block", " | ".join(f"{_literal(chr(34) + b + chr(34))} {_literal('->')} "
                                 f"{_literal(b)}" for b in names), after="s_block")

    _narrow_categorical(g, categorical_lists(workload, target, rules))

    for name, body in extra.items():
        g.add(name, body)
    canonical_spacing(g)
    return str(g)


def _narrow_categorical(g: Grammar, lists: tuple[tuple[int, ...], ...] | None) -> None:
    """``sample_categorical`` draws from one of ``lists``, with an index inside it; without
    lists (none in the design space) MetaSchedule never draws one, and the statement goes.
    None (no design space): the plain rule stays, there being no MetaSchedule script to follow."""
    why = "workload grammar: MetaSchedule's categorical lists"
    if g.body("s_sample_categorical", why) != _CATEGORICAL:
        raise g.mismatch("s_sample_categorical", f"{_CATEGORICAL} (`_outs` bound to one name)",
                         why)
    if lists is None:
        return
    if not lists:
        g.drop_alternatives("_stmt", ["s_sample_categorical"], why)
        return
    choices = []
    for values in lists:
        items = ' "," '.join(_literal(str(v)) for v in values)
        indices = " | ".join(_literal(str(i)) for i in range(len(values)))
        choices.append(f'"[" {items} "]" ({indices})')
    g.replace("s_sample_categorical", _CATEGORICAL.replace("int_list INT", "wl_categorical"))
    g.add("wl_categorical", " | ".join(choices), after="s_sample_categorical")
