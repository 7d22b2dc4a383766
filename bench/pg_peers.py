"""The PostgreSQL task queues a user who already runs PostgreSQL would pick instead of fredica's
PostgreSQL store: procrastinate and pgqueuer, on the same server as the store (a fresh database
per run), with the same durability (the server's fsync on, synchronous_commit on; pgqueuer's
tables all logged, `pgq install`'s default durability).

Each worker is its own process, as in production; this process is the producer. Both ends of
the measurement are the database's clock: first defer -> the last `succeeded` event
(procrastinate), first enqueue -> the last `successful` row of `pgqueuer_log` (pgqueuer, which
writes that row in the statement that deletes the finished job).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg

from bench.peers import READY_TIMEOUT, Child, PeerUnavailable
from bench.pgserver import PgServer
from bench.util import throughput_result

BATCH = 1000  # jobs per batch_defer / enqueue call (fredica's bench creates pipelines of 1000)
DEFAULT_PGQ_BATCH = 10  # `pgq run`'s --batch-size default (pgqueuer 1.6)
_CLOCK = "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8"  # the database's clock


def _db_now(url: str) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute(_CLOCK).fetchone()
    return float(row[0]) if row else 0.0


def _await_done(
    url: str,
    children: list[Child],
    peer: str,
    done: Callable[[str], tuple[int, float | None]],
    n_tasks: int,
    t0: float,
    t_created: float,
    deadline_s: float,
) -> dict[str, Any]:
    """Poll `done` (jobs finished, the database time of the last) until all `n_tasks` are or
    the deadline passes; a worker that exits ends the run with its log's tail."""
    completed, last = 0, None
    while _db_now(url) < t0 + deadline_s:
        completed, last = done(url)
        if completed >= n_tasks:
            break
        for child in children:
            if not child.alive():
                raise RuntimeError(f"a {peer} worker exited:\n{child.tail()}")
        time.sleep(0.05)
    return throughput_result(n_tasks, completed, completed >= n_tasks, t0, t_created, last)


def _finished(url: str, sql: str) -> tuple[int, float | None]:
    """(jobs finished, the database time of the last) by a peer's own bookkeeping `sql`."""
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
    return (int(row[0]), row[1]) if row else (0, None)


def _succeeded(url: str) -> tuple[int, float | None]:
    return _finished(
        url,
        "SELECT COUNT(*), EXTRACT(EPOCH FROM MAX(at))::float8 FROM procrastinate_events"
        " WHERE type = 'succeeded'",
    )


def run_procrastinate(
    server: PgServer,
    work: Path,
    n_tasks: int,
    procs: int,
    concurrency: int | None,
    deadline_s: float,
) -> dict[str, Any]:
    """`procs` worker processes (`worker --concurrency C`, LISTEN/NOTIFY on) on a fresh
    database; the producer defers `n_tasks` no-op jobs in batches of BATCH."""
    try:
        import procrastinate
    except ImportError as exc:
        raise PeerUnavailable(f"{exc}; install the peers with pip install -e '.[bench]'") from exc
    work.mkdir(parents=True, exist_ok=True)
    url = server.create_database()
    env = {"BENCH_PG_URL": url}
    os.environ.update(env)
    from bench import procrastinate_app

    app = procrastinate_app.app
    children: list[Child] = []
    try:
        with app.replace_connector(procrastinate.SyncPsycopgConnector(conninfo=url)) as sync_app:
            sync_app.open()
            sync_app.schema_manager.apply_schema()
            argv = [sys.executable, "-m", "procrastinate", "--app", "bench.procrastinate_app.app"]
            argv += ["worker", "--concurrency", str(concurrency), "--delete-jobs", "never"]
            children = [Child(argv, work / f"worker{i}.log", env) for i in range(procs)]
            _wait_workers(url, children, procs)
            noop = sync_app.tasks["noop"]
            t0 = _db_now(url)
            for start in range(0, n_tasks, BATCH):
                noop.batch_defer(*({} for _ in range(min(BATCH, n_tasks - start))))
            t_created = _db_now(url)
            sync_app.close()
        result = _await_done(url, children, "procrastinate", _succeeded, n_tasks, t0, t_created,
                             deadline_s)  # fmt: skip
    finally:
        for child in children:
            child.stop(signal.SIGTERM)
        server.drop_database(url)
    result["config"] = (
        f"procrastinate {procrastinate.__version__} on the same PostgreSQL server (fresh "
        f"database, fsync on, synchronous_commit on), {procs} worker process(es) `worker "
        f"--concurrency {concurrency} --delete-jobs never` (LISTEN/NOTIFY on, the default), "
        f"sync task; producer `batch_defer` of {BATCH} jobs per call"
    )
    return result


def _wait_workers(url: str, children: list[Child], procs: int) -> None:
    """Until every worker registered itself (procrastinate_workers rows)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if not all(c.alive() for c in children):
            raise RuntimeError(f"a procrastinate worker did not start:\n{children[0].tail()}")
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT COUNT(*) FROM procrastinate_workers").fetchone()
        if row and int(row[0]) >= procs:
            return
        time.sleep(0.05)
    raise RuntimeError("procrastinate workers did not start")


# --- pgqueuer ----------------------------------------------------------------------------------
def _pgq_successful(url: str) -> tuple[int, float | None]:
    return _finished(
        url,
        "SELECT COUNT(*), EXTRACT(EPOCH FROM MAX(created))::float8 FROM pgqueuer_log"
        " WHERE status = 'successful'",
    )


async def _pgq_install(url: str) -> None:
    """pgqueuer's schema, as `pgq install` makes it (durability `durable`: every table logged)."""
    import asyncpg
    from pgqueuer import Queries

    conn = await asyncpg.connect(url)
    try:
        await Queries.from_asyncpg_connection(conn).install()
    finally:
        await conn.close()


async def _pgq_enqueue(url: str, n_tasks: int) -> tuple[float, float]:
    """Enqueue `n_tasks` no-op jobs in batches of BATCH (one INSERT each); the database's clock
    before the first and after the last."""
    import asyncpg
    from pgqueuer import Queries

    conn = await asyncpg.connect(url)
    try:
        queries = Queries.from_asyncpg_connection(conn)
        t0 = float(await conn.fetchval(_CLOCK))
        for start in range(0, n_tasks, BATCH):
            k = min(BATCH, n_tasks - start)
            await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
        t_created = float(await conn.fetchval(_CLOCK))
    finally:
        await conn.close()
    return t0, t_created


def run_pgqueuer(
    server: PgServer,
    work: Path,
    n_tasks: int,
    procs: int,
    concurrency: int | None,
    deadline_s: float,
) -> dict[str, Any]:
    """`procs` worker processes (`pgqueuer.run` with max_concurrent_tasks C and batch size
    C // 2: the cap must be at least twice the batch; C None: pgqueuer's own defaults, a
    batch of 10 and no cap) on a fresh database; the producer enqueues `n_tasks` no-op jobs in
    batches of BATCH."""
    try:
        import asyncpg  # noqa: F401  (the driver of the workers and the producer)
        import pgqueuer  # noqa: F401
    except ImportError as exc:
        raise PeerUnavailable(f"{exc}; install the peers with pip install -e '.[bench]'") from exc
    batch = DEFAULT_PGQ_BATCH if concurrency is None else max(1, concurrency // 2)
    work.mkdir(parents=True, exist_ok=True)
    url = server.create_database()
    children: list[Child] = []
    try:
        asyncio.run(_pgq_install(url))
        argv = [sys.executable, "-m", "bench.pgqueuer_app"]
        argv += ["--batch-size", str(batch)]
        if concurrency is not None:
            argv += ["--max-concurrent-tasks", str(concurrency)]
        ready = [work / f"worker{i}.ready" for i in range(procs)]
        for path in ready:
            path.unlink(missing_ok=True)
        children = [
            Child(argv, work / f"worker{i}.log", {"BENCH_PG_URL": url, "BENCH_PGQ_READY": str(r)})
            for i, r in enumerate(ready)
        ]
        _wait_ready(children, ready)
        t0, t_created = asyncio.run(_pgq_enqueue(url, n_tasks))
        result = _await_done(url, children, "pgqueuer", _pgq_successful, n_tasks, t0, t_created,
                             deadline_s)  # fmt: skip
    finally:
        for child in children:
            child.stop(signal.SIGTERM)
        server.drop_database(url)
    cap = concurrency if concurrency is not None else "unset (its default)"
    result["config"] = (
        f"pgqueuer {version('pgqueuer')} on the same PostgreSQL server (fresh database, fsync "
        f"on, synchronous_commit on, schema of `pgq install`: durability durable, every table "
        f"logged), {procs} worker process(es) of `pgqueuer.run` (what `pgq run` does) with "
        f"batch_size {batch}, max_concurrent_tasks {cap} (a QueueManager on one "
        f"asyncpg connection, LISTEN/NOTIFY on, the default), async entrypoint; producer "
        f"`Queries.enqueue` of {BATCH} jobs per call"
    )
    return result


def _wait_ready(children: list[Child], ready: list[Path]) -> None:
    """Until every pgqueuer worker answered a health-check NOTIFY (its ready file)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        for child in children:
            if not child.alive():
                raise RuntimeError(f"a pgqueuer worker did not start:\n{child.tail()}")
        if all(path.exists() for path in ready):
            return
        time.sleep(0.05)
    raise RuntimeError("pgqueuer workers did not start")
