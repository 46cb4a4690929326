"""Candidates per minute on llvm: isolated workers (``Evaluator``) against the same jobs called
directly in this process, measured in one run; the cost of isolation is their ratio.

    python benchmarks/bench_measure.py [--candidates 8] [--rounds 2]

Scripts are sampled from MetaSchedule for each workload.  "direct" runs the worker's own job
functions (apply, build, export, load, verify, time) in-process and one after another;
"isolated cold" starts a fresh Evaluator (its worker processes included) per round;
"isolated warm" reuses one.  Caching is off throughout.  Each cell is the median of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

# No softmax here: some of its sampled scripts unroll so much that LLVM takes minutes, which
# the direct mode, having no time limit, would wait for (the isolated one stops at its limit).
WORKLOADS = ["matmul(m=128,n=128,k=128)", "conv2d(n=1,h=14,w=14,ci=32,co=32)",
             "dense(m=64,n=256,k=256,bias=1,act=relu)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=8, help="scripts per workload")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import dragon_dsl
    from codegen.measure import MeasureConfig, create
    from codegen.measure import worker_main as jobs
    from codegen.measure.evaluator import Evaluator
    from codegen.measure.protocol import BuildJob, Built, RunJob, WorkloadData
    from codegen.search import sample_traces
    from codegen.targets import target_dict
    from codegen.workloads import workload

    config = MeasureConfig(repeat=5, min_repeat_ms=5.0)
    spec = target_dict("llvm")
    print(f"sampling {args.candidates} scripts for each of {len(WORKLOADS)} workloads ...",
          flush=True)
    cases = []
    for text in WORKLOADS:
        wl = workload(text)
        traces = sample_traces(wl.mod, "llvm", "llvm", args.candidates, seed=7)
        cases.append((wl, [dragon_dsl.from_trace(t, postproc="auto", postproc_set="llvm")
                           for t in traces]))

    def direct(wl, scripts) -> int:
        payload = WorkloadData.of(wl)
        device = create("llvm").ref
        correct = 0
        with tempfile.TemporaryDirectory() as tmp:
            for i, script in enumerate(scripts):
                built = jobs.build_job(BuildJob(payload, spec, f"{tmp}/{i}", script=script))
                if not isinstance(built, Built):
                    continue
                result = jobs.run_job(RunJob(payload, built.artifact, config, device))
                correct += result.ok
        return correct

    def isolated(ev, wl, scripts) -> int:
        return sum(o.ok for o in ev.evaluate(wl, scripts))

    rows = []
    warm = Evaluator("llvm", cache=False, config=config)
    try:
        for wl, scripts in cases:
            times: dict[str, list[float]] = {"direct": [], "isolated cold": [],
                                             "isolated warm": []}
            isolated(warm, wl, scripts[:1])  # start the warm workers outside the timing
            for round_ in range(args.rounds):
                print(f"{wl.spec}: round {round_ + 1} of {args.rounds} ...", flush=True)
                start = time.perf_counter()
                n_direct = direct(wl, scripts)
                times["direct"].append(time.perf_counter() - start)
                start = time.perf_counter()
                with Evaluator("llvm", cache=False, config=config) as cold:
                    n_cold = isolated(cold, wl, scripts)
                times["isolated cold"].append(time.perf_counter() - start)
                start = time.perf_counter()
                n_warm = isolated(warm, wl, scripts)
                times["isolated warm"].append(time.perf_counter() - start)
            assert n_direct == n_cold == n_warm, (n_direct, n_cold, n_warm)
            medians = {k: statistics.median(v) for k, v in times.items()}
            rows.append((wl.spec, len(scripts), n_direct, medians))
    finally:
        warm.close()

    print()
    print("| workload | scripts | correct | direct /min | isolated cold /min | "
          "isolated warm /min | cold/direct time | warm/direct time |")
    print("|---|---|---|---|---|---|---|---|")
    for spec_text, n, correct, m in rows:
        rate = {k: 60 * n / v for k, v in m.items()}
        print(f"| {spec_text} | {n} | {correct} | {rate['direct']:.0f} | "
              f"{rate['isolated cold']:.0f} | {rate['isolated warm']:.0f} | "
              f"{m['isolated cold'] / m['direct']:.2f}x | "
              f"{m['isolated warm'] / m['direct']:.2f}x |")


if __name__ == "__main__":
    main()
