"""Cancel / pause / resume signals of one running task (seed 000 TaskCancelService and
TaskPauseResumeService, in one object).

The engine owns one `TaskControl` per running task. The user side calls `cancel()`,
`pause()` and `resume()`; the executor side awaits `checkpoint()`. Attached OS processes are
stopped with SIGSTOP on pause and continued with SIGCONT on resume, so paused work really uses
no CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable

from fredica.domain import errors
from fredica.executors.ledger import ProcessLedger

logger = logging.getLogger(__name__)

PauseListener = Callable[[bool, str | None], None]
GATE_POLL_SEC = 0.1  # seconds between looks at a closed gate


class TaskControl:
    """Signals for one running task. All methods must be called on the event loop thread."""

    def __init__(self, task_id: str, attempt: int = 0, ledger: ProcessLedger | None = None) -> None:
        self.task_id = task_id
        self.attempt = attempt
        #: where the process groups of this attempt are written down (reaped after a crash)
        self._ledger = ledger
        # flags, with their events made only when something waits (most tasks never do)
        self._cancelled = False
        self._paused = False
        self._cancel_event: asyncio.Event | None = None
        self._running_event: asyncio.Event | None = None  # set = not paused
        self.cancel_reason: str | None = None
        self.pause_reason: str | None = None
        self.self_paused = False
        self._process_groups: set[int] = set()
        #: may this attempt go on? (None: always.) False while its node cannot confirm that it
        #: still owns the task's pipeline (DESIGN §4.11): `checkpoint` waits, so work that
        #: another node may have taken over does nothing visible meanwhile
        self.gate: Callable[[], bool] | None = None
        self._listeners: list[PauseListener] = []
        self._pause_hooks: list[Callable[[bool], None]] = []

    # --- state -----------------------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def paused(self) -> bool:
        return self._paused

    def _cancel_waiter(self) -> asyncio.Event:
        if self._cancel_event is None:
            self._cancel_event = asyncio.Event()
            if self._cancelled:
                self._cancel_event.set()
        return self._cancel_event

    def _running_waiter(self) -> asyncio.Event:
        if self._running_event is None:
            self._running_event = asyncio.Event()
            if not self._paused:
                self._running_event.set()
        return self._running_event

    def on_pause_change(self, listener: PauseListener) -> None:
        """Call `listener(paused, reason)` whenever the pause state changes."""
        self._listeners.append(listener)

    def detach(self) -> None:
        """The attempt ended: drop the listeners and hooks. They usually refer back to the
        engine's record of the attempt, which refers to this control; without this the pair
        lives on as a reference cycle until the garbage collector finds it (about ten objects
        a task, which made its collections walk thousands of finished tasks)."""
        self._listeners.clear()
        self._pause_hooks.clear()

    # --- user side -------------------------------------------------------------------------
    def cancel(self, reason: str = "cancelled by user") -> None:
        if self._cancelled:
            return
        self.cancel_reason = reason
        self._cancelled = True
        if self._cancel_event is not None:
            self._cancel_event.set()
        # A paused task must wake up to notice the cancel; continued processes get terminated.
        self._set_paused(False, None)

    def pause(self, reason: str | None = "paused by user") -> None:
        self.self_paused = False
        self._set_paused(True, reason)

    def resume(self) -> None:
        self._set_paused(False, None)

    # --- executor side ---------------------------------------------------------------------
    def request_pause(self, reason: str) -> None:
        """The work itself asks to pause (e.g. waiting for GPU memory).

        Its processes are not stopped: work that paused itself must stay able to notice that its
        resource is back and call `request_resume()`.
        """
        self._set_paused(True, reason, stop_processes=False)
        self.self_paused = True

    def request_resume(self) -> None:
        self._set_paused(False, None)

    async def checkpoint(self) -> None:
        """Block while paused or while the gate is closed; raise `TaskCancelled` once
        cancelled."""
        if self._cancelled:
            raise errors.TaskCancelled(self.cancel_reason)
        if self.gate is not None and not self.gate():
            await self._hold()
        if self._paused:
            await self._running_waiter().wait()
            if self._cancelled:
                raise errors.TaskCancelled(self.cancel_reason)

    async def _hold(self) -> None:
        """Wait until the gate opens again or the attempt is cancelled (a cancel wins)."""
        assert self.gate is not None
        logger.info(
            "task %s waits: its node cannot confirm that it still owns the task",
            self.task_id,
            extra={"action": "owner_gate"},
        )
        while not self.gate():
            if self._cancelled:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cancel_waiter().wait(), GATE_POLL_SEC)
        if self._cancelled:
            raise errors.TaskCancelled(self.cancel_reason)

    async def wait_cancelled(self) -> None:
        await self._cancel_waiter().wait()

    async def wait_running(self) -> None:
        await self._running_waiter().wait()

    # --- OS processes ------------------------------------------------------------------------
    def attach_process_group(self, pgid: int) -> None:
        self._process_groups.add(pgid)
        if self._ledger is not None:
            try:
                self._ledger.record(self.task_id, self.attempt, pgid)
            except OSError:
                logger.exception("process group not recorded", extra={"action": "ledger"})
        if self.paused:
            self._signal_group(pgid, signal.SIGSTOP)

    def detach_process_group(self, pgid: int) -> None:
        self._process_groups.discard(pgid)
        if self._ledger is not None:
            self._ledger.forget(self.task_id, self.attempt, pgid)

    def add_pause_hook(self, hook: Callable[[bool], None]) -> Callable[[], None]:
        """Call `hook(paused)` on every pause change; returns a function that removes it."""
        self._pause_hooks.append(hook)
        return lambda: self._pause_hooks.remove(hook) if hook in self._pause_hooks else None

    def _set_paused(self, paused: bool, reason: str | None, stop_processes: bool = True) -> None:
        if paused == self.paused:
            return
        self._paused = paused
        if paused:
            self.pause_reason = reason
            if self._running_event is not None:
                self._running_event.clear()
        else:
            self.pause_reason = None
            self.self_paused = False
            if self._running_event is not None:
                self._running_event.set()
        if stop_processes:
            sig = signal.SIGSTOP if paused else signal.SIGCONT
            for pgid in list(self._process_groups):
                self._signal_group(pgid, sig)
        for hook in list(self._pause_hooks):
            try:
                hook(paused)
            except Exception:  # a failing hook must never break the control path
                logger.exception("pause hook failed", extra={"action": "pause_hook"})
        for listener in list(self._listeners):
            try:
                listener(paused, reason)
            except Exception:
                logger.exception("pause listener failed", extra={"action": "pause_listener"})

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        # The group may not exist yet (the child has not called setsid): signal the pid then.
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pgid, sig)
