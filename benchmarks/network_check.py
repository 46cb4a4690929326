"""An independent check of ``bench_vs_metaschedule.py --network``: the kept databases built and
timed by TVM alone, in this process, with TVM's own timer (``time_evaluator``), not the
project's measurement workers.

    python benchmarks/network_check.py 'model(name=bert,preset=tiny)' \\
        runs/net.databases/bert-tiny-8

Builds the model with no database, with ``DIR/dragon`` and with ``DIR/metaschedule``
(``MetaScheduleApplyDatabase`` then ``tvm.compile``, as a user does), checks each build's
outputs against the no-database build's on the same random inputs, times each ``--repeat``
times (each repeat ``--number`` runs), the builds in turn, and prints the medians and
MetaSchedule's over dragon's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np


def build(mod, target, database: str | None):
    import tvm
    from tvm import relax

    if database is not None:
        with target:
            mod = relax.transform.MetaScheduleApplyDatabase(database)(mod)
    return relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("network", help="the model spec the databases were tuned for")
    p.add_argument("databases", help="a folder with dragon/ and metaschedule/")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--number", type=int, default=200)
    args = p.parse_args(argv)

    import tvm

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench_vs_metaschedule import TARGET

    from codegen.model_build import model_inputs
    from codegen.targets import as_target
    from training.cli.optimize_model import load_whole_model

    _, mod, _ = load_whole_model(args.network)
    target = as_target(TARGET)
    folder = Path(args.databases)
    builds = {"default": None, "dragon": str(folder / "dragon"),
              "metaschedule": str(folder / "metaschedule")}
    inputs = [tvm.runtime.tensor(x) for x in model_inputs(mod)]
    vms = {name: build(mod, target, db) for name, db in builds.items()}
    outputs = {}
    for name, vm in vms.items():
        out = vm["main"](*inputs)
        outputs[name] = out.numpy() if hasattr(out, "numpy") else out[0].numpy()
    for name in ("dragon", "metaschedule"):
        err = float(np.max(np.abs(outputs[name] - outputs["default"])))
        print(f"{name}: max abs difference from the default build {err:.2e}")
    times: dict[str, list[float]] = {name: [] for name in vms}
    for _ in range(args.repeat):
        for name, vm in vms.items():
            timer = vm.time_evaluator("main", tvm.cpu(), number=args.number, repeat=1)
            times[name].append(timer(*inputs).mean)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        q = statistics.quantiles(t, n=4)
        print(f"{name:13s} median {med[name] * 1e3:.4f} ms  IQR {(q[2] - q[0]) * 1e3:.4f} ms")
    print(f"MetaSchedule / dragon: {med['metaschedule'] / med['dragon']:.2f}x; "
          f"default / dragon: {med['default'] / med['dragon']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
