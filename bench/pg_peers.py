"""The PostgreSQL task queues a user who already runs PostgreSQL would pick instead of fredica's
PostgreSQL store: procrastinate, on the same server as the store (a fresh database per run),
with the same durability (the server's fsync on, synchronous_commit on).

Each worker is its own process, as in production; this process is the producer. Both ends of
the measurement are the database's clock: first defer -> the last `succeeded` event.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.peers import READY_TIMEOUT, Child, PeerUnavailable
from bench.pgserver import PgServer
from bench.util import throughput_result

BATCH = 1000  # jobs per batch_defer call (fredica's bench creates pipelines of 1000 tasks)


def _db_now(url: str) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8").fetchone()
    return float(row[0]) if row else 0.0


def _succeeded(url: str) -> tuple[int, float | None]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT COUNT(*), EXTRACT(EPOCH FROM MAX(at))::float8 FROM procrastinate_events"
            " WHERE type = 'succeeded'"
        ).fetchone()
    return (int(row[0]), row[1]) if row else (0, None)


def run_procrastinate(
    server: PgServer, work: Path, n_tasks: int, procs: int, concurrency: int, deadline_s: float
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
        completed, last = 0, None
        while _db_now(url) < t0 + deadline_s:
            completed, last = _succeeded(url)
            if completed >= n_tasks:
                break
            if not all(c.alive() for c in children):
                raise RuntimeError(f"a procrastinate worker exited:\n{children[0].tail()}")
            time.sleep(0.05)
        result = throughput_result(n_tasks, completed, completed >= n_tasks, t0, t_created, last)
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
