"""The pgqueuer peer: one no-op entrypoint on a PostgreSQL database, run as
`python -m bench.pgqueuer_app --batch-size 1 --max-concurrent-tasks 2`: `pgqueuer.run(main, ...)`
on uvloop, which is what `pgq run bench.pgqueuer_app:main ...` does. (pgqueuer 1.6.0's `pgq run`
fails before it starts with typer 0.29: its `--log-level` option reaches
`setup_fancy_logger` as a str, "AttributeError: 'str' object has no attribute 'name'".)

Configured by environment (the workers are separate processes started by the harness):
BENCH_PG_URL, the database (the same server as fredica's PostgreSQL store); BENCH_PGQ_READY, a
file this worker creates once its LISTEN connection answers a health-check NOTIFY, so the
producer starts the clock only when every worker is in its dequeue loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pgqueuer
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
from pgqueuer.errors import FailingListenerError


async def _announce_ready(qm: QueueManager, ready: Path) -> None:
    """Create `ready` once a NOTIFY round trip through this worker's listener succeeds."""
    while True:
        try:
            await qm.listener_healthy(timeout=timedelta(seconds=0.5))
        except FailingListenerError:
            continue
        ready.touch()
        return


@contextlib.asynccontextmanager
async def main() -> AsyncIterator[QueueManager]:
    """The worker: a QueueManager (no scheduler) on one asyncpg connection, as in pgqueuer's
    examples; the dispatch limits are `pgqueuer.run`'s (the `pgq run` flags)."""
    connection = await asyncpg.connect(os.environ["BENCH_PG_URL"])
    qm = QueueManager(Queries(AsyncpgDriver(connection)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        """No work: the benchmark measures the queue, not the task."""
        return None

    ready = os.environ.get("BENCH_PGQ_READY")
    announcer = asyncio.create_task(_announce_ready(qm, Path(ready))) if ready else None
    try:
        yield qm
    finally:
        if announcer is not None:
            announcer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await announcer
        await connection.close()


def cli(argv: list[str] | None = None) -> None:
    """`pgq run`'s dispatch flags, then `pgqueuer.run` (SIGTERM / SIGINT stop it)."""
    parser = argparse.ArgumentParser(prog="python -m bench.pgqueuer_app")
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--max-concurrent-tasks", type=int, default=None)
    args = parser.parse_args(argv)
    run = pgqueuer.run(
        main, batch_size=args.batch_size, max_concurrent_tasks=args.max_concurrent_tasks
    )
    try:
        import uvloop
    except ImportError:  # pgqueuer installs uvloop except on Windows
        asyncio.run(run)
    else:
        uvloop.run(run)


if __name__ == "__main__":
    cli()
