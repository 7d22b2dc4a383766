"""The charts' arithmetic on hand-made events (`domain.timeseries`)."""

from __future__ import annotations

import pytest

from fredica.domain import timeseries
from fredica.domain.models import TaskStatus
from fredica.domain.timeseries import TaskAtStart, TimelineEvent

S = TaskStatus


def ev(task: str, kind: str, at: float, current: S = S.COMPLETED, **kw: float) -> TimelineEvent:
    return TimelineEvent(task, "T", kind, at, current, kw.get("started_at"))


@pytest.mark.parametrize(
    ("text", "seconds"), [("15m", 900.0), ("1h", 3600.0), ("7d", 604800.0), ("120", 120.0)]
)
def test_windows(text: str, seconds: float) -> None:
    assert timeseries.parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "1w", "-1h", "10s", "31d", "1h;drop"])
def test_bad_windows_name_the_rule(text: str) -> None:
    with pytest.raises(ValueError, match="window"):
        timeseries.parse_window(text)


def test_a_retry_returns_to_the_queue_and_a_reclaim_that_ends_it_does_not() -> None:
    events = [
        ev("a", "created", 1.0, S.PENDING),
        ev("b", "created", 1.0, S.FAILED),
        ev("a", "claimed", 2.0, S.PENDING),
        ev("b", "claimed", 2.0, S.FAILED),
        ev("a", "retry", 12.0, S.PENDING),  # back in the queue
        ev("b", "requeued", 12.0, S.FAILED),  # reclaimed with no retry left: failed
    ]
    out = timeseries.series(0.0, 20.0, 2, [], events)
    assert out["queue_depth"] == [0, 1]
    assert out["running"] == [2, 0]
    assert out["completed"] == [0, 0]


def test_tasks_waiting_since_before_the_window_count_until_they_leave() -> None:
    at_start = [TaskAtStart("a", "T", S.PENDING), TaskAtStart("b", "T", S.PENDING)]
    events = [ev("a", "claimed", 25.0), ev("a", "completed", 35.0, started_at=25.0)]
    out = timeseries.series(0.0, 40.0, 4, at_start, events)
    assert out["queue_depth"] == [2, 2, 1, 1]
    assert out["running"] == [0, 0, 1, 0]
    assert out["throughput_per_min"] == [0.0, 0.0, 0.0, 6.0]
    assert out["durations_sec"] == {"T": [None, None, None, 10.0]}


def test_bucket_count_defaults_to_sixty_but_not_under_ten_seconds() -> None:
    assert timeseries.bucket_count(3600.0, None) == 60
    assert timeseries.bucket_count(120.0, None) == 12
    assert timeseries.bucket_count(3600.0, 30) == 30
