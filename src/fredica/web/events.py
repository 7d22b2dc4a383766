"""Server-sent events for the web UI: `snapshot` on connect, then `change` events (counts and
the task and pipeline rows that changed), `cluster` updates and a keep-alive comment.

Rows of other owners live in this node's replica, outside the change feed: a `change` event
carries `replicas` (per owner, when its rows were last pulled) whenever that moved, so that a
page showing the whole cluster knows when to read its list again.

The stream follows the node's change feed (a version that moves on every change) and reads the
changed rows from the node's per-owner change cursor, so a reconnecting browser misses nothing:
the cursor is the event id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from fredica.api import deps
from fredica.domain import errors, models
from fredica.node.service import Node
from fredica.web.panel import cluster_panel

logger = logging.getLogger(__name__)

router = APIRouter(tags=["web"])

KEEPALIVE_SEC = 15.0  # seconds between keep-alive comments on an idle event stream
MIN_EVENT_INTERVAL_SEC = 0.25  # seconds; coalesces bursts (progress flushes) into one event
CLUSTER_REFRESH_SEC = 5.0  # seconds; load and disk in change events at most this often
CHANGES_BATCH = 500  # rows per change query; a larger burst is sent over several events
ERROR_PREVIEW_CHARS = 2000  # long tracebacks are cut in events; the task page shows them whole
RECONNECT_MS = 2000  # milliseconds the browser waits before reconnecting


@router.get("/api/v1/events", response_model=None)
async def events(node: deps.NodeDep, token: str | None = None) -> StreamingResponse:
    """Server-sent events: `snapshot` on connect, then `change` events (counts and the task
    and pipeline rows that changed), `cluster` updates and a keep-alive comment every 15 s.

    `token` is accepted as a query parameter because EventSource cannot send an
    Authorization header; the API's token check reads it from there.
    """
    del token  # checked by the auth layer, not here
    return StreamingResponse(
        EventStream(node).events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def sse(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def slim_task(task: models.Task) -> dict[str, Any]:
    """A task row for lists and events: without payload and result (they can be large)."""
    data = task.to_json()
    payload = data.pop("payload") or {}
    result = data.pop("result")
    data["has_result"] = result is not None
    source = payload.get("source") or payload.get("url")
    data["source"] = source if isinstance(source, str) else None
    error = data.get("error")
    if isinstance(error, str) and len(error) > ERROR_PREVIEW_CHARS:
        data["error"] = error[:ERROR_PREVIEW_CHARS] + "…"
    return data


def slim_pipeline(pipeline: models.Pipeline) -> dict[str, Any]:
    data = pipeline.to_json()
    # params carry every ref -> id of the DAG; the detail page reads the full pipeline instead.
    data.pop("params", None)
    data["title"] = pipeline.title  # what people recognise it by (notifications, lists)
    return data


class EventStream:
    """One browser's stream: where it is in the change feed and what it was last sent."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._stop = node.changes.closed
        self._version = 0
        self._seq = 0
        self._counts: dict[str, int] = {}
        self._running = 0
        self._cluster_at = 0.0
        self._replicas: dict[str, Any] = {}

    async def events(self) -> AsyncIterator[str]:
        stop_wait = asyncio.ensure_future(self._stop.wait())
        try:
            yield f"retry: {RECONNECT_MS}\n\n"
            yield await self._snapshot()
            while (version := await self._next_version(stop_wait)) is not None:
                if version == self._version:  # idle: keep proxies and the browser connected
                    yield ": keep-alive\n\n"
                    yield await self._cluster_event()
                    continue
                event = await self._change(version)
                if event:
                    yield event
                # Coalesce a burst of changes into one event per interval.
                await asyncio.wait({stop_wait}, timeout=MIN_EVENT_INTERVAL_SEC)
        except errors.StoreError:
            # The node is stopping under us (forced shutdown): end the stream quietly.
            logger.debug("event stream ended: store closed", extra={"action": "sse_end"})
        finally:
            stop_wait.cancel()

    async def _snapshot(self) -> str:
        node = self._node
        self._version = node.changes.version  # read before the seq: a change in between re-sends
        self._seq = await node.latest_change_cursor()
        self._counts = await node.count_by_status()
        self._running = node.running
        panel = await cluster_panel(node)
        snap = {
            "node_id": node.node_id,
            "version": self._version,
            "seq": self._seq,
            "counts": self._counts,
            "running": self._running,
            "cluster": panel,
        }
        self._replicas = panel["replicas"]
        self._cluster_at = time.monotonic()
        return sse("snapshot", snap, self._seq)

    async def _next_version(self, stop_wait: asyncio.Future[Any]) -> int | None:
        """The feed's version after the next change or keep-alive; None when the node stops."""
        if self._stop.is_set():
            return None
        change_wait = asyncio.ensure_future(self._node.changes.wait(self._version, KEEPALIVE_SEC))
        try:
            await asyncio.wait({change_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not change_wait.done():
                change_wait.cancel()
        return None if self._stop.is_set() else change_wait.result()

    async def _cluster_event(self) -> str:
        self._cluster_at = time.monotonic()
        panel = await cluster_panel(self._node)
        self._replicas = panel["replicas"]
        return sse("cluster", panel)

    async def _change(self, version: int) -> str | None:
        """The `change` event for what changed since the last one (None if nothing shows)."""
        node = self._node
        self._version = version
        # The batch never splits a transaction: resuming from its cursor skips nothing.
        batch = await node.changes_since(self._seq, CHANGES_BATCH)
        self._seq = batch.cursor
        if len(batch.tasks) >= CHANGES_BATCH or len(batch.pipelines) >= CHANGES_BATCH:
            self._version -= 1  # more rows are waiting: do not wait for the next change
        replicas = await node.replica_marks()
        replicas_moved = _pulls(replicas) != _pulls(self._replicas)
        if not (batch.tasks or batch.pipelines or replicas_moved):
            return None
        # Only a task row that changed can move a count (the counts cost a read of every
        # pipeline's counters, so a change of pipelines alone does not pay for it).
        counts = await node.count_by_status() if batch.tasks else self._counts
        data: dict[str, Any] = {
            "version": version,
            "seq": self._seq,
            "counts": counts,
            "running": node.running,
            "tasks": [slim_task(t) for t in batch.tasks],
            "pipelines": [slim_pipeline(p) for p in batch.pipelines],
        }
        if replicas_moved:
            data["replicas"] = self._replicas = replicas
        slots_moved = data["running"] != self._running
        if slots_moved or time.monotonic() - self._cluster_at >= CLUSTER_REFRESH_SEC:
            data["cluster"] = await cluster_panel(node)
            self._cluster_at = time.monotonic()
        self._counts, self._running = counts, data["running"]
        return sse("change", data, self._seq)


def _pulls(marks: dict[str, Any]) -> dict[str, tuple[float, bool]]:
    """When each owner's rows were last pulled (`age_sec` moves on every read), and whether
    it is waited for (not online)."""
    return {
        owner: (mark["pulled_at"], mark.get("waiting") is not None) for owner, mark in marks.items()
    }
