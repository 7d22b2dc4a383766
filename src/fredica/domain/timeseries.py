"""Charts from the task events the owner records: throughput, queue depth and per-type
durations over a time window (pure: the store reads the rows, this turns them into series).

Every status transition writes an event named by the new status (`claimed`, `running`,
`completed`...) or by why it happened (`released`, `retry`, `upstream_failed`...). Replaying
them from each task's status at the window's start gives, per bucket:
- `completed` / `failed`: how many tasks ended so in the bucket; `throughput`: completed per
  minute;
- `queue_depth` / `running`: how many tasks were pending / claimed or running at the bucket's
  end;
- `durations[type]`: the mean seconds from the start of the attempt that completed to its
  completion, over the tasks of that type that completed in the bucket (null when none did).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from fredica.domain.models import TaskStatus

S = TaskStatus

#: events named by why a transition happened, and the status they lead to
EVENT_STATUS: Mapping[str, TaskStatus] = {
    **{s.value: s for s in TaskStatus},
    "created": S.PENDING,
    "retry": S.PENDING,
    "retried": S.PENDING,
    "released": S.PENDING,
    "revived": S.PENDING,
    "requeued": S.PENDING,  # or FAILED when the retries are used up: see `_status_after`
    "recovered": S.RUNNING,
    "upstream_failed": S.CANCELLED,
    "orphaned": S.FAILED,
}
STATUS_EVENTS: tuple[str, ...] = tuple(EVENT_STATUS)
RUNNING_STATES = frozenset({S.CLAIMED, S.RUNNING})
MIN_WINDOW = 60.0  # seconds
#: a task updated less than this before the window is replayed from its events rather than
#: counted by its status (an event may carry a start time from the executor's clock)
TOUCH_MARGIN_SEC = 300.0
MAX_WINDOW = 30 * 86400.0
DEFAULT_BUCKETS = 60
MAX_BUCKETS = 240
_WINDOW = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One status event inside the window, with what the task is now."""

    task_id: str
    task_type: str
    event_type: str
    at: float
    current: TaskStatus
    started_at: float | None = None


@dataclass(frozen=True, slots=True)
class TaskAtStart:
    """A task that existed when the window began: its status then (None: unknown)."""

    task_id: str
    task_type: str
    status: TaskStatus | None


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the store reads for a window (`TaskStore.task_timeline`)."""

    #: unfinished tasks untouched since before the window, by their (unchanged) status
    baseline: Mapping[TaskStatus, int]
    #: the other tasks that existed at the window's start, with their status then
    at_start: list[TaskAtStart]
    #: status events inside the window, in time order
    events: list[TimelineEvent]


#: a status event as the charts' lean read gives it (`TaskStore.timeline_rows`):
#: `(task_id, event_type, at, task_type, started_at, current)`, where `task_type` and
#: `started_at` (the task row's) are read for `completed` events only and `current` (the
#: task's status now) for `requeued` ones only: None otherwise, the replay needs no more
EventRow = tuple[str, str, float, str | None, float | None, str | None]


@dataclass(frozen=True, slots=True)
class TimelineRows:
    """What the store reads for a window, lean (`TaskStore.timeline_rows`): the `Timeline`
    of the same window with each event as an `EventRow` (no object per event, and the task
    row read only where the replay uses it)."""

    baseline: Mapping[TaskStatus, int]
    at_start: list[TaskAtStart]
    #: status events inside the window, in time order
    events: list[EventRow]


def parse_window(text: str) -> float:
    """`90s`, `15m`, `6h`, `7d` or plain seconds -> seconds; ValueError naming the rule."""
    m = _WINDOW.match(text.strip())
    if m is None:
        raise ValueError(f"window: use e.g. 15m, 1h, 24h or 7d, got {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not MIN_WINDOW <= seconds <= MAX_WINDOW:
        raise ValueError(f"window: must be between 1m and 30d, got {text!r}")
    return seconds


def _status_after(event: TimelineEvent, last: bool) -> TaskStatus | None:
    status = EVENT_STATUS.get(event.event_type)
    if event.event_type == "requeued" and last and event.current is S.FAILED:
        return S.FAILED  # the reclaim used up the retries
    return status


class _Replay:
    """The state of the replay: each task's status, how many are in each, the per-bucket
    tallies."""

    def __init__(
        self, buckets: int, at_start: Iterable[TaskAtStart], baseline: Mapping[TaskStatus, int]
    ) -> None:
        self.buckets = buckets
        self.status = {t.task_id: t.status for t in at_start if t.status is not None}
        # how many tasks are in each status now (the baseline's and the replayed ones')
        self.now_in: dict[TaskStatus, int] = defaultdict(int, baseline)
        for s in self.status.values():
            self.now_in[s] += 1
        self.running_since: dict[str, float] = {}
        self.completed = [0] * buckets
        self.failed = [0] * buckets
        self.queue = [0] * buckets
        self.running = [0] * buckets
        self.spent: dict[str, list[float]] = defaultdict(lambda: [0.0] * buckets)
        self.counted: dict[str, list[int]] = defaultdict(lambda: [0] * buckets)
        self.sampled = 0

    def sample_until(self, bucket: int) -> None:
        """Every bucket before `bucket` ended before the next event: it gets the counts as
        they are."""
        while self.sampled < min(bucket, self.buckets):
            self.queue[self.sampled] = self.now_in[S.PENDING]
            self.running[self.sampled] = sum(self.now_in[s] for s in RUNNING_STATES)
            self.sampled += 1

    def apply(self, event: TimelineEvent, new: TaskStatus, bucket: int) -> None:
        old = self.status.get(event.task_id)
        if old is not None:
            self.now_in[old] -= 1
        self.now_in[new] += 1
        self.status[event.task_id] = new
        if new in RUNNING_STATES:
            self.running_since.setdefault(event.task_id, event.at)
        elif new is S.COMPLETED:
            self.completed[bucket] += 1
            # the row's started_at is the start of the attempt that completed; a claim that
            # starts at once records only `claimed`, so the events alone may not say
            since = self.running_since.pop(event.task_id, None)
            began = event.started_at if event.started_at is not None else since
            if began is not None and began <= event.at:
                self.spent[event.task_type][bucket] += event.at - began
                self.counted[event.task_type][bucket] += 1
        elif new is S.FAILED:
            self.failed[bucket] += 1

    def durations(self) -> tuple[dict[str, list[float | None]], dict[str, dict[str, float]]]:
        return _durations(self.buckets, self.spent, self.counted)


def _durations(
    buckets: int, spent_of: Mapping[str, list[float]], counted_of: Mapping[str, list[int]]
) -> tuple[dict[str, list[float | None]], dict[str, dict[str, float]]]:
    """Per type, the mean duration of each bucket and over the window."""
    per_bucket: dict[str, list[float | None]] = {}
    summary: dict[str, dict[str, float]] = {}
    for kind in sorted(counted_of):
        spent, counted = spent_of[kind], counted_of[kind]
        per_bucket[kind] = [
            round(spent[b] / counted[b], 3) if counted[b] else None for b in range(buckets)
        ]
        n = sum(counted)
        summary[kind] = {"count": n, "mean_sec": round(sum(spent) / n, 3)}
    return per_bucket, summary


def _answer(
    start: float,
    end: float,
    step: float,
    completed: list[int],
    failed: list[int],
    queue: list[int],
    running: list[int],
    durations: tuple[dict[str, list[float | None]], dict[str, dict[str, float]]],
) -> dict[str, Any]:
    return {
        "start": start,
        "end": end,
        "step_sec": step,
        "buckets": [start + b * step for b in range(len(completed))],
        "completed": completed,
        "failed": failed,
        "throughput_per_min": [round(c * 60.0 / step, 3) for c in completed],
        "queue_depth": queue,
        "running": running,
        "durations_sec": durations[0],
        "duration_summary": durations[1],
    }


def series(
    start: float,
    end: float,
    buckets: int,
    at_start: Iterable[TaskAtStart],
    events: Iterable[TimelineEvent],
    baseline: Mapping[TaskStatus, int] | None = None,
) -> dict[str, Any]:
    """The charts' series over [start, end) in `buckets` equal buckets. `events` in time
    order; `at_start` the tasks that existed at `start` and were not finished then;
    `baseline` how many more were in each status all through the window."""
    if end <= start or buckets < 1:
        raise ValueError("series: need start < end and at least one bucket")
    step = (end - start) / buckets
    replay = _Replay(buckets, at_start, baseline or {})
    ordered = sorted(events, key=lambda e: e.at)
    last_index = {e.task_id: i for i, e in enumerate(ordered) if e.event_type in EVENT_STATUS}
    for i, event in enumerate(ordered):
        if not start <= event.at < end:
            continue
        bucket = min(buckets - 1, int((event.at - start) // step))
        replay.sample_until(bucket)
        new = _status_after(event, last_index.get(event.task_id) == i)
        if new is not None:
            replay.apply(event, new, bucket)
    replay.sample_until(buckets)
    return _answer(
        start,
        end,
        step,
        replay.completed,
        replay.failed,
        replay.queue,
        replay.running,
        replay.durations(),
    )


#: what a task in each status adds to the two counts the answer samples (queued, running)
_WEIGHT: Mapping[TaskStatus, tuple[int, int]] = {
    S.PENDING: (1, 0),
    **{s: (0, 1) for s in RUNNING_STATES},
}


def _requeues_that_failed(events: Sequence[EventRow]) -> set[int]:
    """The positions of the `requeued` events that led to FAILED (`_status_after`): each the
    last event of a task that is failed now."""
    failed = S.FAILED.value
    candidates = [i for i, e in enumerate(events) if e[5] == failed and e[1] == "requeued"]
    if not candidates:
        return set()
    last = {e[0]: i for i, e in enumerate(events) if e[1] in EVENT_STATUS}
    return {i for i in candidates if last[events[i][0]] == i}


def series_of_rows(start: float, end: float, buckets: int, read: TimelineRows) -> dict[str, Any]:
    """`series` of a lean read (`TimelineRows`): the same replay, the same answer, on plain
    tuples and with the queue and running counts kept as two integers (the only counts the
    answer samples), so a window of many events costs one tight loop. That it equals
    `series` is `tests/contract/test_timeline_rows.py`'s."""
    if end <= start or buckets < 1:
        raise ValueError("series: need start < end and at least one bucket")
    step = (end - start) / buckets
    completed_s, failed_s, none = S.COMPLETED, S.FAILED, (0, 0)
    # each task's weight by its status (the status itself is never read back), each event
    # kind's status and weight: no enum is hashed in the loop
    status = {t.task_id: _WEIGHT.get(t.status, none) for t in read.at_start if t.status}
    leads_to = {kind: (s, _WEIGHT.get(s, none)) for kind, s in EVENT_STATUS.items()}
    to_failed = (failed_s, none)
    queued = sum(read.baseline.get(s, 0) * w[0] for s, w in _WEIGHT.items())
    running = sum(read.baseline.get(s, 0) * w[1] for s, w in _WEIGHT.items())
    queued += sum(w[0] for w in status.values())
    running += sum(w[1] for w in status.values())
    events: Sequence[EventRow] = sorted(read.events, key=itemgetter(2))
    requeues_failed = _requeues_that_failed(events)
    completed, failed = [0] * buckets, [0] * buckets
    queue, run = [0] * buckets, [0] * buckets
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0] * buckets)
    counted: dict[str, list[int]] = defaultdict(lambda: [0] * buckets)
    running_since: dict[str, float] = {}
    sampled = 0
    for i, (task_id, kind, at, task_type, started_at, _) in enumerate(events):
        if not start <= at < end:
            continue
        bucket = min(buckets - 1, int((at - start) // step))
        while sampled < bucket:  # every bucket before ended before this event
            queue[sampled], run[sampled] = queued, running
            sampled += 1
        to = to_failed if i in requeues_failed else leads_to.get(kind)
        if to is None:
            continue
        new, weight = to
        old = status.get(task_id, none)
        queued, running = queued + weight[0] - old[0], running + weight[1] - old[1]
        status[task_id] = weight
        if weight[1]:
            running_since.setdefault(task_id, at)
        elif new is completed_s:
            completed[bucket] += 1
            since = running_since.pop(task_id, None)
            began = started_at if started_at is not None else since
            if began is not None and began <= at:
                spent[str(task_type)][bucket] += at - began
                counted[str(task_type)][bucket] += 1
        elif new is failed_s:
            failed[bucket] += 1
    queue[sampled:], run[sampled:] = [queued] * (buckets - sampled), [running] * (buckets - sampled)
    return _answer(
        start, end, step, completed, failed, queue, run, _durations(buckets, spent, counted)
    )


def bucket_count(window: float, requested: int | None) -> int:
    """Buckets for a window: the requested number (1-240), else 60, never under 10 s each."""
    if requested is not None:
        return requested
    return max(1, min(DEFAULT_BUCKETS, math.floor(window / 10.0)))
