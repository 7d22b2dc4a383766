"""Wake-ups that cross from the store's threads into the event loop, coalesced.

Every commit tells its subscribers what changed, from the store's thread. Scheduling a call on
the event loop from another thread writes to the loop's wake-up pipe, and that write lets the
event loop's thread take the interpreter lock from the store's thread, which may then wait up
to a switch interval to get it back. Many commits in a row need one wake-up, not one each: a
call already scheduled and not yet run absorbs the signals that come before it runs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class CoalescedCall:
    """Run `fn` on `loop` soon, from any thread; signals while a run is pending add nothing."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn
        self._pending = False
        self._lock = threading.Lock()

    def schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._pending:
                return
            self._pending = True
        try:
            loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop closed meanwhile
            with self._lock:
                self._pending = False

    def _run(self) -> None:
        with self._lock:
            self._pending = False  # a signal from now on schedules another run
        self._fn()
