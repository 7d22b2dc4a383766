"""Runs a synchronous store on one dedicated thread, so no DB call blocks the event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from fredica.store.base import TaskStore

P = ParamSpec("P")
T = TypeVar("T")


class StoreRunner:
    """`await runner.call(runner.store.claim, ...)` runs the call on the store thread."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fredica-store")

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        close = getattr(self.store, "close", None)
        if callable(close):
            close()
