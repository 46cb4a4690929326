"""Mutants of measured scripts: MetaSchedule's own mutators applied to the fastest kernels so
far, for a search that exploits what it has measured instead of sampling anew.

MetaSchedule's evolutionary search starts each round from a population of 512 of which at most
a fifth comes from its database: with a handful of measured seeds, its picks are mostly fresh
random samples ranked by the cost model.  ``mutants`` instead varies the seeds themselves, as
one generation of that search restricted to its best: each mutant is one of the rule set's
mutators (``MutateTileSize``, ``MutateComputeLocation``, ``MutateUnroll``, ``MutateParallel``,
drawn by MetaSchedule's own probabilities) applied to one parent's trace, replayed on the
workload with the rule set's postprocessors (a mutant they refuse is dropped, as MetaSchedule
drops it) and written back as a canonical script.  A parent whose instructions are not those of
a design space of the rule set (a model's script MetaSchedule would not write) is not mutated:
MetaSchedule's mutators assume the traces its rules write (``tune._unsearchable``).

>>> from codegen.workloads import workload
>>> mutants(workload("matmul(m=64,n=64,k=64)"), "llvm", [best_script], 32)  # doctest: +SKIP
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

__all__ = ["mutants"]

# Mutations drawn per wanted mutant before giving up (a mutator may find nothing to change, a
# postprocessor may refuse what it made, a mutant may repeat one made before).
_TRIES_PER_MUTANT = 8


def mutants(workload: Any, target: Any, parents: Sequence[str], count: int, *, seed: int = 0,
            rules: str | None = None, exclude: Sequence[str] = ()) -> list[str]:
    """Up to ``count`` distinct canonical scripts, each one mutation of one of ``parents``
    (taken in turn, the first first), none of them a parent or in ``exclude`` (canonical
    scripts, as ``dragon_dsl.format`` writes them); reproducible from ``seed``.  Parents that
    do not replay on ``workload`` or are not of a design space's shape are skipped; with none
    left, the list is empty."""
    from tvm.s_tir.meta_schedule import _ffi_api

    import dragon_dsl

    from ..targets import as_module, as_target, default_rules, import_tensor_intrinsics
    from .space import search_space
    from .tune import _encode, _shape, _unsearchable, tune_context

    if count < 1 or not parents:
        return []
    import_tensor_intrinsics()
    tgt = as_target(target)
    rules = rules or default_rules(tgt)
    mod = as_module(workload)
    space = search_space(mod, tgt, rules)
    shapes = space.derived("shapes", lambda sp: frozenset(_shape(s.trace) for s in sp.spaces))
    rng = random.Random(seed)
    ctx = tune_context(mod, tgt, rules, seed=rng.randrange(1, 2**31 - 1))
    traces, seen = [], set(exclude)
    for script in parents:
        try:
            trace = dragon_dsl.to_schedule(script, workload=workload, target=tgt).trace
        except Exception:  # noqa: BLE001  the language or TVM refuses it: skipped
            continue
        seen.add(dragon_dsl.format(script))
        if _unsearchable(ctx, trace, shapes) is None:
            traces.append(trace)
    if not traces:
        return []
    mutators = list(ctx.space_generator.mutator_probs.items())
    weights = [float(p) for _, p in mutators]
    out: list[str] = []
    for attempt in range(count * _TRIES_PER_MUTANT):
        if len(out) >= count:
            break
        trace = traces[attempt % len(traces)]
        mutator = rng.choices(mutators, weights)[0][0]
        mutated = _ffi_api.MutatorApply(mutator, trace, rng.randrange(1, 2**31 - 1))
        if mutated is None:
            continue
        replayed = space.replay(mutated, rng.randrange(1, 2**31 - 1))
        script = _encode(replayed, workload, tgt, space.postproc_set) \
            if replayed is not None else None
        if script is not None and script not in seen:
            seen.add(script)
            out.append(script)
    return out
