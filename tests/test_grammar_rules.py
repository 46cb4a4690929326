"""``dragon_dsl.grammar.Grammar``: the grammar file read into its definitions prints back as the
same grammar, and the sampling grammar derived from it by rule name survives harmless edits of
the file and names the rule when an edit breaks the derivation."""

from __future__ import annotations

import pathlib
import re

import lark
import llguidance
import pytest

from dragon_dsl import DragonError, GrammarError
from dragon_dsl.grammar import Definition, Grammar, grammar_text
from training.grammars.constraints import expand_ranges, sampling_grammar

from .test_constraints import TOKENIZER, _random_walks

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = sorted((ROOT / "tests" / "golden" / "scripts").glob("*.dragon"))


def _lark(text: str) -> lark.Lark:
    """A parser built as ``dragon_dsl.parser.parser()`` builds it, from ``text``."""
    return lark.Lark(text, parser="lalr", lexer="contextual", propagate_positions=True,
                     maybe_placeholders=False)


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old  # an edit that finds nothing would test nothing
    return text.replace(old, new)


# ---- reading and printing ----------------------------------------------------------------

def test_printing_gives_the_file_back_byte_for_byte():
    assert str(Grammar.load()) == grammar_text()


def test_canonical_spelling_builds_the_same_parser():
    """Every definition printed from its parsed body (continuation lines joined, comments and
    extra spaces gone) still builds a parser giving the same trees, and llguidance takes it."""
    g = Grammar.load()
    for d in list(g):
        g.replace(d.name, d.body)
    text = str(g)
    assert text != grammar_text() and "\n     | s_tile" not in text  # really re-spelled
    original, rebuilt = _lark(grammar_text()), _lark(text)
    for path in GOLDEN:
        script = path.read_text()
        assert rebuilt.parse(script) == original.parse(script), path.name
    with pytest.raises(lark.exceptions.LarkError):
        rebuilt.parse("tile l0 [4, 2] ->\n")
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        llguidance.grammar_from("lark", text))
    assert not is_error and not messages, messages


def test_definitions_prefixes_and_multi_line_bodies():
    g = Grammar.load()
    factor, key = g.definition("factor"), g.definition("ann_key")
    assert (factor.prefix, key.prefix, g.definition("NAME").prefix) == ("?", "!", "")
    assert factor.body == "name | name_range | INT | NONE" and not factor.is_terminal
    assert g.definition("NAME").is_terminal and g.definition("_NL").kind == "terminal"
    statements = g.alternatives("_stmt")  # six lines in the file
    assert statements[0] == "s_block" and statements[-1] == "s_general" and len(statements) == 43
    names = [d.name for d in g]
    assert names[:3] == ["start", "_LEADING", "_stmt"] and names.index("NAME") > names.index("atom")


def test_alternatives_split_only_at_the_top_level():
    text = ('// a comment\n'
            '?a: (b | c) d  // not | here\n'
            '   // between continuation lines\n'
            '\n'
            '   | "x|y" [e | f]\n'
            '   | /p|q/ -> g\n'
            'b: "b"\n'
            '%ignore " "\n')
    g = Grammar.parse(text)
    assert g.alternatives("a") == ["(b | c) d", '"x|y" [e | f]', "/p|q/ -> g"]
    assert g.body("a") == '(b | c) d | "x|y" [e | f] | /p|q/ -> g'
    assert str(g) == text
    g.drop_alternatives("a", ['"x|y"  [e|f]'])  # compared lexeme by lexeme
    g.remove_directive('%ignore  " "')
    g.add("c", '"c"', after="a")
    g.replace("b", '"B"')
    assert str(g) == '// a comment\n?a: (b | c) d | /p|q/ -> g\nc: "c"\nb: "B"\n'
    g.keep_alternatives("a", ["/p|q/ -> g"])
    assert g.definition("a") == Definition("a", "/p|q/ -> g", "?")


@pytest.mark.parametrize("call,rule,words", [
    (lambda g: g.body("_outz", "to test"), "_outz", ["no rule `_outz`", "tester expects it",
                                                     "(to test)"]),
    (lambda g: g.replace("NAMES", "/x/"), "NAMES", ["no terminal `NAMES`"]),
    (lambda g: g.drop_alternatives("_out", ["name_list"]), "_out",
     ["no alternative `name_list`", "name | name_range"]),
    (lambda g: g.keep_alternatives("_out", ["name", "name_range", "x"]), "_out", ["`x`"]),
    (lambda g: g.drop_alternatives("_out", ["name", "name_range"]), "_out",
     ["no alternative left"]),
    (lambda g: g.remove_directive("%ignore WS"), "%ignore WS", ["no directive `%ignore WS`"]),
    (lambda g: g.add("NAME", "/x/"), "NAME", ["already has `NAME`"]),
    (lambda g: g.add("x", "/x/", after="nothing"), "nothing", ["no rule `nothing`"]),
])
def test_missing_names_raise_an_error_naming_them(call, rule, words):
    g = Grammar.load(user="tester")
    with pytest.raises(GrammarError) as info:
        call(g)
    assert isinstance(info.value, DragonError) and info.value.rule == rule
    for word in words:
        assert word in str(info.value), str(info.value)


@pytest.mark.parametrize("text,line,words", [
    ("a: b\n  c\n", 2, ["line 2", "expected a definition", "'c'"]),
    ("  | b\na: c\n", 1, ["line 1", "continues no definition"]),
    ('a: "b\n', 1, ["cannot read", '\'"b'], ),
    ("a: b\nb: c\na: d\n", None, ["defines a more than once"]),
    ("a{x}: x\n", 1, ["expected a definition"]),
])
def test_unreadable_grammar_text_says_where(text, line, words):
    with pytest.raises(GrammarError) as info:
        Grammar.parse(text)
    for word in words:
        assert word in str(info.value), str(info.value)


# ---- deriving the sampling grammar by rule name ------------------------------------------

BROKEN = [
    # Someone renames a rule the derivation edits.
    (lambda t: re.sub(r"\b_out\b", "_result", t), "_out",
     "has no rule `_out`; training.grammars.constraints expects it (sampling grammar: "
     "names without ranges)"),
    # A single-result statement whose result becomes optional.
    (lambda t: _edit(t, "_name_item+ opt_preserve? _outs\n", "_name_item+ opt_preserve? _outs?\n"),
     "s_fuse", "Expected one alternative ending with `_outs` but got s_fuse: "),
    # Options moved after the results of a tile.
    (lambda t: _edit(t, "int_list opt_max_inner? _outs\n", "int_list _outs opt_max_inner?\n"),
     "s_sample_tile", "a tile or split binds one name per factor"),
    # Factor lists lose their ranges in the language itself.
    (lambda t: _edit(t, "?factor: name | name_range | INT", "?factor: name | INT"), "factor",
     "has no alternative `name_range`"),
    # A new number suffix, which the sampled numbers do not know yet.
    (lambda t: _edit(t, "f16|f32|f64|b)", "f16|bf16|f32|f64|b)"), "NUMBER",
     "numbers that fit their dtype"),
    (lambda t: _edit(t, 'tile_factors: "factors" outs', 'tile_factors: "factors" "=" outs'),
     "tile_factors", 'Expected `"factors" outs`'),
    (lambda t: _edit(t, "%ignore COMMENT\n", ""), "%ignore COMMENT", "has no directive"),
    # The layout: spaces no longer ignored, a line that may hold two statements, a new token.
    (lambda t: _edit(t, "%ignore /[ \\t]+/\n", ""), "%ignore /[ \\t]+/", "has no directive"),
    (lambda t: _edit(t, "start: _LEADING? (_stmt? _NL)*", "start: _LEADING? (_stmt* _NL)*"),
     "start", "one statement per line"),
    (lambda t: _edit(t, '_outs: "->" outs', '_outs: "~>" outs'), "_outs",
     "whose spacing training.grammars.layout.separator does not know"),
]


@pytest.mark.parametrize("edit,rule,words", BROKEN, ids=[b[1] for b in BROKEN])
def test_an_edit_that_breaks_the_derivation_names_the_rule(edit, rule, words):
    text = edit(grammar_text())
    assert text != grammar_text()
    _lark(text)  # still a grammar: it is the derivation that cannot follow
    with pytest.raises(GrammarError) as info:
        sampling_grammar(text)
    assert info.value.rule == rule
    assert words in str(info.value), str(info.value)


def _harmless(text: str) -> str:
    """Comments, re-spaced rules, alternatives on continuation lines and in another order, a
    definition moved: the language does not change.  (Not a comment line between continuation
    lines: Lark takes one, llguidance does not, so the grammar file cannot have one.)"""
    text = _edit(text, "_stmt: s_block | s_loops", "// the statements, one per line\n"
                 "_stmt: s_general | s_loops  // the getters first\n     | s_block")
    text = _edit(text, "| s_postproc | s_general\n", "| s_postproc\n")
    text = _edit(text, "_out: name | name_range",
                 "_out: name_range  // a range\n    | name")
    text = _edit(text, "?factor: name | name_range | INT | NONE",
                 "?factor:   INT|NONE\n\n  | name_range|name")
    text = _edit(text, 's_block: "block" STRING opt_func? _outs',
                 '// block "C" -> C\ns_block :  "block"  STRING  opt_func?   _outs  // one')
    text = _edit(text, 's_tile: "tile" name int_list opt_max_inner? opt_preserve?',
                 's_tile:"tile"  name  int_list  opt_max_inner?\topt_preserve?')
    text = _edit(text, "NAME: /[A-Za-z_][A-Za-z0-9_]*/\n", "")
    text = _edit(text, "start: ", "NAME: /[A-Za-z_][A-Za-z0-9_]*/\nstart: ")
    text = _edit(text, "%ignore COMMENT", "%ignore   COMMENT  // comments")
    return text


def test_harmless_edits_derive_the_same_rules():
    text = _harmless(grammar_text())
    original = _lark(grammar_text())
    for path in GOLDEN:  # the edits are harmless to the parser
        script = path.read_text()
        assert _lark(text).parse(script) == original.parse(script), path.name
    before, after = Grammar.parse(sampling_grammar()), Grammar.parse(sampling_grammar(text))
    assert [d.name for d in after] != [d.name for d in before]  # NAME moved
    assert {d.name for d in after} == {d.name for d in before}
    reordered = []
    for d in before:
        new = after.definition(d.name)
        assert (new.prefix, sorted(new.alternatives)) == (d.prefix, sorted(d.alternatives)), d
        if new.body != d.body:
            reordered.append(d.name)
    assert sorted(reordered) == ["_stmt", "factor"]  # `_out` is `name` either way


def test_harmless_edits_derive_a_grammar_accepting_the_same_samples():
    original, edited = sampling_grammar(), sampling_grammar(_harmless(grammar_text()))
    assert original != edited
    for lark_text in (_harmless(grammar_text()), original, edited):
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            llguidance.grammar_from("lark", lark_text))
        assert not is_error, messages
    samples = [s for s in _random_walks(original, 40, seed=1) if s is not None]
    samples += [s for s in _random_walks(grammar_text(), 40, seed=2) if s is not None]
    samples += [_statements(expand_ranges(p.read_text())) for p in GOLDEN]
    samples += ["fuse l3 l4 -> l5\n", "fuse l6..b2 -> l5\n", "reorder x vectorize\n",
                "split l0 [none, 4] -> l1\n", "postproc auto llvm\nloops C -> i\n"]
    samples = [s if isinstance(s, bytes) else s.encode() for s in samples]
    old, new = llguidance.grammar_from("lark", original), llguidance.grammar_from("lark", edited)
    verdicts = [_accepts(old, s) for s in samples]
    assert verdicts.count(True) >= 40 and verdicts.count(False) >= 5  # both kinds are there
    for sample, verdict in zip(samples, verdicts, strict=True):
        assert _accepts(new, sample) == verdict, sample


def _statements(script: str) -> str:
    """A script without its comments and blank lines, which sampled scripts never have."""
    return "".join(line for line in script.splitlines(keepends=True)
                   if line.strip() and not line.startswith("#"))


def _accepts(grammar: str, data: bytes) -> bool:
    matcher = llguidance.LLMatcher(TOKENIZER, grammar, log_level=0)
    return matcher.consume_tokens(list(data)) and matcher.is_accepting()
