"""MetaSchedule at equal budgets: the search that made the data, as a rival "model".

For each workload, MetaSchedule's evolutionary search (``codegen.search.rival_search``) runs
with ``trials = per_round = attempts``: every candidate it proposes is measured as a script by
the evaluation's ``Evaluator`` (its cost model learns from those outcomes), and its trials, in
the order measured, are its attempts.  ``dragon eval`` then measures them again in each task's
interleaved batch, beside the references and the models' attempts, so every figure treats the
search exactly like a model that was given as many measurements.  One search serves the
construction and the refinement tasks of a workload: MetaSchedule does not refine, it searches
the workload from scratch whatever the start script.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from codegen.search.rival import rival_search
from codegen.search.tune import cost_model_name

if TYPE_CHECKING:
    from codegen.measure import Evaluator
    from codegen.targets import TargetLike
    from codegen.workloads.workload import WorkloadLike

__all__ = ["NAME", "describe", "search_attempts"]

NAME = "metaschedule"


def describe(population: int) -> str:
    """What the name stands for, in the manifest and the summary (a rerun must match it)."""
    return (f"MetaSchedule evolutionary search, {cost_model_name()} cost model, population "
            f"{population}, trials = attempts")


def search_attempts(workload: WorkloadLike, spec: str, target: TargetLike, evaluator: Evaluator,
                    attempts: int,
                    seed: int, population: int) -> dict[str, Any]:
    """One search of ``workload`` with ``attempts`` trials measured by ``evaluator``
    (``codegen.search.rival_search``): its candidates in the order measured (``script`` None: a
    trace the language cannot write), with what the search's own measurement made of each."""
    found = rival_search(workload, target, evaluator, attempts, seed=seed,
                         population=population)
    samples = [{"script": a.script, "round": a.round, "search_status": a.outcome.status.value,
                "search_latency_s": a.outcome.latency_s if a.outcome.ok else None}
               for a in found.attempts]
    return {"workload": spec, "search": asdict(found.config), "cost_model": found.cost_model,
            "seconds": found.seconds, "samples": samples}
