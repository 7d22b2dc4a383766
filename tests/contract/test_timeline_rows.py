"""The charts' lean read (`timeline_rows`, replayed by `series_of_rows`) gives the same series as
the reference read (`task_timeline`, replayed by `series`) on generated histories: thousands of
events of every status kind, tasks crossing the windows' edges and the touch margin, retries,
requeues, completions with and without a start on the row, ties in time, events that name no
task of the store or carry another task order, windows with more events than the limit."""

from __future__ import annotations

import random

import pytest

from fredica.domain import timeseries
from fredica.domain.models import TaskStatus
from fredica.store.base import TaskStore

from .conftest import raw_execute

STATUSES = [s.value for s in TaskStatus]
KINDS = [*timeseries.STATUS_EVENTS, "progress", "owner_changed"]
SPAN = 6000.0  # the history covers [1000, 7000)
T0 = 1000.0


def _history(seed: int) -> tuple[list[tuple[object, ...]], list[tuple[str, int, str, float]]]:
    """Task rows `(id, type, status, created_at, updated_at, started_at)` and events
    `(task_id, ord offset, kind, at)`: the offset 0 gives the task's own order, 1 another."""
    rnd = random.Random(seed)
    tasks: list[tuple[object, ...]] = []
    events: list[tuple[str, int, str, float]] = []
    for n in range(600):
        task_id = f"t{seed}-{n:04d}"
        created = T0 + rnd.random() * SPAN
        if rnd.random() < 0.3:  # ties: whole seconds
            created = float(int(created))
        at, kinds = created, ["created"]
        for _ in range(rnd.choice([0, 0, 1, 2, 3, 4, 6, 9, 14])):
            kinds.append(rnd.choice(KINDS))
        last_status = "pending"
        for kind in kinds:
            gap = rnd.choice([0.0, 0.0, rnd.random() * 5, rnd.random() * 120, rnd.random() * 900])
            at += gap
            offset = 1 if rnd.random() < 0.03 else 0  # another task order (an old copy)
            events.append((task_id, offset, kind, at))
            status = timeseries.EVENT_STATUS.get(kind)
            if status is not None:
                last_status = status.value
        status = last_status if rnd.random() < 0.8 else rnd.choice(STATUSES)
        # the row: updated at its last event, give or take a skew of the executor's clock
        updated = at + rnd.choice([0.0, 0.0, rnd.uniform(-60, 60)])
        started = None if rnd.random() < 0.3 else created + rnd.random() * (at - created + 50)
        tasks.append((task_id, rnd.choice("TUV"), status, created, updated, started))
    for n in range(40):  # events of tasks the store does not hold
        events.append((f"gone-{seed}-{n}", 0, rnd.choice(KINDS), T0 + rnd.random() * SPAN))
    rnd.shuffle(events)
    return tasks, events


def _load(kind: str, target: str, seed: int) -> int:
    tasks, events = _history(seed)
    for i in range(0, len(tasks), 100):
        chunk = tasks[i : i + 100]
        raw_execute(
            kind,
            target,
            "INSERT INTO task (id, type, status, created_by, owner_id, created_at, updated_at, "
            "started_at) VALUES "
            + ", ".join("(?, ?, ?, 'test', 'node-a', ?, ?, ?)" for _ in chunk),
            [v for row in chunk for v in row],
        )
    if kind == "sqlite":
        raw_execute(kind, target, "UPDATE task SET ord = rowid WHERE ord IS NULL")
    ords = dict(raw_execute(kind, target, "SELECT id, ord FROM task"))
    rows = [
        (task_id, (ords.get(task_id) or 0) + offset * 100_000, event, at)
        for task_id, offset, event, at in events
    ]
    for i in range(0, len(rows), 200):
        chunk = rows[i : i + 200]
        raw_execute(
            kind,
            target,
            "INSERT INTO task_event (task_id, task_ord, node_id, event_type, message, "
            "occurred_at) VALUES " + ", ".join("(?, ?, 'node-a', ?, NULL, ?)" for _ in chunk),
            [v for row in chunk for v in row],
        )
    return len(rows)


def _windows(seed: int) -> list[tuple[float, float, int, int]]:
    """`(since, until, buckets, limit)`: the whole history, parts of it, windows past it,
    odd edges, one bucket to many, and limits that cut the window short."""
    rnd = random.Random(seed)
    out = [
        (0.0, 10_000.0, 60, 200_000),
        (T0, T0 + SPAN, 240, 200_000),
        (T0 + SPAN + 500, T0 + SPAN + 900, 10, 200_000),
        (3000.0, 4000.0, 1, 200_000),
        (2500.0, 5500.0, 7, 40),
    ]
    for _ in range(25):
        since = T0 + rnd.random() * SPAN
        until = since + rnd.choice([60.0, 300.0, 1000.0 / 3, 1800.0, 3600.0, rnd.random() * 4000])
        limit = rnd.choice([200_000, 200_000, 200_000, 25, 300])
        out.append((since, until, rnd.choice([1, 3, 10, 60, 61, 240]), limit))
    return out


@pytest.mark.parametrize("seed", [1, 2])
async def test_lean_read_gives_the_reference_series(
    store: TaskStore, kind: str, target: str, seed: int
) -> None:
    # Given a generated history written behind the store's back
    n_events = _load(kind, target, seed)
    assert n_events > 3000
    compared = 0
    for since, until, buckets, limit in _windows(seed):
        # When the window is read both ways
        ref = await store.task_timeline(since, until, limit)
        lean = await store.timeline_rows(since, until, limit)
        expected = timeseries.series(since, until, buckets, ref.at_start, ref.events, ref.baseline)
        got = timeseries.series_of_rows(since, until, buckets, lean)
        # Then the parts and the series are the same
        assert lean.baseline == ref.baseline
        assert lean.at_start == ref.at_start
        assert [(e[0], e[1], e[2]) for e in lean.events] == [
            (e.task_id, e.event_type, e.at) for e in ref.events
        ]
        assert got == expected, (since, until, buckets, limit)
        compared += len(ref.events)
    assert compared > 10_000


def test_lean_replay_equals_the_reference_on_hand_made_rows() -> None:
    """`series_of_rows` alone, on events the store would not write (out of order, outside
    the window, a requeue that used up the retries, a completion with no start at all)."""
    S = TaskStatus
    rows: list[timeseries.EventRow] = [
        ("a", "claimed", 12.0, None, None, None),
        ("a", "running", 13.0, None, None, None),
        ("a", "completed", 30.0, "T", None, None),
        ("b", "requeued", 31.0, None, None, "failed"),
        ("c", "requeued", 32.0, None, None, "failed"),
        ("c", "claimed", 33.0, None, None, None),
        ("d", "completed", 5.0, "T", None, None),
        ("e", "completed", 40.0, "U", 45.0, None),
        ("f", "recovered", 41.0, None, None, None),
        ("f", "orphaned", 42.0, None, None, None),
        ("g", "completed", 50.0, "U", None, None),
        ("h", "completed", 15.0, "T", 11.0, None),
    ]
    at_start = [
        timeseries.TaskAtStart("b", "T", S.RUNNING),
        timeseries.TaskAtStart("g", "U", S.CLAIMED),
    ]
    baseline = {S.PENDING: 2, S.RUNNING: 1}
    events = [
        timeseries.TimelineEvent(t, kind_of or "T", k, at, S(now) if now else S.COMPLETED, started)
        for t, k, at, kind_of, started, now in rows
    ]
    for buckets in (1, 2, 5, 60):
        expected = timeseries.series(10.0, 60.0, buckets, at_start, events, baseline)
        read = timeseries.TimelineRows(baseline, at_start, rows)
        assert timeseries.series_of_rows(10.0, 60.0, buckets, read) == expected
