"""The task state machine (seed 001 §5.2) and pipeline status derivation (DESIGN §4.7).

Pure functions: the store asks these before every write, so an illegal transition is refused
with a clear error instead of being applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fredica.domain.models import PipelineStatus, TaskStatus

S = TaskStatus

#: Allowed transitions (from -> set of to). Any non-terminal state may be cancelled.
TRANSITIONS: Mapping[TaskStatus, frozenset[TaskStatus]] = {
    S.PENDING: frozenset({S.CLAIMED, S.RUNNING, S.CANCELLED, S.SKIPPED, S.COMPLETED, S.FAILED}),
    S.CLAIMED: frozenset({S.RUNNING, S.PENDING, S.COMPLETED, S.FAILED, S.CANCELLED, S.SKIPPED}),
    S.RUNNING: frozenset({S.COMPLETED, S.FAILED, S.PENDING, S.STALE, S.CANCELLED}),
    S.STALE: frozenset({S.RUNNING, S.RECLAIMED, S.CANCELLED, S.COMPLETED, S.FAILED, S.PENDING}),
    S.RECLAIMED: frozenset({S.PENDING, S.FAILED, S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset({S.PENDING, S.SKIPPED}),  # manual retry / skip
    S.CANCELLED: frozenset({S.PENDING, S.SKIPPED}),  # manual retry / skip, upstream revival
    S.SKIPPED: frozenset(),
}


def can_transition(current: TaskStatus, target: TaskStatus) -> bool:
    """True if `current -> target` is an edge of the state machine."""
    return target in TRANSITIONS[current]


@dataclass(frozen=True, slots=True)
class StatusCounts:
    """How many tasks of a pipeline are in each status."""

    pending: int = 0
    claimed: int = 0
    running: int = 0
    stale: int = 0
    reclaimed: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    skipped: int = 0

    @classmethod
    def from_mapping(cls, counts: Mapping[str, int]) -> StatusCounts:
        return cls(**{s.value: int(counts.get(s.value, 0)) for s in TaskStatus})

    @property
    def total(self) -> int:
        return sum(getattr(self, s.value) for s in TaskStatus)

    @property
    def active(self) -> int:
        return self.pending + self.claimed + self.running + self.stale + self.reclaimed

    @property
    def done(self) -> int:
        """Completed or skipped (skipped counts as done, seed 001 §2.6)."""
        return self.completed + self.skipped


def derive_pipeline_status(counts: StatusCounts, cancel_requested: bool) -> PipelineStatus:
    """Pipeline status from its tasks, exactly per DESIGN §4.7.

    All tasks terminal -> cancelled if a cancel was requested, else completed if none failed,
    else partial_failed if some completed, else failed. Otherwise cancelling if a cancel is in
    progress, running if any task has left pending, else pending.
    """
    if counts.active == 0:
        if cancel_requested:
            return PipelineStatus.CANCELLED
        if counts.failed == 0:
            return PipelineStatus.COMPLETED
        if counts.done > 0:
            return PipelineStatus.PARTIAL_FAILED
        return PipelineStatus.FAILED
    if cancel_requested:
        return PipelineStatus.CANCELLING
    if counts.total - counts.pending > 0:
        return PipelineStatus.RUNNING
    return PipelineStatus.PENDING
