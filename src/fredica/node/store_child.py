"""`python -m fredica.node.store_child`: the process that runs a node's embedded SQLite store
(`store.hosted`, `store.process`), started by `HostedStore` with one end of a socket pair.

It composes what runs inside the store's transactions as the node does: the built-in templates
and the node's plugins (their spawn hooks) and the system clock shifted by the node's
`clock_offset_sec`. It runs every operation on its only thread, dies with the node (Linux
parent-death signal) and exits when the node closes the socket.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import TypeVar

from fredica.domain import errors
from fredica.domain.clock import OffsetClock
from fredica.engine.registry import builtin_registry
from fredica.executors.ledger import set_pdeathsig
from fredica.node import gctune
from fredica.store import hosted, sql
from fredica.store.sqlite import SQLiteTaskStore

T = TypeVar("T")


class InlineSQLiteStore(SQLiteTaskStore):
    """The SQLite store run on the calling thread: this process has nothing else to do."""

    async def _run(self, fn: Callable[[], T], priority: int = sql.NORMAL) -> T:
        if self._closed:
            raise errors.StoreError("the store is closed")
        return fn()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_connections()
        self._pool.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fredica's store process (started by a node)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--clock-offset", type=float, default=0.0)
    parser.add_argument("--plugin", action="append", default=[])
    args = parser.parse_args(argv)
    set_pdeathsig()  # it dies with the node
    conn = Connection(args.fd)
    try:
        registry = builtin_registry()
        registry.load_plugins(args.plugin)
        clock = OffsetClock(args.clock_offset) if args.clock_offset else None
        store = InlineSQLiteStore(args.db, args.node_id, clock)
        store.set_hooks(registry.spawn_hook)
    except Exception as exc:
        hosted.announce(conn, None, exc)
        return 1
    gctune.tune_once()  # what start-up built lives as long as this process
    hosted.announce(conn, store, None)
    try:
        hosted.serve(conn, store)
    finally:
        hosted.drive(store.close())
    return 0


if __name__ == "__main__":
    sys.exit(main())
