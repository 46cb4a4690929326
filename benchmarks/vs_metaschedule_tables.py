"""Markdown tables from ``bench_vs_metaschedule.py`` reports (its ``--out`` JSON), as
``docs/vs-metaschedule/README.md`` shows them: per workload and budget, the medians of the
head-to-head re-timing and MetaSchedule's latency over dragon's; by budget, their geometric
mean, median and how often dragon was faster; each side's wall-clock seconds.

    python benchmarks/vs_metaschedule_tables.py TITLE REPORT[+REPORT...] [TITLE REPORT ...]

Reports joined with + make one table (runs of different workloads with the same settings).
"""

from __future__ import annotations

import json
import math
import statistics
import sys

SEPARATE = "16 (separate run)"


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def ratio(timed: dict) -> float | None:
    """MetaSchedule's median latency over dragon's; None unless both were correct."""
    if "dragon" not in timed or "metaschedule" not in timed:
        return None
    ours, theirs = timed["dragon"]["median_s"], timed["metaschedule"]["median_s"]
    return theirs / ours if ours and theirs else None


def verdict(timed: dict, ours: str = "dragon", theirs: str = "metaschedule") -> str | None:
    """"faster", "tie" or "slower" for ``ours`` against ``theirs``, by
    ``codegen.measured.compare``: a tie when the ratio is within the sum of the two re-timings'
    relative spreads (here their range over the median, wider than the Evaluator's
    interquartile range, so it calls more ties); None unless both were timed correct."""
    from types import SimpleNamespace

    from codegen.measured import compare

    def timing(name: str) -> SimpleNamespace:
        t = timed.get(name) or {"median_s": None, "spread_s": None}
        return SimpleNamespace(ok=t["median_s"] is not None, latency_s=t["median_s"],
                               spread_s=t["spread_s"])

    comparison = compare(timing(theirs), timing(ours))
    return comparison.verdict if comparison is not None else None


def _us(timed: dict, name: str) -> str:
    secs = timed[name]["median_s"]
    return "-" if secs is None else f"{secs * 1e6:.1f} us"


def _rows(entry: dict) -> list[tuple[str, dict]]:
    rows = [(str(c["budget"]), c["timed"]) for c in entry["curves"]]
    return rows + ([(SEPARATE, entry["separate"]["timed"])] if "separate" in entry else [])


def table(title: str, entries: list[dict]) -> list[str]:
    lines = [f"### {title}", "", "| workload | n | MetaSchedule | dragon | MS / dragon | "
             "unscheduled |", "|---|---|---|---|---|---|"]
    for e in entries:
        for n, t in _rows(e):
            r = ratio(t)
            lines.append(f"| {e['workload']} | {n} | {_us(t, 'metaschedule')} | "
                         f"{_us(t, 'dragon')} | {'-' if r is None else f'{r:.2f}x'} | "
                         f"{_us(t, 'unscheduled')} |")
    lines += ["", "| budget | geomean MS / dragon | median | dragon faster | "
              "faster / tie / slower, by the spread |", "|---|---|---|---|---|"]
    by_budget: dict[str, list[dict]] = {}
    for e in entries:
        for n, t in _rows(e):
            if ratio(t) is not None:
                by_budget.setdefault(n, []).append(t)
    for n, ts in by_budget.items():
        rs = [ratio(t) for t in ts]
        verdicts = [verdict(t) for t in ts]
        lines.append(f"| {n} | {geomean(rs):.3f}x | {statistics.median(rs):.2f}x | "
                     f"{sum(r > 1 for r in rs)} of {len(rs)} | "
                     + " / ".join(str(verdicts.count(v)) for v in ("faster", "tie", "slower"))
                     + " |")
    runs = sorted({n for e in entries for side in e["seconds"].values() for n in side}, key=int)
    label = " / ".join(runs)
    lines += ["", f"| workload | dragon seconds ({label}) | MetaSchedule seconds ({label}) | "
              f"dragon kernels timed out ({label}) |", "|---|---|---|---|"]

    def seconds(secs: dict, side: str) -> str:
        return " / ".join(f"{secs[side][n]:.0f}" if n in secs.get(side, {}) else "-"
                          for n in runs)

    for e in entries:
        top = max(e["seconds"]["dragon"], key=int)  # the run its curve was read from
        runs_of = {n: e.get("dragon") if n == top else
                   e.get("separate", {}).get("dragon") if n in e["seconds"]["dragon"] else None
                   for n in runs}
        lines.append(f"| {e['workload']} | {seconds(e['seconds'], 'dragon')} | "
                     f"{seconds(e['seconds'], 'metaschedule')} | "
                     + " / ".join(_timeouts(runs_of[n]) for n in runs) + " |")
    total = {side: {n: sum(e["seconds"][side][n] for e in entries if n in e["seconds"][side])
                    for n in runs} for side in ("dragon", "metaschedule")}
    lines.append(f"| all | {seconds(total, 'dragon')} | {seconds(total, 'metaschedule')} | |")
    return lines


def _timeouts(extra: dict | None) -> str:
    """How many of a dragon run's kernels timed out ("-" for a report that kept no statuses)."""
    if not extra or "statuses" not in extra:
        return "-"
    return str(extra["statuses"].count("timeout"))


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    for title, files in zip(argv[0::2], argv[1::2], strict=True):
        entries = []
        for path in files.split("+"):
            with open(path, encoding="utf-8") as f:
                entries += json.load(f)["workloads"]
        print("\n".join(table(title, entries)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
