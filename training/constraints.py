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
from dragon_dsl.statements import SPECS

__all__ = ["CATEGORICAL_LISTS", "MAX_FACTORS", "expand_ranges", "kernel_loops", "sampling_grammar",
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
    from codegen.workloads.inspect import blocks as kernel_blocks

    blocks, loops = [], {}
    for block in kernel_blocks(workload):
        blocks.append(block.name)
        for loop in block.loops:
            loops.setdefault(loop.name, set()).add(int(loop.extent))
    return blocks, loops


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
    """The grammar a sampler constrains by: the language's, without name ranges or comments, with
    keywords kept out of names and apart from what follows them, and with numbers the parser
    takes.  Every script it admits parses; every canonical script, with its ranges written out
    (``expand_ranges``), is admitted.

    - ``l3..l6`` is a range only when both ends share a prefix and the first number is smaller,
      which no context-free grammar can say; a sampler that wrote ``l6..b2`` would produce text
      the parser refuses.  Without ranges a sampled script lists names one by one (``l3, l4``),
      which parses, means the same, and prints back in canonical form with its ranges.
    - A comment opened mid-statement can never be closed (its newline ends the statement too).
    - Lark reads ``parallell0`` or ``read4`` as one name, where llguidance (which lexes only what
      the grammar allows next) would read a keyword and then a name or a number.
    - Numbers: an integer-typed literal has no fraction or exponent and fits its dtype; a float
      cannot overflow its dtype (``parse`` refuses both).
    - Results: a statement that gives one result binds one name (``block "C" -> C``), and a
      tile or split binds one name per factor (up to ``MAX_FACTORS``), as decoding requires;
      ``postproc auto`` comes last.
    """
    return _apart(_bound_results(_sampling_rules(text)))


def _sampling_rules(text: str | None) -> str:
    """The rule edits ``sampling_grammar``'s first four points describe (``_bound_results`` and
    ``_apart`` make the rest, after ``workload_grammar``'s edits)."""
    text = grammar_text() if text is None else text
    text = _replace(text, "%ignore COMMENT\n", "")
    # Lark lexes a keyword as the keyword, never as a name; llguidance would take either.
    words = " | ".join(_literal(w) for w in sorted(reserved_words()))
    text = _replace(text, "NAME: /[A-Za-z_][A-Za-z0-9_]*/",
                    f"NAME: /[A-Za-z_][A-Za-z0-9_]*/ & ~({words})")
    text = _replace(text, "_out: name | name_range", "_out: name")
    text = _replace(text, "_name_item: name | name_range", "_name_item: name")
    text = _replace(text, "?factor: name | name_range | INT | NONE", "?factor: name | INT | NONE")
    text = _replace(text, _NUMBER_RULE, f"NUMBER: /{_SAMPLED_NUMBER}/")
    # Nothing but blank lines may follow `postproc auto SET`.
    text = _replace(text, "start: _LEADING? (_stmt? _NL)*",
                    "start: _LEADING? (_stmt? _NL)* (s_postproc_auto _NL+)?")
    return _replace(text, 's_postproc: "postproc" (_AUTO postproc_set)?',
                    's_postproc: "postproc"\ns_postproc_auto: "postproc" _AUTO postproc_set')


_NUMBER_RULE = ("NUMBER: /-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?(i8|i16|i32|i64|u8|u16|u32|u64|"
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
MAX_FACTORS = 8
_LISTED = re.compile(r'^(s_[a-z_]+): ("[a-z_]+") name (int_list|factor_list) (.*?)_outs'
                     r'( tile_factors\?)?$', re.M)


def _bound_results(text: str, tile_targets: dict[int, str] | None = None) -> str:
    """Statements giving one result bind one name; tiles and splits one name per factor.
    ``tile_targets`` (k -> what may stand for a loop and its k factors) narrows `tile`."""
    one = [op for op, spec in SPECS.items() if spec.outputs == "one"]
    text, n = re.subn(rf'^(s_(?:{"|".join(one)})): (.*) _outs$', r'\1: \2 "->" name', text,
                      flags=re.M)
    if n < 10:
        raise RuntimeError("grammar/dragon.lark no longer ends single-result statements with "
                           "`_outs`; update training.constraints._bound_results")

    def counted(m: re.Match) -> str:
        rule, keyword, kind, options, factors = m.groups()
        item = "INT" if kind == "int_list" else "factor"
        targets = {k: _listing(item, k, 'name "[" ', ' "]"') for k in range(1, MAX_FACTORS + 1)}
        if rule == "s_tile" and tile_targets is not None:
            targets = tile_targets
        return _counted_rule(rule, keyword, targets, options.strip(), bool(factors))

    text, n = _LISTED.subn(counted, text)
    if n != 6:
        raise RuntimeError("grammar/dragon.lark's tile and split rules changed; update "
                           "training.constraints._bound_results")
    return text


def _listing(item: str, k: int, before: str = "", after: str = "") -> str:
    """``item "," item ...`` (k items) between ``before`` and ``after``."""
    return before + ' "," '.join([item] * k) + after


def _counted_rule(rule: str, keyword: str, targets: dict[int, str], options: str,
                  factors: bool) -> str:
    """``rule``: ``keyword``, then for some k a target of k factors, ``options``, k names and
    (with ``factors``) an optional ``factors`` clause of k names."""
    lines = [f"{rule}: {keyword} ({' | '.join(f'{rule}_{k}' for k in sorted(targets))})"]
    for k, target in sorted(targets.items()):
        tail = f' ("factors" {_listing("name", k)})?' if factors else ""
        lines.append(f'{rule}_{k}: {target} {options} "->" {_listing("name", k)}{tail}'
                     .replace("  ", " "))
    return "\n".join(lines)


_HEAD = re.compile(r'^(s_[a-z_]+): "([a-z_]+)" (?!\|)', re.M)


def _apart(text: str) -> str:
    """Keywords that a name, a number or another keyword may follow take a space or tab with
    them (``parallel l0``, ``read 0``, ``factors v0``, ``postproc auto llvm``); options that may
    follow a bool take one before them (``preserve_unit_iters=true disable_predication=true``)."""
    terminals = {}

    def spaced(word: str, *, before: bool = False) -> str:
        name = f"KW_{word.upper()}"
        terminals[name] = f"/[ \\t]{word}/" if before else f"/{word}[ \\t]/"
        return name

    text = _replace(text, 's_postproc_auto: "postproc" _AUTO',
                    f's_postproc_auto: {spaced("postproc")} _AUTO')
    text = _HEAD.sub(lambda m: f"{m.group(1)}: {spaced(m.group(2))} ", text)
    text = _replace(text, '_AUTO: "auto"', "_AUTO: /auto[ \\t]/")
    text = _replace(text, 'READ: "read"', "READ: /read[ \\t]/")
    text = _replace(text, 'WRITE: "write"', "WRITE: /write[ \\t]/")
    text = text.replace('("factors" ', f'({spaced("factors")} ')
    text = _replace(text, 'opt_predication: "disable_predication"',
                    f'opt_predication: {spaced("disable_predication", before=True)}')
    text = _replace(text, 'opt_index: "index"', f'opt_index: {spaced("index", before=True)}')
    return text + "\n" + "\n".join(f"{k}: {v}" for k, v in terminals.items()) + "\n"


def workload_grammar(workload: Any) -> str:
    """The grammar narrowed to ``workload``'s blocks, loops and extents (llguidance Lark).

    >>> from codegen.workloads import workload
    >>> 'tf_16_2' in workload_grammar(workload("matmul(m=16,n=16,k=16)"))
    True
    """
    blocks, loops = kernel_loops(workload)
    text = _sampling_rules(None)
    extra: dict[str, str] = {}

    names = [*dict.fromkeys([*blocks, "root"])]
    block_alts = " | ".join(f"{_literal(chr(34) + b + chr(34))} {_literal('->')} {_literal(b)}"
                            for b in names)
    text = _replace(text, 's_block: "block" STRING opt_func? _outs',
                    f's_block: "block" wl_block\nwl_block: {block_alts}')

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
    text = _apart(_bound_results(text, tile_targets))
    return text + "\n// ---- workload-specific ----\n" + "\n".join(
        f"{name}: {body}" for name, body in extra.items()) + "\n"


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise RuntimeError(f"grammar/dragon.lark no longer has the rule {old!r}; update "
                           "training/constraints.py with it")
    return text.replace(old, new, 1)
