"""Parsing: structured syntax errors, and no input that crashes or hangs the parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

import dragon_dsl
from dragon_dsl import DragonError, DslSyntaxError, check, parse
from dragon_dsl.parser import parser


def test_syntax_error_carries_position_snippet_and_expectations():
    text = 'block "C" -> C\nloops C -> l0, \n'
    with pytest.raises(DslSyntaxError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column) == (2, 16)
    assert err.source_line == "loops C -> l0, "
    assert err.snippet.endswith("^") and "a name" in err.expected
    assert "line 2, column 16" in str(err) and "Expected one of" in str(err)


def test_unexpected_character():
    with pytest.raises(DslSyntaxError) as info:
        parse("loops C -> l0 $\n")
    assert info.value.column == 15 and "'$'" in info.value.reason


def test_bad_range_is_a_syntax_error_at_its_statement():
    with pytest.raises(DslSyntaxError) as info:
        parse("block \"C\" -> C\nloops C -> l5..l2\n")
    assert info.value.line == 2 and "not a range" in str(info.value)


@pytest.mark.parametrize("literal,reason", [
    ("300i8", "300 is out of the range of int8 (-128 to 127)"),
    ("-1u32", "-1 is out of the range of uint32 (0 to 4294967295)"),
    ("2b", "2 is out of the range of bool (0 to 1)"),
    ("7e4f16", "7e4 is out of the range of float16 (magnitude at most 65504)"),
    ("1e39f32", "1e39 is out of the range of float32"),
    ("1e999", "1e999 is out of the range of a 64-bit float"),
    ("1.5i32", "integer dtype int32 with a non-integer value '1.5'"),
])
def test_literals_outside_their_dtype_are_syntax_errors_where_they_stand(literal, reason):
    with pytest.raises(DslSyntaxError) as info:
        parse(f'block "C" -> C\n@Foo(1, {literal}; )\n')
    assert (info.value.line, info.value.column) == (2, 9) and reason in str(info.value)
    parse("@Foo(127i8, -128i8, 4294967295u32, 1b, 65504f16, 1e300; )\n")


def test_minus_after_an_operand_is_binary_minus():
    spaced = parse("transform_block_layout b0 map(i, j => i - 1, j * -1)\n")
    for text in ["transform_block_layout b0 map(i, j => i-1, j*-1)\n",
                 "transform_block_layout b0 map(i, j => i -1, j * -1)\n"]:
        assert parse(text).statements[0].args == spaced.statements[0].args


def test_non_utf8_bytes():
    with pytest.raises(DslSyntaxError):
        parse(b"loops \xff")


def test_comments_and_blank_lines_survive_formatting():
    text = "# a schedule\n\nblock \"C\" -> C  # the matmul\n\n\n# loops\nloops C -> l0..l2\n"
    assert dragon_dsl.format(text) == text.replace("\n\n\n", "\n\n")


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_any_bytes_end_in_success_or_dragon_error(data):
    try:
        check(data)
    except DragonError:
        raise AssertionError("check reports problems as diagnostics, it does not raise") \
            from None
    try:
        parse(data)
    except DragonError:
        pass


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from(list('abcdefl0123456789 ->,.[]()=";:@#\n_/%*+')),
               max_size=120))
def test_script_like_text_ends_in_success_or_dragon_error(text):
    try:
        program = parse(text)
    except DragonError:
        return
    assert dragon_dsl.format(dragon_dsl.format(program)) == dragon_dsl.format(program)
    check(text)


def _spaced(terminal):
    # from_lark joins tokens with nothing between them ("loopsC"); pad every token with the
    # spaces the grammar ignores, so that generated text lexes as the grammar means it.
    pattern = terminal.pattern
    if terminal.name == "_NL":
        return st.just("\n")
    base = st.just(pattern.value) if pattern.type == "str" else \
        st.from_regex(pattern.to_regexp(), fullmatch=True)
    return base.map(lambda s: f" {s} ")


GRAMMAR_PROGRAMS = from_lark(parser(), start="start",
                             explicit={t.name: _spaced(t) for t in parser().terminals})


@settings(max_examples=300)
@given(GRAMMAR_PROGRAMS)
def test_grammar_generated_programs_round_trip_or_raise_dragon_error(text):
    try:
        program = parse(text)
        canonical = dragon_dsl.format(program)
    except DragonError:
        return
    again = parse(canonical)
    assert again.statements == program.statements
    assert dragon_dsl.format(again) == canonical
