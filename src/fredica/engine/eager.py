"""Start a coroutine at once, and make an asyncio task of it only if it has to wait.

Most of what a node runs waits (for a child process, a file, the network), but quick tasks
often finish without ever suspending: a no-op, a task whose outputs already exist, a small
formatting step. For those, an asyncio task (its object, its scheduling on the next loop
iteration, its own step) costs more than the work. Python 3.12 has eager task factories for
this; on 3.11 `start()` does the same for one coroutine: it runs it in its own copy of the
context until it first suspends, and only then hands it to an asyncio task that carries on
from where it stopped.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Generator
from typing import Any

logger = logging.getLogger(__name__)


def start(
    coro: Coroutine[Any, Any, None], name: str, context: contextvars.Context | None = None
) -> asyncio.Task[None] | None:
    """Run `coro` now, in `context` (a copy of the current one by default), up to its first
    suspension. None if it finished (its exception, if any, is logged as an asyncio task's
    would be); otherwise the asyncio task that runs the rest (in the same context)."""
    ctx = context if context is not None else contextvars.copy_context()
    try:
        first = ctx.run(coro.send, None)
    except StopIteration:
        return None
    except Exception:
        logger.exception("%s failed", name, extra={"action": "eager_task"})
        return None
    return asyncio.get_running_loop().create_task(_CarryOn(coro, first), name=name, context=ctx)


class _CarryOn(Coroutine[Any, Any, None]):
    """The rest of a started coroutine, as the asyncio task sees it: its first step yields
    what the coroutine yielded when it suspended (the future it waits for, or None for a bare
    yield); every later step, and anything thrown in (a cancellation included, even one that
    comes before the task's first step), goes to the coroutine itself."""

    __slots__ = ("_coro", "_first", "_started")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro = coro
        self._first = first
        self._started = False

    def send(self, value: Any) -> Any:
        if not self._started:
            self._started = True
            return self._first
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._started = True
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # the pre-3.12 three-argument form

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        return self  # type: ignore[return-value]  # send/throw/close, and __next__ below

    def __next__(self) -> Any:
        return self.send(None)

    def __iter__(self) -> _CarryOn:
        return self
