"""A live schedule's state as plain data: what the next statement's grammar reads of it.

``training.grammars.statement`` narrows the next statement by querying a
``live.LiveSchedule`` (names in scope, blocks, loops and their extents, related blocks,
buffer counts, ``rfactor`` ranks, the inlines and moves TVM takes, canonical result names,
``postproc_set``).  When the live schedule is held in another process
(``training.sampling.live_worker``: a TVM crash then ends that process, not the sampler),
``LiveView.of`` records those answers there, ``as_data`` / ``from_data`` carry them over the
pipe as JSON, and the view answers the same queries here, without TVM.

>>> from codegen.workloads import workload                                     # doctest: +SKIP
>>> live = LiveSchedule(workload("matmul(m=16,n=16,k=16)").mod)                # doctest: +SKIP
>>> live.step('block "C" -> C')                                                # doctest: +SKIP
>>> LiveView.from_data(LiveView.of(live).as_data()).expected_results("loops", "C")  # doctest: +SKIP
['i', 'j', 'k']
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .codec import _Namer
from .live import MOVE_OPS, LiveSchedule, Loop, result_names

__all__ = ["LiveView"]

_RELATED = ("children", "consumers", "producers", "output_blocks")


@dataclass(frozen=True)
class LiveView:
    """The answers of a ``LiveSchedule``'s queries at one point of its script.  A query TVM
    refused there (``related`` of the root block, say) raises ``ValueError`` here too."""

    postproc_set: str | None
    statements: int
    changes: int                             # ``LiveSchedule.changes``
    scope: dict[str, str]                    # names alive, in binding order -> kind
    location_names: list[str]                # ``locations()``
    blocks: list[str]                        # ``block_names()``
    loops_of: dict[str, list[Loop]]          # block in scope -> its loops
    related_of: dict[str, dict[str, list[str] | None]]  # block -> op -> blocks (None: refused)
    buffers_of: dict[str, tuple[int, int]]   # block -> (reads, writes)
    extents: dict[str, int | None]           # loop in scope -> extent
    rfactor_ranks: dict[str, int | None]     # loop in scope -> ``rfactor_rank``
    namer: dict[str, Any] = field(default_factory=dict)  # the encoder's naming state
    nice: list[str] = field(default_factory=list)
    bound: list[str] = field(default_factory=list)   # ``bound_blocks()``
    piece_names: list[str] = field(default_factory=list)  # ``pieces()``
    annotated_keys: dict[str, list[str]] = field(default_factory=dict)  # ``annotated()``
    annotations_now: dict[str, list[str]] = field(default_factory=dict)  # ``annotations_on()``
    drawn: str | None = None                 # ``just_drawn()``
    # block under loops -> ``inline_ops``; -> op -> ``move_targets``
    inline_ops_of: dict[str, list[str]] = field(default_factory=dict)
    move_targets_of: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    error: str = ""                          # a query failed while recording: narrow nothing

    @classmethod
    def of(cls, live: LiveSchedule) -> LiveView:
        """Record ``live``'s answers (in the process that holds it)."""
        namer = {"taken": sorted(live._namer.taken), "counters": dict(live._namer.counters),
                 "script_name": dict(live._namer.script_name)}
        base: dict[str, Any] = {"postproc_set": live.postproc_set, "statements": live.statements,
                "changes": live.changes,
                "namer": namer, "nice": sorted(live._nice)}
        if live.postproc_set is not None:  # complete: the grammar reads nothing else
            return cls(scope={}, location_names=[], blocks=[], loops_of={}, related_of={},
                       buffers_of={}, extents={}, rfactor_ranks={}, **base)
        try:
            blocks, loops = live.names("block"), live.names("loop")
            scope = {n: k for k, names in (("block", blocks), ("loop", loops),
                                           ("var", live.names("var"))) for n in names}
            scope = {n: scope[n] for n in live.kinds if n in scope}  # binding order
            related: dict[str, dict[str, list[str] | None]] = {}
            for b in blocks:
                related[b] = {}
                for op in _RELATED:
                    try:
                        related[b][op] = live.related(op, b)
                    except Exception:  # noqa: BLE001  e.g. producers of the root block
                        related[b][op] = None
            loops_of = {b: live.loops(b) for b in blocks}
            movable = [b for b in blocks if loops_of[b]]
            return cls(scope=scope, location_names=live.locations(),
                       inline_ops_of={b: live.inline_ops(b) for b in movable},
                       move_targets_of={b: {op: live.move_targets(op, b) for op in MOVE_OPS}
                                        for b in movable},
                       blocks=live.block_names(), bound=live.bound_blocks(),
                       piece_names=live.pieces(), annotated_keys=live.annotated(),
                       annotations_now=live.annotations_on(), drawn=live.just_drawn(),
                       loops_of=loops_of, related_of=related,
                       buffers_of={b: live.buffers(b) for b in blocks},
                       extents={lp: live.extent(lp) for lp in loops},
                       rfactor_ranks={lp: live.rfactor_rank(lp) for lp in loops}, **base)
        except Exception as exc:  # noqa: BLE001  TVM refuses a query: the sampler narrows nothing
            return cls(scope={}, location_names=[], blocks=[], loops_of={}, related_of={},
                       buffers_of={}, extents={}, rfactor_ranks={},
                       error=f"{type(exc).__name__}: {exc}", **base)

    # ---- over a pipe ----------------------------------------------------------------------

    def as_data(self) -> dict[str, Any]:
        """JSON-safe data (``from_data`` reads it back)."""
        data = dataclasses.asdict(self)
        data["loops_of"] = {b: [[lp.name, lp.extent] for lp in loops]
                            for b, loops in self.loops_of.items()}
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> LiveView:
        data = dict(data)
        data["loops_of"] = {b: [Loop(name, extent) for name, extent in loops]
                            for b, loops in data["loops_of"].items()}
        data["buffers_of"] = {b: (int(r), int(w)) for b, (r, w) in data["buffers_of"].items()}
        return cls(**data)

    # ---- the queries of LiveSchedule ------------------------------------------------------

    def names(self, kind: str) -> list[str]:
        if self.error:
            raise ValueError(self.error)
        return [n for n, k in self.scope.items() if k == kind]

    def locations(self) -> list[str]:
        return list(self.location_names)

    def pieces(self) -> list[str]:
        return list(self.piece_names)

    def block_names(self) -> list[str]:
        return list(self.blocks)

    def bound_blocks(self) -> list[str]:
        return list(self.bound)

    def annotated(self) -> dict[str, list[str]]:
        return {n: list(keys) for n, keys in self.annotated_keys.items()}

    def annotations_on(self) -> dict[str, list[str]]:
        return {n: list(keys) for n, keys in self.annotations_now.items()}

    def just_drawn(self) -> str | None:
        return self.drawn

    def loops(self, block: str) -> list[Loop]:
        return list(self.loops_of[block])

    def extent(self, loop: str) -> int | None:
        return self.extents.get(loop)

    def related(self, op: str, block: str) -> list[str]:
        found = self.related_of[block][op]
        if found is None:
            raise ValueError(f"the schedule refuses {op} of {block}")
        return list(found)

    def rfactor_rank(self, loop: str) -> int | None:
        return self.rfactor_ranks.get(loop)

    def buffers(self, block: str) -> tuple[int, int]:
        return self.buffers_of[block]

    def inline_ops(self, block: str) -> list[str]:
        return list(self.inline_ops_of.get(block, ()))

    def move_targets(self, op: str, block: str) -> list[str]:
        return list(self.move_targets_of.get(block, {}).get(op, ()))

    def expected_results(self, op: str, target: str | None = None, n: int | None = None,
                         *, factors: bool = False) -> list[str]:
        namer = object.__new__(_Namer)
        namer.taken = set(self.namer["taken"])
        namer.counters = dict(self.namer["counters"])
        namer.script_name = dict(self.namer["script_name"])

        def loops(name: str) -> list[Loop]:
            return self.loops_of.get(name, [])

        def related(op: str, name: str) -> list[str]:
            return self.related(op, name) if name in self.related_of else []

        return result_names(namer, set(self.nice), op, target, n, factors, loops,
                            related)
