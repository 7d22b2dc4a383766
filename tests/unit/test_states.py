"""The state machine and pipeline status derivation (pure)."""

from __future__ import annotations

import itertools

import pytest

from fredica.domain import states
from fredica.domain.models import PipelineStatus, TaskStatus
from fredica.domain.states import StatusCounts, can_transition, derive_pipeline_status

S = TaskStatus

ALLOWED = {
    (S.PENDING, S.CLAIMED),
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.CANCELLED),
    (S.PENDING, S.SKIPPED),
    (S.PENDING, S.COMPLETED),
    (S.PENDING, S.FAILED),
    (S.CLAIMED, S.RUNNING),
    (S.CLAIMED, S.PENDING),
    (S.CLAIMED, S.COMPLETED),
    (S.CLAIMED, S.FAILED),
    (S.CLAIMED, S.CANCELLED),
    (S.CLAIMED, S.SKIPPED),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.PENDING),
    (S.RUNNING, S.STALE),
    (S.RUNNING, S.CANCELLED),
    (S.STALE, S.RUNNING),
    (S.STALE, S.RECLAIMED),
    (S.STALE, S.CANCELLED),
    (S.STALE, S.COMPLETED),
    (S.STALE, S.FAILED),
    (S.STALE, S.PENDING),
    (S.RECLAIMED, S.PENDING),
    (S.RECLAIMED, S.FAILED),
    (S.RECLAIMED, S.CANCELLED),
    (S.FAILED, S.PENDING),
    (S.FAILED, S.SKIPPED),
    (S.CANCELLED, S.PENDING),
    (S.CANCELLED, S.SKIPPED),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(TaskStatus, TaskStatus)))
def test_every_pair_of_states(src: TaskStatus, dst: TaskStatus) -> None:
    assert can_transition(src, dst) is ((src, dst) in ALLOWED)


def test_terminal_states_never_go_to_running_work() -> None:
    for terminal in (S.COMPLETED, S.SKIPPED):
        assert not states.TRANSITIONS[terminal]
    assert all(s.is_terminal for s in (S.COMPLETED, S.FAILED, S.CANCELLED, S.SKIPPED))


@pytest.mark.parametrize(
    ("counts", "cancel", "expected"),
    [
        (StatusCounts(pending=3), False, PipelineStatus.PENDING),
        (StatusCounts(pending=2, claimed=1), False, PipelineStatus.RUNNING),
        (StatusCounts(pending=2, completed=1), False, PipelineStatus.RUNNING),
        (StatusCounts(running=1, stale=1), False, PipelineStatus.RUNNING),
        (StatusCounts(pending=1, running=1), True, PipelineStatus.CANCELLING),
        (StatusCounts(completed=2), False, PipelineStatus.COMPLETED),
        (StatusCounts(completed=1, skipped=2), False, PipelineStatus.COMPLETED),
        (StatusCounts(completed=1, cancelled=1), False, PipelineStatus.COMPLETED),
        (StatusCounts(completed=1, failed=1), False, PipelineStatus.PARTIAL_FAILED),
        (StatusCounts(skipped=1, failed=1), False, PipelineStatus.PARTIAL_FAILED),
        (StatusCounts(failed=2, cancelled=1), False, PipelineStatus.FAILED),
        (StatusCounts(completed=1, cancelled=2), True, PipelineStatus.CANCELLED),
        (StatusCounts(failed=1), True, PipelineStatus.CANCELLED),
        (StatusCounts(), False, PipelineStatus.COMPLETED),
    ],
)
def test_derive_pipeline_status(
    counts: StatusCounts, cancel: bool, expected: PipelineStatus
) -> None:
    assert derive_pipeline_status(counts, cancel) is expected


def test_counts_totals() -> None:
    c = StatusCounts.from_mapping({"pending": 1, "running": 2, "completed": 3, "skipped": 1})
    assert (c.total, c.active, c.done) == (7, 3, 4)
