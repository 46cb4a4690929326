"""What does copying a row that went ahead save schedule-aware decoding?

The sampler applies every statement of every row to a live schedule held in a worker
(``training.sampling.live_worker``) and reads the next statement's grammar off it; rows of one
batch often write the same statements, and a row that goes where another just went copies
that row's schedule (``LiveFork``) instead of applying the statement again.  This samples
``--n`` scripts with the built-in model, copying on and off, alternating for ``--repeats``
rounds, on a construction prompt and a refinement prompt (of the script the kept corpus
carries over first), and prints the median seconds of each, their ratio, the statements
copied, and whether both wrote the same scripts (they must: a copy is the same schedule).

    python benchmarks/bench_row_copies.py [--n 32] [--repeats 3] [--workloads SPEC ...]
"""

from __future__ import annotations

import argparse
import statistics
import time

WORKLOADS = ["conv2d(n=1,h=28,w=28,ci=48,co=64,kh=3,kw=3,stride=1,pad=1)",
             "matmul(m=192,n=320,k=256)"]


def prompts(spec: str, records) -> list[tuple[str, object, str]]:
    """(kind, workload, prompt): the construction prompt, and the refinement prompt of the
    first script carried over from ``records`` when one fits."""
    from codegen.targets import as_target
    from codegen.workloads import workload
    from training.optimize.transfer import transferred
    from training.prompts.templates import construction_prompt, refinement_prompt

    wl, target = workload(spec), as_target("llvm")
    out = [("construction", wl, construction_prompt(wl, target))]
    carried = transferred(spec, records, target, workload=wl, limit=1)
    if carried:
        out.append(("refinement", wl, refinement_prompt(wl, target, carried[0].script,
                                                        carried[0].source_latency_s)))
    return out


def main(argv: list[str] | None = None) -> int:
    from codegen.targets import as_target
    from training.cli.common import load_model, model_path
    from training.datagen.records import RecordStore
    from training.models.builtin import KEPT_CORPUS
    from training.sampling import live_worker
    from training.sampling.config import SamplingConfig
    from training.sampling.schedule_aware import sample_schedule_aware

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=WORKLOADS)
    p.add_argument("--n", type=int, default=32, help="Scripts sampled per prompt.")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)

    model, tokenizer = load_model(model_path(None))
    records = list(RecordStore(KEPT_CORPUS).all_records())
    copies = live_worker.LiveWorker._copies
    target = as_target("llvm")
    cases = [case for spec in args.workloads for case in prompts(spec, records)]
    seconds: dict[tuple[str, str, bool], list[float]] = {}
    forks: dict[tuple[str, str], int] = {}
    same: dict[tuple[str, str], bool] = {}
    first: dict[tuple[str, str], list[str]] = {}   # the scripts of each prompt's first run
    for repeat in range(args.repeats):
        for on in ((True, False) if repeat % 2 == 0 else (False, True)):
            live_worker.LiveWorker._copies = copies if on else (lambda self, key, known: False)
            for kind, wl, prompt in cases:
                holder = live_worker.shared(target)
                before = holder.forks
                started = time.perf_counter()
                texts = [s.text for s in sample_schedule_aware(
                    model, tokenizer, prompt, wl, target,
                    SamplingConfig(n=args.n, seed=args.seed))]
                seconds.setdefault((wl.spec, kind, on), []).append(time.perf_counter() - started)
                if on:
                    forks[(wl.spec, kind)] = holder.forks - before
                key = (wl.spec, kind)
                same[key] = same.get(key, True) and first.setdefault(key, texts) == texts
    live_worker.LiveWorker._copies = copies
    print(f"\n{args.n} scripts sampled per prompt, medians of {args.repeats} (seconds)\n")
    print(f"{'workload':<60} {'prompt':<13} {'copying':>8} {'not':>8} {'ratio':>6} "
          f"{'copied':>7}  same scripts")
    for kind_key in dict.fromkeys((spec, kind) for spec, kind, _ in seconds):
        on = statistics.median(seconds[(*kind_key, True)])
        off = statistics.median(seconds[(*kind_key, False)])
        print(f"{kind_key[0]:<60} {kind_key[1]:<13} {on:>8.1f} {off:>8.1f} {off / on:>5.2f}x "
              f"{forks[kind_key]:>7}  {same[kind_key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
