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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
        per_bucket: dict[str, list[float | None]] = {}
        summary: dict[str, dict[str, float]] = {}
        for kind in sorted(self.counted):
            spent, counted = self.spent[kind], self.counted[kind]
            per_bucket[kind] = [
                round(spent[b] / counted[b], 3) if counted[b] else None for b in range(self.buckets)
            ]
            n = sum(counted)
            summary[kind] = {"count": n, "mean_sec": round(sum(spent) / n, 3)}
        return per_bucket, summary


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
    durations, summary = replay.durations()
    return {
        "start": start,
        "end": end,
        "step_sec": step,
        "buckets": [start + b * step for b in range(buckets)],
        "completed": replay.completed,
        "failed": replay.failed,
        "throughput_per_min": [round(c * 60.0 / step, 3) for c in replay.completed],
        "queue_depth": replay.queue,
        "running": replay.running,
        "durations_sec": durations,
        "duration_summary": summary,
    }


def bucket_count(window: float, requested: int | None) -> int:
    """Buckets for a window: the requested number (1-240), else 60, never under 10 s each."""
    if requested is not None:
        return requested
    return max(1, min(DEFAULT_BUCKETS, math.floor(window / 10.0)))
