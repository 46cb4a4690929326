"""The GPU check behind ``benchmarks/gpu_check.sh``: a handful of workloads, each with scripts
sampled from MetaSchedule (plain CUDA rules, and tensor-core rules for float16) and with the
baselines (unscheduled = DLight Fallback, DLight default, best MetaSchedule for a trial
budget), built, verified against the CPU reference and timed on the GPU; one table.
"""

from __future__ import annotations

import argparse
import sys

WORKLOADS = [
    ("matmul(m=1024,n=1024,k=1024,dtype=float16)", ["cuda", "cuda-tensorcore"]),
    ("matmul(m=512,n=512,k=512)", ["cuda"]),
    ("dense(m=128,n=3072,k=768,bias=1,act=gelu,dtype=float16)", ["cuda", "cuda-tensorcore"]),
    ("conv2d(n=1,h=56,w=56,ci=64,co=64)", ["cuda"]),
    ("softmax(m=512,n=1024)", ["cuda"]),
    ("layer_norm(m=512,n=768)", ["cuda"]),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripts", type=int, default=4, help="sampled scripts per rule set")
    parser.add_argument("--trials", type=int, default=32,
                        help="MetaSchedule trial budget for the best-found baseline (0: skip)")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    import dragon_dsl
    from codegen.measure import MeasureConfig
    from codegen.measure.evaluator import Evaluator
    from codegen.search import baselines, sample_traces
    from codegen.workloads import workload

    config = MeasureConfig(repeat=args.repeat, min_repeat_ms=10.0)
    header = ["workload", "candidate", "outcome", "max abs err", "median us", "IQR us",
              "vs unscheduled", "vs default", "vs metaschedule"]
    rows, healthy = [], True
    with Evaluator("cuda", cache=False, config=config) as ev:
        print(f"device: {ev.device}", flush=True)
        for spec, rule_sets in WORKLOADS:
            wl = workload(spec)
            modules, notes = {}, {}
            for name, make in [("unscheduled", baselines.unscheduled),
                               ("default", baselines.rule_based)]:
                try:
                    modules[name] = make(wl, "cuda")
                except baselines.BaselineUnavailable as exc:
                    notes[name] = str(exc)
            if args.trials:
                try:
                    best = baselines.metaschedule_best(wl, "cuda", trials=args.trials)
                    modules["metaschedule"] = best.mod
                except baselines.BaselineUnavailable as exc:
                    notes["metaschedule"] = str(exc)
            scripts = {}
            for rules in rule_sets:
                traces = sample_traces(wl.mod, "cuda", rules, args.scripts, seed=11)
                for i, trace in enumerate(traces):
                    scripts[f"{rules}#{i}"] = dragon_dsl.from_trace(
                        trace, postproc="auto", postproc_set=rules)
            base = ev.evaluate_modules(wl, modules)
            outcomes = dict(zip(scripts, ev.evaluate(wl, list(scripts.values())), strict=True))
            healthy &= all(o.ok for o in base.values()) and any(o.ok for o in outcomes.values())
            for name, outcome in [*base.items(), *outcomes.items()]:
                speedups = []
                for b in ("unscheduled", "default", "metaschedule"):
                    theirs = base[b].latency_s if b in base else None
                    speedups.append(f"{theirs / outcome.latency_s:.2f}x"
                                    if theirs and outcome.latency_s else "-")
                rows.append([spec, name, outcome.status.value,
                             "-" if outcome.max_abs_error is None
                             else f"{outcome.max_abs_error:.1e}",
                             "-" if outcome.latency_s is None else f"{outcome.latency_s * 1e6:.1f}",
                             "-" if outcome.spread_s is None else f"{outcome.spread_s * 1e6:.1f}",
                             *speedups])
            for name, why in notes.items():
                rows.append([spec, name, "unavailable", "-", "-", "-", "-", "-", "-"])
                print(f"{spec} {name}: {why}", file=sys.stderr)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
