"""Workload-aware constraints: ``grammar/dragon.lark`` narrowed to one kernel, for llguidance.

The language's grammar admits any script; this narrows it so that a sampled script can only

- get blocks that exist: ``block "NAME" -> NAME`` for the kernel's blocks (and ``root``), the
  variable named after the block, as the encoder names it;
- tile a kernel loop by factors whose product is the loop's extent: ``tile i [..]`` for a loop
  ``i`` of extent E offers only ordered factorizations of E into 2 to 5 factors (rules over E's
  divisors, not an enumeration); loops the script derives itself (``l3``, ``b0``, ...) keep
  the plain rule;
- draw categorical decisions from MetaSchedule's candidate lists (unroll steps, cooperative
  fetch widths) with an index inside the list.

Like ``sampling_grammar`` (which it starts from) it has no name ranges.  The result is
llguidance Lark (it is compiled in milliseconds per workload), not for the Lark
parser: samples are still parsed with the one grammar.  Every MetaSchedule-sampled script of
the workload stays accepted (tested), so the constraints remove only what cannot apply.
"""

from __future__ import annotations

import re
from typing import Any

from dragon_dsl.grammar import grammar_text, reserved_words

__all__ = ["CATEGORICAL_LISTS", "expand_ranges", "kernel_loops", "sampling_grammar",
           "workload_grammar"]

# MetaSchedule's candidate lists (tvm/s_tir/meta_schedule/schedule_rule: the unroll steps of
# ParallelizeVectorizeUnroll for CPU and GPU, and MultiLevelTiling's cooperative-fetch vector
# lengths).  A test checks every sampled trace draws from these.
CATEGORICAL_LISTS: tuple[tuple[int, ...], ...] = (
    (0, 16, 64, 512),
    (0, 16, 32, 64, 128, 256, 512, 1024),
    (1, 2, 3, 4),
    (1, 2, 4, 8),
    (1, 2, 4),
    (1, 2),
)
TILE_LENGTHS = (2, 3, 4, 5)
_DERIVED = re.compile(r"^[lbv][0-9]+$")


def kernel_loops(workload: Any) -> tuple[list[str], dict[str, set[int]]]:
    """The kernel's block names, and each loop name with the extents it has in some block."""
    from tvm.s_tir.schedule import Schedule

    from dragon_dsl.replay import as_module

    sch = Schedule(as_module(workload))
    blocks, loops = [], {}
    pending = list(sch.get_child_blocks(sch.get_sblock("root")))
    while pending:
        block = pending.pop(0)
        blocks.append(str(sch.get(block).name_hint))
        for loop in sch.get_loops(block):
            node = sch.get(loop)
            loops.setdefault(str(node.loop_var.name), set()).add(int(node.extent))
        pending.extend(sch.get_child_blocks(block))
    return blocks, loops


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tile_rules(extent: int, rules: dict[str, str]) -> str:
    """Rules ``tf_E_n`` for the ordered factorizations of E into n factors; the rule for E."""

    def rule(e: int, n: int) -> str:
        name = f"tf_{e}_{n}"
        if name not in rules:
            if n == 1:
                rules[name] = f'"{e}"'
            else:
                rules[name] = " | ".join(f'"{d}" "," {rule(e // d, n - 1)}'
                                         for d in _divisors(e))
        return name

    return " | ".join(rule(extent, n) for n in TILE_LENGTHS)


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_RANGE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*?)([0-9]+)\.\.([A-Za-z_][A-Za-z0-9_]*?)([0-9]+)\b")


def expand_ranges(script: str) -> str:
    """A script with each ``l3..l6`` written out (``l3, l4, l5, l6`` in results and brackets,
    ``l3 l4 l5 l6`` among positional arguments): the form the sampling grammars produce, and
    so the form to train on.

    >>> expand_ranges("fuse i0..i1 -> l0..l1")
    'fuse i0 i1 -> l0, l1'
    """
    def spell(m: re.Match) -> str:
        prefix, first, last = m.group(1), int(m.group(2)), int(m.group(4))
        if m.group(3) != prefix or first >= last:
            return m.group(0)
        before = m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()]
        listed = "->" in before or before.count("[") > before.count("]")
        return (", " if listed else " ").join(f"{prefix}{k}" for k in range(first, last + 1))

    return _RANGE.sub(spell, script)


def sampling_grammar(text: str | None = None) -> str:
    """The grammar a sampler constrains by: the language's, without name ranges or comments,
    and with keywords kept out of names.

    ``l3..l6`` is a range only when both ends share a prefix and the first number is smaller,
    which no context-free grammar can say; a sampler that wrote ``l6..b2`` would produce text
    the parser refuses.  Without ranges a sampled script lists names one by one (``l3, l4``),
    which parses, means the same, and prints back in canonical form with its ranges.
    """
    text = grammar_text() if text is None else text
    # A comment opened mid-statement can never be closed (its newline ends the statement too);
    # sampled scripts carry no comments.
    text = _replace(text, "%ignore COMMENT\n", "")
    # Lark lexes a keyword as the keyword, never as a name; llguidance would take either.
    words = " | ".join(_literal(w) for w in sorted(reserved_words()))
    text = _replace(text, "NAME: /[A-Za-z_][A-Za-z0-9_]*/",
                    f"NAME: /[A-Za-z_][A-Za-z0-9_]*/ & ~({words})")
    text = _replace(text, "_out: name | name_range", "_out: name")
    text = _replace(text, "_name_item: name | name_range", "_name_item: name")
    return _replace(text, "?factor: name | name_range | INT | NONE", "?factor: name | INT | NONE")


def workload_grammar(workload: Any) -> str:
    """The grammar narrowed to ``workload``'s blocks, loops and extents (llguidance Lark).

    >>> from codegen.workloads import workload
    >>> 'tf_16_2' in workload_grammar(workload("matmul(m=16,n=16,k=16)"))
    True
    """
    blocks, loops = kernel_loops(workload)
    text = sampling_grammar()
    extra: dict[str, str] = {}

    names = [*dict.fromkeys([*blocks, "root"])]
    block_alts = " | ".join(f"{_literal(chr(34) + b + chr(34))} {_literal('->')} {_literal(b)}"
                            for b in names)
    text = _replace(text, 's_block: "block" STRING opt_func? _outs',
                    f's_block: "block" wl_block\nwl_block: {block_alts}')

    tiles = []
    for loop, extents in sorted(loops.items()):
        if _DERIVED.match(loop):
            continue  # it would be mistaken for a derived loop; leave it to the plain rule
        alts = " | ".join(_tile_rules(e, extra) for e in sorted(extents))
        tiles.append(f'{_literal(loop)} "[" ({alts}) "]"')
    tile_target = " | ".join([*tiles, "DERIVED int_list"])
    text = _replace(
        text,
        's_tile: "tile" name int_list opt_max_inner? opt_preserve? opt_predication? _outs '
        'tile_factors?',
        f's_tile: "tile" wl_tile opt_max_inner? opt_preserve? opt_predication? _outs '
        f'tile_factors?\nwl_tile: {tile_target}\nDERIVED: /[lbv][0-9]+/')

    choices = []
    for values in CATEGORICAL_LISTS:
        items = ' "," '.join(_literal(str(v)) for v in values)
        indices = " | ".join(_literal(str(i)) for i in range(len(values)))
        choices.append(f'"[" {items} "]" ({indices})')
    categorical = " | ".join(choices)
    text = _replace(text, 's_sample_categorical: "sample_categorical" int_list INT opt_probs? '
                          '_outs',
                    f's_sample_categorical: "sample_categorical" wl_categorical opt_probs? _outs'
                    f'\nwl_categorical: {categorical}')
    return text + "\n// ---- workload-specific ----\n" + "\n".join(
        f"{name}: {body}" for name, body in extra.items()) + "\n"


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise RuntimeError(f"grammar/dragon.lark no longer has the rule {old!r}; update "
                           "training/constraints.py with it")
    return text.replace(old, new, 1)
