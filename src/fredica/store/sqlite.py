"""The embedded SQLite store: zero setup, one file per node (DESIGN §4.14 topologies a and b).

The node owns the rows it created (`owner_id` = its id); claims, liveness and recovery act on
those rows only, so replicas of other owners' rows can later live in the same file. One
connection in WAL mode, used from one dedicated thread; every write is one `BEGIN IMMEDIATE`
transaction, and a busy or locked database is retried before `StoreError` is raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from fredica.domain import errors
from fredica.domain.clock import Clock, SystemClock
from fredica.store import schema
from fredica.store.rows import Conn, Dialect
from fredica.store.sql import SQLStore, shared_connection

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000

DIALECT = Dialect(
    name="sqlite",
    lock="",  # BEGIN IMMEDIATE already holds the write lock for the whole file
    skip_locked="",
    claim_hint="INDEXED BY task_ready",
    insertion_order="rowid",
    driver_errors=(sqlite3.Error,),
    one_step_rows=True,
    tuples=lambda conn, sql, params: _tuples(cast(sqlite3.Connection, conn), sql, params),
    # SQLite has no statistics unless ANALYZE ran: without them it may walk the type index for
    # a pipeline's tasks (every task of that type) instead of the pipeline's few rows.
    index_hint="INDEXED BY {index}",
)


def _tuples(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    cur = conn.cursor()
    cur.row_factory = None
    return cur.execute(sql, params).fetchall()


class SQLiteTaskStore(SQLStore):
    """The owner-store contract on a SQLite file."""

    dialect = DIALECT

    def __init__(self, path: Path | str, node_id: str, clock: Clock | None = None) -> None:
        super().__init__(node_id, clock or SystemClock(), threads=1)
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = connect(self.path)
            migrate(self._conn)
            # configuration rows written before they were kept per node belong to this node
            self._conn.execute("UPDATE app_config SET node_id = ? WHERE node_id = ''", (node_id,))
        except sqlite3.DatabaseError as exc:
            if not os.access(self.path.parent, os.W_OK):
                raise errors.StoreError(
                    f"cannot open the database {self.path}: the data dir is read-only or not "
                    "writable by this user"
                ) from exc
            if self._is_full(exc):
                raise errors.StoreFull(f"cannot open the database {self.path}: {exc}") from exc
            raise errors.StoreError(f"cannot open the database {self.path}: {exc}") from exc
        except OSError as exc:
            raise errors.StoreError(f"cannot create {self.path.parent}: {exc}") from exc

    def _connection(self) -> contextlib.AbstractContextManager[Conn]:
        return shared_connection(self._conn)

    def _begin(self, conn: Conn) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def _allocate_seq(self, conn: Conn) -> int:
        row = conn.execute(
            "UPDATE change_counter SET seq = seq + 1 WHERE id = 1 RETURNING seq AS seq"
        ).fetchone()
        return int(row["seq"])

    def _clock_now(self, conn: Conn) -> float:
        assert self.clock is not None
        return self.clock.now()

    def _own(self) -> tuple[str, tuple[Any, ...]]:
        return "owner_id = ?", (self.node_id,)

    def _is_retryable(self, exc: BaseException) -> bool:
        text = str(exc).lower()
        return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)

    def _read_cursor_bound(self, conn: Conn) -> int:
        row = conn.execute("SELECT seq FROM change_counter WHERE id = 1").fetchone()
        return int(row["seq"])

    def _close_connections(self) -> None:
        self._conn.close()

    def _is_full(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc).lower()

    def _has_room(self) -> bool:
        try:
            return shutil.disk_usage(self.path.parent).free >= ROOM_AGAIN_BYTES
        except OSError:
            return True


#: after a full disk, the store is healthy again once this much is free (a tiny write can
#: succeed into pages the database already has while the disk is still full)
ROOM_AGAIN_BYTES = 1 << 20


def connect(path: Path | str) -> sqlite3.Connection:
    """Open a connection with the settings every fredica connection uses."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -32000")
    # Checkpoints (the only fsyncs with synchronous=NORMAL) every ~32 MB of WAL instead of
    # ~4 MB: measured +15% no-op throughput (bench/); the WAL file may grow to that size.
    conn.execute("PRAGMA wal_autocheckpoint = 8000")
    return conn


def migrate(conn: sqlite3.Connection, target: int = schema.SCHEMA_VERSION) -> int:
    """Apply pending migrations up to `target`; return the schema version."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT MAX(version) AS v FROM schema_version").fetchone()
        current = row["v"] or 0
        if current > schema.SCHEMA_VERSION:
            raise errors.StoreError(
                f"database schema version {current} is newer than this fredica "
                f"({schema.SCHEMA_VERSION}); upgrade fredica"
            )
        for version in range(current + 1, target + 1):
            for statement in split_sql(schema.MIGRATIONS[version - 1]):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            logger.info("schema migrated to %d", version, extra={"action": "migrate"})
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return target


def split_sql(script: str) -> list[str]:
    """The statements of a migration script (comment lines dropped)."""
    statements, buf = [], []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        buf.append(line)
        if line.rstrip().endswith(";") and sqlite3.complete_statement("\n".join(buf)):
            statements.append("\n".join(buf).strip())
            buf = []
    if "".join(buf).strip():
        statements.append("\n".join(buf).strip())
    return statements
