"""``dragon optimize``: the fastest script a model can write for one kernel, measured.

    dragon optimize 'softmax(m=32,n=64)' --model runs/sft-tiny -k 8 --rounds 3
    dragon optimize 'matmul(m=512,n=512,k=512)' --model runs/rl-tiny --refine old.dragon \\
        --budget 40 --out best.dragon --json

Samples ``-k`` scripts by schedule-aware decoding, measures them beside the unscheduled kernel
and DLight's rule-based default, then lets the model refine its own best script for
``--rounds`` rounds, the measured latency in each refinement prompt (``training.optimize.kernel``).
Prints a table of the rounds, the best script, its speedups over both baselines (re-timed
together at the end, a tie when within the timings' spread), and the kernels timed; writes the
script to ``--out`` (by default ``FAMILY-IDENTITY.dragon`` in the current directory) when it
beat every baseline in that re-timing, and otherwise writes nothing and names the baseline to
keep (``winner``).  Exit codes (``ExitCode``): 0 a script faster than the baselines was found
(with ``--refine``, possibly the given one: ``improved`` says), 1 no correct script, or none
faster than a baseline, 2 usage errors (bad flags, a workload or model that cannot be read, a
script to refine that does not parse, apply or compute the right thing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path

from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
    format_latency,
    format_ratio,
    given_flags,
    parse_target,
    text_table,
)
from training.cli.common import (
    add_measure_arguments,
    load_model,
    measure_from_args,
    model_path,
    script_to_refine,
)
from training.cli.optimize_model import check_writable, is_whole_model, run_optimize_model
from training.optimize.kernel import MEASURE, OptimizeConfig
from training.optimize.model import ModelOptimizeConfig
from training.sampling.config import SamplingConfig

__all__ = ["default_out", "format_report", "register"]

# Scripts carried over from the kept corpus when --transfer is not given and a corpus serves the
# target: measured (docs/vs-metaschedule, section 4), they lifted the best kernel after 8 timed
# from 0.40x to 1.05x of MetaSchedule's, the model's own first kernels being the slowest.
AUTO_TRANSFER = 8
# Samples (and carried-over scripts) a round for the cost model to rank down to what is timed,
# when one ranks and --width is not given: the benchmark's 16 (docs/vs-metaschedule: against
# 32, with a tenth of the budget from the model instead of 0.27, the same kernels within the
# timing noise in 9% less wall clock at 64, the model's rounds 90 s of the seven against 154).
AUTO_WIDTH = 16
_SAMPLING = ("temperature", "top_p", "seed", "max_new_tokens", "batch_size")
_WHOLE_MODEL = "only a whole model (model(...) without task=, or a Relax module file)"


def default_out(wl) -> str:
    """``FAMILY-IDENTITY.dragon``: the workload's family and structural hash."""
    from codegen.workloads import parse_spec

    try:
        family = parse_spec(wl.spec)[0]
    except ValueError:
        family = "workload"
    return f"{family}-{wl.identity}.dragon"


def format_report(result, out: str | None) -> str:
    """The rounds, the best script, its speedups and the kernels timed, for people."""
    from codegen.measured import busy_warning, speedup

    start = result.start
    unscheduled = start.baseline("unscheduled").latency_s
    budget = f" of a budget of {result.config.budget}" if result.config.budget else ""
    lines = [f"{result.workload} on {result.target} ({result.device})",
             "baselines, timed first: " + ", ".join(
                 f"{b.name} {format_latency(b.latency_s)}" if b.outcome is not None and b.outcome.ok
                 else f"{b.name} {'unavailable' if b.outcome is None else b.outcome.status}"
                 for b in start.baselines)]
    rows = [["round", "prompt", "attempts", "measured", "correct", "round best", "best so far",
             "vs unscheduled"]]
    if start.given is not None:
        rows.append(["given", "-", "1", "1", "1", format_latency(start.given.latency_s),
                     format_latency(start.given.latency_s),
                     format_ratio(speedup(unscheduled, start.given.latency_s))])
    for r in result.rounds:
        # A round from a kernel so far names it; a search round's latency is only its best.
        source = {"local": "mutants of", "search": None}.get(r.prompt, "refine")
        prompt = r.prompt if r.prompt_latency_s is None or source is None else \
            f"{source} {format_latency(r.prompt_latency_s)}"
        rows.append([str(r.index), prompt, str(r.attempts), str(r.measured), str(r.correct),
                     format_latency(r.round_best_s), format_latency(r.best_s),
                     format_ratio(speedup(unscheduled, r.best_s))])
    lines += text_table(rows)
    parts = result.spent
    spent = (f"kernels timed: {result.measurements}{budget} = {parts['baselines']} baseline(s)"
             f"{' + the script to refine' if parts['given'] else ''} + {parts['sampled']} "
             f"distinct sampled script(s) (of {sum(r.attempts for r in result.rounds)} "
             f"attempts) + {parts['retimed']} re-timed at the end")
    if result.stopped == "budget":
        spent += f"; the budget stopped the search after {len(result.rounds)} round(s)"
    elif result.stopped.startswith("search failed"):
        spent += f"; MetaSchedule's {result.stopped} (what it timed before is kept)"
    if not result.ok:
        why = "none of the sampled scripts was correct" if result.best is None else \
            f"the best script was not correct when re-timed: {result.final['best'].summary()}"
        return "\n".join([*lines, "", f"no correct script: {why}", spent])
    best = result.best
    origin = {"sample": f"round {best.round}",
              "search": f"MetaSchedule's search, round {best.round}",
              "corpus": "carried over from the corpus",
              "local": f"a mutant of the fastest kernels, round {best.round}",
              "refine": f"the model's refinement between the search's rounds, round "
                        f"{best.round}"}.get(
        best.source, "the given script: no sampled script was faster")
    lines += ["", f"best script ({origin}):", best.script.rstrip(), "",
              "re-timed together:"]
    rows = [["", "median", "best is"]]
    rows.append(["best", format_latency(result.latency_s), ""])
    comparisons = []
    for b in start.baselines:
        if b.outcome is None:
            rows.append([b.name, "unavailable", b.unavailable])
            continue
        again = result.final.get(b.name)
        comparison = result.comparison(b.name)
        comparisons.append(comparison)
        rows.append([b.name, format_latency(again.latency_s if again is not None and again.ok
                                            else None),
                     _verdict(comparison) if comparison is not None
                     else (again.summary() if again is not None else "-")])
    lines += ["  " + ln for ln in text_table(rows)]
    lines.append(spent)
    if result.winner != "best":
        lines.append(f"no script beat the {result.winner} kernel when re-timed: keep it"
                     + ("; no script written" if not out else ""))
    if out:
        lines.append(f"written to {out}")
    warning = busy_warning(comparisons)
    return "\n".join([*lines, warning] if warning else lines)


def _verdict(comparison) -> str:
    """``2.10x faster``, ``0.68x (slower)`` or ``1.03x (tie, spread 8%)``."""
    return {"faster": f"{comparison} faster", "slower": f"{comparison} (slower)"}.get(
        comparison.verdict, str(comparison))


def cmd_optimize(args) -> int:
    from codegen.cli.workloads import cli_workload
    from codegen.measure import Evaluator
    from codegen.measure.devices import create
    from codegen.measured import busy_warning
    from dragon_dsl.files import write_atomic
    from training.optimize.kernel import OptimizeError, RefineError, measure_start, optimize

    whole = is_whole_model(args.workload)
    if not whole:
        refused = [*given_flags(ModelOptimizeConfig, args),
                   *(["database"] if args.database is not None else [])]
        if refused:
            flag = "--" + refused[0].replace("_", "-")
            raise UsageError(f"{flag}: {_WHOLE_MODEL} takes it, not {args.workload}")
    path = model_path(args.model)
    wl = None if whole else cli_workload(args.workload)
    target = parse_target(args.target)
    try:
        create(target)  # a target this machine cannot measure on (num-cores it lacks)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    args.transfer = transfer_count(args.transfer, args.corpus, target.kind.name, whole)
    config = config_from_args(OptimizeConfig, args)
    sampling = config_from_args(SamplingConfig, args, n=config.k)
    _check_seed(sampling.seed, config.rounds)
    measure = measure_from_args(args)
    if args.builders is not None and args.builders < 1:
        raise UsageError(f"Expected --builders >= 1 but got --builders {args.builders}")
    cost_model, config = cli_ranking(args.cost_model, target.kind.name, whole, config)
    corpus = cli_corpus(args.corpus, target.kind.name, config.transfer)
    if whole:
        return run_optimize_model(args, target, config, sampling, measure, path, cost_model,
                                  corpus)
    old = script_to_refine(args.refine) if args.refine else None
    out = args.out or default_out(wl)
    if Path(out).is_dir() or not Path(out).resolve().parent.is_dir():
        raise UsageError(f"--out {out}: not a file in an existing directory")
    check_writable(out)
    progress = not args.quiet
    name = "<stdin>" if args.refine == "-" else args.refine
    with Evaluator(target, config=measure, cache=False, builders=args.builders) as ev, \
            contextlib.redirect_stdout(sys.stderr):  # TVM and tqdm say nothing on stdout
        try:
            start = measure_start(wl, ev, refine=old, config=config)
        except RefineError as exc:
            where = f":{exc.line}:{exc.column or 1}" if exc.line is not None else ""
            raise UsageError(f"--refine {name}{where}: {exc.reason}") from None
        except OptimizeError as exc:
            raise UsageError(f"--budget: {exc}") from None
        _check_runs(start, wl, ev)
        model, tokenizer = load_model(path)
        result = optimize(model, tokenizer, wl, target, config=config, sampling=sampling,
                          refine=old, evaluator=ev, start=start, progress=progress,
                          cost_model=cost_model, corpus=corpus)
    written = lost = None
    if result.best_script is not None:
        try:
            write_atomic(out, result.best_script)
            written = out
        except OSError as exc:  # checked writable at the start; the disk filled since
            lost = f"could not write --out {out}: {exc.strerror or exc}"
    if args.json:
        print(json.dumps({**result.as_dict(), "out": written}, indent=2))
        warning = busy_warning(result.comparison(name) for name in result.final
                               if name != "best")
        if warning:
            print(warning, file=sys.stderr)
    else:
        print(format_report(result, written))
    if lost:
        print(f"dragon: {lost}; the script is in the result printed on stdout", file=sys.stderr)
    return ExitCode.OK if written is not None else ExitCode.FINDINGS


def cli_ranking(choice: str, target_kind: str, whole: bool, config: OptimizeConfig):
    """``--cost-model`` and the config it ranks with: ``auto`` is the built-in cost model for a
    kernel on llvm (none for a whole model: its tasks were not measured with one), ranking
    ``AUTO_WIDTH`` samples a round when ``--width`` is not given."""
    choice = "none" if whole and choice == "auto" else choice
    cost_model = cli_cost_model(choice, target_kind, config.width, config.k)
    return cost_model, dataclasses.replace(
        config, width=ranked_width(config.width, config.k, cost_model))


def ranked_width(width, k: int, cost_model):
    """The samples a round to rank: ``width`` when given (not None or 0), else ``AUTO_WIDTH``
    (at least ``k``) when a cost model ranks, else ``width`` as it was (nothing ranks)."""
    return width if width or cost_model is None else max(AUTO_WIDTH, k)


def cli_cost_model(choice: str, target_kind: str, width: int | None, k: int):
    """``--cost-model``, loaded before anything is measured; a --width wider than ``k`` with
    no cost model to rank it is refused."""
    from codegen.search.cost_model import CostModelError
    from training.models.builtin import load_cost_model

    try:
        cost_model = load_cost_model(choice, target_kind)
    except CostModelError as exc:
        raise UsageError(f"--cost-model {choice}: {exc}") from None
    if cost_model is None and width is not None and width > k:
        raise UsageError(f"--width {width}: no cost model to rank the samples "
                         f"(--cost-model {choice}); drop --width or give a cost model")
    return cost_model


# torch.manual_seed takes -2**63 .. 2**64 - 1; round r samples with seed + r.
_SEEDS = (-(2**63), 2**64 - 1)


def transfer_count(given: int | None, corpus: str, target_kind: str, whole: bool) -> int:
    """``--transfer``: as given; when not given, ``AUTO_TRANSFER`` for a kernel whose target
    a corpus serves (``kept_corpus``), else 0.  A whole model's tasks find neighbours by their
    blocks (``transfer.structural_neighbours``), but on the tiny BERT at 8 kernels a task it
    measured a tie end to end (0.2607 against 0.2601 ms without it, both 1.45x the default
    build), so a whole model carries nothing over unless asked."""
    if given is not None:
        return given
    served = not whole and kept_corpus(corpus, target_kind) is not None
    return AUTO_TRANSFER if served else 0


def kept_corpus(choice: str, target_kind: str) -> str | None:
    """The folder ``--corpus choice`` names for a ``target_kind`` target: ``auto`` is the kept
    corpus of a source checkout for llvm (None elsewhere, or when the checkout has none),
    ``none`` is None, anything else is the folder given."""
    from training.models.builtin import KEPT_CORPUS

    if choice == "none":
        return None
    if choice == "auto":
        kept = target_kind == "llvm" and (KEPT_CORPUS / "datagen.json").is_file()
        return str(KEPT_CORPUS) if kept else None
    return choice


def cli_corpus(choice: str, target_kind: str, transfer: int) -> list | None:
    """``--corpus``'s records, read before anything is measured when ``--transfer`` asks for
    scripts from it: ``auto`` (the kept corpus for an llvm target when the checkout has it),
    ``none``, or a ``dragon datagen`` output folder.  A --transfer with no corpus to carry
    from, or a folder without records or with a damaged one (named, file and line), is
    refused."""
    from training.datagen.records import DataError, RecordStore

    if not transfer:
        return None
    folder = kept_corpus(choice, target_kind)
    if folder is None:
        raise UsageError(f"--transfer {transfer}: no corpus to carry scripts over from "
                         f"(--corpus {choice}); give a `dragon datagen` output folder or drop "
                         f"--transfer")
    try:
        records = list(RecordStore(folder).all_records())
    except DataError as exc:
        raise UsageError(f"--corpus {choice}: {exc}") from None
    if not records:
        raise UsageError(f"--corpus {folder}: no records (not a `dragon datagen` output "
                         f"folder, or one with no task committed yet)")
    return records


def _check_seed(seed: int, rounds: int) -> None:
    """Refuses, before anything is measured, a --seed torch cannot take in the last round."""
    low, high = _SEEDS[0], _SEEDS[1] - rounds
    if not low <= seed <= high:
        raise UsageError(f"Expected --seed in {low}..{high} (torch's seeds; round r samples "
                         f"with seed + r) but got --seed {seed}")


def _check_runs(start, wl, ev) -> None:
    """Stops before any sampling when the unscheduled kernel did not build or run: nothing a
    model writes could be measured against it (no GPU, a workload too large to index)."""
    from dragon_dsl.configs import bounded

    row = start.baseline("unscheduled")
    outcome = row.outcome
    if outcome is not None and outcome.ok:
        return
    why = row.unavailable if outcome is None else outcome.summary()
    device = str(getattr(ev, "device", ""))
    where = f"{ev.target.kind.name} ({device})" if device else ev.target.kind.name
    raise UsageError(bounded(f"{wl.spec} on {where}: the unscheduled kernel did not run, so "
                             f"nothing can be measured; stopped before sampling: {why}", 600))


def register(subparsers) -> None:
    """Add ``dragon optimize`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "optimize",
        help="the fastest schedules a model writes for a kernel or a whole model, measured",
        description="Sample -k scripts for WORKLOAD by schedule-aware decoding, build, verify "
                    "and time them beside the unscheduled kernel and DLight's rule-based "
                    "default, then let the model refine its own best script for --rounds "
                    "rounds with the measured latency in the prompt.  Prints the rounds, the "
                    "best script and its speedups (re-timed beside the baselines at the end) "
                    "and the kernels timed; writes the script to --out when it beat every "
                    "baseline re-timed beside it.  Exit 0 such a script was found, 1 none "
                    "was (no correct script, or a baseline was as fast: keep it), 2 usage "
                    "errors.",
        **examples("dragon optimize 'softmax(m=32,n=64)' --model runs/sft-tiny -k 8 "
                   "--rounds 3",
                   "dragon optimize 'matmul(m=512,n=512,k=512)' --model runs/rl-tiny "
                   "--refine old.dragon --budget 40 --out best.dragon --json"))
    p.add_argument("workload", metavar="WORKLOAD", help="a workload spec or TVMScript file; "
                   "or a whole model: a model spec without task= "
                   "(model(name=bert,preset=tiny)) or a Relax IRModule file (.json from "
                   "tvm.ir.save_json, or .py TVMScript with an @R.function), whose every task "
                   "is optimized, with --budget split over the tasks: each gets its fixed "
                   "cost (baselines, one sampled script, the final re-timing) and the rest "
                   "goes in proportion to weight x unscheduled latency, its share of the "
                   "model's time")
    p.add_argument("--model", help="a local model directory or a `dragon sft`/`dragon rl` run "
                   "directory (its final/); default: the built-in demonstration model "
                   "(training/models/dragon-tiny)")
    p.add_argument("--target", default="llvm",
                   help="llvm, llvm-host (this CPU's vector units), cuda, a tag or a JSON dict "
                        "(default: llvm)")
    add_config_arguments(p, OptimizeConfig, aliases={"k": ("-k",)},
                         only=tuple(f.name for f in dataclasses.fields(OptimizeConfig)
                                    if f.name != "transfer"))
    p.add_argument("--transfer", type=int, default=None, metavar="TRANSFER",
                   help=f"scripts carried over from --corpus (the fastest of the nearest "
                        f"workloads of the family, tiles refitted to this one's loops), timed "
                        f"before the model's first round, which then refines the best of them "
                        f"(default: {AUTO_TRANSFER} when a corpus serves the target, as the "
                        f"kept one does llvm; else 0)")
    p.add_argument("--cost-model", default="auto", metavar="FILE",
                   help="the cost model that ranks --width samples (and carried-over scripts) "
                        "and the --search candidates: a file saved by `dragon cost-model`, "
                        f"auto (default: for a kernel on llvm the built-in one, trained on the "
                        f"kept corpus, ranking --width {AUTO_WIDTH} when not given, the "
                        "configuration measured against MetaSchedule in docs/vs-metaschedule; "
                        "a whole model: none), or none (the search starts MetaSchedule's own "
                        "untrained XGBoost)")
    p.add_argument("--corpus", default="auto", metavar="DIR",
                   help="where --transfer carries scripts over from: a `dragon datagen` output "
                        "folder, auto (the kept corpus of a source checkout, corpus/llvm, for "
                        "llvm targets) or none")
    p.add_argument("--refine", metavar="SCRIPT", help="start from this script: round 0 "
                   "refines it (it is measured first and must be correct); - reads stdin")
    p.add_argument("--out", metavar="FILE", help="where to write the best script (default: "
                   "FAMILY-IDENTITY.dragon in the current directory); for a whole model, the "
                   "JSON result (default: NAME-PRESET.optimize.json)")
    p.add_argument("--database", metavar="DIR", help="a whole model: the MetaSchedule JSON "
                   "database to write (default: --out without .json, plus .database); "
                   "MetaSchedule's own at equal measurements goes to DIR.metaschedule")
    # Whole-model flags: a kernel refuses them, so they are told apart from their defaults.
    add_config_arguments(p, ModelOptimizeConfig, given_only=True)
    add_config_arguments(p, SamplingConfig, only=_SAMPLING)
    add_measure_arguments(p, defaults=MEASURE)
    p.add_argument("--builders", type=int, default=None,
                   help="parallel build workers (default: one per core)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_optimize)

