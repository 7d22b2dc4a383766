"""The PostgreSQL store: an always-on cluster shares one database (DESIGN §4.14 topology c).

Every node of the cluster points at the same database (`store.url` in worker.yaml or
`$FREDICA_STORE_URL`). The database is the owner of every row, so there is no replication and
no peer HTTP: claims lock ready rows with `FOR UPDATE SKIP LOCKED` (two nodes never wait on, or
take, the same task), every transition is the same fenced compare-and-set as on SQLite, and
liveness is judged by the database's clock (`clock_timestamp()`), one clock for the whole
cluster. Commits announce themselves with `NOTIFY fredica`; each node `LISTEN`s and wakes its
engine and its web page at once instead of polling.

The change sequence of a row is the id of the transaction that wrote it. A reader's cursor only
advances past transactions that every snapshot sees as finished (`pg_snapshot_xmin`), so a
transaction that commits late is never skipped by the change feed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg.rows import dict_row, tuple_row

from fredica.domain import errors
from fredica.domain.clock import Clock
from fredica.domain.models import JSON
from fredica.store import pg_schema
from fredica.store.base import Signal, Transfer
from fredica.store.rows import Conn, Cursor, Dialect
from fredica.store.sql import SQLStore
from fredica.store.sqlite import split_sql
from fredica.store.tx import Tx

logger = logging.getLogger(__name__)

CHANNEL = "fredica"
MIGRATION_LOCK = 7_463_102_001  # pg_advisory_lock key: nodes starting together migrate in turn
CONNECT_TIMEOUT_SEC = 10.0  # seconds a node waits for the database when it starts
POOL_WAIT_SEC = 3.0  # seconds an operation waits for a connection before `StoreUnavailable`
DIAL_TIMEOUT_SEC = 3  # seconds one connection attempt may take (an unreachable host)
# psycopg_pool doubles the delay between the attempts to replace a lost connection without
# bound (1 s, 2 s, 4 s, ...): after an outage of N s its next attempt could come N s after the
# database is back (a standby promoted a minute after the primary died: a minute more). So a
# round of attempts (after 1, 3 and 4 s) gives up after RECONNECT_ROUND_SEC; the pool shrinks,
# and the next operation that needs a connection (a heartbeat, every heartbeat_interval_sec)
# grows it again with a fresh round: it keeps trying for as long as it takes, never more than
# 2 s apart.
RECONNECT_ROUND_SEC = 4.0
LISTEN_POLL_SEC = 0.5  # seconds between checks of the stop flag while listening
LISTEN_RETRY_SEC = 1.0  # seconds before the listener reconnects after losing its connection

DIALECT = Dialect(
    name="postgresql",
    lock=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    claim_hint="",
    insertion_order="ord",
    driver_errors=(psycopg.Error,),
    key_lock="SELECT pg_advisory_xact_lock(hashtext(?)) AS locked",
    numbers_task_ord=True,
    tuples=lambda conn, sql, params: cast(_PgConn, conn).tuples(sql, params),
    union_arm_limits=True,
    json_text="({column}::jsonb ->> '{key}')",
)

_RETRYABLE = (
    pg_errors.SerializationFailure,
    pg_errors.DeadlockDetected,
    pg_errors.LockNotAvailable,
)
# a prepared statement the connection made is gone, or one it makes exists already: the
# "connection" is a transaction-mode pooler's (PgBouncer before 1.21) handing each transaction
# to whichever server connection is free
_LOST_PREPARED = (pg_errors.InvalidSqlStatementName, pg_errors.DuplicatePreparedStatement)
PREPARED_HINT = (
    "set store.prepared_statements: false behind a transaction-mode PgBouncer older than 1.21"
)


class StaleConnection(psycopg.OperationalError):
    """The first statement on a pooled connection found it dead (the server restarted or ended
    the session since the pool last used it): nothing ran, so the operation runs again on a
    fresh connection."""


class _PgConn:
    """A psycopg connection that runs the stores' `?`-style SQL.

    A write transaction (from `BEGIN` to `COMMIT` or `ROLLBACK`) runs in psycopg's pipeline
    mode: a statement is sent without waiting for its answer, and the answers are read when a
    result is first used (a row fetched, a rowcount read) or at `COMMIT`. The statements whose
    results nobody reads (`BEGIN`, the events inserted, the counters updated, the
    notifications) then cost no round trip of their own. An error is raised where the answers
    are read: at a later statement's first use, or at `COMMIT`; the transaction fails as a
    whole either way."""

    def __init__(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        self._conn = conn
        self._first = True  # no answer came from the server on this checkout yet
        self._pipeline: psycopg.Pipeline | None = None
        self._pipeline_cm: contextlib.AbstractContextManager[psycopg.Pipeline] | None = None
        self._unread = 0  # statements sent in the pipeline whose answers were not read yet

    @contextlib.contextmanager
    def _guard(self, network: bool = True, stale: bool = True) -> Iterator[None]:
        """Errors of the server's answers. Only an answer read proves the connection alive:
        an error on the first one (`stale`: where nothing can have been committed) on a
        connection found broken is a `StaleConnection`."""
        first = self._first
        try:
            yield
        except psycopg.OperationalError as exc:
            if stale and first and self._conn.broken and not isinstance(exc, pg_errors.DiskFull):
                raise StaleConnection(_first_line(exc)) from exc
            raise
        if network:
            self._first = False

    def _read_answers(self) -> None:
        """Read every answer the pipeline is owed (one round trip for all of them)."""
        if self._pipeline is not None and self._unread:
            with self._guard():
                self._pipeline.sync()
            self._unread = 0

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        if sql == "BEGIN" and self._pipeline is None:
            self._pipeline_cm = self._conn.pipeline()
            self._pipeline = self._pipeline_cm.__enter__()
        elif sql in ("COMMIT", "ROLLBACK") and self._pipeline is not None:
            return self._end(sql)
        if self._pipeline is not None:
            with self._guard(network=False):
                cur = self._send(sql, params)
            self._unread += 1
            return _Answer(self, cur)
        with self._guard():
            return self._send(sql, params)

    def _send(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[dict[str, Any]]:
        if params:
            return self._conn.execute(_convert(sql), params)  # type: ignore[arg-type]
        return self._conn.execute(sql)  # type: ignore[arg-type]

    def _end(self, sql: str) -> Cursor:
        """COMMIT or ROLLBACK, then leave the pipeline, reading every answer: an error of an
        earlier statement, or of the commit itself, is raised here. Never a `StaleConnection`:
        a commit sent may have been applied."""
        pipeline, self._pipeline, self._pipeline_cm = self._pipeline_cm, None, None
        assert pipeline is not None
        try:
            with self._guard(stale=sql == "ROLLBACK"):
                cur = self._send(sql, ())
                pipeline.__exit__(None, None, None)
        except BaseException as exc:
            with contextlib.suppress(psycopg.Error):
                pipeline.__exit__(type(exc), exc, exc.__traceback__)
            raise
        finally:
            self._unread = 0
        return cur

    def tuples(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        self._read_answers()
        with self._guard(), self._conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(_convert(sql), params)  # type: ignore[arg-type]
            return cur.fetchall()

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        if self._pipeline is None:
            with self._guard(), self._conn.cursor() as cur:
                cur.executemany(_convert(sql), params)  # type: ignore[arg-type]
            return
        with self._guard(network=False):
            # left open: its answers arrive with the next read
            self._conn.cursor().executemany(_convert(sql), params)  # type: ignore[arg-type]
        self._unread += 1


class _Answer:
    """The cursor of a statement sent in a pipeline: its answer is read on first use."""

    __slots__ = ("_conn", "_cur")

    def __init__(self, conn: _PgConn, cur: psycopg.Cursor[dict[str, Any]]) -> None:
        self._conn = conn
        self._cur = cur

    def _ready(self) -> psycopg.Cursor[dict[str, Any]]:
        self._conn._read_answers()
        return self._cur

    @property
    def rowcount(self) -> int:
        return self._ready().rowcount

    def fetchone(self) -> Any:
        return self._ready().fetchone()

    def fetchall(self) -> list[Any]:
        return self._ready().fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._ready())


_CONVERTED: dict[str, str] = {}


def _convert(sql: str) -> str:
    converted = _CONVERTED.get(sql)
    if converted is None:
        converted = sql.replace("%", "%%").replace("?", "%s")
        if len(_CONVERTED) > 4096:  # statements with IN lists of many lengths
            _CONVERTED.clear()
        _CONVERTED[sql] = converted
    return converted


def describe_url(url: str) -> str:
    """user@host:port/db of a connection URL, without its password (for messages)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an invalid postgresql:// URL)"
    hosts = str(info.get("host") or "localhost").split(",")
    ports = str(info.get("port") or "5432").split(",")
    if len(ports) == 1:  # one port for every host (libpq's rule)
        ports = ports * len(hosts)
    pairs = zip(hosts, ports, strict=False)
    where = ",".join(f"{h or 'localhost'}:{p or '5432'}" for h, p in pairs)
    user = f"{info['user']}@" if info.get("user") else ""
    return f"{user}{where}/{info.get('dbname') or ''}"


_NO_MOVES = (
    "pipelines do not change owner on PostgreSQL: the database owns every row, and a node that "
    "sleeps holds nothing the others wait for"
)


def _wait_for_database(url: str, timeout: float) -> None:
    """Return once the database accepts a connection; its last error after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(url, connect_timeout=DIAL_TIMEOUT_SEC).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.25)


class PostgresTaskStore(SQLStore):
    """The owner-store contract on a shared PostgreSQL database (see the module docstring)."""

    dialect = DIALECT

    def __init__(
        self,
        url: str,
        node_id: str,
        clock: Clock | None = None,
        pool_size: int = 4,
        listen_url: str = "",
        prepare: bool = True,
    ) -> None:
        """`listen_url`: a direct connection for `LISTEN` when `url` is a transaction-mode
        pooler ("" = `url`); `prepare=False` turns psycopg's prepared statements off (a
        transaction-mode PgBouncer before 1.21 loses them between transactions)."""
        # clock=None: the database's clock (production). Tests inject a ManualClock.
        super().__init__(node_id, clock, threads=pool_size)
        self.url = url
        self.listen_url = listen_url or url
        self.prepare = prepare
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        # why the last attempt to connect failed: a pool that has no connection to give
        # says only that it waited, and a node should say why (refused, read-only standby)
        self.last_dial_error: str | None = None
        self._db = psycopg_pool.ConnectionPool(
            url,
            connection_class=_dialer(self),
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": DIAL_TIMEOUT_SEC,
                # None: never prepare (psycopg prepares a query run 5 times on a connection)
                "prepare_threshold": 5 if prepare else None,
            },
            open=False,
            name=f"fredica-{node_id}",
            timeout=POOL_WAIT_SEC,
            reconnect_timeout=RECONNECT_ROUND_SEC,
        )
        try:
            # a round of the pool's attempts lasts RECONNECT_ROUND_SEC: a database that comes
            # up later (the node and the server started together) is waited for here first
            _wait_for_database(url, CONNECT_TIMEOUT_SEC)
            self._db.open(wait=True, timeout=CONNECT_TIMEOUT_SEC)
            self._migrate()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            self._db.close()
            raise errors.StoreError(
                f"cannot use PostgreSQL at {describe_url(url)}: {_first_line(exc)}"
            ) from exc

    # --- SQLStore -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        with self._db.connection() as conn:
            if not self.prepare:
                conn.prepare_threshold = None  # also on connections opened before it turned off
            yield _PgConn(cast("psycopg.Connection[dict[str, Any]]", conn))

    def _begin(self, conn: Conn) -> None:
        conn.execute("BEGIN")

    def _allocate_seq(self, conn: Conn) -> int:
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint AS seq").fetchone()
        return int(row["seq"])

    def _clock_now(self, conn: Conn) -> float:
        if self.clock is not None:
            return self.clock.now()
        row = conn.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8 AS now").fetchone()
        return float(row["now"])

    def _own(self) -> tuple[str, tuple[Any, ...]]:
        return "TRUE", ()  # the database is the owner of every row it holds

    async def adopt_pipeline(self, transfer: Transfer, epoch: int, move: JSON) -> bool:
        raise errors.InvalidRequest(_NO_MOVES)

    async def demote_pipeline(self, transfer: Transfer) -> list[str]:
        raise errors.InvalidRequest(_NO_MOVES)

    def _is_retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, (*_RETRYABLE, StaleConnection)):
            return True
        if isinstance(exc, _LOST_PREPARED) and self.prepare:
            # the transaction failed on its first use of a lost statement and rolled back:
            # it runs again, and every later one, without prepared statements
            self.prepare = False
            logger.warning(
                "the database lost a prepared statement between transactions (%s): "
                "prepared statements are off from now on; %s to say so in advance",
                _first_line(exc),
                PREPARED_HINT,
                extra={"action": "pg_prepared_off"},
            )
            return True
        # two nodes inserting the same idempotency key at once: the loser runs again and
        # finds the winner's task
        return (
            isinstance(exc, pg_errors.UniqueViolation)
            and exc.diag.constraint_name == "task_idempotency_active"
        )

    def _read_cursor_bound(self, conn: Conn) -> int:
        row = conn.execute(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1 AS bound"
        ).fetchone()
        return int(row["bound"])

    def _before_commit(self, conn: Conn, tx: Tx) -> None:
        if tx.ready:
            conn.execute(
                "SELECT pg_notify(?, 'changed') AS a, pg_notify(?, 'ready') AS b",
                (CHANNEL, CHANNEL),
            )
        elif tx.changed:
            conn.execute("SELECT pg_notify(?, 'changed') AS a", (CHANNEL,))

    def _after_commit(self, tx: Tx) -> None:
        """Subscribers hear every commit, this node's included, through LISTEN."""

    def _is_full(self, exc: BaseException) -> bool:
        return isinstance(exc, pg_errors.DiskFull)

    def _error_text(self, exc: BaseException) -> str:
        text = super()._error_text(exc)
        if isinstance(exc, psycopg_pool.PoolTimeout) and self.last_dial_error:
            return f"{text}; the last connection attempt: {self.last_dial_error}"
        if isinstance(exc, _LOST_PREPARED):
            return f"{text} ({PREPARED_HINT})"
        return text

    def _is_unavailable(self, exc: BaseException) -> bool:
        # a lost or refused connection, no connection from the pool in time, a server that
        # is shutting down or starting, a standby that refuses writes until it is promoted
        return isinstance(
            exc,
            (
                psycopg.OperationalError,
                pg_errors.AdminShutdown,
                pg_errors.CannotConnectNow,
                pg_errors.ReadOnlySqlTransaction,
            ),
        )

    def _close_connections(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=LISTEN_POLL_SEC * 4)
        self._db.close()

    # --- LISTEN ---------------------------------------------------------------------------------
    def subscribe(self, listener: Any) -> None:
        super().subscribe(listener)
        if self._listener is None:
            self._listener = threading.Thread(
                target=self._listen_loop, name="fredica-pg-listen", daemon=True
            )
            self._listener.start()

    def _listen_loop(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(
                    self.listen_url, autocommit=True, connect_timeout=DIAL_TIMEOUT_SEC
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    # notifications sent while we were not listening are lost: look once
                    self._emit(Signal.READY)
                    self._emit(Signal.CHANGED)
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=LISTEN_POLL_SEC):
                            with contextlib.suppress(ValueError):
                                self._emit(Signal(note.payload))
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                logger.warning(
                    "lost the notification connection (%s); reconnecting",
                    _first_line(exc),
                    extra={"action": "pg_listen"},
                )
                self._stop.wait(LISTEN_RETRY_SEC)

    # --- migrations -------------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Bring the schema up to this version in one transaction that holds the migration
        lock (nodes starting together migrate in turn, the later ones find nothing to do): a
        transaction lock, not a session one, so it holds through a transaction-mode pooler,
        and a failed migration leaves the schema as it was."""
        applied: list[int] = []
        with self._db.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) AS v FROM schema_version").fetchone()
            current = int(cast("dict[str, Any]", row)["v"] or 0) if row else 0
            if current > pg_schema.SCHEMA_VERSION:
                raise errors.StoreError(
                    f"database schema version {current} is newer than this fredica "
                    f"({pg_schema.SCHEMA_VERSION}); upgrade fredica"
                )
            for version in range(current + 1, pg_schema.SCHEMA_VERSION + 1):
                for statement in split_sql(pg_schema.MIGRATIONS[version - 1]):
                    conn.execute(statement)  # type: ignore[call-overload]
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
                applied.append(version)
        for version in applied:
            logger.info("schema migrated to %d", version, extra={"action": "migrate"})


def _dialer(store: PostgresTaskStore) -> type[psycopg.Connection[Any]]:
    """The pool's connection class: connects as psycopg does, and keeps on `store` why the
    last attempt failed (cleared by the next one that succeeds)."""

    class _Dial(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            try:
                conn = super().connect(*args, **kwargs)
            except psycopg.Error as exc:
                store.last_dial_error = _first_line(exc)
                raise
            store.last_dial_error = None
            return conn

    return _Dial


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
