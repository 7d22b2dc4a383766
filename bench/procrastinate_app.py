"""The procrastinate peer: one no-op task on a PostgreSQL database, for
`procrastinate --app bench.procrastinate_app.app worker`.

Configured by environment (the workers are separate processes started by the harness):
BENCH_PG_URL, the database (the same server as fredica's PostgreSQL store).
"""

from __future__ import annotations

import os

import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_PG_URL", ""))
)


@app.task(name="noop")
def noop() -> None:
    """No work: the benchmark measures the queue, not the task."""
    return None
