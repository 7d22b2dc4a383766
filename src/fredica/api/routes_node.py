"""The node's own state: `/healthz`, `/metrics`, status, cluster nodes, drain, restart log,
changes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fredica import __version__
from fredica.api import deps

router = APIRouter()

PROMETHEUS_TEXT = "text/plain; version=0.0.4"


class _Metrics:
    """Prometheus collector over one status snapshot (a fresh one per scrape)."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        counts = GaugeMetricFamily("fredica_tasks", "Tasks by status", labels=["status"])
        for status, n in (self.snapshot.get("task_counts") or {}).items():
            counts.add_metric([status], n)
        yield counts
        running = GaugeMetricFamily("fredica_running_tasks", "Tasks executing on this node")
        running.add_metric([], self.snapshot.get("running", 0))
        yield running
        stats = CounterMetricFamily(
            "fredica_engine_tasks", "Task outcomes on this node since start", labels=["outcome"]
        )
        for outcome, n in self.snapshot.get("engine_stats", {}).items():
            stats.add_metric([outcome], n)
        yield stats


@router.get("/healthz")
async def healthz(node: deps.NodeDep) -> JSONResponse:
    """Liveness: 200 with `state: ok` while the node and its store are healthy, 503 with the
    state (`disk_full`, `store_error`, ...) and a one-line reason otherwise. No token needed."""
    health = node.health()
    return JSONResponse(
        status_code=200 if health == "ok" else 503,
        content={
            "ok": health == "ok",
            "state": health,
            "node_id": node.node_id,
            "version": __version__,
        },
    )


@router.get("/metrics")
async def prometheus(node: deps.NodeDep) -> Response:
    """The node's counters in the Prometheus text format: tasks by status, running and queued
    work, completions by outcome, disk space."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Metrics(await node.status()))
    return PlainTextResponse(generate_latest(registry).decode(), media_type=PROMETHEUS_TEXT)


@router.get("/api/v1/status")
async def status(node: deps.NodeDep) -> dict[str, Any]:
    """This node at a glance: id and version, tasks by status, running work, the engine's
    counters, capabilities and scores, disk, cloud limits, the cluster's outbox and the
    data dir."""
    return await node.status()


@router.get("/api/v1/nodes")
async def nodes(node: deps.NodeDep) -> dict[str, Any]:
    """Every node this node knows with its state (online, busy, draining, quarantined,
    offline); `now` is the clock `last_seen_at` is measured by."""
    rows, now = await node.node_table()
    return {"nodes": [n.to_json() for n in rows], "now": now, "self": node.node_id}


@router.post("/api/v1/node/drain")
async def drain(node: deps.NodeDep) -> dict[str, Any]:
    """Stop claiming new work; the running work finishes (`running` says how much is left)."""
    return await node.drain()


@router.post("/api/v1/node/handoff")
async def handoff(node: deps.NodeDep, to: str | None = None) -> dict[str, Any]:
    """Hand every active pipeline this node owns to a peer now (before this machine sleeps):
    `to`, else a peer with `node.always_on`, else the one up the longest. Answers with the
    target and the pipelines moved (409 when no peer is online)."""
    return await node.hand_off(to)


@router.post("/api/v1/node/undrain")
async def undrain(node: deps.NodeDep) -> dict[str, Any]:
    """Stop draining: the node claims work again at once (undoes `POST /api/v1/node/drain`)."""
    return await node.undrain()


@router.get("/api/v1/restart-log")
async def restart_log(
    node: deps.NodeDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    """What the recovery after each unclean stop did with every task it found (newest first):
    what the web UI's recovery dialog shows."""
    return {"entries": [e.to_json() for e in await node.restart_log(limit)]}


@router.get("/api/v1/changes")
async def changes(
    node: deps.NodeDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    timeout: Annotated[float, Query(ge=0, le=60)] = 25.0,
) -> dict[str, Any]:
    """Long-poll: returns when anything changed after version `after`."""
    return {"version": await node.changes.wait(after, timeout)}
