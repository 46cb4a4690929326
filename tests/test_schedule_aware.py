"""Schedule-aware decoding: every MetaSchedule script is admitted statement by statement (with
the encoder's names), what cannot apply is refused by the statement grammar and reported by
``dragon check`` at the same line, and an untrained model's samples all apply, with logprobs that
match a clean forward pass despite the rolled-back tokens."""

from __future__ import annotations

from collections.abc import Sequence

import llguidance
import pytest
import torch

import dragon_dsl
from codegen.search import sample_traces
from codegen.workloads import workload
from dragon_dsl.live import LiveSchedule, apply_script
from dragon_dsl.live_view import LiveView
from training.grammars.constraints import (
    annotation_keys,
    annotation_targets,
    annotation_values,
    expand_ranges,
    tile_lengths,
    tile_max_inner,
)
from training.grammars.statement import statement_grammar
from training.models.tokenizer import tiny_model
from training.prompts.templates import flip_tiles, prompt_config_of
from training.sampling import SamplingConfig, sample_schedule_aware, schedule_aware_generate

from .test_grammar import _ByteTokenizer
from .tiny_models import small_model, small_tokenizer
from .traces import TARGETS, UNSEARCHABLE, WORKLOADS

BYTES = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokenizer()))
CASES = [("matmul(m=128,n=128,k=128)", "llvm", "llvm"),
         ("conv2d(h=14,w=14,ci=16,co=16)", "llvm", "llvm"),
         ("softmax(m=64,n=128)", "cuda", "cuda"),
         ("layer_norm(m=32,n=64)", "cuda", "cuda"),
         ("matmul(m=128,n=128,k=128,dtype=float16)", "cuda", "cuda-tensorcore")]


def admits(lark: str, line: str) -> bool:
    matcher = llguidance.LLMatcher(BYTES, llguidance.grammar_from("lark", lark), log_level=0)
    return matcher.consume_tokens(list(line.encode())) and matcher.is_accepting()


def walk(spec: str, target: str, rules: str, n: int, tile_order: str = "outer") -> int:
    """Each statement of ``n`` MetaSchedule scripts is admitted by the statement grammar of the
    state before it (written as a model of ``tile_order`` writes it), then applies; returns the
    statements walked."""
    from codegen.targets import postproc_set
    from training.grammars.constraints import narrowing

    wl = workload(spec)
    traces = sample_traces(wl.mod, target, rules, n, seed=3)
    assert traces, (spec, rules)
    walked = 0
    for trace in traces:
        script = expand_ranges(dragon_dsl.from_trace(
            trace, postproc="auto", postproc_set=postproc_set(rules), workload=wl))
        live = LiveSchedule(wl, target)
        for line in script.splitlines():
            lark = statement_grammar(live, postproc_set=postproc_set(rules),
                                     **narrowing(wl, target, rules), tile_order=tile_order)
            written = flip_tiles(line) if tile_order == "inner" else line
            assert admits(lark, written + "\n"), \
                f"{spec} {rules}: refused {written!r}\n{script}"
            live.step(line)
            walked += 1
        assert live.postproc_set == postproc_set(rules)
    return walked


def test_an_annotation_goes_only_on_what_metaschedule_puts_it_on():
    """MetaSchedule annotates the root block with parallel, vectorize and unroll (its
    postprocessor reads them there; on a loop they change nothing, and its MutateParallel
    crashes a search seeded with such a script; on another block the RL model's pooling
    scripts put them beside blockizes): the grammar admits them on the root block only."""
    wl = workload("matmul(m=128,n=128,k=128)")
    live = LiveSchedule(wl, "llvm")
    for line in ['block "C" -> C', 'block "root" -> root', "loops C -> i, j, k"]:
        live.step(line)
    targets = annotation_targets(wl, "llvm", "llvm")
    assert targets["parallel"] == targets["vectorize"] == ("root",)
    assert targets["tiling_structure"] == ("block",)
    values = annotation_values(wl, "llvm", "llvm")
    kwargs = dict(postproc_set="llvm", annotations=annotation_keys(wl, "llvm", "llvm"),
                  annotation_values=values)
    parallel = values["parallel"][0]
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        narrowed = statement_grammar(state, **kwargs, annotation_targets=targets)
        assert admits(narrowed, f"annotate root parallel={parallel}\n")
        assert not admits(narrowed, f"annotate i parallel={parallel}\n")
        assert not admits(narrowed, f"annotate C parallel={parallel}\n")
        assert admits(narrowed, 'annotate C tiling_structure="SSRSRS"\n')
    assert admits(statement_grammar(live, **kwargs), f"annotate i parallel={parallel}\n")


def test_a_tile_has_as_many_factors_as_metaschedule_gives_it():
    """Under llvm's SSRSRS MetaSchedule tiles a spatial loop in 4 and a reduction in 2: other
    lengths, which it never writes, are refused (a small model whose factors fall short of the
    extent must finish the tile, not add a fifth factor); a loop it does not tile takes any of
    the lengths it uses."""
    wl = workload("matmul(m=128,n=128,k=128)")
    lengths = tile_lengths(wl, "llvm", "llvm")
    assert lengths == {"i": (4,), "j": (4,), "k": (2,)}
    assert set(tile_lengths(workload("conv2d(h=14,w=14,ci=16,co=16)"), "llvm", "llvm")
               .values()) == {(4,), (2,)}
    live = LiveSchedule(wl, "llvm")
    for line in ['block "C" -> C', "loops C -> i, j, k"]:
        live.step(line)
    narrowed = statement_grammar(live, postproc_set="llvm", tile_lengths=lengths)
    assert admits(narrowed, "tile i [2, 4, 4, 4] -> i0, i1, i2, i3\n")
    assert admits(narrowed, "tile k [64, 2] -> k0, k1\n")
    assert not admits(narrowed, "tile i [2, 4, 4, 2, 2] -> i0, i1, i2, i3, i4\n")
    assert not admits(narrowed, "tile i [8, 4, 4] -> i0, i1, i2\n")
    assert not admits(narrowed, "tile i [8, 16] -> i0, i1\n")
    assert not admits(narrowed, "tile k [2, 4, 4, 4] -> k0, k1, k2, k3\n")
    assert admits(statement_grammar(live, postproc_set="llvm"),
                  "tile i [2, 4, 4, 2, 2] -> i0, i1, i2, i3, i4\n")
    # A tile's pieces are not tiled again, in this process or through a worker's view.
    live.step("tile i [2, 4, 4, 4] -> i0, i1, i2, i3")
    assert live.pieces() == ["i0", "i1", "i2", "i3"]
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        narrowed = statement_grammar(state, postproc_set="llvm", tile_lengths=lengths)
        assert not admits(narrowed, "tile i1 [2, 2] -> l0, l1\n")
        assert admits(narrowed, "tile j [2, 4, 4, 4] -> j0, j1, j2, j3\n")


def test_a_tiles_innermost_factor_stays_within_metaschedules_bound():
    """MetaSchedule's sample_perfect_tile never draws an innermost factor above its bound (64
    on llvm): a model that writes a large loop's factors outermost first, small, is left a
    remainder it may not put last (the built-in model wrote `tile j [16, 2, 2, 800]` for a
    51,200-wide dense).  Its third factor must leave at most 64; a bound MetaSchedule does not
    write is refused too, and without the narrowing anything goes, as before."""
    wl = workload("dense(m=2,n=51200,k=2560)")
    bounds = tile_max_inner(wl, "llvm", "llvm")
    assert bounds == {"i": (64,), "j": (64,), "k": (64,)}
    live = LiveSchedule(wl, "llvm")
    for line in ['block "T_dense" -> T_dense', "loops T_dense -> i, j, k"]:
        live.step(line)
    lengths = tile_lengths(wl, "llvm", "llvm")
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        narrowed = statement_grammar(state, postproc_set="llvm", tile_lengths=lengths,
                                     tile_max_inner=bounds)
        assert admits(narrowed, "tile j [160, 32, 2, 5] -> j0, j1, j2, j3\n")
        assert admits(narrowed, "tile j [16, 2, 25, 64] -> j0, j1, j2, j3\n")
        assert not admits(narrowed, "tile j [16, 2, 2, 800] -> j0, j1, j2, j3\n")
        assert not admits(narrowed, "tile j [16, 2, 20, 80] -> j0, j1, j2, j3\n")
        assert admits(narrowed, "tile k [2560, 1] -> k0, k1\n")
        assert not admits(narrowed, "tile k [20, 128] -> k0, k1\n")
        assert not admits(narrowed, "tile j [160, 32, 2, 5] max_inner=1000 -> j0, j1, j2, j3\n")
    loose = statement_grammar(live, postproc_set="llvm", tile_lengths=lengths)
    assert admits(loose, "tile j [16, 2, 2, 800] -> j0, j1, j2, j3\n")
    assert admits(loose, "tile j [16, 2, 2, 800] max_inner=1000 -> j0, j1, j2, j3\n")


def test_statements_that_change_nothing_metaschedule_never_writes_are_refused():
    """`loops root` binds nothing; a tiling structure on the root block tiles nothing.  Neither
    is in any of the kept corpus' scripts; a model padded its scripts with both."""
    wl = workload("matmul(m=128,n=128,k=128)")
    live = LiveSchedule(wl, "llvm")
    for line in ['block "C" -> C', 'block "root" -> root']:
        live.step(line)
    lark = statement_grammar(live, postproc_set="llvm",
                             annotations=annotation_keys(wl, "llvm", "llvm"),
                             annotation_values=annotation_values(wl, "llvm", "llvm"),
                             annotation_targets=annotation_targets(wl, "llvm", "llvm"))
    assert admits(lark, "loops C -> i, j, k\n") and not admits(lark, "loops root\n")
    assert admits(lark, 'annotate C tiling_structure="SSRSRS"\n')
    assert not admits(lark, 'annotate root tiling_structure="SSRSRS"\n')
    assert admits(lark, "annotate root parallel=32\n")
    # The root block is not inlined, moved or given a compute location (TVM refuses each);
    # the block under loops is.
    for line in ("compute_inline root", "reverse_compute_inline root", "compute_at root l0",
                 "sample_compute_location root -1 -> l0"):
        assert not admits(lark, line + "\n"), line
    assert admits(lark, "sample_compute_location C -1 -> l0\n")
    assert not admits(lark, "compute_inline C\n")  # a reduction, and the kernel's output


def fetched(spec: str, blocks: Sequence[str]) -> LiveSchedule:
    """A live llvm schedule of ``spec`` with ``blocks`` fetched under their own names, then
    their loops bound."""
    live = LiveSchedule(workload(spec), "llvm")
    for b in blocks:
        live.step(f'block "{b}" -> {b}')
    for b in blocks:
        live.step(f"loops {b} -> " + ", ".join(live.expected_results("loops", b)))
    return live


def applies(live: LiveSchedule, line: str) -> bool:
    """Whether TVM applies ``line`` to a fork of ``live`` (``live`` is left as it is)."""
    try:
        live.fork().step(line)
    except dragon_dsl.DragonError:
        return False
    return True


@pytest.mark.parametrize("spec", ["conv2d(h=14,w=14,ci=16,co=16)", "pool2d(kind=avg)",
                                  "layer_norm(m=32,n=64)"])
def test_answers_kept_across_an_annotation_are_those_of_a_fresh_schedule(spec):
    """An annotation keeps what TVM takes (moves, inlines, rfactor) and which names are alive
    (``LiveSchedule._memo``); after each of MetaSchedule's annotations the live schedule
    answers as one that applied the same statements afresh."""
    wl = workload(spec)
    checked = 0
    for trace in sample_traces(wl.mod, "llvm", "llvm", 2, seed=3):
        lines = expand_ranges(dragon_dsl.from_trace(trace, postproc="auto", postproc_set="llvm",
                                                    workload=wl)).splitlines()
        live = LiveSchedule(wl, "llvm")
        for n, line in enumerate(lines[:-1]):
            LiveView.of(live)  # every answer asked, and memoized, before the statement
            live.step(line)
            if line.startswith(("annotate ", "unannotate ")):
                fresh = apply_script("\n".join(lines[:n + 1]), wl, "llvm")
                assert LiveView.of(live).as_data() == LiveView.of(fresh).as_data(), line
                checked += 1
    assert checked >= 4


def test_a_block_is_inlined_or_moved_only_where_tvm_takes_it():
    """The held-out pooling kernels' samples spent their retries on `compute_inline` of the
    pooling reduction and on moving the padding under its own loops; TVM refuses both.  The
    padding inlines, and moves under the pooling's loops; the pooling block (the output) moves
    nowhere: not forward (an output), not back under the padding (its strided window)."""
    live = fetched("pool2d(c=16,h=16,w=16,k=3,stride=2,pad=1)", ("pad_temp", "pool_max"))
    pad_loops = [lp.name for lp in live.loops("pad_temp")]
    own = live.names("loop")[:len(pad_loops)]
    pool = live.names("loop")[len(pad_loops):]
    assert live.inline_ops("pad_temp") == ["compute_inline"] and live.inline_ops("pool_max") == []
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        lark = statement_grammar(state, postproc_set="llvm")
        assert admits(lark, "compute_inline pad_temp\n")
        for line in ("compute_inline pool_max", "reverse_compute_inline pool_max",
                     "reverse_compute_inline pad_temp", f"compute_at pad_temp {own[0]}",
                     f"compute_at pool_max {own[0]}", f"compute_at pool_max {pool[0]}",
                     f"reverse_compute_at pool_max {pool[0]}",
                     f"reverse_compute_at pool_max {own[1]}"):
            assert not admits(lark, line + "\n"), line
        for lp in pool:
            assert admits(lark, f"compute_at pad_temp {lp}\n"), lp
    # `rfactor` only of a loop TVM factors (the pooling samples named spatial loops): the
    # grammar admits exactly the lines that apply.
    lark = statement_grammar(live, postproc_set="llvm")
    verdicts = []
    for lp in pool:
        line = f"rfactor {lp} 0 -> " + ", ".join(live.expected_results("rfactor"))
        verdicts.append(applies(live, line))
        assert admits(lark, line + "\n") == verdicts[-1], line
    assert not verdicts[0] and any(verdicts), verdicts
    # What the grammar admits TVM applies, and the inlined padding is gone from scope.
    live.fork().step(f"compute_at pad_temp {pool[-1]}")
    live.step("compute_inline pad_temp")
    assert "pad_temp" not in live.names("block") and live.inline_ops("pool_max") == []


def test_a_draw_is_used_next_and_only_metaschedules_statements_come():
    """The RL model's pooling scripts drew values and locations it never used, moved a block
    to one location three times, took `parallel` off the root to put it back, annotated
    blockized blocks with it and blockized shapes TVM could not build: none of which
    MetaSchedule's scripts do (the kept corpus' 16,630 scripts use every draw in the next
    statement, annotate `parallel`, `vectorize` and `unroll_explicit` on the root only, take
    off only `random_compute_producer` and `schedule_rule`, and never blockize)."""
    from training.grammars.constraints import narrowing

    wl = workload("matmul(m=128,n=128,k=128)")
    narrow = narrowing(wl, "llvm")
    assert "blockize" not in narrow["ops"] and "parallel" not in narrow["unannotate_keys"]
    live = fetched("matmul(m=128,n=128,k=128)", ("C",))
    live.step('block "root" -> root')
    blockize = f"blockize k -> {live.expected_results('blockize')[0]}"
    assert admits(statement_grammar(live, postproc_set="llvm"), blockize + "\n")
    assert applies(live, blockize)
    parallel = f"annotate root parallel={narrow['annotation_values']['parallel'][0]}"
    values = narrow["categorical"][0]
    draw = f"sample_categorical [{', '.join(map(str, values))}] 1 -> v0"
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        lark = statement_grammar(state, postproc_set="llvm", **narrow)
        assert not admits(lark, blockize + "\n")
        assert admits(lark, parallel + "\n") and admits(lark, draw + "\n")
    live.step(draw)
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        lark = statement_grammar(state, postproc_set="llvm", **narrow)
        assert admits(lark, "annotate root unroll_explicit=v0\n")
        assert not admits(lark, parallel + "\n")
    live.step("annotate root unroll_explicit=v0")
    # nothing could use another draw now (the root holds its unroll_explicit)
    again = draw.replace("-> v0", f"-> {live.expected_results('sample_categorical')[0]}")
    assert not admits(statement_grammar(live, postproc_set="llvm", **narrow), again + "\n")
    # Taken off: what MetaSchedule takes off (softmax's producers), never `parallel`.
    softmax = workload("softmax(m=32,n=64)")
    narrow = narrowing(softmax, "llvm")
    live = fetched("softmax(m=32,n=64)", ("T_softmax_exp",))
    for line in ('block "root" -> root', parallel,
                 "annotate T_softmax_exp random_compute_producer=1"):
        live.step(line)
    lark = statement_grammar(live, postproc_set="llvm")
    assert admits(lark, "unannotate root parallel\n")
    lark = statement_grammar(live, postproc_set="llvm", **narrow)
    assert not admits(lark, "unannotate root parallel\n")
    assert admits(lark, "unannotate T_softmax_exp random_compute_producer\n")
    # A drawn location: moved to right away, and never again.
    pool = fetched("pool2d(c=16,h=16,w=16,k=3,stride=2,pad=1)", ("pad_temp", "pool_max"))
    assert admits(statement_grammar(pool, postproc_set="llvm"), "compute_inline pad_temp\n")
    drawn = pool.expected_results("sample_compute_location")[0]
    pool.step(f"sample_compute_location pad_temp 2 -> {drawn}")
    move = f"compute_at pad_temp {drawn}"
    for state in (pool, LiveView.from_data(LiveView.of(pool).as_data())):
        lark = statement_grammar(state, postproc_set="llvm")
        assert admits(lark, move + "\n") and not admits(lark, "compute_inline pad_temp\n")
    pool.step(move)
    assert not admits(statement_grammar(pool, postproc_set="llvm"), move + "\n")
    # The root mark: TVM takes the move to it again and again, and nothing changes.
    mark = pool.expected_results("sample_compute_location")[0]
    pool.step(f"sample_compute_location pad_temp -1 -> {mark}")
    pool.step(f"compute_at pad_temp {mark}")
    assert applies(pool, f"compute_at pad_temp {mark}")
    assert not admits(statement_grammar(pool, postproc_set="llvm"),
                      f"compute_at pad_temp {mark}\n")


def test_no_reduction_is_decomposed_before_postproc():
    """An untrained conv2d sample of the 1,000-sample test parallelized the root, then
    decomposed the reduction at its third loop: TVM applies both, and then the closing
    `postproc auto` refuses (RewriteParallelVectorizeUnroll), so the sample failed at its
    end.  `postproc auto` decomposes every reduction itself and MetaSchedule's scripts never
    write `decompose_reduction` before it; neither may the sampler."""
    live = fetched("conv2d(h=14,w=14,ci=16,co=16)", ("conv2d_nhwc",))
    root = live.expected_results("block", "root")[0]
    live.step(f'block "root" -> {root}')
    live.step(f"annotate {root} parallel=32")
    xx = live.names("loop")[2]
    line = f"decompose_reduction conv2d_nhwc {xx} -> " + \
        live.expected_results("decompose_reduction")[0]
    decomposed = live.fork()
    decomposed.step(line)  # TVM takes it ...
    with pytest.raises(dragon_dsl.DragonError, match="RewriteParallelVectorizeUnroll"):
        decomposed.step("postproc auto llvm")  # ... and the script can no longer end
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        assert not admits(statement_grammar(state, postproc_set="llvm"), line + "\n")
    live.step("postproc auto llvm")


def test_statements_tvm_refuses_for_their_shape_are_not_admitted():
    """What the held-out pooling samples were still refused on after the moves: `reorder` of
    one loop twice, a buffer's name as a storage scope, `blockize` binding a name already
    bound, `compute_at` to a drawn location TVM no longer takes, `unannotate` of a key the
    loop does not carry.  Each line the grammar turns away, TVM refuses too (applied to a
    fork), and its well-formed neighbour is admitted."""
    live = fetched("pool2d(c=16,h=16,w=16,k=3,stride=2,pad=1)", ("pad_temp", "pool_max"))
    drawn = live.expected_results("sample_compute_location")[0]
    live.step(f"sample_compute_location pad_temp 2 -> {drawn}")  # the pooling's third loop
    l1, l3 = live.names("loop")[5], live.names("loop")[7]
    live.step(f"compute_at pad_temp {l3}")  # deeper than the drawn loop: it is out of reach
    block, inner = live.expected_results("blockize")[0], live.names("loop")[-1]

    refused = [f"reorder {l1} {l1}", f"reorder {l3} {l1} {l1}",
               'cache_write pool_max 0 "pad_temp"', 'cache_read pool_max 0 "X_1"',
               f"blockize {inner} -> pad_temp", f"compute_at pad_temp {drawn}",
               f"unannotate {l3} random_compute_producer"]
    live.step(f"annotate {l1} random_compute_producer=1")
    admitted = [f"reorder {l3} {l1}", 'cache_write pool_max 0 "global" -> '
                + live.expected_results("cache_write")[0], f"blockize {inner} -> {block}",
                f"unannotate {l1} random_compute_producer"]
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        lark = statement_grammar(state, postproc_set="llvm")
        for line in refused:
            assert not admits(lark, line + "\n") and not applies(live, line), line
        for line in admitted:
            assert admits(lark, line + "\n") and applies(live, line), line
    # The root and inline marks drawn for a reduction: TVM takes `compute_at` to either (it
    # leaves the block where it is), and so does the grammar (a copy of the schedule, where
    # the moves are tried, holds no mark).
    pooled = fetched("pool2d(c=64,h=9,w=9,kind=global,layout=NHWC)", ("adaptive_pool_sum",))
    for decision in (-2, -1):
        mark = pooled.expected_results("sample_compute_location")[0]
        pooled.step(f"sample_compute_location adaptive_pool_sum {decision} -> {mark}")
        line = f"compute_at adaptive_pool_sum {mark}"
        assert admits(statement_grammar(pooled, postproc_set="llvm"), line + "\n")
        pooled.fork().step(line)
    # On a GPU the caches name its memories; on a CPU they do not.
    assert admits(statement_grammar(live, postproc_set="cuda"),
                  'set_scope pool_max 0 "shared"\n')
    assert not admits(statement_grammar(live, postproc_set="llvm"),
                      'set_scope pool_max 0 "shared"\n')


def test_a_statement_left_to_the_whole_script_grammar_names_what_exists():
    """`blockize`, `tensorize`, `reindex` ... keep the whole-script grammar's syntax, but their
    first argument is a name in scope of their kind: with every block fetched the built-in
    model's mass sat on `block` (a fetch again, refused), and the token led into `blockize`
    with a name that never existed, refused until the sample was closed with nothing done."""
    wl = workload("pool2d(c=64,h=9,w=9,kind=global,layout=NHWC)")
    live = LiveSchedule(wl, "llvm")
    for line in ['block "root" -> root', 'block "adaptive_pool_sum" -> adaptive_pool_sum',
                 'block "adaptive_pool_avg" -> adaptive_pool_avg']:
        live.step(line)
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        lark = statement_grammar(state, postproc_set="llvm")
        assert not admits(lark, "blockize yy084podhw0root640 -> l1\n")
        assert not admits(lark, "blockize root1d_structure -> b0\n")
        assert not admits(lark, "blockize adaptive_pool_sum -> b0\n")  # a loop, not a block
        assert not admits(lark, 'block "root" -> root\n')
        assert admits(lark, 'reindex adaptive_pool_sum write 0 -> b0\n')
        assert admits(lark, 'tensorize root "x"\n')
    live.step("loops adaptive_pool_sum -> " + ", ".join(
        live.expected_results("loops", "adaptive_pool_sum")))
    loop = live.names("loop")[0]
    assert admits(statement_grammar(live, postproc_set="llvm"), f"blockize {loop} -> b0\n")


@pytest.mark.parametrize("spec,target,rules", CASES)
def test_metaschedule_scripts_are_admitted_statement_by_statement(spec, target, rules):
    assert walk(spec, target, rules, 3) > 20


@pytest.mark.parametrize("spec,target,rules", CASES[:2])
def test_metaschedule_scripts_are_admitted_with_their_tiles_innermost_first(spec, target, rules):
    """Prompt format 3 writes a tile's factors innermost first: every MetaSchedule script,
    its tiles so written, is admitted statement by statement, within the innermost bound."""
    assert walk(spec, target, rules, 3, tile_order="inner") > 20


def test_a_format_3_tile_is_written_innermost_first_within_the_bound():
    """Innermost first, the bound falls on the first factor written and the last one, the
    outermost, takes what is left: `[5, 2, 32, 160]` for MetaSchedule's `[160, 32, 2, 5]` of
    a 51,200-wide dense; the built-in model's `[16, 2, 2, 800]`, reversed, starts over the
    bound.  Without a bound every ordered factorization is admitted, either way round."""
    wl = workload("dense(m=2,n=51200,k=2560)")
    bounds = tile_max_inner(wl, "llvm", "llvm")
    lengths = tile_lengths(wl, "llvm", "llvm")
    live = LiveSchedule(wl, "llvm")
    for line in ['block "T_dense" -> T_dense', "loops T_dense -> i, j, k"]:
        live.step(line)
    for state in (live, LiveView.from_data(LiveView.of(live).as_data())):
        inner = statement_grammar(state, postproc_set="llvm", tile_lengths=lengths,
                                  tile_max_inner=bounds, tile_order="inner")
        assert admits(inner, "tile j [5, 2, 32, 160] -> j0, j1, j2, j3\n")
        assert admits(inner, "tile j [64, 25, 2, 16] -> j0, j1, j2, j3\n")
        assert not admits(inner, "tile j [800, 2, 2, 16] -> j0, j1, j2, j3\n")
        assert not admits(inner, "tile j [5, 2, 32, 16] -> j0, j1, j2, j3\n")  # 51,200 / 5,120
        assert admits(inner, "tile k [1, 2560] -> k0, k1\n")
        assert not admits(inner, "tile k [128, 20] -> k0, k1\n")
    loose = statement_grammar(live, postproc_set="llvm", tile_lengths=lengths,
                              tile_order="inner")
    for factors in ("[800, 2, 2, 16]", "[16, 2, 2, 800]", "[5, 2, 32, 160]"):
        assert admits(loose, f"tile j {factors} -> j0, j1, j2, j3\n")


@pytest.mark.slow
@pytest.mark.parametrize("target,rules", TARGETS[:3])
@pytest.mark.parametrize("spec", WORKLOADS)
def test_every_family_under_every_rule_set_is_admitted(spec, target, rules):
    if (spec, rules) in UNSEARCHABLE:
        pytest.skip(UNSEARCHABLE[(spec, rules)][1])
    try:
        search = sample_traces(workload(spec).mod, target, rules, 1, seed=3)
    except Exception as exc:  # noqa: BLE001  MetaSchedule cannot search the pair
        pytest.skip(f"MetaSchedule: {exc}")
    if not search:
        pytest.skip("no sample survives MetaSchedule's postprocessors")
    walk(spec, target, rules, 2)


PREFIX = 'block "C" -> C\nloops C -> i, j, k\n'
WRONG = [
    ('block "D" -> D', "no such block"),
    ("loops C -> i, j", "C has three loops"),
    ("tile i [3, 5] -> i0, i1", "15 is not 128"),
    ("parallel C", "a block where a loop goes"),
    ("fuse i zz -> l0", "zz is not defined"),
    ('cache_read C 2 "global" -> b0', "C reads two buffers"),
    ("loops C -> i, j, k", "i, j, k are bound already"),
]


@pytest.mark.parametrize("line,why", WRONG)
def test_what_cannot_apply_is_refused_and_check_reports_the_same_line(line, why):
    wl = workload("matmul(m=128,n=128,k=128)")
    live = LiveSchedule(wl, "llvm")
    for good in PREFIX.splitlines():
        live.step(good)
    assert not admits(statement_grammar(live, postproc_set="llvm"), line + "\n"), why
    found = dragon_dsl.check(PREFIX + line + "\n", workload=wl, target="llvm")
    assert found and found[0].line == 3, (why, found)
    with pytest.raises(dragon_dsl.DragonError):
        live.step(line)
    assert live.statements == 2  # a refused statement leaves the state as it was


def test_a_cuda_block_left_on_the_host_is_refused_at_postproc():
    """MetaSchedule's RewriteUnboundBlock binds a block nobody bound, except one annotated
    ``tiling_structure`` (the tiling rule binds those itself), and VerifyGPUCode has no kernel
    to reject then: the built module would hold no CUDA kernel.  The built-in model, trained on
    llvm, wrote exactly this; ``postproc auto cuda`` refuses it, naming the block."""
    wl = workload("matmul(m=128,n=128,k=128)")
    unbound = 'block "C" -> C\nannotate C tiling_structure="SSSRRSRS"\npostproc auto cuda\n'
    (found,) = dragon_dsl.check(unbound, workload=wl, target="cuda")
    assert found.line == 3 and "block 'C_init' runs under no GPU thread" in found.message
    live = LiveSchedule(wl, "cuda")
    for line in unbound.splitlines()[:2]:
        live.step(line)
    with pytest.raises(dragon_dsl.DragonError, match="no GPU thread"):
        live.step("postproc auto cuda")
    # Without the annotation the postprocessor binds the block, and the script stands.
    assert dragon_dsl.check('block "C" -> C\npostproc auto cuda\n', workload=wl,
                            target="cuda") == []


def test_a_loop_that_was_split_is_out_of_scope():
    wl = workload("matmul(m=128,n=128,k=128)")
    live = LiveSchedule(wl, "llvm")
    for line in [*PREFIX.splitlines(), "tile i [4, 32] -> i0, i1"]:
        live.step(line)
    assert live.names("loop") == ["j", "k", "i0", "i1"]
    lark = statement_grammar(live, postproc_set="llvm")
    assert not admits(lark, "tile i [8, 16] -> i2, i3\n")
    assert not admits(lark, "tile i1 [8, 4] -> l0, l1\n")  # a piece is not tiled again
    assert admits(lark, "split i1 [8, 4] -> l0, l1\n")  # i1 is not a workload loop: l<N>
    assert admits(lark, "reorder i0 j i1 k\n")
    found = dragon_dsl.check(PREFIX + "tile i [4, 32] -> i0, i1\nparallel i\n", workload=wl,
                             target="llvm")
    assert found and found[0].line == 4


def test_apply_script_is_the_checker():
    wl = workload("matmul(m=64,n=64,k=64)")
    [trace] = sample_traces(wl.mod, "llvm", "llvm", 1, seed=1)
    script = dragon_dsl.from_trace(trace, postproc="auto", postproc_set="llvm", workload=wl)
    live = apply_script(script, wl, "llvm")
    assert live.postproc_set == "llvm"
    assert dragon_dsl.check(script, workload=wl, target="llvm") == []


# ---- sampling ---------------------------------------------------------------------------------

SPECS = ["matmul(m=128,n=128,k=128)", "softmax(m=32,n=64)", "conv2d(h=14,w=14,ci=16,co=16)",
         "layer_norm(m=32,n=64)"]


@pytest.fixture(scope="module")
def tokenizer():
    return small_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return small_model(tokenizer)


@pytest.fixture(scope="module")
def samples(model, tokenizer):
    from training.prompts.templates import construction_prompt

    wls = [workload(s) for s in SPECS]
    stats: dict = {}
    out = sample_schedule_aware(model, tokenizer,
                                [construction_prompt(w, "llvm") for w in wls], wls, "llvm",
                                SamplingConfig(n=12, batch_size=24, max_new_tokens=192, seed=1),
                                stats=stats)
    return out, wls, stats


def test_untrained_samples_all_end_parse_and_apply(samples):
    out, wls, stats = samples
    assert len(out) == 48
    for s in out:
        assert s.finish_reason == "end" and s.parses and s.applies, s
        found = dragon_dsl.check(s.text, workload=wls[s.prompt_index], target="llvm")
        assert found == [], (s.text, found)  # checked again, independently of the sampler
    assert sum(s.resampled for s in out) > 0  # the untrained model's statements do get refused
    for s in out:  # every tile has as many factors as MetaSchedule gives one of that kernel
        lengths = tile_lengths(wls[s.prompt_index], "llvm", "llvm") or {}
        for line in s.text.splitlines():
            if line.startswith("tile ") and line.split()[1] in lengths:
                factors = line[line.index("[") + 1:line.index("]")].count(",") + 1
                assert factors in lengths[line.split()[1]], (line, s.text)
    assert len(stats["replay_seconds"]) > len(out)


@pytest.mark.parametrize("bound", [False, True])
def test_the_innermost_bound_narrows_only_when_asked(model, tokenizer, monkeypatch, bound):
    """``ScheduleAwareConfig.tile_bound`` hands MetaSchedule's innermost bounds to every
    statement grammar; off (the default, a measured tie) it hands none."""
    from training.prompts.templates import construction_prompt
    from training.sampling import schedule_aware
    from training.sampling.schedule_aware import ScheduleAwareConfig

    seen: list = []
    real = schedule_aware.statement_grammar

    def spy(live, **kwargs):
        seen.append(kwargs.get("tile_max_inner"))
        return real(live, **kwargs)

    monkeypatch.setattr(schedule_aware, "statement_grammar", spy)
    wl = workload(SPECS[0])
    out = sample_schedule_aware(model, tokenizer, construction_prompt(wl, "llvm"), wl, "llvm",
                                SamplingConfig(n=1, max_new_tokens=48, seed=0),
                                aware=ScheduleAwareConfig(tile_bound=bound, isolate=False))
    assert out and seen
    assert all(b == ({"i": (64,), "j": (64,), "k": (64,)} if bound else None) for b in seen)


def test_a_format_3_model_writes_tiles_innermost_first_and_gets_dragon_back(model, tokenizer,
                                                                           monkeypatch):
    """A model whose tokenizer names prompt format 3 is given statement grammars of
    innermost-first tiles, each of its lines is applied in Dragon's order, and the text handed
    back is Dragon's: its own tokens with every tile flipped, applying as it stands."""
    from training.prompts.templates import PromptConfig, construction_prompt, mark_tokenizer
    from training.sampling import schedule_aware
    from training.sampling.schedule_aware import ScheduleAwareConfig, _Decoder

    orders: list = []
    submitted: list[str] = []
    real, submit = schedule_aware.statement_grammar, _Decoder._submit

    def spy(live, **kwargs):
        orders.append(kwargs.get("tile_order"))
        return real(live, **kwargs)

    def spy_submit(self, row, text):
        submitted.append(text)
        return submit(self, row, text)

    monkeypatch.setattr(schedule_aware, "statement_grammar", spy)
    monkeypatch.setattr(_Decoder, "_submit", spy_submit)
    wl = workload(SPECS[0])
    mark_tokenizer(tokenizer, PromptConfig(tile_order="inner"))
    try:
        out = schedule_aware_generate(
            model, tokenizer, [construction_prompt(wl, "llvm")] * 6, [wl] * 6, "llvm",
            sampling=SamplingConfig(max_new_tokens=400, seed=0, stop="<end>"),
            config=ScheduleAwareConfig(isolate=False))
    finally:
        mark_tokenizer(tokenizer, PromptConfig())
    assert orders and set(orders) == {"inner"}
    written = [tokenizer.decode(r.tokens).removesuffix("<end>") for r in out]
    tiles = [line for r in out for line in r.text.splitlines() if line.startswith("tile ")]
    assert tiles, "no sample tiled: the test shows nothing"
    assert any(flip_tiles(line) != line for line in tiles)
    for r, text in zip(out, written, strict=True):
        assert r.text == flip_tiles(text)
        if r.applies:
            assert apply_script(r.text, wl, "llvm").postproc_set == "llvm"
    assert set(tiles) <= set(submitted)
    assert prompt_config_of(tokenizer).tile_order == "outer"


def test_a_refused_closing_ends_the_sample_at_once(model, tokenizer, monkeypatch):
    """When the closing ``postproc auto`` is refused (on CUDA, VerifyGPUCode rejecting what the
    statements built), no script that applies can end there: the sample ends as it stands,
    failed, with why; it neither loops to the step limit nor keeps half an end marker."""
    from training.prompts.templates import construction_prompt
    from training.sampling.schedule_aware import ScheduleAwareConfig, _Decoder

    outcome = _Decoder._outcome  # what the schedule says of the statement submitted
    monkeypatch.setattr(_Decoder, "_outcome", lambda self, row: "refused for the test"
                        if row.ticket[0].startswith("postproc") else outcome(self, row))
    wl = workload(SPECS[0])
    stats: dict = {}
    out = sample_schedule_aware(model, tokenizer, construction_prompt(wl, "llvm"), wl, "llvm",
                                SamplingConfig(n=6, max_new_tokens=160, seed=3), stats=stats)
    retries = ScheduleAwareConfig().sample_retries
    for s in out:
        assert (s.finish_reason, s.applies) == ("error", False), s
        assert s.error.startswith("the closing `postproc auto llvm` was refused: refused for")
        assert "postproc" not in s.text and not s.text.rstrip().endswith(("<", "<end")), s.text
        assert dragon_dsl.check(s.text, workload=wl, target="llvm") == []  # what was kept applies
        assert s.resampled <= retries + 2
    assert stats["steps"] < 2 * 160  # each row ended at its refused closing, not at the limit


def test_logprobs_are_those_of_a_clean_forward_pass(model, tokenizer):
    """Rolled-back tokens leave holes in the key/value cache; the kept tokens must get the
    same distribution as the same sequence without holes."""
    from training.prompts.templates import construction_prompt

    wl = workload("matmul(m=128,n=128,k=128)")
    prompt = construction_prompt(wl, "llvm")
    torch.manual_seed(3)
    results = schedule_aware_generate(model, tokenizer, [prompt] * 6, [wl] * 6, "llvm",
                                      sampling=SamplingConfig(max_new_tokens=160))
    assert any(r.resampled for r in results)
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"][0].tolist()
    for r in results:
        sequence = torch.tensor([ids + r.tokens])
        with torch.no_grad():
            logits = model(sequence).logits[0, len(ids) - 1:-1].float()
        clean = torch.log_softmax(logits, dim=-1)[torch.arange(len(r.tokens)), r.tokens]
        assert torch.allclose(clean, torch.tensor(r.model_logprobs), atol=1e-3), r.text
        for masked, free, forced in zip(r.logprobs, r.model_logprobs, r.forced, strict=True):
            assert masked == 0.0 if forced else masked >= free - 1e-4


def test_grpo_rollouts_apply(tmp_path, tokenizer, monkeypatch):
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from training.prompts.templates import STOP, construction_prompt, split_completion
    from training.sampling import schedule_rollout

    from .traces import applies_in_tvm

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(2)
    policy = tiny_model(tokenizer)
    wls = {construction_prompt(workload(s), "llvm"): workload(s) for s in SPECS[:2]}
    seen = []

    def applies(completions, applies, resampled, prompts, **kwargs):
        seen.extend(zip(completions, applies, prompts, strict=True))
        return [float(a) for a in applies]

    args = trl.GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4,
                          num_generations=4, max_completion_length=64, max_steps=1,
                          report_to=[], use_cpu=True, save_strategy="no", logging_steps=1)
    trainer = trl.GRPOTrainer(
        model=policy, processing_class=tokenizer, reward_funcs=[applies], args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": list(wls)}),
        rollout_func=schedule_rollout(wls, "llvm"))
    trainer.train()
    assert len(seen) == 4
    for completion, ok, prompt in seen:
        assert ok and completion.endswith(STOP)
        assert applies_in_tvm(split_completion(completion), wls[prompt])


@pytest.mark.slow
def test_thousand_untrained_samples_end_parse_and_apply(model, tokenizer, record_property):
    """The 1,000-sample guarantee of the other modes (tests/test_sampling.py), schedule-aware:
    every sample ends, parses and applies to its kernel."""
    import collections
    import time

    from training.prompts.templates import construction_prompt

    wls = [workload(s) for s in SPECS]
    start = time.perf_counter()
    out = sample_schedule_aware(model, tokenizer,
                                [construction_prompt(w, "llvm") for w in wls], wls, "llvm",
                                SamplingConfig(n=250, batch_size=125, max_new_tokens=256,
                                               seed=7))
    seconds = time.perf_counter() - start
    record_property("schedule-aware", f"1000 samples in {seconds:.0f} s, "
                    f"{sum(s.resampled for s in out)} statements resampled")
    assert len(out) == 1000
    failed = collections.Counter((s.finish_reason, s.parses, s.applies, s.error[:60])
                                 for s in out if not (s.finish_reason == "end" and s.parses
                                                      and s.applies))
    first = next((s for s in out if not (s.finish_reason == "end" and s.parses and s.applies)),
                 None)
    assert not failed, (failed.most_common(5), first.error, first.text)


def test_the_independent_apply_check_refuses_what_tvm_refuses():
    from .traces import applies_in_tvm

    assert applies_in_tvm('block "T_softmax_norm" -> b0\n', "softmax(m=32,n=64)")
    assert not applies_in_tvm('block "no_such_block" -> b0\n', "softmax(m=32,n=64)")
    assert not applies_in_tvm('block "T_softmax_norm" -> b0\nloops b0 -> i, j\n'
                              'split j [3, 3] -> j0, j1\n', "softmax(m=32,n=64)")


def test_a_block_bound_already_is_not_fetched_again():
    """``block "C"`` once ``C`` is bound would bind a second name to the same block and change
    nothing: MetaSchedule's scripts never write it before ``postproc``, and the RL model
    learned to pad its scripts with such lines, so the statement grammar does not admit it.
    The isolated sampler's ``LiveView`` gives the same answer."""
    from dragon_dsl.live_view import LiveView

    wl = workload("matmul(m=128,n=128,k=128)")
    live = LiveSchedule(wl, "llvm")
    lark = statement_grammar(live, postproc_set="llvm")
    assert admits(lark, 'block "C" -> C\n') and admits(lark, 'block "root" -> root\n')
    live.step('block "C" -> C')
    lark = statement_grammar(live, postproc_set="llvm")
    assert not admits(lark, 'block "C" -> C_2\n') and admits(lark, 'block "root" -> root\n')
    live.step('block "root" -> root')
    assert live.bound_blocks() == ["C", "root"]
    view = LiveView.from_data(LiveView.of(live).as_data())
    assert view.bound_blocks() == ["C", "root"]
    for state in (live, view):
        lark = statement_grammar(state, postproc_set="llvm")
        assert not admits(lark, 'block "root" -> root_2\n')
        assert not admits(lark, 'block "C" -> C_2\n')
        assert admits(lark, "loops C -> i, j, k\n")


def test_an_annotation_is_not_written_twice():
    """The RL model padded a pooling script with ``annotate root parallel=32`` four times; no
    MetaSchedule script annotates one name with one key twice (the walks above admit every
    statement of theirs), so the statement grammar does not admit it.  ``unannotate`` frees
    the key again, another key stays open, and the isolated sampler's ``LiveView`` answers the
    same."""
    wl = workload("pool2d(n=1,c=16,h=16,w=16)")
    keys = dict(annotations=annotation_keys(wl, "llvm", "llvm"),
                annotation_values=annotation_values(wl, "llvm", "llvm"),
                annotation_targets=annotation_targets(wl, "llvm", "llvm"))
    live = LiveSchedule(wl, "llvm")
    for line in ['block "pad_temp" -> pad_temp', 'block "root" -> root']:
        live.step(line)
    lark = statement_grammar(live, postproc_set="llvm", **keys)
    assert admits(lark, "annotate root parallel=32\n")
    live.step("annotate root parallel=32")
    assert live.annotated() == {"root": ["meta_schedule.parallel"]}
    view = LiveView.from_data(LiveView.of(live).as_data())
    for state in (live, view):
        lark = statement_grammar(state, postproc_set="llvm", **keys)
        assert not admits(lark, "annotate root parallel=32\n")
        assert not admits(lark, "annotate root parallel=64\n")  # a new value: still padding
        assert admits(lark, "annotate root vectorize=64\n")
    live.step("unannotate root parallel")
    lark = statement_grammar(live, postproc_set="llvm", **keys)
    assert admits(lark, "annotate root parallel=32\n")


def test_a_script_that_changes_nothing_does_not_end():
    """The built-in model ended most of its pooling scripts after the block fetches
    (``block "root" -> root`` then ``postproc auto llvm``: the unscheduled kernel, an attempt
    spent on the baseline); none of MetaSchedule's scripts does.  ``postproc auto`` is admitted
    once a statement changed the kernel, not after fetches and draws alone, and the isolated
    sampler's ``LiveView`` answers the same."""
    wl = workload("pool2d(n=1,c=16,h=16,w=16)")
    keys = dict(annotations=annotation_keys(wl, "llvm", "llvm"),
                annotation_values=annotation_values(wl, "llvm", "llvm"),
                annotation_targets=annotation_targets(wl, "llvm", "llvm"))
    live = LiveSchedule(wl, "llvm")
    assert not admits(statement_grammar(live, postproc_set="llvm", **keys), "postproc auto llvm\n")
    lines = ['block "pad_temp" -> pad_temp', 'block "root" -> root', "loops pad_temp",
             "sample_categorical [0, 16, 64, 512] 1 -> v0"]
    for line in lines:
        if line == "loops pad_temp":
            line += " -> " + ", ".join(live.expected_results("loops", "pad_temp"))
        live.step(line)
        view = LiveView.from_data(LiveView.of(live).as_data())
        for state in (live, view):
            lark = statement_grammar(state, postproc_set="llvm", **keys)
            assert not admits(lark, "postproc auto llvm\n"), line
    assert live.changes == 0
    live.step("annotate root unroll_explicit=v0")
    assert live.changes == 1
    view = LiveView.from_data(LiveView.of(live).as_data())
    for state in (live, view):
        assert admits(statement_grammar(state, postproc_set="llvm", **keys), "postproc auto llvm\n")


def test_the_cache_appended_in_place_gives_the_concatenated_caches_logits(model):
    """The decoder's cache appends each step's keys and values into room that doubles; across
    regrowths, and with holes in the attention mask, every step's logits are those of
    transformers' own ``DynamicCache``."""
    from transformers import DynamicCache

    from training.sampling.schedule_aware import _growing_cache

    torch.manual_seed(0)
    ids = torch.randint(3, 200, (3, 5))
    logits = {}
    for name, cache in (("plain", DynamicCache()), ("grown", _growing_cache(DynamicCache))):
        mask = torch.ones(3, 5, dtype=torch.long)
        seen = []
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, past_key_values=cache,
                        use_cache=True)
            for step in range(150):  # past 64 and 128: the room grows twice
                keep = torch.tensor([[1], [step % 3 != 0], [1]], dtype=torch.long)
                mask = torch.cat([mask, keep], dim=1)
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                out = model(input_ids=token, attention_mask=mask, past_key_values=cache,
                            position_ids=mask.sum(-1, keepdim=True) - 1, use_cache=True)
                seen.append(out.logits[:, -1])
        logits[name] = torch.stack(seen)
    assert type(cache.layers[0]).__name__ == "GrowingLayer"
    assert cache.layers[0].room[0].shape[-2] >= 155 and cache.get_seq_length() == 155
    assert torch.allclose(logits["plain"], logits["grown"], atol=1e-5)


def test_rows_in_the_same_state_share_a_grammar_and_write_the_same_scripts(model, tokenizer,
                                                                             monkeypatch):
    """Samples of one prompt that reach the same state (the same statements applied) are given
    the grammar built for the first of them; the scripts are those written when every row's
    grammar is built anew, and torch runs the forward passes on one thread, restored after."""
    from training.prompts.templates import construction_prompt
    from training.sampling import schedule_aware

    real, built, threads = schedule_aware.statement_grammar, [], []

    def spy(live, **kwargs):
        built.append(1)
        return real(live, **kwargs)

    monkeypatch.setattr(schedule_aware, "statement_grammar", spy)
    wl = workload(SPECS[0])
    prompt = construction_prompt(wl, "llvm")

    def sample(forget: bool) -> tuple[list[str], int, int]:
        init = schedule_aware._Decoder.__init__

        def forgetful(self, *args, **kwargs):
            init(self, *args, **kwargs)
            if forget:
                self.grammars = type("Forget", (dict,), {"__setitem__": lambda *a: None})()
        monkeypatch.setattr(schedule_aware._Decoder, "__init__", forgetful)
        built.clear()
        stats: dict = {}
        out = sample_schedule_aware(model, tokenizer, prompt, wl, "llvm",
                                    SamplingConfig(n=8, max_new_tokens=96, seed=4), stats=stats)
        monkeypatch.setattr(schedule_aware._Decoder, "__init__", init)
        return [s.text for s in out], len(built), len(stats["narrow_seconds"])

    forward = model.forward
    monkeypatch.setattr(model, "forward",
                        lambda *a, **k: threads.append(torch.get_num_threads()) or forward(*a, **k))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        shared, built_shared, statements = sample(forget=False)
        assert torch.get_num_threads() == 2 and set(threads) == {1}
    finally:
        torch.set_num_threads(before)
    anew, built_anew, _ = sample(forget=True)
    assert shared == anew
    # the eight rows start in one state: at least seven grammars fewer
    assert built_anew == statements and built_shared <= statements - 7, \
        (built_shared, built_anew, statements)
