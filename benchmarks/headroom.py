"""How much faster can these kernels get?  MetaSchedule's and dragon's best against a vendor
library on the same machine, in the same run.

``bench_vs_metaschedule.py`` asks whether dragon beats MetaSchedule; this asks how much room
there is to beat it by.  For each workload of a benchmark JSON (its ``--out``), the best kernel
of each side at one budget is rebuilt and timed by one ``Evaluator`` (checked against the
unscheduled kernel's output), and the same computation is timed in PyTorch (eager, its
oneDNN/MKL kernels, as many threads as the target has cores), the rounds interleaved.  Both
timings are warm (on llvm the Evaluator does not flush caches between repeats; neither does
the PyTorch loop).  Also printed: each kernel's GFLOP/s and the machine's own float32 peak as
PyTorch reaches it on a large matrix product, so a compute-bound kernel near that peak has no
room left, whatever the schedule.

    python benchmarks/headroom.py docs/vs-metaschedule/transfer4_model27_builtin489.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def torch_op(spec: str):
    """(a no-argument callable running ``spec``'s computation in PyTorch, its FLOPs)."""
    import torch

    from codegen.workloads.specs import parse_spec

    family, p = parse_spec(spec)
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, generator=g)

    if family == "matmul":
        a, b = rand(p["m"], p["k"]), rand(p["k"], p["n"])
        return (lambda: torch.mm(a, b)), 2 * p["m"] * p["n"] * p["k"]
    if family == "batch_matmul":
        a, b = rand(p["b"], p["m"], p["k"]), rand(p["b"], p["k"], p["n"])
        return (lambda: torch.bmm(a, b)), 2 * p["b"] * p["m"] * p["n"] * p["k"]
    if family == "dense":
        x, w = rand(p["m"], p["k"]), rand(p["n"], p["k"])
        bias = rand(p["n"]) if p.get("bias") else None
        act = {"none": lambda y: y, "relu": torch.relu, "gelu": torch.nn.functional.gelu}[
            p.get("act", "none")]
        return (lambda: act(torch.nn.functional.linear(x, w, bias))), 2 * p["m"] * p["n"] * p["k"]
    if family == "conv2d":
        if p.get("groups", 1) != 1 or p.get("dilation", 1) != 1:
            raise ValueError(f"{spec}: only plain convolutions are compared")
        x = rand(p["n"], p["ci"], p["h"], p["w"]).contiguous(memory_format=torch.channels_last)
        w = rand(p["co"], p["ci"], p["kh"], p["kw"])
        ho = (p["h"] + 2 * p["pad"] - p["kh"]) // p["stride"] + 1
        wo = (p["w"] + 2 * p["pad"] - p["kw"]) // p["stride"] + 1
        flops = 2 * p["n"] * ho * wo * p["co"] * p["ci"] * p["kh"] * p["kw"]
        return (lambda: torch.nn.functional.conv2d(x, w, stride=p["stride"],
                                                   padding=p["pad"])), flops
    if family == "softmax":
        x = rand(p["m"], p["n"])
        return (lambda: torch.softmax(x, dim=1)), 0
    if family == "layer_norm":
        x, gamma, beta = rand(p["m"], p["n"]), rand(p["n"]), rand(p["n"])
        return (lambda: torch.nn.functional.layer_norm(x, (p["n"],), gamma, beta, 1e-5)), 0
    if family == "reduce":
        x = rand(p["m"], p["n"])
        op = {"sum": lambda: x.sum(1), "mean": lambda: x.mean(1),
              "max": lambda: x.amax(1), "min": lambda: x.amin(1)}[p.get("op", "sum")]
        return op, 0
    raise ValueError(f"{spec}: no PyTorch equivalent written for the family {family!r}")


def time_torch(fn, min_s: float = 0.05, rounds: int = 5) -> list[float]:
    """Per-call seconds in ``rounds`` rounds of at least ``min_s`` each (warm, after one call)."""
    fn()
    out = []
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_s:
                break
        out.append(elapsed / n)
    return out


def peak_gflops() -> float:
    """GFLOP/s of PyTorch's 1024^3 float32 matrix product, at its current thread count."""
    import torch

    a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
    seconds = statistics.median(time_torch(lambda: torch.mm(a, b), min_s=0.3))
    return 2 * 1024 ** 3 / seconds / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bench_json", help="A bench_vs_metaschedule.py --out file.")
    p.add_argument("--budget", type=int, default=64, help="Whose best kernels (default 64).")
    p.add_argument("--rounds", type=int, default=5, help="Interleaved timing rounds.")
    p.add_argument("--out", default=None, help="Write the measurements as JSON here.")
    args = p.parse_args(argv)

    import torch

    from codegen.measure import Evaluator
    from codegen.workloads import workload

    data = json.loads(Path(args.bench_json).read_text())
    target = data.get("target") or {"kind": "llvm", "num-cores": 2}
    threads = int(target.get("num-cores", 2)) if isinstance(target, dict) else 2
    torch.set_num_threads(threads)
    peak = peak_gflops()
    rows = []
    with Evaluator(target, cache=False) as ev:
        for entry in data["workloads"]:
            spec = entry["workload"]
            curve = next((c for c in entry["curves"] if c["budget"] == args.budget), None)
            if curve is None:
                print(f"{spec}: no curve at budget {args.budget}, left out", file=sys.stderr)
                continue
            fn, flops = torch_op(spec)
            wl = workload(spec)
            scripts = [curve["scripts"]["metaschedule"], curve["scripts"]["dragon"]]
            times: dict[str, list[float]] = {"metaschedule": [], "dragon": [], "torch": []}
            for r in range(args.rounds):
                order = [0, 1] if r % 2 == 0 else [1, 0]
                outcomes = ev.evaluate(wl, [scripts[i] for i in order])
                for i, o in zip(order, outcomes, strict=True):
                    if o.ok:
                        times[("metaschedule", "dragon")[i]].append(o.latency_s)
                times["torch"].append(statistics.median(time_torch(fn, rounds=3)))
            med = {k: statistics.median(v) if v else None for k, v in times.items()}
            rows.append({"workload": spec, "flops": flops, "median_s": med,
                         "seconds": times})
            print(f"{spec}: {', '.join(f'{k} {v * 1e6:.1f} us' for k, v in med.items() if v)}",
                  file=sys.stderr)

    print(f"\nfloat32 peak here (PyTorch, 1024^3 matrix product, {threads} threads): "
          f"{peak:.1f} GFLOP/s\n")
    print("| workload | MetaSchedule | dragon | PyTorch | MS / PyTorch | MS GFLOP/s "
          "(% of peak) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        m = row["median_s"]
        ms, dr, pt = m["metaschedule"], m["dragon"], m["torch"]
        rate = (f"{row['flops'] / ms / 1e9:.1f} ({100 * row['flops'] / ms / 1e9 / peak:.0f}%)"
                if row["flops"] and ms else "-")
        print(f"| {row['workload']} | {_us(ms)} | {_us(dr)} | {_us(pt)} | "
              f"{ms / pt:.2f}x | {rate} |" if ms and pt else f"| {row['workload']} | - |")
    if args.out:
        Path(args.out).write_text(json.dumps({"peak_gflops": peak, "threads": threads,
                                              "budget": args.budget, "rows": rows}, indent=1))
    return 0


def _us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds else "-"


if __name__ == "__main__":
    raise SystemExit(main())
