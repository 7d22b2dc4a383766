"""The charts' read (`task_timeline`) and the series it gives, on known events: every store
must return each task's status at the window's start and the status events inside it."""

from __future__ import annotations

from fredica.domain import timeseries
from fredica.domain.models import ErrorType, NewTask, TaskStatus
from fredica.store.base import Failure

from .conftest import claim_one, complete, make_pipeline

S = TaskStatus


async def _history(store, clock) -> None:
    # Given three tasks created at 100; a runs from 110 to 170, b from 180 to 230; c fails
    # for good at 240 (its retries do not apply to PERMANENT)
    await make_pipeline(store, NewTask("T", id="a"), NewTask("T", id="b"), NewTask("U", id="c"))
    clock.set(110.0)
    a = await claim_one(store)
    assert a.id == "a"
    clock.set(170.0)
    await complete(store, a)
    clock.set(180.0)
    b = await claim_one(store)
    clock.set(230.0)
    await complete(store, b)
    clock.set(240.0)
    c = await claim_one(store)
    await store.fail(Failure("c", c.attempt, "boom", ErrorType.PERMANENT))


async def test_timeline_gives_status_at_start_and_events_inside(store, clock) -> None:
    await _history(store, clock)
    # When the window starts at 160 (a claimed and started at once, b and c pending)
    read = await store.task_timeline(160.0, 280.0)
    at_start, events = read.at_start, read.events
    # Then (every task was touched lately: each is replayed, none only counted)
    assert read.baseline == {}
    assert sorted((t.task_id, t.task_type, t.status) for t in at_start) == [
        ("a", "T", S.CLAIMED),
        ("b", "T", S.PENDING),
        ("c", "U", S.PENDING),
    ]
    assert [(e.task_id, e.event_type, e.at) for e in events] == [
        ("a", "completed", 170.0),
        ("b", "claimed", 180.0),
        ("b", "completed", 230.0),
        ("c", "claimed", 240.0),
        ("c", "failed", 240.0),
    ]
    assert events[0].started_at == 110.0 and events[0].current is S.COMPLETED
    # a window after everything ended has nothing at its start and no events
    later = await store.task_timeline(300.0, 400.0)
    assert (later.baseline, later.at_start, later.events) == ({}, [], [])


async def test_series_of_known_events(store, clock) -> None:
    await _history(store, clock)
    read = await store.task_timeline(160.0, 280.0)
    out = timeseries.series(160.0, 280.0, 2, read.at_start, read.events, read.baseline)
    assert out["buckets"] == [160.0, 220.0]
    assert out["completed"] == [1, 1]
    assert out["failed"] == [0, 1]
    assert out["throughput_per_min"] == [1.0, 1.0]
    # at 220 b runs and c waits; at 280 nothing is left
    assert out["queue_depth"] == [1, 0]
    assert out["running"] == [1, 0]
    # a ran 110 -> 170 (its start lies before the window), b 180 -> 230
    assert out["durations_sec"] == {"T": [60.0, 50.0]}
    assert out["duration_summary"] == {"T": {"count": 2, "mean_sec": 55.0}}


async def test_tasks_untouched_long_before_the_window_are_counted_not_replayed(
    store, clock
) -> None:
    # Given a task running since 110 and one pending since 100, nothing since
    await make_pipeline(store, NewTask("T", id="a"), NewTask("T", id="b"))
    clock.set(110.0)
    await claim_one(store)
    clock.set(2000.0)
    # When the window starts long after (more than the touch margin)
    since = 110.0 + timeseries.TOUCH_MARGIN_SEC + 100
    read = await store.task_timeline(since, since + 120)
    # Then they are counted by status, with no per-task rows to replay
    assert read.baseline == {S.RUNNING: 1, S.PENDING: 1}
    assert (read.at_start, read.events) == ([], [])
    out = timeseries.series(since, since + 120, 2, read.at_start, read.events, read.baseline)
    assert (out["queue_depth"], out["running"]) == ([1, 1], [1, 1])
