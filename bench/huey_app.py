"""The Huey peer: a SqliteHuey with one no-op task, for `huey_consumer bench.huey_app.huey`.

Configured by environment (the consumer is a separate process started by the harness):
BENCH_HUEY_DB (the SQLite file), BENCH_EXPECTED (how many completions end the run) and
BENCH_STATUS_DIR (where the consumer reports `ready` and `done`).

Durability is set to fredica's: WAL and synchronous=NORMAL. (SqliteHuey's own choices are WAL
with SQLite's default synchronous=FULL, or `fsync=False` which means synchronous=OFF; neither
would be the same durability as the system it is compared with.)
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from huey import SqliteHuey
from huey.constants import WORKER_THREAD
from huey.signals import SIGNAL_COMPLETE
from huey.storage import SqliteStorage

from bench import status

WORKER_TYPE = WORKER_THREAD


class NormalSyncStorage(SqliteStorage):
    """SqliteStorage with synchronous=NORMAL (fredica's setting), WAL as SqliteHuey's default."""

    def _create_connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection = super()._create_connection()
        conn.execute("pragma synchronous=NORMAL")
        return conn


class NormalSyncHuey(SqliteHuey):
    storage_class = NormalSyncStorage


huey = NormalSyncHuey("bench", filename=os.environ.get("BENCH_HUEY_DB", ":memory:"))


@huey.task()
def noop() -> None:
    """No work: the benchmark measures the queue, not the task."""
    return None


@huey.on_startup()
def _ready() -> None:
    # one line per worker thread; the harness starts producing when every worker is up
    with status.lock, (status.STATUS_DIR / "ready").open("a") as f:
        f.write(f"{threading.current_thread().name}\n")


@huey.signal(SIGNAL_COMPLETE)
def _completed(signal: str, task: Any) -> None:
    status.completed()
