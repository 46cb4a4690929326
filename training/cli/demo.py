"""``dragon demo``: the main job on the built-in model, against MetaSchedule at equal budgets.

    dragon demo                      # BERT-base's FFN layer and tiny BERT end to end, on llvm
    dragon demo --kernel 'softmax(m=128,n=512)' --network '' -k 8

What ``make demo`` runs (``optimize.demo``): the model optimizes a real layer and a real model;
MetaSchedule gets as many measured candidates as the model's search measured, in the same
session (the layer: ``tune_tir`` as a user runs it; the network: its search per task); the
headline table compares both with the unscheduled kernel and the rule-based default.  The
codec's round trip is ``dragon roundtrip``.  Exit codes: 0 done (whoever won), 1 the model
found no correct script or an end-to-end build failed, 2 usage errors.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from dragon_dsl.cli_kit import (
    ExitCode,
    UsageError,
    add_config_arguments,
    config_from_args,
    examples,
    format_latency,
    text_table,
)
from training.cli.common import load_model, model_path
from training.optimize.demo import DemoConfig

__all__ = ["format_headline", "register", "wall_clock_line"]

HEADER = ["", "measured", "unscheduled", "default", "MetaSchedule", "dragon",
          "dragon vs unscheduled", "dragon vs MetaSchedule"]


def _ratio(comparison) -> str:
    """``2.10x``, ``1.03x (tie, spread 8%)`` or "-"."""
    return "-" if comparison is None else str(comparison)


def kernel_comparisons(showdown) -> list:
    """The headline's two ratios: dragon over the unscheduled kernel and over MetaSchedule."""
    return [showdown.comparison("dragon"), showdown.comparison("dragon", "metaschedule")]


def network_comparisons(result) -> list:
    """The same two ratios, end to end: dragon's build over the default and MetaSchedule's."""
    from codegen.measured import compare

    e2e = result.end_to_end
    return [compare(e2e.get("before"), e2e.get("dragon")),
            compare(e2e.get("metaschedule"), e2e.get("dragon"))]


def kernel_row(showdown) -> list[str]:
    lat = showdown.latency_s
    return [f"{showdown.workload} (kernel)",
            f"{showdown.trials} / {showdown.metaschedule_trials or showdown.trials}",
            *(format_latency(lat(n)) for n in ("unscheduled", "default", "metaschedule", "dragon")),
            *(_ratio(c) for c in kernel_comparisons(showdown))]


def network_row(result) -> list[str]:
    before = result.end_to_end.get("before")
    latency = {n: (e.latency_s if e.ok else None) for n, e in result.end_to_end.items()}
    dragon, ms = latency.get("dragon"), latency.get("metaschedule")
    return [f"{result.model}, {len(result.tasks)} tasks (end to end)",
            f"{result.measurements} / {result.metaschedule_measurements}",
            format_latency(before.latency_s if before is not None and before.ok else None), "-",
            format_latency(ms), format_latency(dragon),
            *(_ratio(c) for c in network_comparisons(result))]


def wall_clock_line(showdown) -> str:
    """Each side's wall clock on the layer, its whole run (sampling, search, measurement)."""
    secs = showdown.seconds
    if "dragon" not in secs or "metaschedule" not in secs:
        return ""
    phases = ", ".join(f"{name} {t:.0f}" for name, t in
                       getattr(showdown.result, "seconds", {}).items())
    return (f"wall clock, {showdown.workload}: dragon {secs['dragon']:.0f} s"
            + (f" ({phases})" if phases else "")
            + f", MetaSchedule's tune_tir {secs['metaschedule']:.0f} s")


def format_headline(rows: list[list[str]], model_name: str, device: str, seconds: float,
                    comparisons: list | None = None, notes: list[str] | None = None) -> str:
    """The headline table: one row per part of the demo, then ``notes`` (one a line); a line
    when one of its ``comparisons`` is a tie within the timings' spread
    (``codegen.measured.busy_warning``)."""
    from codegen.measured import busy_warning

    lines = [f"Little Dragon demo: {model_name} on {device}, {seconds / 60:.1f} min", "",
             *text_table([HEADER, *rows]), "",
             "measured: kernels the model's search timed / MetaSchedule's got (the layer: "
             "tune_tir from nothing in a new process, max_trials_global the model's count; "
             "the network: its evolutionary search per task).  Every "
             "latency is a median of its part's final, interleaved timing; a network's "
             "'unscheduled' is its default build (relax.build without a database).  A ratio "
             "within the two timings' spread is a tie.", *[n for n in notes or () if n]]
    warning = busy_warning(comparisons or [])
    return "\n".join([*lines, warning] if warning else lines)


def say(text: str) -> None:
    print(f"   {text}", flush=True)


def cmd_demo(args) -> int:
    from codegen.measure import Evaluator
    from codegen.targets import as_target
    from training.optimize.demo import compare_kernel
    from training.optimize.kernel import MEASURE

    try:
        config = config_from_args(DemoConfig, args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from training.cli.optimize import cli_cost_model, ranked_width

    cost_model = cli_cost_model(args.cost_model, "llvm", config.width,
                                min(config.k, config.network_k))
    # auto ranks the layer's samples and carried-over scripts (as many as dragon optimize
    # ranks); the network's tasks get a cost model only when one is named.
    network_cost_model = None if args.cost_model == "auto" else cost_model
    kernel_width = ranked_width(config.width, config.k, cost_model)
    wl = None
    if config.kernel:
        from codegen.cli.workloads import cli_workload

        wl = cli_workload(config.kernel)
    if config.network:
        from training.cli.optimize_model import is_whole_model, load_whole_model

        if not is_whole_model(config.network):
            raise UsageError(f"--network {config.network}: expected a model spec without task= "
                             "(model(name=bert,preset=tiny)) or a Relax module file")
        label, mod, tasks = load_whole_model(config.network)
    if args.out:
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as exc:  # a file there, or a file on the way
            raise UsageError(f"--out {args.out}: exists and is not a directory ({exc.strerror})"
                             if os.path.exists(args.out) else
                             f"--out {args.out}: cannot make the directory ({exc.strerror})"
                             ) from None
    from training.cli.optimize import cli_corpus, kept_corpus

    folder = kept_corpus("auto", "llvm") if wl is not None and config.transfer else None
    corpus = cli_corpus(folder, "llvm", config.transfer) if folder is not None else None
    path = model_path(args.model)
    started = time.perf_counter()
    target = as_target("llvm")
    rows, parts, comparisons, notes = [], {}, [], []
    with Evaluator(target, cache=False, config=MEASURE) as ev, \
            contextlib.redirect_stdout(sys.stderr):
        model, tokenizer = load_model(path)
        if wl is not None:
            print(f"== 1. a layer: {wl.spec}", flush=True)
            if config.transfer and corpus is None:
                print("   no kept corpus (corpus/llvm) in this installation: nothing carried "
                      "over", flush=True)
            showdown = compare_kernel(model, tokenizer, wl, ev, k=config.k, rounds=config.rounds,
                                      seed=config.seed, width=kernel_width, search=config.search,
                                      cost_model=cost_model, transfer=config.transfer,
                                      corpus=corpus, progress=not args.quiet,
                                      local=config.local)
            rows.append(kernel_row(showdown))
            notes.append(wall_clock_line(showdown))
            comparisons += kernel_comparisons(showdown)
            parts["kernel"] = showdown.as_dict()
        if config.network:
            import tempfile

            from training.optimize.demo import compare_network

            print(f"== 2. a network: {config.network}", flush=True)
            out = args.out or tempfile.mkdtemp(prefix="dragon-demo-")
            result = compare_network(model, tokenizer, label, mod, tasks, ev,
                                     os.path.join(out, f"{label}.database"), k=config.network_k,
                                     seed=config.seed, population=config.population,
                                     width=config.width, search=config.network_search,
                                     cost_model=network_cost_model, progress=not args.quiet,
                                     say=None if args.quiet else say)
            rows.append(network_row(result))
            comparisons += network_comparisons(result)
            # ok: every end-to-end build ran correctly.  No schedule beating the default is a
            # finding the table reports (dragon's build then keeps the default), not a failure.
            parts["network"] = {**result.as_dict(), "ok": all(
                e.ok for e in result.end_to_end.values()), "comparison": {
                    f"dragon vs {over}": c.as_dict() if c else None for over, c in zip(
                        ("before", "metaschedule"), network_comparisons(result), strict=True)}}
        device = ev.device
    seconds = time.perf_counter() - started
    name = "dragon-tiny (the built-in model)" if args.model is None else path
    if args.json:
        from codegen.measured import busy_warning

        print(json.dumps({"model": path, "device": device, "seconds": seconds, **parts},
                         indent=2))
        if busy_warning(comparisons):
            print(busy_warning(comparisons), file=sys.stderr)
    else:
        print(format_headline(rows, name, device, seconds, comparisons, notes))
        if "network" in parts:
            print(f"the network's MetaSchedule databases: {parts['network']['database']} "
                  "(ours) and its .metaschedule twin")
    ok = parts.get("kernel", {}).get("optimize", {}).get("ok", True) and \
        parts.get("network", {}).get("ok", True)
    return ExitCode.OK if ok else ExitCode.FINDINGS


def register(subparsers) -> None:
    """Add ``dragon demo`` (the ``dragon.commands`` entry point)."""
    p = subparsers.add_parser(
        "demo", help="the main job on the built-in model, against MetaSchedule at equal budgets",
        description="Optimize BERT-base's FFN layer and tiny BERT end to end on llvm with a "
                    "model (the built-in one by default), give MetaSchedule's search as many "
                    "measured candidates, and print the headline table: latencies re-timed "
                    "together, speedups over the unscheduled kernel and against MetaSchedule. "
                    "A few minutes on 2 cores.  The codec round trip is `dragon roundtrip`.",
        **examples("dragon demo",
                   "dragon demo --kernel 'softmax(m=128,n=512)' --network '' -k 8 --rounds 2"))
    add_config_arguments(p, DemoConfig, aliases={"k": ("-k",)})
    p.add_argument("--model", default=None, metavar="PATH",
                   help="a local model directory or run directory (default: the built-in "
                        "model, training/models/dragon-tiny)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="where the network's MetaSchedule databases go (default: a new "
                        "temporary directory, printed)")
    p.add_argument("--cost-model", default="auto", metavar="FILE",
                   help="the cost model that ranks samples and the search's candidates: a file "
                        "saved by `dragon cost-model`, auto (default: the built-in one for the "
                        "layer, as dragon optimize; none for the network), or none "
                        "(MetaSchedule's own untrained XGBoost in the search)")
    p.add_argument("--json", action="store_true", help="print every figure as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo)
