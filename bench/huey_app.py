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
import time
from pathlib import Path
from typing import Any

from huey import SqliteHuey
from huey.constants import WORKER_THREAD
from huey.signals import SIGNAL_COMPLETE
from huey.storage import SqliteStorage

WORKER_TYPE = WORKER_THREAD
PROGRESS_EVERY = 500  # completions between progress files (for a run that never finishes)


class NormalSyncStorage(SqliteStorage):
    """SqliteStorage with synchronous=NORMAL (fredica's setting), WAL as SqliteHuey's default."""

    def _create_connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection = super()._create_connection()
        conn.execute("pragma synchronous=NORMAL")
        return conn


class NormalSyncHuey(SqliteHuey):
    storage_class = NormalSyncStorage


huey = NormalSyncHuey("bench", filename=os.environ.get("BENCH_HUEY_DB", ":memory:"))

_status = Path(os.environ.get("BENCH_STATUS_DIR", "."))
_expected = int(os.environ.get("BENCH_EXPECTED", "0"))
_lock = threading.Lock()
_done = 0


@huey.task()
def noop() -> None:
    """No work: the benchmark measures the queue, not the task."""
    return None


@huey.on_startup()
def _ready() -> None:
    # one line per worker thread; the harness starts producing when every worker is up
    with _lock, (_status / "ready").open("a") as f:
        f.write(f"{threading.current_thread().name}\n")


@huey.signal(SIGNAL_COMPLETE)
def _completed(signal: str, task: Any) -> None:
    global _done
    with _lock:
        _done += 1
        count = _done
    if count == _expected:
        _write(_status / "done", count)
    elif count % PROGRESS_EVERY == 0:
        _write(_status / "progress", count)


def _write(path: Path, count: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{count} {time.time():.6f}\n")
    tmp.replace(path)
