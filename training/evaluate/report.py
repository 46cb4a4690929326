"""The evaluation report: ``OUT/report.md`` with its tables and PNG plots beside it.

Plots (matplotlib, written without a display): correctness per model and kind
(``correctness.png``), the distribution of each model's best speedup per task over the
unscheduled kernel (``speedups.png``), the budget curves, best speedup against measurements
spent per task, one line per model (``budget_curves.png``), and for the first two models a
per-task scatter of their best speedups (``scatter.png``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.evaluate.metaschedule import NAME as METASCHEDULE
from training.evaluate.metrics import FAST_P, best_by_task, sign_test

__all__ = ["markdown", "write_report"]


def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def markdown(summary: dict[str, Any]) -> str:
    """The report's tables as Markdown."""
    lines = [f"# Evaluation on the {summary['split']} split",
             "",
             f"Target `{summary['target']}`; {summary['attempts']} attempts per task and model; "
             "every latency measured in this run, beside its references.",
             ""]
    if summary.get("min_unscheduled_us"):
        left = ", ".join(f"{n} {k}" for k, n in summary.get("left_out", {}).items())
        lines += [f"Only tasks whose unscheduled kernel took at least "
                  f"{summary['min_unscheduled_us']:g} us here are counted; left out: {left} "
                  "(their rows are in samples.jsonl).", ""]
    if METASCHEDULE in summary["by_model"]:
        lines += [f"`{METASCHEDULE}` is MetaSchedule's evolutionary search given as many "
                  "measurements per workload as a model has attempts per task, its trials "
                  "being its attempts in the order measured (MetaSchedule's best is the best "
                  "script of the longer search that made the data).", ""]
    for kind, count in summary["tasks"].items():
        lines += [f"## {kind.capitalize()} ({count} tasks)", "",
                  "| model | parses | applies | builds | correct | attempt speedup geomean "
                  "(median) | best speedup geomean (median) | "
                  + " | ".join(f"fast_{p:g}" for p in FAST_P) + " | best vs MetaSchedule's "
                  "best geomean (median) |",
                  "|---" * (8 + len(FAST_P)) + "|"]
        for model, kinds in summary["by_model"].items():
            f = kinds.get(kind)
            if f is None:
                continue
            lines.append(
                f"| {model} | {_pct(f['parses'])} | {_pct(f['applies'])} | {_pct(f['builds'])} "
                f"| {_pct(f['correct'])} | {_x(f['attempt_speedup_geomean'])} "
                f"({_x(f['attempt_speedup_median'])}) | {_x(f['best_speedup_geomean'])} "
                f"({_x(f['best_speedup_median'])}) | "
                + " | ".join(_pct(f["fast_p"][f"{p:g}"]) for p in FAST_P)
                + f" | {_x(f.get('best_over_metaschedule_geomean'))} "
                f"({_x(f.get('best_over_metaschedule_median'))}) |")
        if kind == "refinement":
            lines += ["", "Best over the start script (geomean, tasks improved): " + ", ".join(
                f"{m} {_x(k[kind].get('best_over_start_geomean'))} "
                f"({k[kind].get('faster_than_start', 0)})"
                for m, k in summary["by_model"].items() if kind in k)]
            if METASCHEDULE in summary["by_model"]:
                lines += ["", f"`{METASCHEDULE}` does not refine: its attempts at a "
                          "refinement task are its search of the workload from scratch, the "
                          "same as for construction."]
        lines += _curve_table(summary.get("curves", {}), kind)
        pairs = summary["head_to_head"].get(kind, {})
        if pairs:
            permuted = summary.get("permutation", {}).get(kind, {})
            lines += ["", "| head to head | wins | wins | ties | tasks | sign test p "
                      "| best of k, geomean ratio | permutation p |",
                      "|---|---|---|---|---|---|---|---|"]
            for pair, h in pairs.items():
                a, b = pair.split(" vs ")
                t = permuted.get(pair) or {}
                lines.append(f"| {pair} | {a}: {h['wins_a']} | {b}: {h['wins_b']} | "
                             f"{h['ties']} | {h['tasks']} | {sign_test(h):.3g} | "
                             + (f"{t['ratio']:.3f} (k={t['k']}) | {t['p']:.3g} |"
                                if t.get("ratio") else "- | - |"))
            if permuted:
                lines += ["", "Best of k, geomean ratio: the first model's best-of-k speedup "
                          "over the second's (at least 1x each; k the fewest attempts "
                          "either made), geometric mean over the tasks; permutation p: the "
                          "share of dealings of each task's pooled attempts between the two "
                          "models, at random, whose ratio is at least as far from 1 (the "
                          "chance that which attempts the sampler drew made the difference)."]
            noise = summary.get("head_to_head_noise", {}).get(kind, {})
            if noise:
                lines += ["", "Sampling alone: each model against itself, its attempts drawn "
                          "again with replacement (" + ", ".join(
                              f"{m} {d['decided']:.1f} of {d['tasks']} tasks decided"
                              for m, d in noise.items())
                          + f", the mean of {next(iter(noise.values()))['rounds']} draws).  "
                          "A head to head that decides not many more tasks than this, or whose "
                          "sign test p is large, says nothing about which model is better."]
        lines += _family_table(summary.get("by_family", {}).get(kind, {}), kind,
                               summary.get("head_to_head_by_family", {}).get(kind, {}))
        lines.append("")
    lines += _script_table(summary)
    lines += ["fast_p: the share of tasks whose best attempt is correct and at least p times "
              "faster than the unscheduled kernel (fast_0: solved at all).  Speedup geomeans "
              "are over correct attempts (attempt) or over tasks with a correct attempt "
              "(best); best vs MetaSchedule's best: over the best script of the search that "
              "made the data, re-measured here.", "",
              "![correctness](correctness.png)", "", "![speedups](speedups.png)", ""]
    if summary.get("curves"):
        lines += ["![budget curves](budget_curves.png)", ""]
    if len(summary["by_model"]) >= 2:
        lines += ["![scatter](scatter.png)", ""]
    return "\n".join(lines)


def _family_table(families: dict[str, dict[str, Any]], kind: str,
                  duels: dict[str, dict[str, dict[str, int]]] | None = None) -> list[str]:
    """Per family: tasks, then each model's correct share and best speedup (geomean), then
    each pair's head to head (wins, wins, ties) when ``duels`` has it."""
    if not families:
        return []
    models = list(dict.fromkeys(m for f in families.values() for m in f))
    pairs = list(dict.fromkeys(p for d in (duels or {}).values() for p in d))
    start = ", and over the start script" if kind == "refinement" else ""
    against = "; head to head: the first model's wins, the second's, ties" if pairs else ""
    lines = ["", f"Per family: correct per attempt, best speedup geomean over the unscheduled "
             f"kernel{start}{against}.", "",
             "| family | tasks | " + " | ".join([*models, *pairs]) + " |",
             "|---" * (2 + len(models) + len(pairs)) + "|"]
    for family, by_model in families.items():
        tasks = max(f["tasks"] for f in by_model.values())
        cells = []
        for model in models:
            f = by_model.get(model)
            if f is None:
                cells.append("-")
                continue
            cell = f"{_pct(f['correct'])}, {_x(f.get('best_speedup_geomean'))}"
            if kind == "refinement":
                cell += f", {_x(f.get('best_over_start_geomean'))}"
            cells.append(cell)
        for pair in pairs:
            h = (duels or {}).get(family, {}).get(pair)
            cells.append(f"{h['wins_a']} / {h['wins_b']} / {h['ties']}" if h else "-")
        lines.append(f"| {family} | {tasks} | " + " | ".join(cells) + " |")
    return lines


def _script_table(summary: dict[str, Any]) -> list[str]:
    """What each model's parsed scripts do (``metrics.script_figures``): tiling, per family
    too, length and rebinds, beside MetaSchedule's own."""
    found = [(model, kind, kinds[kind]["scripts"]) for model, kinds in summary["by_model"].items()
             for kind in kinds if "scripts" in kinds[kind]]
    if not found:
        return []
    families = sorted({f for _, _, s in found for f in s["tile_by_family"]})
    lines = ["## What the scripts do", "",
             "Over the attempts that parse (`dragon_dsl.stats`): the share that tile (cut at "
             "least two loops into parts other than 1), per family too; statements per script "
             "(median); blocks fetched again with nothing changed since (rebinds, mean).", "",
             "| model | kind | scripts | tile | statements | rebinds | "
             + " | ".join(f"tile: {f}" for f in families) + " |",
             "|---" * (6 + len(families)) + "|"]
    for model, kind, s in found:
        lines.append(f"| {model} | {kind} | {s['scripts']} | {_pct(s['tile'])} | "
                     f"{s['statements_median']:g} | {s['rebinds_mean']:.2f} | "
                     + " | ".join(_pct(s["tile_by_family"].get(f)) for f in families) + " |")
    return lines + [""]


def _curve_table(curves: dict[str, Any], kind: str) -> list[str]:
    """Best speedup against measurements spent per task, one row per model."""
    rows = {m: k[kind] for m, k in curves.items() if kind in k}
    if not rows:
        return []
    budget = max(len(c["measurements"]) for c in rows.values())
    lines = ["", "Budget: geomean over tasks of the best speedup over the unscheduled kernel "
             "among the first n attempts (n measurements per task; a task without a faster "
             "correct kernel counts 1.0x, the unscheduled kernel kept), and fast_1.", "",
             "| model | " + " | ".join(f"n={n}" for n in range(1, budget + 1)) + " |",
             "|---" * (budget + 1) + "|"]
    for model, c in rows.items():
        cells = [f"{_x(g)} ({_pct(f)})" for g, f in zip(c["geomean"], c["fast_1"], strict=True)]
        lines.append(f"| {model} | " + " | ".join(cells + ["-"] * (budget - len(cells))) + " |")
    return lines


def _speedup_axis(ax: Any, which: str) -> None:
    """A log axis labelled 0.5x, 1x, 2x rather than in powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_locator(LogLocator(base=2))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def write_report(out: Path, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """``report.md`` and the plots, in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(summary["by_model"])
    kinds = list(summary["tasks"])
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.5), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        stages = ("parses", "applies", "builds", "correct")
        width = 0.8 / max(1, len(models))
        for i, model in enumerate(models):
            f = summary["by_model"][model].get(kind)
            if f:
                ax.bar([j + i * width for j in range(len(stages))], [f[s] for s in stages],
                       width, label=model)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(stages))], stages)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{kind}: share of attempts")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "correctness.png", dpi=110)
    plt.close(fig)

    best = best_by_task(r for r in rows if r["status"] != "skipped")
    ref = {r["task"]: r.get("unscheduled_s") for r in rows}
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.5), squeeze=False)
    for ax, kind in zip(axes[0], kinds, strict=True):
        data = []
        for model in models:
            data.append([ref[t] / r["latency_s"] for (m, t), r in best.items()
                         if m == model and r and r["kind"] == kind and ref.get(t)])
        if any(data):
            ax.boxplot(data, tick_labels=models)
            for i, values in enumerate(data, 1):
                ax.scatter([i] * len(values), values, s=10, alpha=0.6)
        _speedup_axis(ax, "y")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(f"{kind}: best speedup per task")
        ax.set_ylabel("over the unscheduled kernel")
    fig.tight_layout()
    fig.savefig(out / "speedups.png", dpi=110)
    plt.close(fig)

    curves = summary.get("curves", {})
    if curves:
        fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.5), squeeze=False)
        for ax, kind in zip(axes[0], kinds, strict=True):
            for model, marker in zip(models, "osd^v<>p*h" * len(models), strict=False):
                c = curves.get(model, {}).get(kind)
                if c:
                    ax.plot(c["measurements"], c["geomean"], marker=marker, label=model,
                            alpha=0.8)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xlabel("measurements per task")
            ax.set_ylabel("best speedup, geomean over tasks")
            ax.set_title(f"{kind}: best speedup against budget")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "budget_curves.png", dpi=110)
        plt.close(fig)

    if len(models) >= 2:
        a, b = models[:2]
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        for kind, marker in zip(kinds, "os", strict=False):
            xs, ys = [], []
            for (m, t), r in best.items():
                other = best.get((b, t))
                if m == a and r and other and r["kind"] == kind and ref.get(t):
                    xs.append(ref[t] / other["latency_s"])
                    ys.append(ref[t] / r["latency_s"])
            ax.scatter(xs, ys, marker=marker, label=kind, alpha=0.7)
        _speedup_axis(ax, "x")
        _speedup_axis(ax, "y")
        low, high = ax.get_xlim()
        ax.plot([low, high], [low, high], color="grey", lw=0.8)
        ax.set_xlabel(f"{b}: best speedup")
        ax.set_ylabel(f"{a}: best speedup")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "scatter.png", dpi=110)
        plt.close(fig)
    (out / "report.md").write_text(markdown(summary), encoding="utf-8")
