"""Scripts carried over from the kept corpus: the fastest scripts MetaSchedule's search found
for the nearest workloads of the same family, fitted to a new workload's loop extents.

A tuned schedule transfers between shapes of one operator better than a random one does (the
premise of TLM's and TenSet's pre-trained search); what does not transfer is a tile's factors,
whose product must be the loop's extent.  ``fit_script`` replays a script on the new workload
statement by statement (``dragon_dsl.live.LiveSchedule``) and, before each ``tile`` whose
factors no longer multiply to its loop's extent, refits them (``fit_factors``: the inner
factors kept as near as the new extent's divisors allow, in log scale, the outermost taking
the rest); any other statement the new workload refuses drops the script.

``neighbours`` ranks a corpus's workloads of the same family by distance in log shape (the
spec's sizes; a parameter of another kind, dtype, layout, groups, counts as farther than any
size); a model's task has no family, and ``structural_neighbours`` ranks the corpus workloads
whose scripts fetch only blocks it has (a BERT's ``matmul`` and ``T_add``, from another model's
task or preset) by the blocks they leave out and how far their tiles' loops are from its own.
``transferred`` gives the distinct fitted scripts of the nearest ones whose scripts fit, the
fastest first.

>>> fit_factors([1, 4, 8, 2], 96)
[2, 3, 8, 2]
>>> fit_factors([8, 4], 7)
[1, 7]
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Transferred", "fit_factors", "fit_script", "neighbours", "shape_distance",
           "structural_neighbours", "transferred"]


@dataclass(frozen=True)
class Transferred:
    """One script carried over: fitted to the new workload, with where it came from."""

    script: str
    source: str            # the corpus workload it was tuned for
    source_latency_s: float
    distance: float        # of the source's shape from the new workload's


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def fit_factors(factors: Sequence[int], extent: int) -> list[int]:
    """``factors`` refitted to multiply to ``extent``: innermost first, each the divisor of
    what is left nearest to the old factor in log scale; the outermost takes the rest."""
    if extent < 1 or not factors:
        raise ValueError(f"Expected a positive extent and factors but got {extent}, {factors}")
    out = [1] * len(factors)
    rest = extent
    for i in range(len(factors) - 1, 0, -1):
        want = math.log(max(int(factors[i]), 1))
        out[i] = min(_divisors(rest), key=lambda d: (abs(math.log(d) - want), d))
        rest //= out[i]
    out[0] = rest
    return out


def fit_script(script: str, workload: Any, target: Any = None) -> str | None:
    """``script`` replayed on ``workload`` with every literal tile refitted to its loop's
    extent there; None when a statement is refused (a block or loop it names is not there)."""
    fitted = _fit(script, workload, target)
    return fitted[0] if fitted is not None else None


def _fit(script: str, workload: Any, target: Any = None) -> tuple[str, float] | None:
    """``fit_script``'s text and how far the script's loops were from ``workload``'s: the
    Euclidean distance in log2 of each literal tile's product (its loop's extent where the
    script was tuned) from the loop's extent here."""
    from dragon_dsl.errors import DragonError
    from dragon_dsl.live import LiveSchedule
    from dragon_dsl.parser import parse
    from dragon_dsl.printer import format_program

    try:
        program = parse(script)
        live = LiveSchedule(workload, target)
        fitted = []
        squares = 0.0
        for stmt in program.statements:
            if stmt.op == "tile" and len(stmt.args) >= 2 and _literal(stmt.args[1]):
                extent = live.extent(stmt.args[0].name)
                factors = list(stmt.args[1])
                if extent is not None and math.prod(factors) != extent:
                    squares += (math.log2(max(math.prod(factors), 1)) - math.log2(extent)) ** 2
                    stmt = replace(stmt, args=[stmt.args[0], tuple(fit_factors(factors, extent)),
                                               *stmt.args[2:]])
            live.step(stmt)
            fitted.append(stmt)
    except (DragonError, ValueError):
        return None
    return format_program(replace(program, statements=fitted)), math.sqrt(squares)


def _literal(factors: Any) -> bool:
    return isinstance(factors, tuple) and all(isinstance(f, int) for f in factors)


# What a parameter of another kind costs (dtype, layout, act, groups ...): beside it every shape
# difference is small, so that scripts come from workloads of the same structure first.
_OTHER_KIND = 20.0
# Parameters that change the kernel's structure, not only its size.
_STRUCTURAL = ("groups", "bias", "gqa")


def _shape(spec: str) -> tuple[str, dict[str, Any]]:
    """A spec's family and every parameter, the family's defaults filled in."""
    from codegen.workloads.families import FAMILIES
    from codegen.workloads.specs import parse_spec

    family, given = parse_spec(spec)
    return family, {**dict(FAMILIES[family].params), **given} if family in FAMILIES else given


def shape_distance(a: str, b: str) -> float:
    """How far two specs of one family are: the Euclidean distance of their sizes in log2 (a
    parameter left out has the family's default); a parameter that differs in kind (dtype, act,
    layout, groups ...) adds 20, more than any difference of size.  Infinite between families.

    >>> round(shape_distance("matmul(m=64,n=64,k=64)", "matmul(m=256,n=64,k=64)"), 2)
    2.0
    >>> shape_distance("matmul(m=64)", "matmul(m=64,dtype=float16)") >= 20
    True
    """
    fa, pa = _shape(a)
    fb, pb = _shape(b)
    if fa != fb:
        return math.inf
    total = 0.0
    for key in sorted(set(pa) | set(pb)):
        x, y = pa.get(key), pb.get(key)
        if x == y:
            continue
        sizes = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (x, y))
        if sizes and key not in _STRUCTURAL:
            total += (math.log2(x) - math.log2(y)) ** 2
        else:
            total += _OTHER_KIND ** 2
    return math.sqrt(total)


def neighbours(spec: str, specs: Iterable[str]) -> list[tuple[float, str]]:
    """The specs of ``spec``'s family (itself left out), nearest first."""
    ranked = sorted((shape_distance(spec, other), other) for other in set(specs) if other != spec)
    return [(d, other) for d, other in ranked if math.isfinite(d)]


# How many of the corpus' workloads that name only blocks of a model's task are replayed on it
# to measure their distance (``structural_neighbours``), those that name the most of its
# blocks first: each replay costs a few milliseconds to a second.
STRUCTURAL_CANDIDATES = 32


def _script_blocks(script: str) -> set[str]:
    """The blocks a script fetches by name (``block "NAME"``), root left out."""
    return set(re.findall(r'^block "([^"]+)"', script, re.MULTILINE)) - {"root"}


def structural_neighbours(spec: str, workload: Any, by_workload: dict[str, list[Any]],
                          target: Any = None, *, fit: Any = None) -> list[tuple[float, str]]:
    """For a kernel without a family (a model's task, a module file's): the corpus workloads
    whose fastest script fetches only blocks ``workload`` has, nearest first.  The distance
    is ``_OTHER_KIND`` for each of ``workload``'s blocks the script does not fetch, plus how far
    its tiles' loops are from ``workload``'s (``_fit``); a script that does not replay here is
    no neighbour.  ``spec`` itself is left out, as ``neighbours`` leaves it out.  ``fit``:
    ``_fit`` of a script on ``workload`` (a caller's memo of it), by default ``_fit`` itself."""
    from dragon_dsl.live import LiveSchedule

    fit = fit or (lambda script: _fit(script, workload, target))

    names = set(LiveSchedule(workload, target).block_names()) - {"root"}
    if not names:
        return []
    fastest = {source: min(records, key=lambda r: r.latency_s)
               for source, records in by_workload.items() if source != spec}
    matching = []
    for source, record in fastest.items():
        used = _script_blocks(record.script)
        if used and used <= names:
            matching.append((len(names - used), source))
    ranked = []
    for missing, source in sorted(matching)[:STRUCTURAL_CANDIDATES]:
        fitted = fit(fastest[source].script)
        if fitted is not None:
            ranked.append((missing * _OTHER_KIND + fitted[1], source))
    return sorted(ranked)


def transferred(spec: str, records: Iterable[Any], target: Any = None, *, workload: Any = None,
                neighbours_k: int = 4, per_neighbour: int = 4,
                limit: int = 16) -> list[Transferred]:
    """The fitted scripts of the fastest correct ``records`` (``training.datagen.records``
    records) of the ``neighbours_k`` workloads nearest ``spec`` whose scripts fit it,
    ``per_neighbour`` from each, distinct, the nearest neighbour's fastest first, at most
    ``limit``.  The nearest: of the same family by shape (``neighbours``); for a model's task
    or a module file's, which have no family, by the blocks they name and their loops
    (``structural_neighbours``)."""
    from codegen.workloads import workload as make_workload
    from codegen.workloads.families import FAMILIES
    from codegen.workloads.specs import WorkloadError, parse_spec

    by_workload: dict[str, list[Any]] = {}
    for record in records:
        if record.status == "correct" and record.latency_s:
            by_workload.setdefault(record.workload, []).append(record)
    try:
        family: str | None = parse_spec(spec)[0]
    except WorkloadError:
        family = None
    wl = workload
    if wl is None or isinstance(wl, str):
        try:
            wl = make_workload(spec)
        except WorkloadError:
            return []
    # A script's fit on this workload, once: the structural ranking replays each neighbour's
    # fastest script, which is the first one taken from it below.
    fit = functools.cache(lambda script: _fit(script, wl, target))
    order = neighbours(spec, by_workload) if family in FAMILIES else \
        structural_neighbours(spec, wl, by_workload, target, fit=fit)
    out: list[Transferred] = []
    seen: set[str] = set()
    sources = 0
    for distance, source in order:
        if sources >= neighbours_k or len(out) >= limit:
            break
        fastest = sorted(by_workload[source], key=lambda r: r.latency_s)
        taken = 0
        for record in fastest:
            if taken >= per_neighbour or len(out) >= limit:
                break
            result = fit(record.script)
            if result is None or result[0] in seen:
                continue
            seen.add(result[0])
            out.append(Transferred(result[0], source, record.latency_s, distance))
            taken += 1
        sources += taken > 0
    return out
