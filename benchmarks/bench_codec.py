"""Size and speed of the Dragon codec on a fixed corpus of MetaSchedule traces.

Prints, per target (llvm; cuda with the plain rules; tensor cores), the median and p90 of
cl100k tokens of the script (``postproc auto`` and explicit) against TVM's Python and JSON
forms of the same trace, and the median time of parse, format, from_trace and to_trace per
script against TVM's own ``Trace.apply_json_to_schedule`` replay of that trace, all measured
in this one run.

    python benchmarks/bench_codec.py [--traces-per-workload 3] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CORPUS = {
    "llvm": [("llvm", "llvm", w) for w in (
        "matmul(m=128,n=128,k=128)", "conv2d(h=14,w=14,ci=16,co=16,layout_free=1)",
        "batch_matmul(b=2,m=32,n=32,k=32)", "softmax(m=32,n=64)", "layer_norm(m=32,n=64)",
        "conv2d(h=14,w=14,ci=16,co=16,layout=NCHW,stride=2)", "depthwise_conv2d()",
    )],
    "cuda": [("cuda", "cuda", w) for w in (
        "matmul(m=128,n=128,k=128)", "batch_matmul(b=2,m=32,n=32,k=32)", "softmax(m=32,n=64)",
        "layer_norm(m=32,n=64)", "gemv(m=128,k=128)", "pool2d(kind=max)",
        "conv2d(h=14,w=14,ci=16,co=16)",
    )],
    "tensor core": [
        ("cuda", "cuda-tensorcore", "matmul(m=128,n=128,k=128,dtype=float16)"),
        ("cuda", "mma", "matmul(m=128,n=128,k=128,dtype=float16)"),
        ("cuda", "cuda-tensorcore", "conv2d(h=14,w=14,ci=32,co=32,dtype=float16)"),
        ("cuda", "cuda-tensorcore", "batch_matmul(b=2,m=64,n=64,k=64,dtype=float16)"),
        ("cuda", "mma", "matmul(m=256,n=128,k=64,dtype=float16)"),
    ],
}


def _median(xs):
    return statistics.median(xs)


def _p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]


def _time(fn, repeat: int) -> float:
    best = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best.append(time.perf_counter() - start)
    return _median(best)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces-per-workload", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5, help="timing repetitions per script")
    args = ap.parse_args()

    import bpe_openai
    from tvm.s_tir.schedule import Schedule, Trace

    import dragon_dsl
    from codegen import sample_traces, workload
    from codegen.targets import postproc_set

    enc = bpe_openai.get_encoding("cl100k_base")

    def tokens(text: str) -> int:
        return len(enc.encode(text))

    rows = []
    for group, entries in CORPUS.items():
        sizes = {"auto": [], "explicit": [], "python": [], "json": []}
        ratios_auto, ratios_explicit = [], []
        times = {"parse": [], "format": [], "from_trace": [], "to_trace": [], "tvm replay": []}
        for target, rules, spec in entries:
            wl = workload(spec)
            print(f"[{group}] {spec} ({rules}) ...", file=sys.stderr, flush=True)
            for trace in sample_traces(wl.mod, target, rules, args.traces_per_workload, seed=7):
                auto = dragon_dsl.from_trace(trace, postproc="auto",
                                             postproc_set=postproc_set(rules))
                explicit = dragon_dsl.from_trace(trace)
                python_form = "\n".join(trace.as_python())
                raw = trace.as_json()
                json_form = json.dumps(raw, default=lambda o: getattr(o, "value", str(o)))
                n_py = tokens(python_form)
                sizes["auto"].append(tokens(auto))
                sizes["explicit"].append(tokens(explicit))
                sizes["python"].append(n_py)
                sizes["json"].append(tokens(json_form))
                ratios_auto.append(tokens(auto) / n_py)
                ratios_explicit.append(tokens(explicit) / n_py)
                program = dragon_dsl.parse(explicit)
                times["parse"].append(_time(lambda: dragon_dsl.parse(explicit), args.repeat))
                times["format"].append(_time(lambda: dragon_dsl.format(program), args.repeat))
                times["from_trace"].append(
                    _time(lambda: dragon_dsl.from_trace(trace), args.repeat))
                times["to_trace"].append(
                    _time(lambda: dragon_dsl.to_trace(explicit), args.repeat))
                times["tvm replay"].append(_time(
                    lambda: Trace.apply_json_to_schedule(raw, Schedule(wl.mod)), args.repeat))
        rows.append((group, sizes, ratios_auto, ratios_explicit, times))

    print("\nTokens (cl100k) per trace: median / p90, and script/Python-form ratio (median)")
    print("| target | n | script auto | script explicit | Python form | JSON form | "
          "auto/Python | explicit/Python |")
    print("|---|---|---|---|---|---|---|---|")
    for group, sizes, ra, rx, _ in rows:
        cells = [f"{_median(sizes[k]):.0f} / {_p90(sizes[k]):.0f}"
                 for k in ("auto", "explicit", "python", "json")]
        print(f"| {group} | {len(ra)} | " + " | ".join(cells) +
              f" | {_median(ra):.0%} | {_median(rx):.0%} |")

    print("\nTime per script (explicit form), median ms, and ratio to TVM's "
          "apply_json_to_schedule replay of the same trace")
    print("| target | parse | format | from_trace | to_trace | TVM replay |")
    print("|---|---|---|---|---|---|")
    for group, _, _, _, times in rows:
        base = _median(times["tvm replay"])
        cells = [f"{_median(times[k]) * 1e3:.2f} ({_median(times[k]) / base:.2f}x)"
                 for k in ("parse", "format", "from_trace", "to_trace")]
        print(f"| {group} | " + " | ".join(cells) + f" | {base * 1e3:.2f} (1.00x) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
