"""check(): syntax, then semantics, then (given a workload) whether the script applies; each
finding with its stage, position and message as fields."""

from __future__ import annotations

import pytest

import dragon_dsl
from codegen import workload
from dragon_dsl import DslSemanticError, check

GOOD = (__import__("pathlib").Path(__file__).parent / "golden" / "scripts" /
        "matmul_llvm.dragon").read_text()


@pytest.fixture(scope="module")
def matmul():
    return workload("matmul(m=128,n=128,k=128)")


def only(diagnostics):
    assert len(diagnostics) == 1, diagnostics
    return diagnostics[0]


def test_clean_script_without_and_with_workload(matmul):
    assert check(GOOD) == []
    assert check(GOOD, workload=matmul, target="llvm") == []


def test_syntax_error_is_one_diagnostic():
    d = only(check("loops C ->\n"))
    assert d.stage == "syntax" and d.line == 1 and "a name" in d.expected


def test_undefined_name_suggests_close_names():
    d = only(check('block "C" -> C\nloops D -> l0\n'))
    assert (d.stage, d.line, d.column) == ("semantic", 2, 7)
    assert d.message == "'D' is not defined" and "'C'" in d.expected


def test_all_semantic_errors_are_reported_without_cascades():
    text = 'loops X -> l0\nparallel l0\nloops Y -> l1\n'
    ds = check(text)
    assert [d.line for d in ds] == [1, 3]


def test_wrong_kind_of_variable():
    d = only(check('block "C" -> C\nparallel C\n'))
    assert "expects a loop" in d.message and "'C' is a block" in d.message


def test_redefinition():
    d = only(check('block "C" -> C\nblock "D" -> C\n'))
    assert "already defined on line 1" in d.message and d.line == 2


@pytest.mark.parametrize("text,needle", [
    ('block "C" -> C\nloops C -> l0\ntile l0 [2, 4] -> a\n', "2 factors but binds 1"),
    ('sample_categorical [1, 2] 5 -> v\n', "index 5"),
    ('block "C" -> C\nblock "C" -> a, b\n', "exactly one result"),
    ('block "C" -> C\n@ComputeInline(C;) -> x\n', "has no results"),
    ('postproc auto llvm\nblock "C" -> C\n', "nothing may follow"),
    ('@NoSuchKind(;)\n', "unknown instruction kind"),
    ('sample_categorical [1, 2] 0 probs=[0.5] -> v\n', "one entry per candidate"),
])
def test_semantic_rules(text, needle):
    d = only(check(text))
    assert d.stage == "semantic" and needle in d.message, d


def test_script_for_a_different_kernel(matmul):
    d = only(check('block "conv" -> b\n', workload=matmul))
    assert d.stage == "apply" and d.line == 1 and "GetSBlock" in d.message


def test_tile_factors_must_multiply_to_the_extent(matmul):
    bad = GOOD.replace("tile l0 [8, 2, 8, 1]", "tile l0 [8, 2, 8, 2]")
    d = only(check(bad, workload=matmul, target="llvm"))
    assert d.stage == "apply" and "multiply to 256" in d.message and "extent 128" in d.message
    assert d.line == bad.splitlines().index("tile l0 [8, 2, 8, 2] -> l3..l6") + 1


def test_postproc_auto_needs_a_target(matmul):
    d = only(check(GOOD, workload=matmul))
    assert "needs a target" in d.message


def test_to_trace_raises_the_first_error_with_position():
    with pytest.raises(DslSemanticError) as info:
        dragon_dsl.to_trace('block "C" -> C\nloops D -> x\n')
    assert info.value.line == 2 and info.value.snippet.endswith("^")


def test_to_trace_auto_without_workload_explains():
    with pytest.raises(DslSemanticError, match="needs the workload and target"):
        dragon_dsl.to_trace(GOOD)


def test_diagnostics_render_for_people():
    d = only(check('block "C" -> C\nloops D -> x\n'))
    assert str(d).startswith("2:7: error: 'D' is not defined")
    assert d.as_dict()["line"] == 2
