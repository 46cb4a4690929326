"""What holding the live schedules in a worker process costs per statement
(``training.sampling.live_worker``) against holding them in the sampler's own process.

On MetaSchedule scripts, statement by statement, both measured in one run:

- ``step``: applying the statement (in process: ``LiveSchedule.step``; isolated: the
  ``LiveStep`` round trip, the ``LiveView`` recorded in the worker and read back here);
- ``narrow``: the next statement's grammar (``statement_grammar`` on the schedule or the view);
- ``total``: both, what the sampler pays per statement beyond the model;

then the worker's start and a row's replay (``LiveOpen`` with its statements so far, what a
crash costs each surviving row), and, with ``--sample``, schedule-aware sampling from a tiny
untrained model both ways (the sampler's own per-statement timings).

    python benchmarks/bench_live_worker.py [--traces 3] [--sample]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CORPUS = [("llvm", "llvm", "matmul(m=128,n=128,k=128)"),
          ("llvm", "llvm", "conv2d(h=14,w=14,ci=16,co=16)"),
          ("llvm", "llvm", "softmax(m=32,n=64)"),
          ("cuda", "cuda", "softmax(m=64,n=128)"),
          ("cuda", "cuda", "matmul(m=128,n=128,k=128)")]


def _ms(xs: list[float]) -> str:
    return f"{1e3 * statistics.median(xs):8.3f}" if xs else "       -"


def statements(traces: int) -> list[tuple]:
    import dragon_dsl
    from codegen.search import sample_traces
    from codegen.workloads import workload
    from training.grammars.constraints import (
        annotation_keys,
        annotation_values,
        categorical_lists,
        expand_ranges,
    )

    cases = []
    for target, rules, spec in CORPUS:
        wl = workload(spec)
        kwargs = dict(postproc_set=rules, categorical=categorical_lists(wl, target, rules) or (),
                      annotations=annotation_keys(wl, target, rules) or (),
                      annotation_values=annotation_values(wl, target, rules))
        for trace in sample_traces(wl.mod, target, rules, traces, seed=3):
            script = expand_ranges(dragon_dsl.from_trace(trace, postproc="auto",
                                                         postproc_set=rules, workload=wl))
            cases.append((target, spec, wl, kwargs, script.splitlines()))
    return cases


def per_statement(cases: list[tuple]) -> None:
    from codegen.measure.protocol import LiveClose, LiveOpen, WorkloadData
    from dragon_dsl.live import LiveSchedule
    from training.grammars.statement import statement_grammar
    from training.sampling.live_worker import LiveWorker

    holders = {}
    start_s = []
    for target in dict.fromkeys(c[0] for c in cases):
        holder = holders[target] = LiveWorker(target)
        begin = time.perf_counter()
        holder.open(cases[0][2])  # the worker starts on its first request
        start_s.append(time.perf_counter() - begin)
    rows: dict[tuple, dict[str, list[float]]] = {}
    replay_s, replayed, open_in, open_w = [], [], [], []
    for target, spec, wl, kwargs, lines in cases:
        times = rows.setdefault((target, spec), {k: [] for k in (
            "in_step", "in_narrow", "w_step", "w_narrow")})
        holder = holders[target]
        begin = time.perf_counter()
        live = LiveSchedule(wl, target)
        mid = time.perf_counter()
        key, view = holder.open(wl)
        open_in.append(mid - begin)
        open_w.append(time.perf_counter() - mid)
        # Interleaved, statement by statement, so that both see the same machine load.
        for line in lines:
            begin = time.perf_counter()
            live.step(line)
            mid = time.perf_counter()
            statement_grammar(live, **kwargs)
            end = time.perf_counter()
            view = holder.step(key, line)
            after = time.perf_counter()
            statement_grammar(view, **kwargs)
            last = time.perf_counter()
            times["in_step"].append(mid - begin)
            times["in_narrow"].append(end - mid)
            times["w_step"].append(after - end)
            times["w_narrow"].append(last - after)
        holder.close([key])
        # A surviving row after a crash: a new live schedule, its statements so far replayed.
        replay = LiveOpen(-1, WorkloadData.of(wl), holder.target, lines[:-1])
        begin = time.perf_counter()
        holder.worker.call(replay, timeout=300)
        replay_s.append(time.perf_counter() - begin)
        holder.worker.call(LiveClose([-1]), timeout=300)
        replayed.append(len(lines) - 1)
    for holder in holders.values():
        holder.kill()

    print("per statement, medians in ms (in process | worker), both measured in this run\n")
    print(f"{'target':6} {'workload':32} {'n':>4} | {'step':>8} {'narrow':>8} {'total':>8} | "
          f"{'step':>8} {'narrow':>8} {'total':>8} | {'ratio':>6}")
    every: dict[str, list[float]] = {k: [] for k in ("in_step", "in_narrow", "w_step",
                                                      "w_narrow")}
    for (target, spec), t in [*rows.items(), (("all", ""), every)]:
        if target != "all":
            for k, v in t.items():
                every[k] += v
        inside = [a + b for a, b in zip(t["in_step"], t["in_narrow"], strict=True)]
        worker = [a + b for a, b in zip(t["w_step"], t["w_narrow"], strict=True)]
        ratio = statistics.median(worker) / statistics.median(inside)
        print(f"{target:6} {spec:32} {len(inside):4} | {_ms(t['in_step'])} "
              f"{_ms(t['in_narrow'])} {_ms(inside)} | {_ms(t['w_step'])} {_ms(t['w_narrow'])} "
              f"{_ms(worker)} | {ratio:6.2f}")
    print(f"\na row opened: in process {_ms(open_in).strip()} ms, in the worker "
          f"{_ms(open_w).strip()} ms (medians over {len(open_w)})")
    print(f"worker start (first request): median {_ms(start_s).strip()} ms over "
          f"{len(start_s)}; a row's replay after a crash ({statistics.median(replayed):.0f} "
          f"statements, median): {_ms(replay_s).strip()} ms")


def sampling(n: int) -> None:
    import torch

    from codegen.workloads import workload
    from training.models.tokenizer import TokenizerConfig, build_tokenizer, tiny_model
    from training.prompts.templates import construction_prompt
    from training.sampling import SamplingConfig, ScheduleAwareConfig, schedule_aware_generate

    tokenizer = build_tokenizer(TokenizerConfig(
        workloads=("matmul(m=64,n=64,k=64)", "softmax(m=32,n=64)"), targets=("llvm",),
        traces_per_workload=2))
    torch.manual_seed(0)
    model = tiny_model(tokenizer).eval()
    wls = [workload(s) for s in ("matmul(m=128,n=128,k=128)", "softmax(m=32,n=64)")
           for _ in range(n)]
    prompts = [construction_prompt(w, "llvm") for w in wls]
    print(f"\nschedule-aware sampling, {len(wls)} samples of a tiny untrained model "
          f"(the sampler's own timings; per statement: ms, median)\n")
    print(f"{'isolate':8} {'statements':>10} {'step':>8} {'narrow':>8} {'step+narrow s':>14} "
          f"{'wall s':>8}")
    for isolate in (False, True, False, True):  # twice each: the first pays for warm-up
        stats: dict = {}
        torch.manual_seed(1)
        begin = time.perf_counter()
        schedule_aware_generate(model, tokenizer, prompts, wls, "llvm",
                                sampling=SamplingConfig(max_new_tokens=160),
                                config=ScheduleAwareConfig(isolate=isolate), stats=stats)
        wall = time.perf_counter() - begin
        spent = sum(stats["replay_seconds"]) + sum(stats["narrow_seconds"])
        print(f"{isolate!s:8} {len(stats['replay_seconds']):10} {_ms(stats['replay_seconds'])} "
              f"{_ms(stats['narrow_seconds'])} {spent:14.3f} {wall:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=3, help="MetaSchedule scripts per workload")
    parser.add_argument("--sample", action="store_true", help="also sample from a tiny model")
    parser.add_argument("--samples", type=int, default=8, help="samples per workload (--sample)")
    args = parser.parse_args()
    per_statement(statements(args.traces))
    if args.sample:
        sampling(args.samples)


if __name__ == "__main__":
    main()
