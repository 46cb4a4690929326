"""The sampling grammars as GBNF (``grammars.gbnf``), loaded in XGrammar: MetaSchedule's scripts
are accepted, malformed ones refused, and the GBNF admits what the Lark grammar admits,
llguidance's random walks through it included, and nothing the Lark grammar refuses."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import dragon_dsl
from codegen.search import sample_traces
from codegen.workloads import workload
from dragon_dsl.errors import GrammarError
from training.grammars.constraints import expand_ranges, sampling_grammar, workload_grammar
from training.grammars.gbnf import lark_to_gbnf

from .test_constraints import CANONICAL, MOVED, _random_walks

try:  # a missing checker must fail the suite, not skip every test of this file
    import xgrammar as xgr
except ImportError as exc:
    raise ImportError("tests/test_gbnf.py needs xgrammar: `make` installs it "
                      "(pip install --no-deps xgrammar==0.2.8)") from exc

SPEC = "matmul(m=32,n=32,k=32)"
GOLDEN = Path(__file__).parent / "golden" / "scripts" / "matmul_llvm.dragon"


@functools.cache
def compiled(gbnf: str):
    grammar = xgr.Grammar.from_ebnf(gbnf)
    return xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False).compile_grammar(grammar)


def accepts(gbnf: str, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compiled(gbnf), terminate_without_stop_token=True)
    return matcher.accept_string(text) and matcher.is_completed()


@functools.cache
def grammars() -> dict[str, str]:
    return {"sampling": lark_to_gbnf(sampling_grammar()),
            "workload": lark_to_gbnf(workload_grammar(workload(SPEC), "llvm"))}


@functools.cache
def metaschedule_scripts() -> list[str]:
    wl = workload(SPEC)
    traces = sample_traces(wl.mod, "llvm", "llvm", 4, seed=3)
    assert traces
    return [expand_ranges(dragon_dsl.from_trace(t, postproc="auto", postproc_set="llvm",
                                                workload=wl)) for t in traces]


@pytest.mark.parametrize("which", ["sampling", "workload"])
def test_metaschedule_scripts_are_accepted(which):
    gbnf = grammars()[which]
    for script in metaschedule_scripts():
        assert accepts(gbnf, script), script
    assert accepts(gbnf, "")  # no statement yet is a script too


def test_the_golden_metaschedule_script_is_accepted():
    import re

    lines = [re.sub(r"[ ]*#.*", "", line) for line in GOLDEN.read_text().splitlines()]
    uncommented = "".join(f"{line}\n" for line in lines if line)  # (no '#' in its strings)
    script = expand_ranges(dragon_dsl.format(uncommented))
    assert accepts(grammars()["sampling"], script)


@pytest.mark.parametrize("which", ["sampling", "workload"])
def test_malformed_scripts_are_refused(which):
    gbnf = grammars()[which]
    script = metaschedule_scripts()[0]
    first, _, rest = script.partition("\n")
    assert accepts(gbnf, script)
    misspelt = script.replace("annotate ", "anotate ", 1)
    assert misspelt != script and not accepts(gbnf, misspelt)
    assert not accepts(gbnf, script.rstrip("\n"))                # the last newline missing
    assert not accepts(gbnf, first + rest)                       # two statements on one line
    assert not accepts(gbnf, "loops tile -> l0\n")               # a keyword as a name
    assert not accepts(gbnf, 'block "C" -> C\n<end>\n')          # not Dragon


def test_only_the_canonical_layout_is_admitted():
    gbnf = grammars()["sampling"]
    assert accepts(gbnf, CANONICAL)
    for old, new in MOVED:
        assert not accepts(gbnf, CANONICAL.replace(old, new)), repr(new)


@pytest.mark.parametrize("spec", [None, SPEC])
def test_what_llguidance_admits_the_gbnf_admits(spec):
    lark = sampling_grammar() if spec is None else workload_grammar(workload(spec), "llvm")
    gbnf = lark_to_gbnf(lark)
    walks = [s.decode() for s in _random_walks(lark, 150, seed=1) if s is not None]
    assert len(walks) > 100
    refused = [w for w in walks if not accepts(gbnf, w)]
    assert not refused, refused[:3]


def test_gbnf_names_are_what_llama_cpp_reads():
    import re

    for gbnf in grammars().values():
        names = re.findall(r"^(\S+) ::=", gbnf, re.M)
        assert names[0] == "root" and len(set(names)) == len(names)
        assert all(re.fullmatch(r"[A-Za-z0-9-]+", n) for n in names)
        assert "_" not in "".join(names)


def test_ignore_directives_allow_ignored_text_between_tokens():
    gbnf = lark_to_gbnf('start: "a" B+\nB: /[0-9]/\n%ignore " "\n')
    assert accepts(gbnf, " a 1 2 ") and accepts(gbnf, "a12")
    assert not accepts(gbnf, "a") and not accepts(gbnf, "a 1x")


def test_left_recursion_becomes_repetition():
    gbnf = lark_to_gbnf('start: sum\nsum: N | sum "+" N\nN: /[0-9]+/\n')
    assert "sum ::= N (\"+\" N)*" in gbnf
    assert accepts(gbnf, "1+22+3") and not accepts(gbnf, "1++2")


@pytest.mark.parametrize("text,needle", [
    ('start: "a"\n%import common.WS\n', "%import"),
    ('start: "a"i\n', "case-insensitive"),
    ('start: A\nA: /(?=x)x/\n', "(?="),
    ('start: A\nA: /^x/\n', "anchor"),
    ('start: A\nA: /x+?/\n', "lazy"),
    ('start: A\nA: /x/i\n', "flags"),
    ('start: A\nA: /[a-z]+/ & ~("x" | B)\nB: "b"\n', "other than literals"),
    ('start: A\nA: /a|b/ & ~("a")\n', "name pattern"),
    ('start: a\na: b "x" | "y"\nb: a "z"\n', "left-recursive through other rules"),
    ('start: a\n', "no rule `a`"),
    ('s: "a"\n', "no `start` rule"),
])
def test_what_cannot_be_translated_is_named(text, needle):
    with pytest.raises(GrammarError, match=None) as info:
        lark_to_gbnf(text, source="test.lark")
    assert needle in str(info.value), str(info.value)


# ---- dragon grammar -------------------------------------------------------------------------

@pytest.fixture
def dragon(monkeypatch):
    """``dragon_dsl.cli.main`` with this checkout's ``grammar`` entry point (an editable install
    made before the command existed does not list it)."""
    from importlib import metadata

    import dragon_dsl.cli as cli

    real = metadata.entry_points
    mine = metadata.EntryPoint("grammar", "training.cli.grammar:register", "dragon.commands")

    def entry_points(group):
        found = [e for e in real(group=group) if e.name != "grammar"]
        return [*found, mine] if group == "dragon.commands" else found

    monkeypatch.setattr(cli.metadata, "entry_points", entry_points)
    return cli.main


def test_dragon_grammar_writes_what_the_samplers_and_xgrammar_read(dragon, capsys, tmp_path):
    import llguidance

    assert dragon(["grammar", "--format", "lark"]) == 0
    lark = capsys.readouterr().out
    assert lark.startswith("//") and '"<end>"?' in lark
    assert not llguidance.LLMatcher.validate_grammar_with_warnings(
        llguidance.grammar_from("lark", lark))[0]
    out = tmp_path / "matmul.gbnf"
    assert dragon(["grammar", "--format", "gbnf", "--workload", SPEC, "--out", str(out)]) == 0
    gbnf = out.read_text()
    assert gbnf == lark_to_gbnf(workload_grammar(workload(SPEC), "llvm").replace(
        "start: (_stmt _NL)* (s_postproc_auto _NL)?",
        'start: (_stmt _NL)* (s_postproc_auto _NL)? "<end>"?'))
    script = metaschedule_scripts()[0]
    assert accepts(gbnf, script) and accepts(gbnf, script + "<end>")
    assert not accepts(gbnf, script + "<end>\nloops C -> l0\n")
    assert dragon(["grammar", "--format", "gbnf", "--no-end-marker"]) == 0
    assert capsys.readouterr().out == grammars()["sampling"]
