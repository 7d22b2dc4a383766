"""The embedded SQLite store in a process of its own (`store.process`, on by default for
`fredica serve`): the node's side (`HostedStore`) and the loop that answers it in the child
(`serve`); the child's composition root is `node/store_child.py`.

With the store on a thread of the node's process, its thread and the event loop share one
interpreter lock: the driver gives the lock up for every statement it runs and waits for it
before the next, and the two threads slow each other down (`python -m bench.gil_steps`). Here
the store runs in a child process, on that process's only thread, and the node talks to it over
a socket pair:

- every `TaskStore` call is one message (`pickle`), answered in turn; engine writes (claims,
  reports, liveness) go before queued API calls, as on the store's thread;
- claims come back as rows, and the node builds the `Task` objects (cheaper to send);
- commit signals (`Signal`) come back as messages and reach the subscribers;
- the child dies with the node (parent-death signal, and the end of the socket); if it dies
  alone, the calls waiting for it fail with `StoreError` and the next call starts a new one.

Only what the child can rebuild is hosted: the built-in templates and the configured plugins
(their spawn hooks run inside the store's transactions) and the system clock with the node's
`clock_offset_sec`. Anything else (a custom registry, a test clock) keeps the store on a thread.
"""

from __future__ import annotations

import asyncio
import copyreg
import dataclasses
import heapq
import itertools
import logging
import operator
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from fredica.domain import errors, models
from fredica.store import sql, work
from fredica.store.base import (
    BackendNote,
    ClaimFilter,
    Completed,
    CompletionItem,
    Signal,
    SignalListener,
    SpawnHookLookup,
    StartItem,
    TaskStore,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

START_TIMEOUT = 120.0  # seconds for the child to open (and migrate) the database
STOP_TIMEOUT = 10.0  # seconds for the child to close the database and exit
#: the engine's writes, which go before queued API calls (`SQLStore._work`)
URGENT_CALLS = frozenset(
    {
        "claim",
        "complete_and_claim",
        "fail",
        "forgive_silence",
        "heartbeat",
        "monitor",
        "outbox_done",
        "outbox_put",
        "progress",
        "record_event",
        "release",
        "set_paused",
        "start",
    }
)
_CLAIM_ROWS, _COMPLETE_ROWS, _CLOSE = "claim_rows", "complete_and_claim_rows", "close"


# --- messages ----------------------------------------------------------------------------------
def _by_fields(*classes: type) -> None:
    """Pickle these dataclasses as their field values (`Class(*values)` when loaded): the
    default for a frozen dataclass with slots looks its fields up again for every object,
    which costs more than a task's whole store work."""
    for cls in classes:
        get = operator.attrgetter(*(f.name for f in dataclasses.fields(cls)))
        copyreg.pickle(cls, lambda obj, cls=cls, get=get: (cls, get(obj)))  # type: ignore[misc]


_by_fields(models.NewTask, models.NewPipeline, CompletionItem, BackendNote, Completed, StartItem)


def _dumps(message: tuple[Any, ...]) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def _sendable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a `StoreError` that says what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return errors.StoreError(f"{type(exc).__name__}: {exc}")
    return exc


# --- the node's side ---------------------------------------------------------------------------
class HostedStore(TaskStore):
    """`TaskStore` on a SQLite file, served by a child process (see the module docstring)."""

    def __init__(
        self,
        child: str,
        path: Path | str,
        node_id: str,
        plugins: Sequence[str] = (),
        clock_offset: float = 0.0,
    ) -> None:
        self._child_module = child
        self.path = Path(path)
        self.node_id = node_id
        self.degraded = None
        self.out_of_process = True
        self._plugins = tuple(plugins)
        self._clock_offset = clock_offset
        self._listeners: list[SignalListener] = []
        # rid -> (loop, future, build, the connection it went out on)
        self._pending: dict[
            int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Any, Connection]
        ] = {}
        self._ids = itertools.count()
        self._send_lock = threading.Lock()
        self._closed = False
        self._closing = False
        self._respawn = asyncio.Lock()
        self._conn: Connection | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._spawn()

    # lifecycle
    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        argv = [
            sys.executable,
            "-m",
            self._child_module,
            "--fd",
            str(theirs.fileno()),
            "--db",
            str(self.path),
            "--node-id",
            self.node_id,
            "--clock-offset",
            repr(self._clock_offset),
        ]
        for plugin in self._plugins:
            argv += ["--plugin", plugin]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            child = subprocess.Popen(argv, pass_fds=[theirs.fileno()], env=env)
        except OSError as exc:
            ours.close()
            raise errors.StoreError(f"cannot start the store's process: {exc}") from exc
        finally:
            theirs.close()
        conn = Connection(ours.detach())
        try:
            if not conn.poll(START_TIMEOUT):
                raise errors.StoreError(
                    f"the store's process did not open {self.path} in {START_TIMEOUT:g}s"
                )
            kind, _, value, _ = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError) as exc:
            conn.close()
            child.wait()
            raise errors.StoreError(
                f"the store's process exited while opening {self.path} "
                f"(exit code {child.returncode})"
            ) from exc
        except BaseException:
            conn.close()
            child.kill()
            child.wait()
            raise
        if kind != "ready":
            conn.close()
            child.wait()
            raise value
        self._conn, self._child = conn, child
        threading.Thread(
            target=self._read, args=(conn, child), name="fredica-store-reader", daemon=True
        ).start()

    async def close(self) -> None:
        if self._closed:
            return
        self._closing = True  # the child's exit that follows is no failure
        try:
            if self._conn is not None:
                await self._call(_CLOSE, (), {})
        except errors.StoreError:
            pass  # it is gone already
        finally:
            self._closed = True
            child = self._child
            if child is not None:
                try:
                    await asyncio.to_thread(child.wait, STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    child.kill()
                    await asyncio.to_thread(child.wait)
            if self._conn is not None:
                self._conn.close()

    # composition
    def set_hooks(self, hooks: SpawnHookLookup) -> None:
        """The child uses its own registry's hooks (the same templates and plugins)."""

    def subscribe(self, listener: SignalListener) -> None:
        self._listeners.append(listener)

    # calls
    async def claim(self, flt: ClaimFilter, node_id: str | None = None) -> list[models.Task]:
        if flt.asks_nothing:
            return []
        tasks: list[models.Task] = await self._call(
            _CLAIM_ROWS, (flt, node_id), {}, "claim", work.tasks_of
        )
        return tasks

    async def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        claim: ClaimFilter | None = None,
        node_id: str | None = None,
        starts: Sequence[StartItem] = (),
    ) -> tuple[list[Completed | errors.FredicaError], list[models.Task]]:
        def build(value: Any) -> Any:
            outcomes, rows = value
            return outcomes, work.tasks_of(rows)

        result: tuple[list[Completed | errors.FredicaError], list[models.Task]] = await self._call(
            _COMPLETE_ROWS,
            (list(items), claim, node_id, list(starts)),
            {},
            "complete_and_claim",
            build,
        )
        return result

    async def _call(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        kind: str | None = None,
        build: Callable[[Any], Any] | None = None,
    ) -> Any:
        if self._closed:
            raise errors.StoreError("the store is closed")
        if self._conn is None:  # the child died: start another (one, for all who ask)
            async with self._respawn:
                if self._conn is None:
                    await asyncio.to_thread(self._spawn)
        conn = self._conn
        assert conn is not None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        rid = next(self._ids)
        priority = sql.URGENT if (kind or name) in URGENT_CALLS else sql.NORMAL
        data = _dumps((rid, priority, name, args, kwargs))
        self._pending[rid] = (loop, future, build, conn)
        try:
            with self._send_lock:
                conn.send_bytes(data)
        except OSError as exc:
            self._pending.pop(rid, None)
            # the child is gone though its reader may not have seen it yet: the next call
            # starts another instead of writing into the same dead pipe
            if self._conn is conn:
                self._conn = None
            raise errors.StoreError(f"the store's process is gone: {exc}") from exc
        return await future

    def _read(self, conn: Connection, child: subprocess.Popen[bytes]) -> None:
        """The reader thread: answers to their callers, signals to the subscribers."""
        while True:
            try:
                kind, rid, value, degraded = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                break
            self.degraded = degraded
            if kind == "sig":
                self._emit(value)
                continue
            loop, future, build, _ = self._pending.pop(rid)
            if kind == "ok" and build is not None:
                try:
                    value = build(value)
                except Exception as exc:  # a row this version cannot read
                    kind, value = "err", errors.StoreError(f"unreadable result: {exc}")
            with _suppress_closed_loop():
                loop.call_soon_threadsafe(_settle, future, kind == "ok", value)
        # the child is gone: whoever waits for it hears so; the next call starts a new one
        if self._conn is conn:
            self._conn = None
        conn.close()
        code = child.wait()
        if not self._closing:
            logger.error(
                "the store's process exited (code %s); starting another at the next call",
                code,
                extra={"action": "store_process"},
            )
        for rid, entry in list(self._pending.items()):
            if entry[3] is not conn:
                continue  # sent to the child started after this one died
            self._pending.pop(rid, None)
            loop, future, _, _ = entry
            with _suppress_closed_loop():
                loop.call_soon_threadsafe(
                    _settle,
                    future,
                    False,
                    errors.StoreError(f"the store's process exited (code {code})"),
                )

    def _emit(self, signal: Signal) -> None:
        for listener in self._listeners:
            try:
                listener(signal)
            except Exception:
                logger.exception("store listener failed", extra={"action": "store_signal"})


def _forwarder(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def call(self: HostedStore, *args: Any, **kwargs: Any) -> Any:
        return await self._call(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


# every other operation of the contract is one message with the same arguments
for _name in sorted(TaskStore.__abstractmethods__):
    if _name not in HostedStore.__dict__:
        setattr(HostedStore, _name, _forwarder(_name))
HostedStore.__abstractmethods__ = frozenset()


def open_hosted(
    child: str,
    path: Path | str,
    node_id: str,
    plugins: Sequence[str] = (),
    clock_offset: float = 0.0,
) -> TaskStore:
    """A `HostedStore` whose child runs `python -m <child>` (the module that composes the
    store in that process); its operations are filled in above, which mypy cannot see."""
    return HostedStore(child, path, node_id, plugins, clock_offset)  # type: ignore[abstract]


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class _suppress_closed_loop:
    """A caller's event loop that closed meanwhile: nobody waits for the answer any more."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is RuntimeError


# --- the child's side (its composition root is `node/store_child.py`) ---------------------------
def drive(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a store coroutine that never suspends (its `_run` returns at once)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise errors.StoreError("a store operation waited for something in the store's process")


def serve(conn: Connection, store: sql.SQLStore) -> None:
    """Answer the node's calls until it says close or goes away: the most urgent first, then in
    arrival order."""
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        try:
            data = _dumps(message)
        except Exception as exc:  # an answer that does not pickle
            data = _dumps(("err", message[1], errors.StoreError(repr(exc)), store.degraded))
        with send_lock:
            conn.send_bytes(data)

    store.subscribe(lambda signal: send(("sig", None, signal, store.degraded)))
    queue: list[tuple[int, int, tuple[Any, ...]]] = []
    order = itertools.count()

    def receive() -> None:
        rid, priority, name, args, kwargs = pickle.loads(conn.recv_bytes())
        heapq.heappush(queue, (priority, next(order), (rid, name, args, kwargs)))

    while True:
        try:
            if not queue:
                receive()
            while conn.poll(0):
                receive()
        except (EOFError, OSError):
            break  # the node is gone
        _, _, (rid, name, args, kwargs) = heapq.heappop(queue)
        try:
            value = _answer(store, name, args, kwargs)
        except Exception as exc:
            send(("err", rid, _sendable(exc), store.degraded))
            continue
        send(("ok", rid, value, store.degraded))
        if name == _CLOSE:
            break


def _answer(store: sql.SQLStore, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What the store says to one call of the node."""
    if name == _CLAIM_ROWS:
        flt, node_id = args
        return drive(store._work(lambda tx: work.claim_rows(tx, flt), node_id))
    if name == _COMPLETE_ROWS:
        items, flt, node_id, starts = args
        hooks = store._hooks
        return drive(
            store._work(lambda tx: work.complete_and_claim(tx, items, hooks, flt, starts), node_id)
        )
    return drive(getattr(store, name)(*args, **kwargs))


def announce(conn: Connection, store: sql.SQLStore | None, failure: BaseException | None) -> None:
    """The child's first message: the store is open, or why it could not be opened."""
    if store is None:
        conn.send_bytes(_dumps(("failed", None, _sendable(failure or errors.StoreError()), None)))
    else:
        conn.send_bytes(_dumps(("ready", None, None, store.degraded)))
