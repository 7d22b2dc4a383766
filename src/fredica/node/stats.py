"""The charts' use case: throughput, queue depth and per-type durations over a window, from
the task events the store records (`domain.timeseries` does the arithmetic)."""

from __future__ import annotations

from typing import Any

from fredica.domain import timeseries
from fredica.store.base import TaskStore

EVENT_LIMIT = 200_000  # status events read per request; beyond, the newest part is left out


class Stats:
    def __init__(self, store: TaskStore) -> None:
        self._store = store

    async def timeseries(self, window: float, buckets: int) -> dict[str, Any]:
        """The series of the last `window` seconds in `buckets` buckets, by the store's clock
        (the one that stamps the events). `truncated`: more events than one request reads."""
        end = await self._store.now()
        start = end - window
        read = await self._store.timeline_rows(start, end, EVENT_LIMIT)
        out = timeseries.series_of_rows(start, end, buckets, read)
        return {"window_sec": window, "truncated": len(read.events) >= EVENT_LIMIT, **out}
