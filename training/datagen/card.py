"""The dataset card, ``OUT/README.md``, and its plots in ``OUT/plots/``.

A Hugging Face dataset card: YAML front matter (the ``construction``, ``refinement`` and
``records`` configs and their files, task categories), then what a user of the data needs to
trust it: how many examples of each family, target and split; how long prompts and completions
are in tokens; how much faster refinement completions are than their starts; the selection
rules; the records by status; and every script or workload that was skipped, with its reason.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dragon_dsl.files import atomic_file, write_atomic
from dragon_dsl.stats import MIN_TILED_LOOPS, script_stats
from training.datagen.dataset import RECORDS_FILE, TASKS
from training.datagen.examples import SPLITS, THIRDS, Examples
from training.models.tokenizer import openai_tokenizer
from training.prompts.templates import PROMPT_VERSION

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["PLOTS", "quantiles", "token_lengths", "write_card"]

PLOTS = {"token_lengths": "Token lengths of prompts and completions",
         "examples_per_family": "Examples per family and split",
         "refinement_speedup": "Refinement speedups (start latency / completion latency)",
         "best_vs_start": "Latency of the completion against the latency of the start"}


def quantiles(values: Sequence[float]) -> dict[str, float]:
    """min, median, p10, p90 and max (nearest rank); empty for no values.

    >>> quantiles([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])["p90"]
    9
    """
    if not values:
        return {}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"min": ordered[0], "p10": rank(0.1), "median": statistics.median(ordered),
            "p90": rank(0.9), "max": ordered[-1]}


def token_lengths(examples: Examples,
                  tokenizer: PreTrainedTokenizerBase) -> dict[str, dict[str, list[int]]]:
    """Token counts of every example's prompt and completion, by task (each distinct text
    tokenized once, in batches)."""
    rows = {task: [r for split in SPLITS for r in getattr(examples, task)[split]]
            for task in TASKS}
    texts = sorted({r[part] for task in TASKS for r in rows[task]
                    for part in ("prompt", "completion")})
    counts: dict[str, int] = {}
    for start in range(0, len(texts), 512):
        batch = texts[start:start + 512]
        ids = tokenizer(batch, add_special_tokens=False)["input_ids"]
        counts.update(zip(batch, map(len, ids), strict=True))
    return {task: {part: [counts[r[part]] for r in rows[task]]
                   for part in ("prompt", "completion")} for task in TASKS}


def write_card(out: str, examples: Examples, *, tokenizer: PreTrainedTokenizerBase | None = None,
               title: str = "Little Dragon: MetaSchedule schedules as Dragon scripts",
               generation: dict[str, Any] | None = None) -> str:
    """Write ``OUT/README.md`` and ``OUT/plots/*.png``; the card's path.

    ``tokenizer`` counts tokens (default: ``training.models.tokenizer.openai_tokenizer()``,
    cl100k_base, built offline); ``generation`` adds rows to the card's table of how the
    data was made (preset, target, trials, ...).

    >>> import tempfile                                                 # doctest: +SKIP
    >>> from training.datagen.examples import build_examples
    >>> write_card(tempfile.mkdtemp(), build_examples([]))              # doctest: +SKIP
    '/tmp/.../README.md'
    """
    if tokenizer is None:
        tokenizer, name = openai_tokenizer("cl100k_base"), "cl100k_base"
    else:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    lengths = token_lengths(examples, tokenizer)
    plots = _plots(os.path.join(out, "plots"), examples, lengths)
    text = _front_matter(examples) + _body(examples, lengths, plots, title, generation or {}, name)
    path = os.path.join(out, "README.md")
    write_atomic(path, text)
    return path


# ---- text --------------------------------------------------------------------------------

def _size_category(n: int) -> str:
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M")):
        if n < bound:
            return name
    return "1M<n<10M"


def _front_matter(examples: Examples) -> str:
    total = sum(len(getattr(examples, t)[s]) for t in TASKS for s in SPLITS)
    lines = ["---", "configs:"]
    for task in TASKS:
        lines += [f"- config_name: {task}", "  data_files:"]
        for split in SPLITS:
            lines += [f"  - split: {split}", f"    path: {task}/{split}/*.arrow"]
    lines += ["- config_name: records", "  data_files:", "  - split: train",
              f"    path: {RECORDS_FILE}",
              "task_categories:", "- text-generation",
              "tags:", "- code", "- compilers", "- tvm", "- metaschedule",
              "size_categories:", f"- {_size_category(total)}",
              "pretty_name: Little Dragon schedules", "---", ""]
    return "\n".join(lines) + "\n"


def _table(header: Sequence[str], rows: list[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out + [""]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def _count_table(examples: Examples, column: str) -> list[str]:
    counts = {task: {split: Counter(r[column] for r in getattr(examples, task)[split])
                     for split in SPLITS} for task in TASKS}
    keys = sorted({k for task in TASKS for c in counts[task].values() for k in c})
    header = [column] + [f"{task} {split}" for task in TASKS for split in SPLITS]
    rows = [[k] + [counts[t][s][k] for t in TASKS for s in SPLITS] for k in keys]
    return _table(header, rows)


def _body(examples: Examples, lengths: dict[str, dict[str, list[int]]],
          plots: dict[str, str], title: str, generation: dict[str, Any],
          tokenizer_name: str) -> str:
    config, stats = examples.config, examples.stats
    n = {task: {split: len(getattr(examples, task)[split]) for split in SPLITS}
         for task in TASKS}
    workloads = {split: len({r["workload_id"] for t in TASKS
                             for r in getattr(examples, t)[split]}) for split in SPLITS}
    out = [f"# {title}", "",
           "Tensor-program schedules found by TVM MetaSchedule's evolutionary search, each "
           "measured (built, verified against the unscheduled kernel, timed) and written as a "
           "Dragon script.  Two tasks: *construction* (write a script for an unscheduled "
           "kernel) and *refinement* (improve a script with a known latency).  Load with "
           "`datasets.load_from_disk(\"construction\")` (or `refinement`); every record, "
           f"failures included, is in `{RECORDS_FILE}`.", "",
           f"Prompt format version {PROMPT_VERSION} (`training.prompts.templates`).  "
           f"{stats.records} records; {stats.workloads} workload-target pairs with a correct "
           f"record.", "", "## Splits", "",
           "By workload identity (a hash of `workload_id`), so no kernel is in two splits; "
           "held-out families and real-model workloads are all in test (column `holdout`).", ""]
    out += _table(["split", "workloads", "construction", "refinement"],
                  [[s, workloads[s], n["construction"][s], n["refinement"][s]] for s in SPLITS])
    if generation:
        out += ["## Generation", ""] + _table(["setting", "value"], list(generation.items()))
    out += ["## Selection rules", ""]
    out += _table(["rule", "value"], [
        ["construction: scripts per workload (k)", config.k],
        ["construction: within this factor of the best latency (tolerance)", config.tolerance],
        ["refinement: minimum speedup of completion over start (min_gain)", config.min_gain],
        ["refinement: starts", "one per third (" + ", ".join(THIRDS) + ") of each search"],
        ["refinement: completion", "the workload's best script"],
        ["split fractions train/validation/test",
         f"{config.train:g}/{config.validation_fraction:g}/{config.test_fraction:g}"],
        ["held-out families", ", ".join(config.holdout_families) or "none"],
        ["verified records only", config.verified_only], ["seed", config.example_seed]])
    out += ["## Records by status", ""]
    out += _table(["status", "records"], sorted(stats.by_status.items()))
    out += ["## Skipped", ""]
    if stats.skipped:
        out += ["Scripts (or, for a workload, its records) left out after the re-check that "
                "every script written is canonical and applies to its workload:", ""]
        out += _table(["reason", "count"], sorted(stats.skipped.items()))
    else:
        out += ["Nothing: every script written re-applied to its workload.", ""]
    out += [f"Search thirds without a start at least {config.min_gain:g}x slower than the "
            f"best: {stats.missing_thirds}.", ""]
    out += ["## Examples per family", ""] + _count_table(examples, "family")
    out += ["## Examples per target", ""] + _count_table(examples, "target")
    out += _script_tables(examples)
    out += ["## Token lengths", "", f"Tokenizer: `{tokenizer_name}`.", ""]
    rows = [[task, part, *(quantiles(values).get(q, "-") for q in ("min", "median", "p90",
                                                                   "max"))]
            for task in TASKS for part, values in lengths[task].items()]
    out += _table(["task", "text", "min", "median", "p90", "max"], rows)
    out += ["## Refinement gains", ""]
    speedups = [r["speedup"] for s in SPLITS for r in examples.refinement[s]]
    if speedups:
        q = quantiles(speedups)
        geo = math.exp(statistics.fmean(math.log(x) for x in speedups))
        out += _table(["pairs", "median", "geometric mean", "p10", "p90", "max"],
                      [[len(speedups), q["median"], geo, q["p10"], q["p90"], q["max"]]])
    else:
        out += ["No refinement pairs.", ""]
    spread = quantiles(stats.spread_ratio)
    if spread:
        out += [f"Measurement spread of correct records (interquartile range of the repeats "
                f"over the median): median {spread['median']:.2%}, p90 {spread['p90']:.2%}.",
                ""]
    out += ["## Plots", ""]
    out += [f"![{PLOTS[name]}]({path})" for name, path in plots.items()] + [""]
    out += ["## Columns", "",
            "`prompt` and `completion` are the training text (`completion` ends with "
            "`<end>`); `script` is the completion's script, `latency_s` its latency (median, "
            "seconds) and `spread_s` the interquartile range of its repeats; refinement rows "
            "add `start_script`, `start_latency_s`, `start_third` and `speedup`.  `holdout` "
            "says why a workload is in test (`family`, `model`) or is empty.", ""]
    return "\n".join(out)


def _script_tables(examples: Examples) -> list[str]:
    """What the construction completions do, per family (``dragon_dsl.stats``), and where
    their latencies were measured."""
    rows = [r for split in SPLITS for r in examples.construction[split]]
    stats = {id(r): script_stats(r["script"]) for r in rows}
    out = ["## What the scripts do", "",
           f"Construction completions per family: how many tile (cut at least "
           f"{MIN_TILED_LOOPS} loops into parts other than 1: `dragon_dsl.stats`), their "
           "statements (median) and blocks fetched again with nothing changed since "
           "(rebinds, mean).", ""]
    table = []
    for family in sorted({r["family"] for r in rows}):
        mine = [stats[id(r)] for r in rows if r["family"] == family]
        table.append([family, len(mine), f"{sum(s.tiles for s in mine) / len(mine):.0%}",
                      statistics.median(s.statements for s in mine),
                      statistics.fmean(s.rebinds for s in mine)])
    out += _table(["family", "scripts", "tile", "statements", "rebinds"], table) if table \
        else ["No construction examples.", ""]
    devices = Counter(r["device"] for r in rows)
    out += ["## Where latencies were measured", ""]
    out += _table(["device", "scripts"], sorted(devices.items())) if devices \
        else ["Nowhere: no construction examples.", ""]
    return out


# ---- plots -------------------------------------------------------------------------------

def _plots(folder: str, examples: Examples,
           lengths: dict[str, dict[str, list[int]]]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    paths = {}

    def save(name: str, fig: Any) -> None:
        try:
            with atomic_file(os.path.join(folder, f"{name}.png"), "wb") as f:
                fig.savefig(f, format="png", dpi=100, bbox_inches="tight")
        finally:
            plt.close(fig)
        paths[name] = f"plots/{name}.png"

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for row, task in enumerate(TASKS):
        for col, part in enumerate(("prompt", "completion")):
            ax = axes[row][col]
            values = lengths[task][part]
            if values:
                ax.hist(values, bins=min(40, max(5, len(set(values)))))
            ax.set_title(f"{task}: {part}")
            ax.set_xlabel("tokens")
            ax.set_ylabel("examples")
    fig.suptitle(PLOTS["token_lengths"])
    save("token_lengths", fig)

    families = sorted({r["family"] for t in TASKS for s in SPLITS
                       for r in getattr(examples, t)[s]})
    fig, axes = plt.subplots(1, 2, figsize=(12, max(3, 0.3 * len(families) + 1.5)))
    for ax, task in zip(axes, TASKS, strict=True):
        left = [0] * len(families)
        for split in SPLITS:
            counts = Counter(r["family"] for r in getattr(examples, task)[split])
            widths = [counts[f] for f in families]
            ax.barh(families, widths, left=left, label=split)
            left = [a + b for a, b in zip(left, widths, strict=True)]
        ax.set_title(task)
        ax.set_xlabel("examples")
        ax.legend()
    fig.suptitle(PLOTS["examples_per_family"])
    save("examples_per_family", fig)

    rows = [r for s in SPLITS for r in examples.refinement[s]]
    fig, ax = plt.subplots(figsize=(6, 4))
    if rows:
        speedups = [r["speedup"] for r in rows]
        bins = [10 ** (math.log10(min(speedups)) + i * (math.log10(max(speedups)) -
                                                        math.log10(min(speedups)) + 1e-9) / 30)
                for i in range(31)]
        ax.hist(speedups, bins=bins)
        ax.set_xscale("log")
    ax.axvline(examples.config.min_gain, color="k", linestyle="--", label="min_gain")
    ax.set_xlabel("speedup")
    ax.set_ylabel("pairs")
    ax.legend()
    ax.set_title(PLOTS["refinement_speedup"])
    save("refinement_speedup", fig)

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for third in THIRDS:
        pick = [r for r in rows if r["start_third"] == third]
        ax.scatter([r["start_latency_s"] * 1e6 for r in pick],
                   [r["latency_s"] * 1e6 for r in pick], s=12, label=f"start: {third}")
    if rows:
        low = min(r["latency_s"] for r in rows) * 1e6 / 1.5
        high = max(r["start_latency_s"] for r in rows) * 1e6 * 1.5
        ax.plot([low, high], [low, high], "k-", linewidth=0.8, label="no gain")
        ax.plot([low, high], [low / examples.config.min_gain, high / examples.config.min_gain],
                "k--", linewidth=0.8, label="min_gain")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend()
    ax.set_xlabel("start latency (us)")
    ax.set_ylabel("completion (best) latency (us)")
    ax.set_title(PLOTS["best_vs_start"])
    save("best_vs_start", fig)
    return paths
