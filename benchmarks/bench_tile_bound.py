"""Schedule-aware decoding with and without MetaSchedule's bound on a tile's innermost factor.

MetaSchedule's sample_perfect_tile never draws an innermost factor above its bound (64 on
llvm; ``training.grammars.constraints.tile_max_inner``), and none of the kept corpus' tiles has
one; a small model writes a tile's factors outermost first and is left the remainder last
(``tile j [16, 2, 2, 800]`` for a 51,200-wide dense).  This samples ``-k`` construction scripts
per held-out task (the kept corpus' test split, the tiling families) from one model with the
same seeds, once under each decoder, times every distinct script with one Evaluator, then the
two decoders' best and MetaSchedule's best script for the workload (the search that made the
data) timed together with the unscheduled kernel, interleaved (``--retimes`` rounds).

Prints, per decoder: the share of scripts with a tile past the bound, the share that tile, the
share correct, the best of k over the unscheduled kernel (geometric mean, median) and over
MetaSchedule's, and the head to head of the two decoders' best (a tie within the two timings'
spread, ``codegen.measured.compare``); per family too.  Writes ``--out`` (JSON).

    python benchmarks/bench_tile_bound.py -k 4 --out tile_bound.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_vs_metaschedule import TARGET, geomean, head_to_head  # noqa: E402
from model_alone_vs_metaschedule import speedup, tiles  # noqa: E402
from vs_metaschedule_tables import verdict as timed_verdict  # noqa: E402

FAMILIES = ("dense", "matmul", "batch_matmul", "conv2d")
DECODERS = ("bound", "unbound")
_TILE = re.compile(r"^tile \S+ \[([0-9, ]+)\]", re.M)


def past_bound(script: str, bound: int = 64) -> bool:
    return any(int(m.group(1).split(",")[-1]) > bound for m in _TILE.finditer(script))


def run_task(task, model, tokenizer, evaluator, k: int, seed: int, retimes: int) -> dict:
    from codegen.workloads import workload
    from training.optimize.kernel import _canonical
    from training.prompts.templates import construction_prompt
    from training.sampling.config import SamplingConfig
    from training.sampling.schedule_aware import ScheduleAwareConfig, sample_schedule_aware

    wl = workload(task.workload)
    prompt = construction_prompt(wl, evaluator.target)
    entry: dict = {"workload": task.workload, "family": task.family}
    scripts: dict[str, list[str]] = {}
    for name in DECODERS:
        started = time.perf_counter()
        samples = sample_schedule_aware(model, tokenizer, prompt, wl, evaluator.target,
                                        SamplingConfig(n=k, seed=seed),
                                        aware=ScheduleAwareConfig(tile_bound=name == "bound"))
        scripts[name] = [_canonical(s.text) for s in samples if s.applies]
        entry[name] = {"seconds": time.perf_counter() - started, "sampled": len(samples),
                       "applies": len(scripts[name]),
                       "past_bound": sum(map(past_bound, scripts[name])),
                       "tiles": sum(map(tiles, scripts[name]))}
    distinct = list(dict.fromkeys(s for name in DECODERS for s in scripts[name]))
    timed = dict(zip(distinct, evaluator.evaluate(wl, distinct), strict=True)) \
        if distinct else {}
    best: dict[str, str | None] = {}
    for name in DECODERS:
        ok = [s for s in scripts[name] if timed[s].ok]
        entry[name]["correct"] = len(ok)
        best[name] = min(ok, key=lambda s: timed[s].latency_s) if ok else None
        entry[name]["best_script"] = best[name]
    entry["timed"] = head_to_head(evaluator, task.workload,
                                  {**best, "metaschedule": task.metaschedule_script}, retimes)
    return entry


def verdict(timed: dict, a: str, b: str) -> str | None:
    """"a", "b" or "tie": which of two timed names is faster beyond their spread."""
    v = timed_verdict(timed, ours=a, theirs=b)
    return None if v is None else "tie" if v == "tie" else a if v == "faster" else b


def summary(entries: list[dict], min_us: float) -> dict:
    kept = [e for e in entries
            if (e["timed"]["unscheduled"]["median_s"] or 0) * 1e6 >= min_us]
    out: dict = {"tasks": len(kept), "left_out": len(entries) - len(kept)}
    for name in DECODERS:
        scripts = sum(e[name]["applies"] for e in kept)
        over = [speedup(e["timed"], name) for e in kept]
        vs_ms = [speedup(e["timed"], name) / speedup(e["timed"], "metaschedule")
                 for e in kept if speedup(e["timed"], name)
                 and speedup(e["timed"], "metaschedule")]
        out[name] = {
            "scripts": scripts,
            "past_bound": sum(e[name]["past_bound"] for e in kept) / scripts if scripts else None,
            "tiles": sum(e[name]["tiles"] for e in kept) / scripts if scripts else None,
            "correct": sum(e[name]["correct"] for e in kept) / scripts if scripts else None,
            "best_over_unscheduled_geomean": geomean(over),
            "best_over_unscheduled_median": statistics.median([x for x in over if x])
            if any(over) else None,
            "best_over_metaschedule_geomean": geomean(vs_ms),
            "sampling_seconds": sum(e[name]["seconds"] for e in kept)}
    votes = [verdict(e["timed"], "bound", "unbound") for e in kept]
    out["head_to_head"] = {v: votes.count(v) for v in ("bound", "unbound", "tie")}
    out["head_to_head"]["none"] = votes.count(None)
    return out


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def print_tables(entries: list[dict], min_us: float) -> None:
    print(f"\n{'workload':52s} {'unscheduled':>11s} {'bound':>8s} {'unbound':>8s} {'MS':>8s}"
          f"  past bound (b/u)  verdict")
    for e in entries:
        t = e["timed"]
        base = t["unscheduled"]["median_s"]
        if base is None or base * 1e6 < min_us:
            why = (f"the unscheduled kernel was not timed ({t['unscheduled']['status']})"
                   if base is None else f"unscheduled under {min_us:.0f} us")
            print(f"{e['workload']:52s} left out: {why}")
            continue
        print(f"{e['workload']:52s} {base * 1e6:9.1f}us {_x(speedup(t, 'bound')):>8s} "
              f"{_x(speedup(t, 'unbound')):>8s} {_x(speedup(t, 'metaschedule')):>8s}"
              f"  {e['bound']['past_bound']}/{e['unbound']['past_bound']}"
              f"{'':14s}{verdict(t, 'bound', 'unbound')}")
    groups = {"all": entries, **{f: [e for e in entries if e["family"] == f] for f in FAMILIES}}
    print(f"\n{'':14s} {'tasks':>5s}  {'decoder':8s} {'past bound':>10s} {'tiles':>6s} "
          f"{'correct':>7s} {'best/unsch geomean (median)':>28s} {'best/MS':>8s}  h2h b/u/tie")
    for label, group in groups.items():
        if not group:
            continue
        s = summary(group, min_us)
        h = s["head_to_head"]
        for name in DECODERS:
            d = s[name]
            print(f"{label:14s} {s['tasks']:5d}  {name:8s} {_pct(d['past_bound']):>10s} "
                  f"{_pct(d['tiles']):>6s} {_pct(d['correct']):>7s} "
                  f"{_x(d['best_over_unscheduled_geomean']):>18s} "
                  f"({_x(d['best_over_unscheduled_median'])}) "
                  f"{_x(d['best_over_metaschedule_geomean']):>8s}"
                  + (f"  {h['bound']}/{h['unbound']}/{h['tie']}" if name == "bound" else ""))


def main(argv: list[str] | None = None) -> int:
    from codegen.measure import Evaluator
    from training.cli.common import load_model
    from training.evaluate.tasks import load_tasks
    from training.models.builtin import default_model_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT / "corpus" / "llvm"))
    p.add_argument("--model", default=None, help="a model directory (default: the built-in)")
    p.add_argument("--families", nargs="+", default=list(FAMILIES))
    p.add_argument("-k", type=int, default=4, help="scripts per task and decoder")
    p.add_argument("--max-tasks", type=int, default=None)
    p.add_argument("--min-us", type=float, default=50.0,
                   help="leave out tasks whose unscheduled kernel is faster than this")
    p.add_argument("--retimes", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="tile_bound.json")
    args = p.parse_args(argv)

    tasks = load_tasks(args.data, "test", ("construction",), families=tuple(args.families),
                       max_tasks=args.max_tasks)
    model, tokenizer = load_model(args.model or str(default_model_dir()))
    report: dict = {"target": TARGET, "args": vars(args), "tasks": []}
    with Evaluator(TARGET, cache=False) as ev:
        for i, task in enumerate(tasks):
            print(f"[{i + 1}/{len(tasks)}] {task.workload}", flush=True)
            report["tasks"].append(run_task(task, model, tokenizer, ev, args.k, args.seed,
                                            args.retimes))
            Path(args.out).write_text(json.dumps(report, indent=1))
    report["summary"] = summary(report["tasks"], args.min_us)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print_tables(report["tasks"], args.min_us)
    return 0


if __name__ == "__main__":
    sys.exit(main())
