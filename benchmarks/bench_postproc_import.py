"""What a new process pays for its first ``postproc auto llvm``: with TVM's tensor intrinsics
imported first (as a ``TuneContext`` imports them, ``postprocessors(intrinsics=True)``) and
without (``intrinsics=False``, what ``dragon_dsl`` now does for a schedule that names no
intrinsic: ``tvm_support.uses_tensor_intrinsics``).  Every schedule holder of the
schedule-aware sampler and every builder of the evaluator is such a process.

Each run is a new Python process that imports the stack, makes the workload, applies a
MetaSchedule script of it up to ``postproc auto`` (untimed), then times the postprocessing
alone; the two ways alternate, ``--repeats`` times.  Both must give the same module (checked).
Prints the median seconds of each and their ratio.

    python benchmarks/bench_postproc_import.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = "dense(m=128,n=3072,k=768,bias=1,act=gelu)"

CHILD = textwrap.dedent("""
    import json, sys, time
    import tvm_ffi
    import dragon_dsl
    from codegen import workload
    from dragon_dsl.tvm_support import postprocessors, schedule_of
    spec, text, intrinsics = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    wl = workload(spec)
    trace = dragon_dsl.to_trace(text.replace("postproc auto llvm", ""), workload=wl)
    sch = schedule_of(wl)
    trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    began = time.perf_counter()
    for postproc in postprocessors(wl.mod, "llvm", "llvm", intrinsics=intrinsics):
        assert postproc.apply(sch)
    seconds = time.perf_counter() - began
    print(json.dumps({"seconds": seconds, "hash": tvm_ffi.structural_hash(sch.mod)}))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import dragon_dsl
    from codegen import sample_traces, workload

    wl = workload(SPEC)
    [trace] = sample_traces(wl.mod, "llvm", "llvm", 1, seed=0)
    text = dragon_dsl.from_trace(trace, postproc="auto", postproc_set="llvm")
    seconds: dict[str, list[float]] = {"TuneContext (imports)": [], "without the import": []}
    hashes = set()
    for _ in range(args.repeats):
        for name, flag in (("TuneContext (imports)", "1"), ("without the import", "0")):
            done = subprocess.run([sys.executable, "-c", CHILD, SPEC, text, flag], cwd=ROOT,
                                  capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            seconds[name].append(result["seconds"])
            hashes.add(result["hash"])
    if len(hashes) != 1:
        raise SystemExit(f"the two ways gave different modules: {sorted(hashes)}")
    base = statistics.median(seconds["TuneContext (imports)"])
    print(f"first `postproc auto llvm` in a new process, {SPEC}, {args.repeats} processes each")
    print(f"{'':24}  {'median s':>9}  {'runs':>22}  {'speedup':>8}")
    for name, values in seconds.items():
        median = statistics.median(values)
        runs = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:24}  {median:9.3f}  {runs:>22}  {base / median:7.1f}x")


if __name__ == "__main__":
    main()
