"""Workload-aware grammars: every MetaSchedule script of the workload stays accepted, and what
cannot fit the kernel is refused."""

from __future__ import annotations

import re

import llguidance
import pytest

import dragon_dsl
from codegen.search import sample_traces
from codegen.workloads import workload
from training.grammars.constraints import (
    categorical_lists,
    expand_ranges,
    sampling_grammar,
    workload_grammar,
)

from .test_grammar import _ByteTokenizer
from .traces import FAMILY_MATRIX, RULES, UNSEARCHABLE, WORKLOADS, space_or_none, target_of

CASES = [
    ("matmul(m=128,n=128,k=128)", "llvm", "llvm"),
    ("softmax(m=64,n=128)", "llvm", "llvm"),
    ("conv2d(n=1,h=14,w=14,ci=16,co=16)", "cuda", "cuda"),
    ("dense(m=128,n=768,k=768,bias=1,act=gelu)", "cuda", "cuda"),
    ("matmul(m=128,n=128,k=128,dtype=float16)", "cuda", "cuda-tensorcore"),
    # Thread extents and cross-thread reductions, which a fixed list of candidates missed.
    ("softmax(m=64,n=128)", "cuda", "cuda"),
    ("pool2d(kind=avg)", "cuda", "cuda-tensorcore"),
    ("tvm(name=NRM)", "cuda", "cuda"),
]


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokenizer()))


def accepts(grammar, text: str) -> bool:
    matcher = llguidance.LLMatcher(TOKENIZER, grammar, log_level=0)
    return matcher.consume_tokens(list(text.encode())) and matcher.is_accepting()


def assert_scripts_accepted(spec: str, target: str, rules: str, n: int, seed: int,
                            max_tries: int = 50) -> None:
    """``n`` MetaSchedule-sampled scripts of the pair, each accepted by its workload grammar."""
    wl = workload(spec)
    grammar = llguidance.grammar_from("lark", workload_grammar(wl, target, rules))
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    assert not is_error, messages
    lists = categorical_lists(wl, target, rules)
    traces = sample_traces(wl.mod, target, rules, n, seed=seed, max_tries=max_tries)
    assert traces
    for trace in traces:
        script = dragon_dsl.from_trace(trace, postproc="auto", postproc_set=rules, workload=wl)
        spelled = expand_ranges(script)
        assert accepts(grammar, spelled), spelled
        assert dragon_dsl.format(spelled) == script  # the same script, canonical again
        for inst in trace.insts:  # the candidate lists cover what MetaSchedule draws
            if inst.kind.name == "SampleCategorical":
                values = tuple(int(v) for v in inst.attrs[0])
                assert values in lists, values


@pytest.mark.parametrize("spec,target,rules", CASES)
def test_metaschedule_scripts_stay_accepted(spec, target, rules):
    assert_scripts_accepted(spec, target, rules, 6, seed=4)


# The 28 workloads of the round trip and one small instance of every family, under the rule
# sets a target picks (mma, a rule list of the tests' own, is left out).
SWEEP_RULES = ("llvm", "cuda", "cuda-tensorcore")
SWEEP = sorted({(spec, rules) for spec in WORKLOADS for rules in SWEEP_RULES}
               | {(specs[RULES.index(rules)], rules) for specs in FAMILY_MATRIX.values()
                  for rules in SWEEP_RULES})


@pytest.mark.slow
@pytest.mark.parametrize("spec,rules", SWEEP)
def test_every_family_under_every_rule_set_stays_accepted(spec, rules):
    target = target_of(rules)
    if (spec, rules) in UNSEARCHABLE or space_or_none(spec, target, rules) is None:
        pytest.skip("MetaSchedule cannot search this pair")
    assert_scripts_accepted(spec, target, rules, 3, seed=1, max_tries=300)


def test_categorical_candidates_come_from_the_design_space():
    wl = workload("softmax(m=64,n=128)")
    cpu, gpu = categorical_lists(wl, "llvm"), categorical_lists(wl, "cuda", "cuda")
    assert cpu == ((0, 16, 64, 512),)  # ParallelizeVectorizeUnroll's unroll steps on CPU
    assert (4, 8, 16, 32, 64, 128, 256, 512) in gpu  # CrossThreadReduction's thread extents
    narrow = llguidance.grammar_from("lark", workload_grammar(wl, "llvm"))
    assert accepts(narrow, "sample_categorical [0, 16, 64, 512] 3 -> v0\n")
    assert not accepts(narrow, "sample_categorical [4, 8, 16, 32, 64, 128, 256, 512] 0 -> v0\n")


def test_what_cannot_fit_is_refused_and_the_plain_grammar_allows_it():
    wl = workload("matmul(m=128,n=128,k=128)")
    narrow = llguidance.grammar_from("lark", workload_grammar(wl, "llvm"))
    plain = llguidance.grammar_from("lark", dragon_dsl.grammar.grammar_text())
    good = 'block "C" -> C\nloops C -> i, j, k\ntile i [4, 2, 16] -> i0, i1, i2\n'
    wrong = [
        'block "D" -> D\n',                                        # no such block
        'block "C" -> b0\n',                                       # named unlike the encoder
        'block "C" -> C\nloops C -> i, j, k\ntile i [3, 5] -> i0, i1\n',   # 15 != 128
        'block "C" -> C\nloops C -> i, j, k\ntile k [128, 2] -> k0, k1\n',  # 256 != 128
        "sample_categorical [0, 16, 64, 512] 4 -> v0\n",           # index past the list
        "sample_categorical [0, 7] 1 -> v0\n",                     # not a MetaSchedule list
    ]
    assert accepts(narrow, good) and accepts(plain, good)
    for text in wrong:
        assert accepts(plain, text), text
        assert not accepts(narrow, text), text


def test_derived_loops_keep_the_plain_rule():
    narrow = llguidance.grammar_from("lark", workload_grammar(workload("matmul(m=16,n=16,k=16)")))
    assert accepts(narrow, "tile l7 [3, 5] -> l8, l9\n")


def test_sampling_grammar_has_no_ranges_that_could_be_wrong():
    plain = llguidance.grammar_from("lark", sampling_grammar())
    assert not llguidance.LLMatcher.validate_grammar_with_warnings(plain)[0]
    assert accepts(plain, "fuse l3 l4 -> l5\n")
    assert not accepts(plain, "fuse l6..b2 -> l5\n")  # the parser would refuse it


def test_keywords_are_not_names_when_sampling():
    plain = llguidance.grammar_from("lark", sampling_grammar())
    assert accepts(plain, "reorder x y\n")
    assert not accepts(plain, "reorder x vectorize\n")  # Lark would read the keyword


def test_glued_keywords_and_numbers_the_parser_refuses_are_not_sampled():
    plain = llguidance.grammar_from("lark", sampling_grammar())
    for text in ["reindex b0 write 0 -> b1\n", "tile l0 [4, 8] -> l1, l2 factors v0, v1\n",
                 "split l0 [4, 8] preserve_unit_iters=true disable_predication=true -> l1, l2\n",
                 "postproc\n", "postproc auto llvm\n", "@Foo(x - 3, 4i8, 1.5, 2e-3f32;)\n"]:
        assert accepts(plain, text), text
        dragon_dsl.parse(text)
    for text in ["reindex b0 write4 -> b1\n", "tile l0 [4] -> l1 factorsv0\n",
                 "@Foo(1.5i8;)\n", "@Foo(300i8;)\n", "@Foo(1e999;)\n", "@Foo(1e9f16;)\n",
                 "@Foo(-1u32;)\n"]:
        assert not accepts(plain, text), text
        with pytest.raises(dragon_dsl.DragonError):
            dragon_dsl.parse(text)
    # Whether Lark splits a glued keyword depends on its parser state (it reads `parallell0` as
    # `parallel l0` where no name may come); sampled scripts never rely on it.
    for text in ["parallell0\n", "split l0 [4] preserve_unit_iters=truedisable_predication=true"
                 " -> l1\n", "postprocauto llvm\n"]:
        assert not accepts(plain, text), text


def _random_walks(lark: str, n: int, seed: int):
    """``n`` scripts written a byte at a time, each byte drawn uniformly from those the grammar
    allows next (every byte is a token boundary, so every way of gluing lexemes is tried), ended
    at random or after 300 bytes and then closed as the sampler's wind-down closes them."""
    import numpy as np

    from training.sampling.closing import Closer, grammar_literals

    template = llguidance.LLMatcher(TOKENIZER, llguidance.grammar_from("lark", lark), log_level=0)
    closer = Closer(TOKENIZER, extra=grammar_literals(lark))
    rng = np.random.default_rng(seed)
    for _ in range(n):
        matcher, text = template.deep_copy(), bytearray()
        while len(text) < 300:
            bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8),
                                 bitorder="little")
            allowed = np.flatnonzero(bits[:256])
            if bits[256] and rng.random() < 0.02 or not len(allowed):
                break
            text.append(int(rng.choice(allowed)))
            assert matcher.consume_token(text[-1])
        path = [] if matcher.is_accepting() else closer.path(matcher)
        yield None if path is None else bytes(text) + bytes(path)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NUMBER = re.compile(r"(?<![\w.])-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?(?:[iuf][0-9]+|b)?"
                     r"(?![\w.])")
_DTYPE = re.compile(r": (?:u?int|float|bfloat)[0-9]+\b|: bool\b")


def _layout(script: str) -> str:
    """``script`` with what the printer respells erased, its layout kept: each string is `""`,
    each number `0`, an index-map variable loses its dtype, and a parenthesis that only groups
    goes (the printer writes `a + b` for `(a + b)`), the spaces around it staying.  The sampling
    grammars fix the layout, not how a literal is spelled.

    >>> _layout('@K((a + b) * c, min(x, 1.5f32), "\\u00e9"; map(i: int32 => i))')
    '@K(a + b * c, min(x, 0), ""; map(i => i))'
    """
    text = _DTYPE.sub("", _NUMBER.sub("0", _STRING.sub('""', script)))
    out, grouping = [], []
    for i, c in enumerate(text):
        if c == "(":
            grouping.append(i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_>"))
            if grouping[-1]:
                continue
        elif c == ")" and grouping and grouping.pop():
            continue
        out.append(c)
    return "".join(out)


@pytest.mark.parametrize("spec,n", [(None, 600), ("matmul(m=128,n=128,k=128)", 200),
                                    ("conv2d(n=1,h=14,w=14,ci=16,co=16)", 200)])
def test_what_the_sampling_grammars_admit_parses_in_canonical_layout(spec, n):
    """Everything admitted parses, and is laid out as the printer lays it out: formatting it
    (with its ranges written out again) changes no space and no line break."""
    lark = sampling_grammar() if spec is None else workload_grammar(workload(spec))
    scripts = list(_random_walks(lark, n, seed=0))
    closed = [s.decode() for s in scripts if s is not None]
    assert len(closed) >= 0.97 * n  # a few prefixes have no closing string the closer finds
    refused, moved = [], []
    for script in closed:
        try:
            canonical = expand_ranges(dragon_dsl.format(script))
        except dragon_dsl.DragonError as exc:
            refused.append((script[-80:], str(exc).splitlines()[0]))
            continue
        if _layout(canonical) != _layout(script):
            moved.append((script[-80:], canonical[-80:]))
    assert not refused, f"{len(refused)} of {len(closed)} refused by the parser: {refused[:3]}"
    assert not moved, f"{len(moved)} of {len(closed)} not in canonical layout: {moved[:3]}"
    assert sum(expand_ranges(dragon_dsl.format(s)) == s for s in closed) >= len(closed) // 4


# A canonical script, and the same script with one space or line break moved: each parses and
# means the same, and only the first is how the printer writes it.
CANONICAL = ('block "C" -> C\nloops C -> i, j, k\ntile i [4, 2, 2] -> i0, i1, i2\n'
             "fuse i0 i1 -> l3\nannotate C unroll=16\n@Foo(x - 3, [1, 2]; {\"a\": 1}) -> v0\n"
             "postproc auto llvm\n")
MOVED = [
    ("tile i", "tile  i"), ("i0, i1, i2", "i0 ,i1, i2"), ("i0, i1, i2", "i0,i1, i2"),
    ("[4, 2, 2]", "[4,2, 2]"), ("[4, 2, 2]", "[ 4, 2, 2]"), ("[4, 2, 2]", "[4, 2, 2 ]"),
    ("-> C\n", "-> C \n"), ("loops", " loops"), ("tile i", "tile\ti"), ("-> i0", "->i0"),
    ("C\nloops", "C\n\nloops"), ("C\nloops", "C\r\nloops"), ("unroll=16", "unroll = 16"),
    ("fuse i0 i1", "fuse i0  i1"), ("@Foo(x", "@Foo (x"), ("(x - 3", "( x - 3"),
    ("x - 3", "x-3"), ("; {", ";{"), ('"a": 1', '"a" : 1'), ('"a": 1', '"a":1'),
    ("llvm\n", "llvm\n\n"), ("llvm\n", "llvm"),
]


@pytest.mark.parametrize("spec", [None, "matmul(m=16,n=16,k=16)"])
def test_only_the_canonical_layout_is_admitted(spec):
    lark = sampling_grammar() if spec is None else workload_grammar(workload(spec))
    grammar = llguidance.grammar_from("lark", lark)
    assert expand_ranges(dragon_dsl.format(CANONICAL)) == CANONICAL
    assert accepts(grammar, CANONICAL)
    for old, new in MOVED:
        assert CANONICAL.count(old) == 1, old
        text = CANONICAL.replace(old, new)
        assert not accepts(grammar, text), repr(new)
        assert dragon_dsl.parse(text) == dragon_dsl.parse(CANONICAL), repr(new)  # the same


def test_result_counts_match_what_decoding_requires():
    plain = llguidance.grammar_from("lark", dragon_dsl.grammar.grammar_text())
    for lark in (sampling_grammar(), workload_grammar(workload("matmul(m=16,n=16,k=16)"))):
        narrow = llguidance.grammar_from("lark", lark)
        for text in ['block "C" -> C\n', "tile l0 [4, 8] -> l1, l2 factors v0, v1\n",
                     "split l0 [none, 4] -> l1, l2\n", "fuse l0 l1 -> l2\n"]:
            assert accepts(narrow, text), text
        for text in ['block "C" -> C, D\n', "tile l0 [4, 8] -> l1\n",
                     "tile l0 [4, 8] -> l1, l2 factors v0\n", "split l0 [none, 4] -> l1\n",
                     "fuse l0 l1 -> l2, l3\n"]:
            assert accepts(plain, text), text
            assert not accepts(narrow, text), text
            with pytest.raises(dragon_dsl.DragonError):
                dragon_dsl.to_trace(text)  # the decoder refuses it too


def test_postproc_auto_comes_last():
    narrow = llguidance.grammar_from("lark", sampling_grammar())
    assert accepts(narrow, "loops C -> i\npostproc auto llvm\n")
    assert not accepts(narrow, "loops C -> i\npostproc auto llvm\n\n")  # no blank lines
    assert accepts(narrow, "loops C -> i\npostproc\nloops C -> j\n")
    assert not accepts(narrow, "postproc auto llvm\nloops C -> i\n")
    with pytest.raises(dragon_dsl.DragonError, match="nothing may follow"):
        dragon_dsl.to_trace("postproc auto llvm\nloops C -> i\n")


def test_tile_lengths_are_written_once_per_space_and_never_shared(monkeypatch):
    from training.grammars.constraints import tile_lengths

    first = tile_lengths(workload("matmul(m=16,n=16,k=16)"))
    monkeypatch.setattr(dragon_dsl, "from_trace",
                        lambda *a, **k: pytest.fail("the design spaces were written again"))
    again = tile_lengths(workload("matmul(m=16,n=16,k=16)"))   # a new object, the same kernel
    assert again == first == {"i": (4,), "j": (4,), "k": (2,)}
    again["i"] = (9,)                                          # the caller's copy only
    assert tile_lengths(workload("matmul(m=16,n=16,k=16)")) == first
