"""Do a model's construction scripts tile?  Per family, beside MetaSchedule's own scripts.

Issue 26 asks of a built-in model that at least 80% of its construction scripts for dense,
matmul, batch_matmul and conv2d tile (``dragon_dsl.stats``: a split or sample_perfect_tile
cutting at least two loops).  This samples ``-k`` construction scripts per workload from each
``--model`` by schedule-aware decoding (every one applies), on workloads no kept training run
searched (the benchmark's held-out shapes and the kept corpus' validation and test splits of
those families), and prints per model and family: the share that tile, statements and rebinds
per script (medians), and the same for MetaSchedule's correct candidates of that family in the
kept corpus.  Nothing is built or timed: what the scripts do, not how fast they run (that is
``dragon eval``'s).

    python benchmarks/model_tiling.py --model builtin=training/models/dragon-tiny \\
        --model m=runs/sweep/m -k 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from training.datagen.tasks import family_of

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

FAMILIES = ("dense", "matmul", "batch_matmul", "conv2d")


def held_out(corpus: Path) -> list[str]:
    """The benchmark's held-out shapes of ``FAMILIES`` and the corpus' validation and test
    construction workloads of them."""
    from bench_vs_metaschedule import HELD_OUT
    from datasets import load_from_disk

    specs = [s for s in HELD_OUT if family_of(s) in FAMILIES]
    data = load_from_disk(str(corpus / "construction"))
    for split in ("validation", "test"):
        specs += sorted({w for w in data[split]["workload"] if family_of(w) in FAMILIES})
    return list(dict.fromkeys(specs))


def stats_row(scripts: list[str]) -> dict:
    """Tile share (of every script: one that does not parse does not tile), median statements
    and rebinds (of those that parse)."""
    from dragon_dsl.errors import DragonError
    from dragon_dsl.stats import script_stats

    rows = []
    for text in scripts:
        try:
            rows.append(script_stats(text))
        except DragonError:
            pass
    return {"scripts": len(scripts), "unparsed": len(scripts) - len(rows),
            "tile_share": sum(r.tiles for r in rows) / len(scripts) if scripts else None,
            "statements": statistics.median(r.statements for r in rows) if rows else 0,
            "rebinds": statistics.median(r.rebinds for r in rows) if rows else 0}


def metaschedule_scripts(corpus: Path) -> dict[str, list[str]]:
    """MetaSchedule's correct candidates in the kept corpus, by family."""
    from training.datagen.records import RecordStore

    out: dict[str, list[str]] = {f: [] for f in FAMILIES}
    for r in RecordStore(str(corpus)).all_records():
        family = family_of(r.workload)
        if family in out and r.status == "correct" and r.script:
            out[family].append(r.script)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", required=True, metavar="NAME=PATH")
    p.add_argument("-k", type=int, default=4, help="construction scripts per workload")
    p.add_argument("--corpus", default=str(ROOT / "corpus" / "llvm"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, action="append", default=None,
                   help="sampling temperature; repeat for a sweep (default: 1.0)")
    p.add_argument("--out", default=None, help="a JSON file for every figure and script")
    args = p.parse_args(argv)

    from codegen.targets import as_target
    from codegen.workloads import workload
    from training.cli.common import load_model, model_path
    from training.optimize.propose import propose
    from training.sampling.config import SamplingConfig

    corpus = Path(args.corpus)
    specs = held_out(corpus)
    target = as_target({"kind": "llvm", "num-cores": 2})
    temperatures = args.temperature or [1.0]
    report: dict = {"workloads": specs, "k": args.k, "models": {}}
    for item, temperature in [(m, t) for m in args.model for t in temperatures]:
        name, _, path = item.partition("=")
        if len(temperatures) > 1:
            name = f"{name} T={temperature:g}"
        model, tokenizer = load_model(model_path(path))
        by_family: dict[str, list[str]] = {f: [] for f in FAMILIES}
        started = time.perf_counter()
        for spec in specs:
            proposals = propose(model, tokenizer, workload(spec), target,
                                config=SamplingConfig(n=args.k, seed=args.seed,
                                                  temperature=temperature),
                                grammar="schedule")
            by_family[family_of(spec)] += [q.sample.text for q in proposals]
        report["models"][name] = {
            "path": path, "temperature": temperature, "seconds": time.perf_counter() - started,
            "families": {f: stats_row(s) for f, s in by_family.items()},
            "all": stats_row([s for v in by_family.values() for s in v]),
            "scripts": by_family}
    ms = metaschedule_scripts(corpus)
    report["metaschedule"] = {"families": {f: stats_row(s) for f, s in ms.items()},
                              "all": stats_row([s for v in ms.values() for s in v])}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    _print(report)
    return 0


def _cell(row: dict) -> str:
    if not row["scripts"]:
        return "-"
    return f"{row['tile_share']:.0%} ({row['statements']:.0f} st, {row['rebinds']:.0f} rb)"


def _print(report: dict) -> None:
    print(f"{len(report['workloads'])} held-out workloads, {report['k']} construction scripts "
          "each; cells: share that tile (median statements, median rebinds)")
    head = ["", *FAMILIES, "all"]
    rows = [[name, *(_cell(m["families"][f]) for f in FAMILIES), _cell(m["all"])]
            for name, m in report["models"].items()]
    ms = report["metaschedule"]
    rows.append(["MetaSchedule (corpus)", *(_cell(ms["families"][f]) for f in FAMILIES),
                 _cell(ms["all"])])
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    sys.exit(main())
