"""The cost of applying one instruction to a live schedule (``dragon_dsl.live_apply``) against
replaying the whole trace on a fresh schedule, on MetaSchedule traces.

Prints, per target (llvm; cuda with the plain rules; tensor cores): the median, p90 and mean
time of one ``apply_inst`` call per instruction; the whole trace applied incrementally; one
full ``Trace.apply_to_schedule`` replay (schedule creation included); what replaying every
prefix costs (a sampler without live schedules replays the prefix after each statement); and
``Schedule.copy()``.  Then the median ``apply_inst`` time per instruction kind.

    python benchmarks/bench_live_apply.py [--traces-per-workload 2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CORPUS = {
    "llvm": [("llvm", "llvm", w) for w in (
        "matmul(m=128,n=128,k=128)", "conv2d(h=14,w=14,ci=16,co=16,layout_free=1)",
        "softmax(m=32,n=64)", "layer_norm(m=32,n=64)",
    )],
    "cuda": [("cuda", "cuda", w) for w in (
        "matmul(m=128,n=128,k=128)", "softmax(m=32,n=64)", "conv2d(h=14,w=14,ci=16,co=16)",
        "pool2d(kind=max)",
    )],
    "tensor core": [
        ("cuda", "cuda-tensorcore", "matmul(m=128,n=128,k=128,dtype=float16)"),
        ("cuda", "mma", "matmul(m=128,n=128,k=128,dtype=float16)"),
        ("cuda", "cuda-tensorcore", "conv2d(h=14,w=14,ci=32,co=32,dtype=float16)"),
    ],
}


def _p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]


def _time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _per_instruction(mod, trace, repeat: int) -> list[tuple[str, float]]:
    """(kind, median seconds of its apply_inst call) for every instruction of the trace."""
    from tvm.s_tir.schedule import Schedule

    from dragon_dsl.live_apply import _Translator, apply_inst

    runs = []
    for _ in range(repeat):
        sch, translate, times = Schedule(mod), _Translator(), []
        for inst in trace.insts:
            kind = str(inst.kind.name)
            inputs = [translate(v, kind) for v in inst.inputs]
            attrs, decision = list(inst.attrs), trace.get_decision(inst)
            start = time.perf_counter()
            outputs = apply_inst(sch, kind, inputs, attrs, decision)
            times.append(time.perf_counter() - start)
            translate.add(list(inst.outputs), outputs, kind)
        runs.append(times)
    kinds = [str(inst.kind.name) for inst in trace.insts]
    return [(kind, statistics.median(run[i] for run in runs)) for i, kind in enumerate(kinds)]


def _prefix_replays(mod, trace) -> float:
    """Seconds to replay every prefix once on a fresh schedule."""
    from tvm.s_tir.schedule import Schedule, Trace

    insts, decisions = list(trace.insts), {}
    start = time.perf_counter()
    for k, inst in enumerate(insts):
        if trace.get_decision(inst) is not None:
            decisions[inst] = trace.get_decision(inst)
        Trace(insts[:k + 1], dict(decisions)).apply_to_schedule(Schedule(mod),
                                                                remove_postproc=False)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces-per-workload", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5, help="timing repetitions per trace")
    args = ap.parse_args()

    from tvm.s_tir.schedule import Schedule

    from codegen import sample_traces, workload
    from dragon_dsl.live_apply import apply_trace_incrementally

    by_kind: dict[str, list[float]] = defaultdict(list)
    rows = []
    everything: list[float] = []
    for group, entries in CORPUS.items():
        per_inst, incremental, replay, prefixes, copies, lengths = [], [], [], [], [], []
        for target, rules, spec in entries:
            mod = workload(spec).mod
            print(f"[{group}] {spec} ({rules}) ...", file=sys.stderr, flush=True)
            for trace in sample_traces(mod, target, rules, args.traces_per_workload, seed=7):
                lengths.append(len(trace.insts))
                for kind, seconds in _per_instruction(mod, trace, args.repeat):
                    per_inst.append(seconds)
                    by_kind[kind].append(seconds)
                incremental.append(_time(
                    lambda: apply_trace_incrementally(Schedule(mod), trace), args.repeat))
                replay.append(_time(lambda: trace.apply_to_schedule(
                    Schedule(mod), remove_postproc=False), args.repeat))
                prefixes.append(_prefix_replays(mod, trace))
                sch = Schedule(mod)
                trace.apply_to_schedule(sch, remove_postproc=False)
                copies.append(_time(sch.copy, args.repeat * 20))
        everything += per_inst
        rows.append((group, lengths, per_inst, incremental, replay, prefixes, copies))

    print("\nPer trace: instructions (median); apply_inst per instruction, us: median / p90 / "
          "mean; ms per trace: incremental, one full replay, every prefix replayed; "
          "Schedule.copy() us")
    print("| target | traces | insts | apply_inst | incremental | full replay | "
          "prefix replays | copy |")
    print("|---|---|---|---|---|---|---|---|")
    for group, lengths, per_inst, incremental, replay, prefixes, copies in rows:
        print(f"| {group} | {len(lengths)} | {statistics.median(lengths):.0f} | "
              f"{statistics.median(per_inst) * 1e6:.0f} / {_p90(per_inst) * 1e6:.0f} / "
              f"{statistics.mean(per_inst) * 1e6:.0f} | "
              f"{statistics.median(incremental) * 1e3:.2f} | "
              f"{statistics.median(replay) * 1e3:.2f} | "
              f"{statistics.median(prefixes) * 1e3:.0f} | "
              f"{statistics.median(copies) * 1e6:.1f} |")
    print(f"| all | {sum(len(r[1]) for r in rows)} | {len(everything)} instructions | "
          f"{statistics.median(everything) * 1e6:.0f} / {_p90(everything) * 1e6:.0f} / "
          f"{statistics.mean(everything) * 1e6:.0f} | | | | |")

    print("\napply_inst by kind, us: median (count)")
    print("| kind | median | count |")
    print("|---|---|---|")
    for kind, times in sorted(by_kind.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"| {kind} | {statistics.median(times) * 1e6:.0f} | {len(times)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
