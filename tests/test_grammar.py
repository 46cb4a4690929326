"""The grammar file is the single source of truth, accepted as-is by Lark and llguidance, and
every statement has its grammar rule, its table row or codec branch, and its printer."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import llguidance
import pytest
from hypothesis import HealthCheck, given, settings

from dragon_dsl import parse
from dragon_dsl.codec import ALL_KINDS
from dragon_dsl.grammar import grammar_path, grammar_text, statement_options
from dragon_dsl.parser import parser
from dragon_dsl.statements import SPECIAL_OPS, STATEMENTS

from .test_parser import GRAMMAR_PROGRAMS

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = sorted((ROOT / "tests" / "golden" / "scripts").glob("*.dragon"))


class _ByteTokenizer:
    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]

    def __call__(self, text):
        return list(text)


@pytest.fixture(scope="module")
def llg():
    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokenizer()))
    grammar = llguidance.grammar_from("lark", grammar_text())
    return tokenizer, grammar


def llg_accepts(llg, text: str) -> bool:
    tokenizer, grammar = llg
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    return matcher.consume_tokens(list(text.encode())) and matcher.is_accepting()


def test_one_grammar_file_loaded_by_one_helper():
    assert grammar_path().name == "dragon.lark"
    assert grammar_path().read_text() == (ROOT / "grammar" / "dragon.lark").read_text()


def test_lark_lalr_builds_the_grammar():
    assert parser().options.parser == "lalr"


def test_llguidance_accepts_the_grammar_as_is(llg):
    grammar = llguidance.grammar_from("lark", grammar_text())
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    assert not is_error and not messages, messages


def test_grammar_uses_only_what_llguidance_supports():
    text = grammar_text()
    assert "(?=" not in text and "(?!" not in text and "(?<" not in text  # lookarounds
    assert not re.search(r"^[A-Z_]+\.\d+\s*:", text, re.M)  # terminal priorities
    assert not re.search(r"^\w+\{", text, re.M)  # templates


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_both_engines_accept_the_golden_scripts(path, llg):
    text = path.read_text()
    parse(text)
    assert llg_accepts(llg, text)


@pytest.mark.parametrize("text", [
    "loops C -> \n", "tile l0 [4, 2] ->\n", "block C -> C\n", "annotate x = 1\n",
    "bind l0 threadIdx.x\n", "reorder\n", "@foo(;)\n",
])
def test_both_engines_reject_invalid_scripts(text, llg):
    from dragon_dsl import DslSyntaxError

    with pytest.raises(DslSyntaxError):
        parse(text)
    assert not llg_accepts(llg, text)


def test_every_statement_has_rule_row_and_printer():
    """Adding a statement means a grammar rule, a STATEMENTS row (or a codec branch for the
    special ones) and a printer; this fails when one is missing."""
    import dragon_dsl.printer as printer

    rules = set(statement_options())
    assert rules == set(STATEMENTS) | set(SPECIAL_OPS), rules ^ (set(STATEMENTS) | set(SPECIAL_OPS))
    for op in SPECIAL_OPS:
        assert hasattr(printer, f"print_{op}"), op
    for op, spec in STATEMENTS.items():
        assert spec.kind in ALL_KINDS, op
        assert set(spec.options) == set(statement_options()[op]), op


def test_all_52_instruction_kinds_are_registered_in_tvm():
    from tvm.s_tir.schedule import InstructionKind

    assert len(ALL_KINDS) == len(set(ALL_KINDS)) == 52
    for kind in ALL_KINDS:
        assert InstructionKind.get(kind).name == kind
    with pytest.raises(Exception):  # noqa: B017  TVM raises its own error type
        InstructionKind.get("NoSuchKind")


def test_language_package_never_evaluates_text():
    for path in (ROOT / "dragon_dsl").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("eval", "exec", "compile"), path
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.split(".")[0] in ("pickle", "marshal", "shelve")
                               for n in names), path


def test_language_package_does_not_import_torch():
    code = "import sys, dragon_dsl, dragon_dsl.cli; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(GRAMMAR_PROGRAMS)
def test_lark_and_llguidance_agree_on_generated_programs(llg, text):
    """A constrained decoder must allow exactly the scripts the parser reads."""
    import lark

    try:
        parser().parse(text if text.endswith("\n") else text + "\n")
        lark_ok = True
    except lark.exceptions.LarkError:
        lark_ok = False
    assert llg_accepts(llg, text if text.endswith("\n") else text + "\n") == lark_ok, text


def test_the_wheel_ships_the_grammar(tmp_path):
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("little_dragon-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = zf.read("dragon_dsl/_grammar/dragon.lark").decode()
        assert "dragon_dsl/py.typed" in zf.namelist()
    assert shipped == grammar_text()
