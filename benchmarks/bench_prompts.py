"""Tokens of the compact kernel description against TVMScript, one default instance per family.

Prints a markdown table of cl100k tokens of ``training.prompts.kernel_text.describe`` and of the
module's ``mod.script()`` for each operator family of ``codegen.workloads.FAMILIES`` (the
``tvm`` family, TVM's own test workloads, is left out), and the median ratio; also the
tokens of a whole construction prompt for each.

    python benchmarks/bench_prompts.py [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    args = ap.parse_args(argv)

    from bpe_openai import get_encoding

    from codegen.workloads.families import FAMILIES
    from training.prompts.kernel_text import token_counts
    from training.prompts.templates import construction_prompt

    specs = [name for name in FAMILIES if name != "tvm"]
    rows = token_counts(specs)
    encoding = get_encoding("cl100k_base")
    for row in rows:
        row["prompt"] = len(encoding.encode(construction_prompt(row["spec"], "llvm")))
    median = statistics.median(row["ratio"] for row in rows)
    if args.json:
        print(json.dumps({"rows": rows, "median_ratio": median}, indent=1))
        return 0
    print("Tokens (cl100k) of the kernel: compact description vs TVMScript (mod.script())")
    print("| workload | compact | TVMScript | ratio | construction prompt |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['spec']} | {row['compact']} | {row['tvmscript']} | "
              f"{row['ratio']:.2f} | {row['prompt']} |")
    print(f"\nmedian ratio: {median:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
