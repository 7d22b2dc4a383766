"""`SQLStore`: the owner-store contract on a SQL database, shared by SQLite and PostgreSQL.

The operations are synchronous functions of one transaction (`store.work`, `store.control`);
this class runs them on the store's own threads so that no database call blocks the event loop,
retries a transaction the database reports as busy, locked, deadlocked or serialization-failed,
turns every other driver error into `StoreError`, and tells subscribers what a commit changed.
A subclass supplies connections, transaction control, the change sequence and the clock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import queue
import sys
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from fredica.domain import errors, history, timeseries
from fredica.domain.clock import Clock
from fredica.domain.history import ListFilter
from fredica.domain.library import LibraryFile
from fredica.domain.models import (
    JSON,
    TERMINAL_STATUSES,
    NewPipeline,
    NewTask,
    Pipeline,
    Task,
    TaskEvent,
    TaskStatus,
)
from fredica.domain.timeseries import TaskAtStart, Timeline, TimelineEvent, TimelineRows
from fredica.store import control, library, lists, peering, work
from fredica.store.base import (
    CancelOutcome,
    ChangeBatch,
    ClaimFilter,
    Completed,
    CompletionItem,
    Failure,
    HeartbeatFeedback,
    Liveness,
    MonitorReport,
    NodeRecord,
    OutboxItem,
    Page,
    RecoveryReport,
    RestartLogEntry,
    Signal,
    SignalListener,
    SpawnHookLookup,
    StartItem,
    TaskStore,
    Transfer,
    no_hooks,
)
from fredica.store.rows import (
    PIPELINE_COLUMNS,
    TASK_COLUMNS,
    Conn,
    Dialect,
    Row,
    dumps,
    loads_opt,
    row_to_pipeline,
    row_to_task,
    task_from_values,
)
from fredica.store.tx import Tx

logger = logging.getLogger(__name__)

T = TypeVar("T")

STATUS = {s.value: s for s in TaskStatus}  # a task's status column -> TaskStatus
URGENT, NORMAL = 0, 1  # priorities of the store's queue (lower first)
RETRY_ATTEMPTS = 8  # a busy/locked/deadlocked transaction is run again up to this many times
RETRY_BACKOFF = 0.02  # seconds, doubled on each retry
UNAVAILABLE = "store_unavailable"  # `degraded` while the database cannot be reached
#: The interpreter's switch interval while a store runs (seconds; Python's default is 0.005).
#: The driver lets go of the interpreter lock for every statement it runs and must take it back
#: before the next: while the event loop runs Python (a burst of short tasks), each statement of
#: a transaction waits up to one switch interval for it. Measured on the no-op benchmark (8
#: workers, 8 alternating rounds): 1 ms instead of 5 ms, +8.6 % median of pairs.
SWITCH_INTERVAL = 0.001


class PriorityPool:
    """The store's threads: a queue ordered by priority, then arrival (see `SQLStore._work`)."""

    def __init__(self, threads: int) -> None:
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)  # process-wide; only ever shortened
        self._queue: queue.PriorityQueue[tuple[int, int, Callable[[], Any] | None, Any]] = (
            queue.PriorityQueue()
        )
        self._order = itertools.count()
        self._threads = [
            threading.Thread(target=self._serve, name=f"fredica-store-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[], T], priority: int) -> asyncio.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put((priority, next(self._order), fn, future))
        return asyncio.wrap_future(future)

    def _serve(self) -> None:
        while True:
            _, _, fn, future = self._queue.get()
            if fn is None:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put((NORMAL + 1, next(self._order), None, None))
        for thread in self._threads:
            thread.join()


class SQLStore(TaskStore):
    """The contract over a SQL database (see the module docstring)."""

    dialect: Dialect

    def __init__(self, node_id: str, clock: Clock | None, threads: int) -> None:
        self.node_id = node_id
        self.clock = clock
        self._hooks: SpawnHookLookup = no_hooks
        self._listeners: list[SignalListener] = []
        self._pool = PriorityPool(threads)
        self._closed = False
        self._back_at: float | None = None  # monotonic time the database was reachable again

    # --- what a subclass provides ---------------------------------------------------------------
    @abstractmethod
    def _connection(self) -> contextlib.AbstractContextManager[Conn]:
        """A connection for one operation (autocommit; `_begin` opens a transaction)."""

    @abstractmethod
    def _begin(self, conn: Conn) -> None:
        """Open a write transaction."""

    @abstractmethod
    def _allocate_seq(self, conn: Conn) -> int:
        """The change sequence of the current transaction (called once per transaction)."""

    @abstractmethod
    def _clock_now(self, conn: Conn) -> float:
        """The store's clock, read inside the transaction."""

    @abstractmethod
    def _own(self) -> tuple[str, tuple[Any, ...]]:
        """SQL predicate (with parameters) for the rows this store is authoritative for."""

    @abstractmethod
    def _is_retryable(self, exc: BaseException) -> bool:
        """Is this driver error worth running the transaction again (busy, deadlock...)?"""

    @abstractmethod
    def _read_cursor_bound(self, conn: Conn) -> int:
        """The highest change sequence every earlier writer has committed or abandoned."""

    @abstractmethod
    def _close_connections(self) -> None:
        """Close the database connections."""

    @abstractmethod
    def _is_full(self, exc: BaseException) -> bool:
        """Did this driver error say the disk is full?"""

    def _is_unavailable(self, exc: BaseException) -> bool:
        """Did this driver error say the database cannot be reached (down, restarting, refusing
        connections)? The store then reports `store_unavailable` until an operation succeeds."""
        return False

    def _has_room(self) -> bool:
        """After a full disk: is there room again? (A tiny write may still fit into pages the
        database already has while the disk is full.)"""
        return True

    def _before_commit(self, conn: Conn, tx: Tx) -> None:
        """Called with the transaction still open (e.g. to queue a notification)."""

    def _after_commit(self, tx: Tx) -> None:
        """Tell this process's subscribers what the commit changed."""
        if tx.changed:
            self._emit(Signal.CHANGED)
        if tx.ready:
            self._emit(Signal.READY)

    # --- composition ----------------------------------------------------------------------------
    def set_hooks(self, hooks: SpawnHookLookup) -> None:
        self._hooks = hooks

    def subscribe(self, listener: SignalListener) -> None:
        self._listeners.append(listener)

    def _emit(self, signal: Signal) -> None:
        for listener in self._listeners:
            try:
                listener(signal)
            except Exception:  # a listener must never break a commit
                logger.exception("store listener failed", extra={"action": "store_signal"})

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._pool.submit(self._close_connections, URGENT)
        self._pool.shutdown()

    # --- running operations ---------------------------------------------------------------------
    async def _run(self, fn: Callable[[], T], priority: int = NORMAL) -> T:
        if self._closed:
            raise errors.StoreError("the store is closed")
        return await self._pool.submit(fn, priority)

    async def _write(
        self, fn: Callable[[Tx], T], node_id: str | None = None, priority: int = NORMAL
    ) -> T:
        return await self._run(
            functools.partial(self._write_sync, fn, node_id or self.node_id), priority
        )

    async def _work(self, fn: Callable[[Tx], T], node_id: str | None) -> T:
        """A write of the engine (claims, reports, liveness): it goes before queued API calls,
        so a burst of API requests never starves the work itself."""
        return await self._write(fn, node_id, URGENT)

    async def _read(self, fn: Callable[[Conn], T]) -> T:
        return await self._run(functools.partial(self._with_retries, fn))

    def _write_sync(self, fn: Callable[[Tx], T], node_id: str) -> T:
        def once(conn: Conn) -> tuple[T, Tx]:
            self._begin(conn)
            try:
                now = self._clock_now(conn)
                tx = Tx(conn, self.dialect, node_id, now, self._allocate_seq, self._own())
                result = fn(tx)
                tx.flush_pipelines()
                self._before_commit(conn, tx)
            except BaseException:
                with contextlib.suppress(*self.dialect.driver_errors):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result, tx

        result, tx = self._with_retries(once)
        if self.degraded is not None and self._has_room():
            self.degraded = None  # a write went through and there is space again
        self._after_commit(tx)
        return result

    def _with_retries(self, fn: Callable[[Conn], T]) -> T:
        delay = RETRY_BACKOFF
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                with self._connection() as conn:
                    result = fn(conn)
            except errors.FredicaError:
                raise
            except self.dialect.driver_errors as exc:
                if attempt < RETRY_ATTEMPTS and self._is_retryable(exc):
                    logger.debug("store busy, retrying: %s", exc, extra={"action": "store_retry"})
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise self._store_error(exc) from exc
            if self.degraded == UNAVAILABLE:
                self._back_at = time.monotonic()  # before `degraded` clears (see `monitor`)
                self.degraded = None
                logger.warning("store available again", extra={"action": "store_available"})
            return result
        raise errors.StoreError("unreachable")  # pragma: no cover

    def _error_text(self, exc: BaseException) -> str:
        """What a driver error says, in one line (for the store's errors and its log)."""
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

    def _store_error(self, exc: BaseException) -> errors.StoreError:
        text = self._error_text(exc)
        if self._is_unavailable(exc) and not self._is_full(exc):
            if self.degraded != UNAVAILABLE:
                self.degraded = UNAVAILABLE
                logger.warning(
                    "store unavailable: %s; reconnecting",
                    text,
                    extra={"action": "store_unavailable"},
                )
            return errors.StoreUnavailable(f"the database cannot be reached: {text}")
        if self._is_full(exc):
            self.degraded = "disk_full"
            return errors.StoreFull(f"the disk holding the task store is full ({text})")
        if self._is_retryable(exc):
            return errors.StoreBusy(f"the database stayed busy: {text}")
        return errors.StoreError(f"{self.dialect.name}: {text}")

    # --- clock ------------------------------------------------------------------------------
    async def now(self) -> float:
        return await self._read(self._clock_now)

    # --- app_config ---------------------------------------------------------------------------
    async def get_config(self, key: str) -> str | None:
        def read(conn: Conn) -> str | None:
            row = conn.execute(
                "SELECT value FROM app_config WHERE node_id = ? AND key = ?", (self.node_id, key)
            ).fetchone()
            return None if row is None else str(row["value"])

        return await self._read(read)

    async def set_config(self, key: str, value: str) -> None:
        def write(tx: Tx) -> None:
            tx.q(
                "INSERT INTO app_config (node_id, key, value, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (node_id, key) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at",
                (self.node_id, key, value, tx.now),
            )

        await self._write(write)

    # --- watch folders ---------------------------------------------------------------------------
    async def library_files(self, library_name: str) -> list[LibraryFile]:
        return await self._read(lambda conn: library.files(conn, self.node_id, library_name))

    async def library_file(self, file_id: str) -> LibraryFile | None:
        return await self._read(lambda conn: library.get(conn, self.node_id, file_id))

    async def save_library_file(self, item: LibraryFile) -> None:
        await self._write(lambda tx: library.save(tx, item))

    # --- creation and control -----------------------------------------------------------------
    async def create_pipeline(self, spec: NewPipeline) -> tuple[Pipeline, bool]:
        return await self._write(lambda tx: control.create_pipeline(tx, spec))

    async def add_task(self, spec: NewTask, pipeline_id: str | None = None) -> Task:
        return await self._write(lambda tx: control.add_task(tx, spec, pipeline_id))

    async def cancel_task(self, task_id: str, reason: str = "cancelled by user") -> CancelOutcome:
        return await self._write(lambda tx: control.cancel_task(tx, task_id, reason))

    async def cancel_pipeline(
        self, pipeline_id: str, reason: str = "pipeline cancelled"
    ) -> list[CancelOutcome]:
        return await self._write(lambda tx: control.cancel_pipeline(tx, pipeline_id, reason))

    async def retry_task(self, task_id: str) -> Task:
        return await self._write(lambda tx: control.retry_task(tx, task_id))

    async def fail_stranded(self, runnable_on: Mapping[str, Sequence[str]]) -> list[str]:
        return await self._write(lambda tx: control.fail_stranded(tx, runnable_on))

    async def skip_task(self, task_id: str, reason: str = "skipped by user") -> Task:
        return await self._write(lambda tx: control.skip_task(tx, task_id, reason))

    async def retry_pipeline(self, pipeline_id: str) -> list[str]:
        return await self._write(lambda tx: control.retry_pipeline(tx, pipeline_id))

    async def delete_pipeline(self, pipeline_id: str) -> list[str]:
        return await self._write(lambda tx: control.delete_pipeline(tx, pipeline_id))

    # --- claims and reports ---------------------------------------------------------------------
    async def claim(self, flt: ClaimFilter, node_id: str | None = None) -> list[Task]:
        if flt.asks_nothing:
            return []
        return work.tasks_of(await self._work(lambda tx: work.claim_rows(tx, flt), node_id))

    async def start(self, task_id: str, attempt: int, node_id: str | None = None) -> Task:
        return await self._work(lambda tx: work.start(tx, task_id, attempt), node_id)

    async def release(
        self, task_id: str, attempt: int, reason: str, node_id: str | None = None
    ) -> Task:
        return await self._work(lambda tx: work.release(tx, task_id, attempt, reason), node_id)

    async def heartbeat(
        self, tasks: Sequence[tuple[str, int]], node_id: str | None = None
    ) -> list[HeartbeatFeedback]:
        return await self._work(lambda tx: work.heartbeat(tx, tasks), node_id)

    async def progress(
        self, updates: Sequence[tuple[str, int, int, str | None]], node_id: str | None = None
    ) -> None:
        await self._work(lambda tx: work.progress(tx, updates), node_id)

    async def set_paused(
        self,
        task_id: str,
        attempt: int,
        paused: bool,
        reason: str | None,
        node_id: str | None = None,
    ) -> Task:
        return await self._work(
            lambda tx: work.set_paused(tx, task_id, attempt, paused, reason), node_id
        )

    async def record_event(
        self, task_id: str, event_type: str, message: str | None, node_id: str | None = None
    ) -> None:
        await self._work(lambda tx: tx.event(task_id, event_type, message), node_id)

    async def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        claim: ClaimFilter | None = None,
        node_id: str | None = None,
        starts: Sequence[StartItem] = (),
    ) -> tuple[list[Completed | errors.FredicaError], list[Task]]:
        hooks = self._hooks
        outcomes, rows = await self._work(
            lambda tx: work.complete_and_claim(tx, items, hooks, claim, starts), node_id
        )
        return outcomes, work.tasks_of(rows)

    async def fail(self, failure: Failure, node_id: str | None = None) -> Task:
        return await self._work(lambda tx: work.fail(tx, failure), node_id)

    # --- liveness and recovery --------------------------------------------------------------------
    async def monitor(self, liveness: Liveness) -> MonitorReport:
        def write(tx: Tx) -> MonitorReport:
            # the database was out of reach for this node until it came back, and so, most
            # likely, for every node: silence before then says nothing about their work
            since: float | None = None
            if self.degraded == UNAVAILABLE:
                since = tx.now  # this very transaction is the first to reach it again
            elif (back := self._back_at) is not None:
                since = tx.now - (time.monotonic() - back)
            return control.monitor(tx, liveness, since)

        return await self._work(write, None)

    async def recover_startup(self, node_id: str | None = None) -> RecoveryReport:
        return await self._write(control.recover_startup, node_id)

    async def recalculate(self, pipeline_id: str) -> Pipeline:
        def write(tx: Tx) -> Pipeline:
            control.get_pipeline(tx, pipeline_id)  # NotFound first
            tx.recount(pipeline_id)
            return control.get_pipeline(tx, pipeline_id)

        return await self._write(write)

    # --- nodes ----------------------------------------------------------------------------------
    async def upsert_node(self, record: NodeRecord) -> None:
        def write(tx: Tx) -> None:
            tx.q(
                "INSERT INTO worker_node (id, hostname, capabilities, status, max_workers, "
                "last_seen_at, address, info) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, "
                "capabilities = excluded.capabilities, status = excluded.status, "
                "max_workers = excluded.max_workers, last_seen_at = excluded.last_seen_at, "
                "address = excluded.address, info = excluded.info",
                (
                    record.id,
                    record.hostname,
                    dumps(record.capabilities),
                    record.status,
                    record.max_workers,
                    tx.now,
                    record.address,
                    dumps(record.info),
                ),
            )

        await self._write(write)

    async def list_nodes(self) -> list[NodeRecord]:
        def read(conn: Conn) -> list[NodeRecord]:
            return [
                NodeRecord(
                    id=r["id"],
                    hostname=r["hostname"],
                    capabilities=loads_opt(r["capabilities"]) or [],
                    status=r["status"],
                    max_workers=r["max_workers"],
                    last_seen_at=r["last_seen_at"],
                    address=r["address"],
                    info=loads_opt(r["info"]) or {},
                )
                for r in conn.execute(
                    "SELECT id, hostname, capabilities, status, max_workers, last_seen_at, "
                    "address, info FROM worker_node ORDER BY id"
                )
            ]

        return await self._read(read)

    # --- reads ----------------------------------------------------------------------------------
    async def get_task(self, task_id: str) -> Task:
        def read(conn: Conn) -> Task:
            row = conn.execute(
                f"SELECT {TASK_COLUMNS} FROM task WHERE id = ?", (task_id,)
            ).fetchone()
            if row is None:
                raise errors.NotFound(f"task {task_id} not found")
            return row_to_task(row)

        return await self._read(read)

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        def read(conn: Conn) -> Pipeline:
            row = conn.execute(
                f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE id = ?", (pipeline_id,)
            ).fetchone()
            if row is None:
                raise errors.NotFound(f"pipeline {pipeline_id} not found")
            return row_to_pipeline(row)

        return await self._read(read)

    async def list_pipelines(
        self,
        status: str | None = None,
        limit: int = 100,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> list[Pipeline]:
        page = await self.page_pipelines(status, limit, None, offset, where)
        return page.items

    async def page_pipelines(
        self,
        status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> Page[Pipeline]:
        _check_limit(limit)
        history.check_filter(where)
        after = lists.decode_cursor(lists.PIPELINE_CURSOR, cursor) if cursor else None
        # One row more than asked says whether a next page exists.
        sql, params = lists.pipeline_query(status, limit + 1, offset, after, self.dialect, where)
        rows = await self._read(lambda conn: list(conn.execute(sql, params)))
        return _page(rows, limit, lists.PIPELINE_CURSOR, row_to_pipeline)

    async def list_tasks(
        self,
        pipeline_id: str | None = None,
        status: Sequence[str] | None = None,
        task_type: str | None = None,
        limit: int = 500,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> list[Task]:
        history.check_filter(where)
        sql, params = lists.task_query(
            self.dialect, pipeline_id, status, task_type, limit, offset, where=where
        )
        return await self._read(lambda conn: self._tasks_of(conn, sql, params))

    def _tasks_of(self, conn: Conn, sql: str, params: Sequence[Any]) -> list[Task]:
        """The tasks a SELECT of `TASK_COLUMNS` (first) returns; as plain tuples where the
        driver gives them (no per-column name lookups: a pipeline's thousand tasks)."""
        if self.dialect.tuples is None:
            return [row_to_task(r) for r in conn.execute(sql, params)]
        return [task_from_values(v) for v in self.dialect.tuples(conn, sql, params)]

    async def page_tasks(
        self,
        pipeline_id: str | None = None,
        status: Sequence[str] | None = None,
        task_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> Page[Task]:
        _check_limit(limit)
        history.check_filter(where)
        after = lists.decode_cursor(lists.TASK_CURSOR, cursor) if cursor else None
        sql, params = lists.task_query(
            self.dialect, pipeline_id, status, task_type, limit + 1, offset, after, where
        )
        rows = await self._read(lambda conn: list(conn.execute(sql, params)))
        return _page(rows, limit, lists.TASK_CURSOR, row_to_task)

    async def task_events(self, task_id: str) -> list[TaskEvent]:
        sql = (
            "SELECT id, task_id, node_id, event_type, message, occurred_at FROM task_event "
            "WHERE task_ord = COALESCE((SELECT ord FROM task WHERE id = ?), 0) AND task_id = ? "
            "ORDER BY occurred_at, id"
        )

        def read(conn: Conn) -> list[TaskEvent]:
            return [
                TaskEvent(
                    str(r["id"]),
                    r["task_id"],
                    r["node_id"],
                    r["event_type"],
                    r["message"],
                    r["occurred_at"],
                )
                for r in conn.execute(sql, (task_id, task_id))
            ]

        return await self._read(read)

    async def count_created_since(self, publisher_id: str, since: float) -> int:
        def read(conn: Conn) -> int:
            row = conn.execute(
                "SELECT COUNT(*) AS n FROM task WHERE publisher_id = ? AND created_at > ?",
                (publisher_id, since),
            ).fetchone()
            return int(row["n"])

        return await self._read(read)

    async def count_by_status(self) -> dict[str, int]:
        return await self._read(lambda conn: lists.counts_from(list(conn.execute(lists.COUNT_SQL))))

    async def task_timeline(self, since: float, until: float, limit: int = 200_000) -> Timeline:
        kinds = ", ".join("?" for _ in timeseries.STATUS_EVENTS)
        done = ", ".join("?" for _ in TERMINAL_STATUSES)
        done_values = [s.value for s in TERMINAL_STATUSES]
        # every status change sets updated_at, so an unfinished task not updated since a
        # margin before the window kept its status through it: counted, not replayed
        touched = since - timeseries.TOUCH_MARGIN_SEC
        # the unfinished tasks by status (an index-only count), less those created in the
        # window or touched since the margin: each of these two is a range of an index, so
        # the count never reads the rows of a large backlog (`bench/chart_cost.py`)
        unfinished_sql = (
            f"SELECT status, COUNT(*) FROM task WHERE status NOT IN ({done}) GROUP BY status"
        )
        recent_sql = (
            "SELECT status, COUNT(*) FROM task WHERE id IN (SELECT id FROM task WHERE "
            "created_at >= ? UNION SELECT id FROM task WHERE updated_at >= ?) "
            f"AND status NOT IN ({done}) GROUP BY status"
        )
        before_sql = (
            "SELECT t.id, t.type, (SELECT e.event_type FROM task_event e "
            "WHERE e.task_ord = t.ord AND e.task_id = t.id AND e.occurred_at < ? "
            f"AND e.event_type IN ({kinds}) ORDER BY e.occurred_at DESC, e.id DESC LIMIT 1) "
            "FROM task t WHERE t.created_at < ? AND t.updated_at >= ?"
        )
        events_sql = (
            "SELECT e.task_id, t.type, e.event_type, e.occurred_at, t.status, t.started_at "
            "FROM task_event e JOIN task t ON t.id = e.task_id "
            f"WHERE e.occurred_at >= ? AND e.occurred_at < ? AND e.event_type IN ({kinds}) "
            "ORDER BY e.occurred_at, e.id LIMIT ?"
        )

        def rows(conn: Conn, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            if self.dialect.tuples is not None:
                return self.dialect.tuples(conn, sql, params)
            return [tuple(r) for r in conn.execute(sql, params)]

        def read(conn: Conn) -> Timeline:
            baseline = dict(rows(conn, unfinished_sql, done_values))
            for status, n in rows(conn, recent_sql, (since, touched, *done_values)):
                baseline[status] = baseline.get(status, 0) - int(n)
            baseline = {k: int(n) for k, n in baseline.items() if n}
            at_start = []
            params = (since, *timeseries.STATUS_EVENTS, since, touched)
            for task_id, task_type, before_kind in rows(conn, before_sql, params):
                before = timeseries.EVENT_STATUS.get(before_kind or "")
                if before is not None and not before.is_terminal:
                    at_start.append(TaskAtStart(task_id, task_type, before))
            params = (since, until, *timeseries.STATUS_EVENTS, limit)
            events = [
                TimelineEvent(task_id, kind, event, float(at), STATUS[now], started)
                for task_id, kind, event, at, now, started in rows(conn, events_sql, params)
            ]
            return Timeline({TaskStatus(k): int(n) for k, n in baseline.items()}, at_start, events)

        return await self._read(read)

    async def timeline_rows(self, since: float, until: float, limit: int = 200_000) -> TimelineRows:
        kinds = ", ".join("?" for _ in timeseries.STATUS_EVENTS)
        active_values = [s.value for s in TaskStatus if not s.is_terminal]
        active = ", ".join("?" for _ in active_values)
        touched = since - timeseries.TOUCH_MARGIN_SEC
        # the baseline of `task_timeline` (unfinished, created before the window, untouched
        # since the margin) as the unfinished tasks created before the window (a range of
        # the index (status, created_at) per status, index-only) less those of them touched
        # since the margin: the rows `before_sql` reads anyway (their status now is theirs)
        older_sql = (
            f"SELECT status, COUNT(*) FROM task WHERE status IN ({active}) "
            "AND created_at < ? GROUP BY status"
        )
        before_sql = (
            "SELECT t.id, t.type, t.status, (SELECT e.event_type FROM task_event e "
            "WHERE e.task_ord = t.ord AND e.task_id = t.id AND e.occurred_at < ? "
            f"AND e.event_type IN ({kinds}) ORDER BY e.occurred_at DESC, e.id DESC LIMIT 1) "
            "FROM task t WHERE t.created_at < ? AND t.updated_at >= ?"
        )
        # the events of `task_timeline`'s join (those of a task the store holds), without
        # reading the task row of each. An event written with its task's `task_ord` (not 0)
        # has its task: a task's ord never changes once numbered, and its events are deleted
        # with it (`peering.remove_pipeline_rows`, the only place task rows are deleted), so
        # only an event without one (0: written before its row, or kept by the migration
        # that numbered the events) is looked up, by its id. The row's columns are read only
        # for the events whose replay reads them.
        events_sql = (
            "SELECT e.task_id, e.event_type, e.occurred_at, "
            "CASE WHEN e.event_type = 'completed' THEN "
            "(SELECT t.type FROM task t WHERE t.id = e.task_id) END, "
            "CASE WHEN e.event_type = 'completed' THEN "
            "(SELECT t.started_at FROM task t WHERE t.id = e.task_id) END, "
            "CASE WHEN e.event_type = 'requeued' THEN "
            "(SELECT t.status FROM task t WHERE t.id = e.task_id) END "
            "FROM task_event e "
            f"WHERE e.occurred_at >= ? AND e.occurred_at < ? AND e.event_type IN ({kinds}) "
            "AND (e.task_ord <> 0 OR EXISTS (SELECT 1 FROM task t WHERE t.id = e.task_id)) "
            "ORDER BY e.occurred_at, e.id LIMIT ?"
        )

        def rows(conn: Conn, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            if self.dialect.tuples is not None:
                return self.dialect.tuples(conn, sql, params)
            return [tuple(r) for r in conn.execute(sql, params)]

        def read(conn: Conn) -> TimelineRows:
            baseline = {k: int(n) for k, n in rows(conn, older_sql, (*active_values, since))}
            at_start = []
            params = (since, *timeseries.STATUS_EVENTS, since, touched)
            for task_id, task_type, now, before_kind in rows(conn, before_sql, params):
                if now in active_values:
                    baseline[now] = baseline.get(now, 0) - 1
                before = timeseries.EVENT_STATUS.get(before_kind or "")
                if before is not None and not before.is_terminal:
                    at_start.append(TaskAtStart(task_id, task_type, before))
            params = (since, until, *timeseries.STATUS_EVENTS, limit)
            # the rows as they come (`occurred_at` is a REAL / DOUBLE PRECISION: a float)
            events = cast("list[timeseries.EventRow]", rows(conn, events_sql, params))
            counts = {TaskStatus(k): n for k, n in baseline.items() if n}
            return TimelineRows(counts, at_start, events)

        return await self._read(read)

    async def restart_log(self, limit: int = 100) -> list[RestartLogEntry]:
        def read(conn: Conn) -> list[RestartLogEntry]:
            return [
                RestartLogEntry(**{name: r[name] for name in RestartLogEntry.__slots__})
                for r in conn.execute(
                    "SELECT id, restarted_at, node_id, task_id, pipeline_id, task_type, "
                    "previous_status, new_status, action, message FROM restart_task_log "
                    "ORDER BY id DESC LIMIT ?",
                    (limit,),
                )
            ]

        return await self._read(read)

    async def local_running(self, node_id: str | None = None) -> list[Task]:
        node = node_id or self.node_id
        return await self._read(
            lambda conn: [
                row_to_task(r)
                for r in conn.execute(
                    f"SELECT {TASK_COLUMNS} FROM task WHERE claimed_by = ? "
                    "AND status IN ('claimed', 'running', 'stale')",
                    (node,),
                )
            ]
        )

    # --- change feed ------------------------------------------------------------------------------
    # --- the home cluster (store/peering.py) ----------------------------------------------------
    async def outbox_put(
        self, owner_id: str, task_id: str, attempt: int, kind: str, body: JSON
    ) -> None:
        await self._work(
            lambda tx: peering.outbox_put(tx, owner_id, task_id, attempt, kind, body), None
        )

    async def outbox_list(self, limit: int = 100) -> list[OutboxItem]:
        return await self._read(lambda conn: peering.outbox_list(conn, self.node_id, limit))

    async def outbox_done(self, item_id: int) -> None:
        await self._work(lambda tx: peering.outbox_done(tx, item_id), None)

    async def outbox_tried(self, item_id: int, error: str) -> None:
        await self._write(lambda tx: peering.outbox_tried(tx, item_id, error))

    async def apply_replica(self, owner_id: str, batch: ChangeBatch) -> int:
        owners = {t.owner_id for t in batch.tasks} | {p.owner_id for p in batch.pipelines}
        strangers = owners - {owner_id}
        if strangers:
            raise errors.InvalidRequest(
                f"a batch of {owner_id}'s changes holds rows of {sorted(strangers)}"
            )
        if owner_id == self.node_id:
            raise errors.InvalidRequest("a node does not replicate its own rows")
        return await self._write(lambda tx: peering.apply_replica(tx, owner_id, batch))

    async def replica_cursor(self, owner_id: str) -> int:
        return await self._read(lambda conn: peering.replica_cursor(conn, owner_id))

    async def replica_freshness(self) -> dict[str, float]:
        return await self._read(peering.replica_freshness)

    async def replica_tasks(
        self,
        pipeline_id: str | None = None,
        status: Sequence[str] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Task]:
        statuses = list(status or [])
        return await self._read(
            lambda conn: peering.replica_tasks(conn, pipeline_id, statuses, limit, offset)
        )

    async def replica_pipelines(
        self, status: Sequence[str] | None = None, limit: int = 100, offset: int = 0
    ) -> list[Pipeline]:
        statuses = list(status or [])
        return await self._read(
            lambda conn: peering.replica_pipelines(conn, statuses, limit, offset)
        )

    async def replica_task(self, task_id: str) -> Task | None:
        return await self._read(lambda conn: peering.replica_task(conn, task_id))

    async def replica_pipeline(self, pipeline_id: str) -> Pipeline | None:
        return await self._read(lambda conn: peering.replica_pipeline(conn, pipeline_id))

    async def digest(self, owner_id: str, replica: bool) -> str:
        return await self._read(lambda conn: peering.digest(conn, owner_id, replica))

    async def forgive_silence(self) -> int:
        return await self._work(peering.forgive_silence, None)

    async def export_pipeline(self, pipeline_id: str) -> Transfer:
        return await self._read(lambda conn: peering.export_pipeline(conn, pipeline_id))

    async def replica_transfer(self, pipeline_id: str) -> Transfer:
        return await self._read(lambda conn: peering.replica_transfer(conn, pipeline_id))

    async def adopt_pipeline(self, transfer: Transfer, epoch: int, move: JSON) -> bool:
        if epoch <= transfer.pipeline.owner_epoch:
            raise errors.InvalidRequest(
                f"epoch {epoch} is not newer than the pipeline's ({transfer.pipeline.owner_epoch})"
            )
        return await self._write(lambda tx: peering.adopt(tx, transfer, epoch, move))

    async def demote_pipeline(self, transfer: Transfer) -> list[str]:
        return await self._write(lambda tx: peering.demote(tx, transfer))

    async def moved_away(self, created_by: str) -> list[tuple[str, str, int]]:
        return await self._read(lambda conn: peering.moved_away(conn, created_by))

    async def adopted(self) -> list[tuple[str, str, int]]:
        return await self._read(lambda conn: peering.adopted(conn, self.node_id))

    async def outbox_readdress(self, task_ids: Sequence[str], owner_id: str) -> int:
        return await self._write(lambda tx: peering.outbox_readdress(tx, task_ids, owner_id))

    async def latest_cursor(self, owner_id: str | None = None) -> int:
        return await self._read(self._read_cursor_bound)

    async def changes_since(
        self, owner_id: str | None, cursor: int, limit: int = 1000
    ) -> ChangeBatch:
        return await self._read(functools.partial(self._changes, owner_id, cursor, limit))

    def _changes(self, owner_id: str | None, cursor: int, limit: int, conn: Conn) -> ChangeBatch:
        bound = self._read_cursor_bound(conn)
        task_rows = _changed_rows(conn, "task", TASK_COLUMNS, owner_id, cursor, bound, limit)
        pipeline_rows = _changed_rows(
            conn, "pipeline_instance", PIPELINE_COLUMNS, owner_id, cursor, bound, limit
        )
        # A full page may stop inside one transaction's rows: end the batch before that
        # transaction (it comes whole in the next batch); a transaction larger than a whole
        # page is sent whole.
        end, whole = bound, False
        for rows in (task_rows, pipeline_rows):
            if len(rows) >= limit:
                first, last = rows[0]["change_seq"], rows[-1]["change_seq"]
                end = min(end, last if first == last else last - 1)
                whole = whole or first == last
        if whole:
            task_rows = _changed_rows(conn, "task", TASK_COLUMNS, owner_id, cursor, end, None)
            pipeline_rows = _changed_rows(
                conn, "pipeline_instance", PIPELINE_COLUMNS, owner_id, cursor, end, None
            )
        sql = "SELECT kind, id FROM deleted_row WHERE change_seq > ? AND change_seq <= ?"
        params: list[Any] = [cursor, end]
        if owner_id is not None:
            sql += " AND owner_id = ?"
            params.append(owner_id)
        deleted = [(str(r["kind"]), str(r["id"])) for r in conn.execute(sql, params)]
        return ChangeBatch(
            [row_to_task(r) for r in task_rows if r["change_seq"] <= end],
            [row_to_pipeline(r) for r in pipeline_rows if r["change_seq"] <= end],
            max(end, cursor),
            deleted,
        )


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise errors.InvalidRequest(f"limit: must be at least 1, got {limit}")


def _page(rows: list[Row], limit: int, kind: str, to_item: Callable[[Row], T]) -> Page[T]:
    """The first `limit` of `rows` (read with one extra row) and the cursor after them."""
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = lists.encode_cursor(kind, lists.position_of(rows[-1])) if more else None
    return Page([to_item(r) for r in rows], cursor)


def _changed_rows(
    conn: Conn,
    table: str,
    columns: str,
    owner_id: str | None,
    cursor: int,
    bound: int,
    limit: int | None,
) -> list[Row]:
    sql = f"SELECT {columns} FROM {table} WHERE change_seq > ? AND change_seq <= ?"
    params: list[Any] = [cursor, bound]
    if owner_id is not None:
        sql += " AND owner_id = ?"
        params.append(owner_id)
    sql += " ORDER BY change_seq"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return list(conn.execute(sql, params))


@contextlib.contextmanager
def shared_connection(conn: Conn) -> Iterator[Conn]:
    """A context manager over one long-lived connection (the SQLite store's)."""
    yield conn
