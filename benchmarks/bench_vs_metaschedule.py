"""Does ``dragon optimize`` beat MetaSchedule at MetaSchedule's own budget?

For each held-out workload (a shape no kept training run searched: the script refuses one
that is in the corpus) and each budget n of candidate kernels timed (8, 16, 32, 64 by default):

* **MetaSchedule** as a user runs it: ``tune_tir(mod, target, work_dir,
  max_trials_global=64)`` with its LocalBuilder, LocalRunner and XGBoost cost model, started
  from nothing; its budget curve is the best (by its own timing) among the first n records of
  its database, and one separate run at 16 checks that reading a curve from one run is fair;
* **dragon**: ``optimize`` with ``--transfer`` (8, as ``dragon optimize``) scripts carried
  over from the kept corpus
  (the nearest workloads' fastest, tiles refitted), the built-in model's rounds
  (``--model-share`` of the rest, 0.1 by default: two rounds of 3 at 64, one kernel at 16)
  and MetaSchedule's
  evolutionary search seeded with everything timed for the rest of the budget; as ``dragon
  optimize`` by default, the built-in cost model (``--cost-model``, trained on the kept
  corpus' search records) ranks ``--width`` carried-over scripts and samples per round down
  to what is timed, and the search's candidates (``--cost-model none``: nothing ranks the
  samples, the search starts MetaSchedule's own untrained XGBoost); its curve is the
  best (by our timing) among the first n candidates it timed, and a separate run at 16 again;
* then, for each n, both best kernels are rebuilt, checked against the unscheduled kernel's
  output and timed together, interleaved (``--retimes`` rounds, the order alternating), by one
  Evaluator in this run; the table gives the medians and MetaSchedule's latency over ours, a
  ratio inside the two timings' spread being a tie (``codegen.measured.compare``).

Wall-clock time to result is each side's whole run, sampling, search and measurement included.
Prints the budget curves side by side, writes ``--out`` (JSON) and a plot beside it.

    python benchmarks/bench_vs_metaschedule.py                       # all held-out workloads
    python benchmarks/bench_vs_metaschedule.py --workloads 'softmax(m=384,n=768)' --budgets 8 16
    python benchmarks/bench_vs_metaschedule.py --target cuda --cost-model none --transfer 0  # GPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from vs_metaschedule_tables import ratio as _ratio  # MS's latency over ours; None unless both

HELD_OUT = [
    "matmul(m=192,n=320,k=256)",
    "dense(m=96,n=640,k=384,bias=1,act=relu)",
    "batch_matmul(b=6,m=96,n=80,k=64)",
    "conv2d(n=1,h=28,w=28,ci=48,co=64,kh=3,kw=3,stride=1,pad=1)",
    "softmax(m=384,n=768)",
    "layer_norm(m=384,n=768)",
    "reduce(m=512,n=1024,op=sum)",
]
BUDGETS = (8, 16, 32, 64)
TARGET = {"kind": "llvm", "num-cores": 2}
# dragon's default split of a budget (the flags' defaults; local_vs_search.py uses them too)
MODEL_SHARE, WIDTH, TRANSFER = 0.1, 16, 8
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Side:
    """One run of one side: the candidates in the order timed, (script, latency or None)."""

    name: str
    timed: list[tuple[str | None, float | None]]
    seconds: float
    extra: dict = field(default_factory=dict)

    def best_of_first(self, n: int) -> tuple[str | None, float | None]:
        correct = [(s, lat) for s, lat in self.timed[:n] if s is not None and lat is not None]
        return min(correct, key=lambda x: x[1]) if correct else (None, None)


@dataclass
class Recorded:
    """MetaSchedule's side read from an earlier run's report: its best script at each budget
    (timed again here, head to head) and its wall-clock seconds."""

    name: str
    best: dict[int, str | None]
    seconds: float

    @classmethod
    def of(cls, report: dict, spec: str, budget: int, separate: bool = False) -> Recorded:
        entry = next(e for e in report["workloads"] if e["workload"] == spec)
        if separate:
            best = {budget: entry["separate"]["scripts"]["metaschedule"]}
        else:
            best = {c["budget"]: c["scripts"]["metaschedule"] for c in entry["curves"]}
        return cls("metaschedule", best, entry["seconds"]["metaschedule"][str(budget)])

    def best_of_first(self, n: int) -> tuple[str | None, None]:
        return self.best.get(n), None


def kept_records() -> list:
    """Every record of the kept corpora (corpus/*: a training run's searches)."""
    from training.datagen.records import RecordStore

    records = []
    for folder in sorted((ROOT / "corpus").glob("*")):
        if (folder / "records").is_dir() or (folder / "shards").is_dir():
            records += RecordStore(str(folder)).all_records()
    return records


def trained_specs() -> set[str]:
    """Every workload a kept or shipped training run searched (the corpus' records)."""
    return {r.workload for r in kept_records()}


def metaschedule(spec: str, trials: int, seed: int) -> Side:
    """``tune_tir`` as a user runs it (its LocalBuilder, LocalRunner and XGBoost model, with
    the build and run time limits of our own measurement: MetaSchedule's 30 s build limit
    failed all 16 builds of a softmax on a busy machine); the records of its JSON database in
    commit order, as scripts with MetaSchedule's own latencies."""
    from tvm.s_tir import meta_schedule as ms

    from codegen.measure import MeasureConfig
    from codegen.search.baselines import unnamed_handlers_aside
    from codegen.targets import as_module, as_target
    from codegen.workloads import workload
    from training.datagen.from_database import database_records

    wl = workload(spec)
    with tempfile.TemporaryDirectory(prefix="bench-ms-") as work_dir:
        started = time.perf_counter()
        with unnamed_handlers_aside():
            limits = MeasureConfig()
            ms.tune_tir(as_module(wl), as_target(TARGET), work_dir, max_trials_global=trials,
                        seed=seed,
                        builder=ms.builder.LocalBuilder(timeout_sec=limits.build_timeout_s),
                        runner=ms.runner.LocalRunner(timeout_sec=limits.run_timeout_s))
        seconds = time.perf_counter() - started
        records = [r for group in database_records(work_dir, target=TARGET)
                   for r in group.records]
    timed = [(r.script if r.script else None,
              r.latency_s if r.status == "correct" else None) for r in records]
    return Side("metaschedule", timed, seconds)


def dragon(spec: str, trials: int, seed: int, model, tokenizer, cost_model_path: str | None,
           evaluator, share: float, width: int, ablate: str | None = None, transfer: int = 0,
           corpus: list | None = None, refine_search: int = 0, local: float = 0.0) -> Side:
    """``optimize``: ``transfer`` kernels carried over from ``corpus`` first (at most half the
    budget), then round(share x the rest) from the model's rounds (two rounds, the second
    refining the best so far, when there are at least 4), the rest from the seeded search; the
    candidates in the order timed.  ``ablate`` turns one part off: "ranking" (no
    cost model that has seen search: no ranking of samples, and the search's XGBoost starts
    untrained, as MetaSchedule's), "seeding" (the search starts from random samples, not from
    the model's scripts) or "model" (the model's rounds cut to one sample).  ``refine_search``:
    the model's refinements of the best so far between the search's rounds (counted in it).
    ``local``: the share of the search's part timed last, as mutants of the fastest kernels
    (``OptimizeConfig.local``)."""
    from codegen.workloads import workload
    from training.optimize.kernel import OptimizeConfig, optimize
    from training.sampling.config import SamplingConfig

    cost_model = None
    if cost_model_path and ablate != "ranking":
        from codegen.search.cost_model import CostModel

        cost_model = CostModel.load(cost_model_path, threads=0)  # as dragon optimize's
    carried = min(transfer, trials // 2) if corpus is not None else 0
    rest = trials - carried
    from_model = 1 if ablate == "model" else max(1, round(share * rest))
    rounds = 1 if from_model >= 4 else 0
    k = from_model // (rounds + 1)
    searched = rest - k * (rounds + 1)
    mutated = round(local * searched)
    config = OptimizeConfig(k=k, rounds=rounds, search=searched - mutated, local=mutated,
                            width=max(k, width) if cost_model is not None else None,
                            seed_search=ablate != "seeding", transfer=carried,
                            refine_search=refine_search)
    started = time.perf_counter()
    result = optimize(model, tokenizer, workload(spec), config=config,
                      sampling=SamplingConfig(seed=seed), evaluator=evaluator,
                      cost_model=cost_model, corpus=corpus if carried else None)
    seconds = time.perf_counter() - started
    timed = [(c.script, c.latency_s) for c in result.candidates if c.source != "given"]
    return Side("dragon", timed, seconds,
                {"sources": [c.source for c in result.candidates],
                 "latencies_s": [c.latency_s for c in result.candidates],
                 "statuses": [c.outcome.status.value for c in result.candidates],
                 "timeouts": [f"{c.source}: {c.outcome.message}" for c in result.candidates
                              if c.outcome.status.value == "timeout"],
                 "spent": result.spent, "config": vars(config),
                 "phases_s": {name: round(t, 2) for name, t in result.seconds.items()}})


def head_to_head(evaluator, spec: str, scripts: dict[str, str | None], retimes: int) -> dict:
    """Each script and the unscheduled kernel timed ``retimes`` times, interleaved, the order
    alternating; the median latency, the spread and the status of each."""
    from codegen.measured import Baselines, make_baselines, measure_beside, outcomes
    from codegen.workloads import workload

    wl = workload(spec)
    made = make_baselines(wl, evaluator.target)
    base = Baselines({"unscheduled": made.modules["unscheduled"]})
    named = {n: s for n, s in scripts.items() if s is not None}
    times: dict[str, list[float]] = {n: [] for n in [*named, "unscheduled"]}
    status: dict[str, str] = {}
    for i in range(retimes):
        order = dict(sorted(named.items(), reverse=bool(i % 2)))
        for name, outcome in outcomes(measure_beside(evaluator, wl, order, base)).items():
            status[name] = outcome.status.value
            if outcome.ok:
                times[name].append(outcome.latency_s)
    return {n: {"median_s": statistics.median(t) if t else None,
                "spread_s": (max(t) - min(t)) if len(t) > 1 else None,
                "status": status.get(n, "none")} for n, t in times.items()}


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def main(argv: list[str] | None = None) -> int:
    from network_vs_metaschedule import network_showdown, print_networks

    from codegen.measure import Evaluator
    from training.cli.common import load_model
    from training.models.builtin import DEFAULT_MODEL, default_model_dir
    from training.optimize.kernel import MEASURE

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="*", default=HELD_OUT,
                   help="Held-out kernels (none: only --network).")
    p.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS))
    p.add_argument("--separate", type=int, default=16,
                   help="The budget also run on its own by each side (0: none).")
    p.add_argument("--model", default=None, help="A model directory (default: the built-in).")
    p.add_argument("--cost-model", default=str(DEFAULT_MODEL / "cost_model.tar"),
                   help="The cost model file (default: the built-in one, as dragon optimize "
                        "on an llvm kernel), or 'none' (the search starts MetaSchedule's "
                        "untrained XGBoost, nothing ranks the samples).")
    p.add_argument("--model-share", type=float, default=MODEL_SHARE,
                   help="The share of each budget (after --transfer) timed from the model's "
                        "rounds; at least one kernel.  Default 0.1 (two rounds of 3 at 64); "
                        "0.27 until the thirty-fourth session, which measured the same "
                        "kernels in 9%% less wall clock at 0.1 (docs/vs-metaschedule; "
                        "--ablate model cuts them to one kernel).")
    p.add_argument("--width", type=int, default=WIDTH,
                   help="Samples per model round (and carried-over scripts) for the cost "
                        "model to rank; 16, as dragon optimize (32 until the thirty-fourth "
                        "session).")
    p.add_argument("--transfer", type=int, default=TRANSFER,
                   help="Kernels carried over from the kept corpus (the nearest workloads of "
                        "the family, refitted) timed first, at most half each budget; 0: none.")
    p.add_argument("--refine-search", type=int, default=0,
                   help="The model's refinements of the best so far written between the "
                        "search's rounds (OptimizeConfig.refine_search); 0: none.")
    p.add_argument("--local", type=float, default=0.0,
                   help="The share of dragon's searched part timed last as mutants of its "
                        "fastest kernels (OptimizeConfig.local; benchmarks/local_vs_search.py "
                        "measures it); 0: none.")
    p.add_argument("--retimes", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default=None,
                   help="The target of both sides instead of llvm with 2 cores: a short name "
                        "(cuda: the H100 tag, also right for an H200), a tag or a JSON dict.  "
                        "Off llvm, give --cost-model none --transfer 0, as `dragon optimize` "
                        "does there: the corpus and the cost model are llvm measurements.")
    p.add_argument("--mcpu", default=None,
                   help="Add an mcpu to the target of both sides (e.g. sapphirerapids: LLVM "
                        "then uses the host's vector units; the corpus and the cost model were "
                        "measured without one).")
    p.add_argument("--ablate", choices=["ranking", "seeding", "model"], default=None,
                   help="Turn one part of dragon's side off, to measure what it contributes.")
    p.add_argument("--metaschedule-from", default=None, metavar="JSON",
                   help="An earlier run's --out: MetaSchedule's best scripts are taken from it "
                        "(not searched again) and timed head to head with this run's.")
    p.add_argument("--network", action="append", default=[], metavar="MODEL",
                   help="A whole model end to end too (e.g. 'model(name=bert,preset=tiny)'; "
                        "network_vs_metaschedule.py), at each --network-budgets.")
    p.add_argument("--network-budgets", nargs="+", type=int, default=[8],
                   help="Kernels timed per task of each --network, by each side.")
    p.add_argument("--out", default="bench_vs_metaschedule.json")
    args = p.parse_args(argv)
    if args.target:
        from codegen.targets import target_dict

        TARGET.clear()  # the one target of the run, read by both sides and the networks'
        TARGET.update(target_dict(args.target))
    if args.mcpu:
        TARGET["mcpu"] = args.mcpu
    if TARGET["kind"] != "llvm" and (args.cost_model != "none" or args.transfer):
        print(f"--target {args.target}: the kept corpus and the built-in cost model are llvm "
              "measurements; give --cost-model none --transfer 0 (as `dragon optimize` does "
              "off llvm)", file=sys.stderr)
        return 2

    held = trained_specs()
    seen = [w for w in args.workloads if w in held]
    if seen:
        print(f"not held out (searched by a kept training run): {', '.join(seen)}",
              file=sys.stderr)
        return 2
    cost_model = None if args.cost_model == "none" else args.cost_model
    if cost_model is not None and not Path(cost_model).is_file():
        print(f"no cost model at {cost_model}: train it (make cost-model) or pass "
              "--cost-model none", file=sys.stderr)
        return 2
    earlier = None
    if args.metaschedule_from:
        earlier = json.loads(Path(args.metaschedule_from).read_text())
        missing = [w for w in args.workloads
                   if w not in {e["workload"] for e in earlier["workloads"]}]
        if missing or earlier["budgets"] != args.budgets:
            print(f"{args.metaschedule_from}: not a run of these workloads and budgets "
                  f"(missing: {', '.join(missing) or 'none'})", file=sys.stderr)
            return 2
    model, tokenizer = load_model(args.model or str(default_model_dir()))
    corpus = kept_records() if args.transfer else None
    top = max(args.budgets)
    rows, report = [], {"target": TARGET, "budgets": args.budgets, "args": vars(args),
                        "workloads": []}
    with Evaluator(TARGET, cache=False, config=MEASURE) as ev:
        for spec in args.workloads:
            if earlier is not None:
                theirs = Recorded.of(earlier, spec, top)
            else:
                print(f"{spec}: MetaSchedule {top} ...", flush=True)
                theirs = metaschedule(spec, top, args.seed)
            print(f"{spec}: dragon {top} ...", flush=True)
            ours = dragon(spec, top, args.seed, model, tokenizer, cost_model, ev,
                          args.model_share, args.width, args.ablate, args.transfer, corpus,
                          args.refine_search, args.local)
            runs = {"metaschedule": {top: theirs}, "dragon": {top: ours}}
            if args.separate and args.separate < top:
                runs["metaschedule"][args.separate] = \
                    Recorded.of(earlier, spec, args.separate, separate=True) \
                    if earlier is not None else metaschedule(spec, args.separate, args.seed)
                runs["dragon"][args.separate] = dragon(
                    spec, args.separate, args.seed, model, tokenizer, cost_model, ev,
                    args.model_share, args.width, args.ablate, args.transfer, corpus,
                    args.refine_search, args.local)
            entry = {"workload": spec, "curves": []}
            for n in args.budgets:
                scripts = {"dragon": ours.best_of_first(n)[0],
                           "metaschedule": theirs.best_of_first(n)[0]}
                timed = head_to_head(ev, spec, scripts, args.retimes)
                entry["curves"].append({"budget": n, "scripts": scripts, "timed": timed})
                rows.append((spec, n, timed))
            for n, side in [(b, s) for name in runs for b, s in runs[name].items()]:
                entry.setdefault("seconds", {}).setdefault(side.name, {})[n] = side.seconds
            if args.separate and args.separate < top:
                scripts = {"dragon": runs["dragon"][args.separate].best_of_first(
                               args.separate)[0],
                           "metaschedule": runs["metaschedule"][args.separate].best_of_first(
                               args.separate)[0]}
                entry["separate"] = {"budget": args.separate, "scripts": scripts,
                                     "timed": head_to_head(ev, spec, scripts, args.retimes),
                                     "dragon": runs["dragon"][args.separate].extra}
            entry["dragon"] = ours.extra
            report["workloads"].append(entry)
            Path(args.out).write_text(json.dumps(report, indent=1))
        report["networks"] = []
        for spec, n in [(s, b) for s in args.network for b in args.network_budgets]:
            report["networks"].append(network_showdown(
                spec, n, model, tokenizer, ev, seed=args.seed, transfer=args.transfer,
                corpus=corpus, rounds=args.retimes,
                keep=f"{Path(args.out).with_suffix('')}.databases"))
            Path(args.out).write_text(json.dumps(report, indent=1))
    if report["workloads"]:
        _print(report)
        _plot(report, Path(args.out).with_suffix(".png"))
    print_networks(report["networks"])
    return 0


def _print(report: dict) -> None:
    print(f"\n{'workload':58s} {'n':>3s} {'MetaSchedule':>13s} {'dragon':>11s} "
          f"{'MS/dragon':>9s} {'unsched':>10s}")
    for entry in report["workloads"]:
        for curve in entry["curves"]:
            t = curve["timed"]
            none = {"median_s": None}  # a side with no correct kernel among its first n
            ms_ = t.get("metaschedule", none)["median_s"]
            dr = t.get("dragon", none)["median_s"]
            r = _ratio(t)
            print(f"{entry['workload']:58s} {curve['budget']:3d} "
                  f"{_us(ms_):>13s} {_us(dr):>11s} "
                  f"{'-' if r is None else f'{r:.2f}x':>9s} "
                  f"{_us(t['unscheduled']['median_s']):>10s}")
    print("\ngeometric mean of MetaSchedule's latency over dragon's, by budget:")
    for n in report["budgets"]:
        ratios = [_ratio(c["timed"]) for e in report["workloads"] for c in e["curves"]
                  if c["budget"] == n]
        known = [r for r in ratios if r is not None]
        g = geomean(known)
        print(f"  n={n:3d}: {'-' if g is None else f'{g:.2f}x'}  median "
              f"{statistics.median(known) if known else float('nan'):.2f}x  "
              f"dragon faster on {sum(r > 1 for r in known)} of {len(known)}")
    print("\nwall-clock seconds (dragon / MetaSchedule):")
    for e in report["workloads"]:
        secs = e.get("seconds", {})
        print(f"  {e['workload']:58s} " + "  ".join(
            f"n={n}: {secs.get('dragon', {}).get(n, float('nan')):.0f} / "
            f"{secs.get('metaschedule', {}).get(n, float('nan')):.0f}"
            for n in sorted(secs.get("dragon", {}))))
        phases = e.get("dragon", {}).get("phases_s")
        if phases:  # where the curve run's seconds went
            print(f"  {'':58s} dragon's run of {max(report['budgets'])}: " + ", ".join(
                f"{name} {t:.0f}" for name, t in phases.items()))


def _us(secs: float | None) -> str:
    return "-" if secs is None else f"{secs * 1e6:.1f} us"


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for e in report["workloads"]:
        xs = [c["budget"] for c in e["curves"]]
        ys = [_ratio(c["timed"]) or float("nan") for c in e["curves"]]
        ax.plot(xs, ys, marker="o", label=e["workload"].split("(")[0])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("candidate kernels timed")
    ax.set_ylabel("MetaSchedule latency / dragon latency")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
