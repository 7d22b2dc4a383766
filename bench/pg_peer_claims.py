"""Claim latency of the PostgreSQL task queues (procrastinate, pgqueuer) at growing backlogs,
as `bench.claim_cost` measures fredica's PostgreSQL store: one fresh database per backlog size
on the same server, a backlog of which half is ready and half is not yet due (fredica's half
waits on dependencies; the peers have no dependencies, so theirs waits on a start time an hour
ahead), then `claims` rounds of one claim (the next ready job, marked running by this worker)
and its completion, one after the other, through each peer's own API and driver.

- procrastinate: `JobManager.fetch_job` (its `procrastinate_fetch_job` function) and
  `finish_job(..., succeeded, delete_job=False)`, as its worker calls them, on its async
  psycopg connector; the backlog through `batch_defer_async` (its jobs, its triggers).
- pgqueuer: `Queries.dequeue(batch_size=1, ...)` and `Queries.log_jobs([(job, "successful",
  None)])`, as its QueueManager calls them (the manager buffers the log calls; here each one is
  flushed at once, as fredica's completion is), on one asyncpg connection; the backlog through
  `Queries.enqueue`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from importlib.metadata import version
from statistics import mean
from typing import Any

from bench.pgserver import PgServer
from bench.util import log, percentile, rnd

BATCH = 1000  # jobs per enqueue call while the backlog is built
NOT_DUE = timedelta(hours=1)  # the half of the backlog that is not ready


def _timing(claim_ms: list[float], complete_ms: list[float]) -> dict[str, Any]:
    total = [a + b for a, b in zip(claim_ms, complete_ms, strict=True)]
    return {
        "claims": len(total),
        "claim_complete_ms": rnd(mean(total), 4),
        "claim_complete_p50_ms": rnd(percentile(total, 50), 4),
        "claim_only_ms": rnd(mean(claim_ms), 4),
        "complete_only_ms": rnd(mean(complete_ms), 4),
        "claim_only_p99_ms": rnd(percentile(claim_ms, 99), 4),
    }


# --- procrastinate ---------------------------------------------------------------------------
async def _procrastinate(url: str, size: int, claims: int) -> dict[str, Any]:
    import procrastinate
    from procrastinate.jobs import Status

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    def noop() -> None:
        return None

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        t0 = time.perf_counter()
        for start in range(0, size, BATCH):
            k = min(BATCH, size - start)
            ready = k // 2
            await noop.batch_defer_async(*({} for _ in range(ready)))
            later = noop.configure(schedule_in={"seconds": NOT_DUE.total_seconds()})
            await later.batch_defer_async(*({} for _ in range(k - ready)))
        built = time.perf_counter() - t0
        await app.connector.execute_query_async("ANALYZE")
        manager = app.job_manager
        worker_id = await manager.register_worker()
        claim_ms: list[float] = []
        complete_ms: list[float] = []
        for _ in range(claims):
            t1 = time.perf_counter()
            job = await manager.fetch_job(queues=None, worker_id=worker_id)
            t2 = time.perf_counter()
            if job is None:
                raise RuntimeError("procrastinate: expected a ready job, fetched none")
            await manager.finish_job(job, Status.SUCCEEDED, delete_job=False)
            t3 = time.perf_counter()
            claim_ms.append((t2 - t1) * 1000)
            complete_ms.append((t3 - t2) * 1000)
    return {**_timing(claim_ms, complete_ms), "backlog_build_s": rnd(built, 1)}


# --- pgqueuer --------------------------------------------------------------------------------
async def _pgqueuer(url: str, size: int, claims: int) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import Queries
    from pgqueuer.ports.repository import EntrypointExecutionParameter

    conn = await asyncpg.connect(url)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        await queries.install()
        t0 = time.perf_counter()
        for start in range(0, size, BATCH):
            k = min(BATCH, size - start)
            ready = k // 2
            after: list[timedelta | None] = [None] * ready + [NOT_DUE] * (k - ready)
            await queries.enqueue(["noop"] * k, [None] * k, [0] * k, after)
        built = time.perf_counter() - t0
        await conn.execute("ANALYZE")
        entrypoints = {"noop": EntrypointExecutionParameter(concurrency_limit=0)}
        manager_id = uuid.uuid4()
        claim_ms: list[float] = []
        complete_ms: list[float] = []
        for _ in range(claims):
            t1 = time.perf_counter()
            jobs = await queries.dequeue(
                batch_size=1,
                entrypoints=entrypoints,  # type: ignore[arg-type]
                queue_manager_id=manager_id,  # type: ignore[arg-type]
                global_concurrency_limit=None,
                heartbeat_timeout=timedelta(seconds=30),
            )
            t2 = time.perf_counter()
            if len(jobs) != 1:
                raise RuntimeError(f"pgqueuer: expected one ready job, dequeued {len(jobs)}")
            await queries.log_jobs([(jobs[0], "successful", None)])
            t3 = time.perf_counter()
            claim_ms.append((t2 - t1) * 1000)
            complete_ms.append((t3 - t2) * 1000)
    finally:
        await conn.close()
    return {**_timing(claim_ms, complete_ms), "backlog_build_s": rnd(built, 1)}


PEERS = {"procrastinate": _procrastinate, "pgqueuer": _pgqueuer}


def _config(peer: str) -> str:
    """How `peer` was driven, with its installed version (only called for a peer that is)."""
    if peer == "procrastinate":
        return (
            f"procrastinate {version('procrastinate')}: JobManager.fetch_job + finish_job "
            "(succeeded, kept), async psycopg connector; backlog by batch_defer_async"
        )
    return (
        f"pgqueuer {version('pgqueuer')}: Queries.dequeue(batch_size=1) + log_jobs "
        "(successful), one asyncpg connection; backlog by Queries.enqueue"
    )


def claim_costs(server: PgServer, sizes: list[int], claims: int) -> dict[str, Any]:
    """Each peer at each backlog size on a fresh database of `server` (dropped afterwards):
    {"sizes": {peer: {label: timing}}, "config": {peer: text}}; a peer that is not installed
    is reported as such."""
    from bench import claim_cost as cc

    out: dict[str, Any] = {"sizes": {}, "config": {}, "unavailable": {}}
    for peer, run in PEERS.items():
        try:
            __import__(peer)
        except ImportError as exc:
            out["unavailable"][peer] = f"{exc}; install the peers with pip install -e '.[bench]'"
            continue
        out["sizes"][peer] = {}
        for size in sizes:
            url = server.create_database()
            try:
                n = min(claims, max(1, size // 4))
                log(f"  {peer}: {cc.label(size)} jobs, {n} claims + completions")
                out["sizes"][peer][cc.label(size)] = asyncio.run(run(url, size, n))
            finally:
                server.drop_database(url)
    out["config"] = {peer: _config(peer) for peer in out["sizes"]}
    return out
