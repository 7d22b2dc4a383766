"""The score gate of claims (seed 001 §6.3, DESIGN §4.8): a node leaves a ready task to a better
node that is free to run it, and the SOFT affinity of a task to the node that holds its input.

A node compares its own effective score for each task type with the scores its peers advertise
(from their last report: `/cluster/info`, or the node registry a shared database keeps). If an
online peer with a free slot scores higher, the node defers that type: it claims only the
tasks pinned to itself. The starvation guard is per ready task: a deferred task that has been
ready for `defer_window` seconds (its `ready_since`, judged by its owner's clock inside the
claim) is claimed anyway, so work never waits on a peer that looks free but does not claim it,
and a task made a moment ago always waits for the better node first.

Pure logic; the engine asks it on every claim.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PeerView:
    """What a peer last said of itself."""

    node_id: str
    online: bool
    free_slots: int
    #: effective score per task type (its best backend, at its load)
    scores: Mapping[str, float] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return self.online and self.free_slots > 0


@dataclass(frozen=True)
class Gate:
    """What a claim leaves to others (`ClaimFilter.deferred_types` / `soft_elsewhere`)."""

    deferred_types: frozenset[str] = frozenset()
    soft_elsewhere: frozenset[str] = frozenset()


NO_GATE = Gate()


class ClaimGate:
    """The score gate of one node, fed with what its peers last reported."""

    def __init__(self, self_id: str, defer_window: float) -> None:
        self.self_id = self_id
        #: seconds a deferred task waits, from when it became ready, before this node claims
        #: it anyway (`ClaimFilter.defer_wait`)
        self.defer_window = defer_window
        self._peers: list[PeerView] = []

    @property
    def peers(self) -> list[PeerView]:
        return list(self._peers)

    def update(self, peers: Iterable[PeerView]) -> None:
        self._peers = [p for p in peers if p.node_id != self.self_id]

    def apply(self, types: Iterable[str], my_scores: Mapping[str, float]) -> Gate:
        """The gate for a claim of `types` by a node scoring `my_scores` now: the types an
        online peer with a free slot scores higher for."""
        available = [p for p in self._peers if p.available]
        if not available:
            return NO_GATE
        deferred = frozenset(
            task_type
            for task_type in types
            if max(p.scores.get(task_type, -math.inf) for p in available)
            > my_scores.get(task_type, -math.inf)
        )
        return Gate(deferred, frozenset(p.node_id for p in available))

    def needs_scores(self) -> bool:
        """Whether `apply` will compare scores (some peer is available)."""
        return any(p.available for p in self._peers)
