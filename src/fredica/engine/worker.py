"""The worker engine (seed 000 "WorkerEngine", DESIGN §4).

Start-up recovery runs before the first claim. Then a main poll loop claims ready tasks in
batches straight into `running` (up to the free slots), and side loops commit completions
together (group commit), flush progress, heartbeat running tasks, and watch liveness
(stale/reclaim) as the owner. If a side loop dies the engine stops rather than run half-alive.

Every report carries the task's `attempt`: a report refused with `StaleAttempt` means this
attempt lost the task (reclaimed, cancelled, or claimed again), and its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fredica.cluster.gate import NO_GATE, ClaimGate, Gate
from fredica.domain import errors, models
from fredica.domain.clock import Clock, SystemClock
from fredica.domain.models import ErrorType, TaskStatus
from fredica.engine import eager
from fredica.engine.backends import BackendChoice, BackendSelector
from fredica.engine.registry import Registry
from fredica.engine.wakeups import CoalescedCall
from fredica.executors import outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import FileFetcher, TaskContext
from fredica.executors.control import TaskControl
from fredica.executors.ledger import ProcessLedger
from fredica.store.base import (
    BackendNote,
    ClaimFilter,
    Completed,
    CompletionItem,
    Failure,
    Liveness,
    RecoveryReport,
    Signal,
    StartItem,
    WorkStore,
)

logger = logging.getLogger(__name__)

EARLY_CANCEL_TTL = 60.0  # seconds a cancel for a task not (yet) here is remembered
EARLY_CANCELS_KEPT = 1000  # entries before the expired ones are dropped


class DiskCheck(Protocol):
    """Room on this node's disk for disk-heavy work (seed 001 §7.7; `node.disk.DiskGate`)."""

    def held_types(self, types: frozenset[str]) -> frozenset[str]:
        """The types among `types` not to claim now for lack of disk space."""
        ...

    def applies(self, task_type: str) -> bool:
        """Whether tasks of this type need room (cheap: asked for every task)."""
        ...

    def shortfall(self, task: models.Task) -> str | None:
        """None if the claimed task's estimated output fits, else why not (blocking)."""
        ...


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Timing knobs, all floats in seconds (DESIGN §4.12)."""

    node_id: str
    data_dir: Path
    max_workers: int = 2
    poll_interval: float = 1.0
    idle_poll_interval: float = 5.0
    idle_after_empty_polls: int = 3
    heartbeat_interval: float = 30.0
    stale_after: float = 180.0
    reclaim_after: float = 900.0
    claim_timeout: float = 60.0
    monitor_interval: float | None = None  # default: min(heartbeat_interval, stale_after / 3)
    progress_flush_interval: float = 0.25
    shutdown_grace: float = 30.0
    quarantine_after_failures: int = 3  # 0: never quarantine
    quarantine_cooldown: float = 60.0
    claim_ahead: int = 512  # tasks claimed beyond the free slots (0: only for free slots)
    claim_ahead_window: float = 1.0  # a task claimed ahead starts within this, or goes back
    start_record_delay: float = 0.02  # a start is written once the task ran this long
    #: with a store that works in another process: after this many quick tasks ran inline
    #: and finished, the engine lets their commit go out before it starts the rest, so that
    #: the store writes one part while the node runs the next (0: never)
    commit_burst: int = 128

    @property
    def effective_monitor_interval(self) -> float:
        if self.monitor_interval is not None:
            return self.monitor_interval
        return max(0.05, min(self.heartbeat_interval, self.stale_after / 3))


@dataclass
class _Running:
    task: models.Task
    control: TaskControl
    job: asyncio.Task[None] | None = None
    lost: str | None = None  # set when this attempt no longer owns the task
    backend: BackendNote | None = None  # recorded with the outcome
    choice: BackendChoice | None = None  # counts as active on its backend until the task ends
    pause_writes: list[asyncio.Task[Any]] = field(default_factory=list)
    launched: float = 0.0  # monotonic time the executor began
    started_at: float | None = None  # the same moment on the store's clock
    start_recorded: bool = False  # the store has the task as running
    completed: bool = False  # its completion waits for (or went through) the group commit


@dataclass(slots=True)
class _Queued:
    """A task claimed ahead, waiting for a free slot (claimed, not yet running)."""

    task: models.Task
    claimed: float  # monotonic time of the claim
    cancel: str | None = None  # set when it must not start (cancelled, lost)


class WorkerEngine:
    """Claims and runs tasks on this node."""

    def __init__(
        self,
        store: WorkStore,
        registry: Registry,
        settings: EngineSettings,
        clock: Clock | None = None,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self._on_change = on_change
        self._running: dict[str, _Running] = {}
        self._starting = False  # _start_queued is launching (tasks may finish as they start)
        self._wake = asyncio.Event()
        self._stopping = False
        self._releasing = False
        self._loops: list[asyncio.Task[None]] = []
        self._queued: dict[str, _Queued] = {}  # claimed ahead, in claim order
        self._done: list[tuple[CompletionItem, _Running]] = []  # awaiting the group commit
        self._commit_wake = asyncio.Event()
        self._committing = False
        self._starts_paused = False  # until the commit loop sent the results of a burst
        self._resume_due = False  # the starts go on at the event loop's next turn
        self._avg_run: dict[str, float] = {}  # moving average of run time by task type (s)
        self._progress: dict[str, tuple[int, int, str | None]] = {}
        self._progress_dirty = asyncio.Event()
        self.recovery: RecoveryReport | None = None
        self.stats = {"claimed": 0, "completed": 0, "failed": 0, "retried": 0, "cancelled": 0}
        self.failure: BaseException | None = None
        self.selector: BackendSelector | None = None
        #: the score gate against the peers (set by the node when it has peers)
        self.gate: ClaimGate | None = None
        #: per task id, the gate its attempt's checkpoints wait at (set by a node whose
        #: pipelines can move to other owners: `node.ownership`)
        self.gate_for: Callable[[str], Callable[[], bool] | None] | None = None
        self._pausable = registry.pausable_map()
        self._active_by_backend: dict[str, int] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self.stopped = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ledger = ProcessLedger(settings.data_dir / "run")
        self.quarantine = Quarantine(
            settings.quarantine_after_failures, settings.quarantine_cooldown
        )
        self._last_heartbeat = time.monotonic()
        self._reserved = 0  # slots promised to claims in flight (poll and commit loops)
        self._store_wake = CoalescedCall(self._wake.set)
        #: cancels for tasks not (yet) here: a claim in flight when the cancel was committed
        #: brings the task a moment later, and it must not start as if nothing happened
        self._early_cancels: dict[str, tuple[str, float]] = {}
        #: fetches inputs held by other nodes (set by the node when it has a cluster secret)
        self.peer_files: FileFetcher | None = None
        #: `fredica node drain`: finish the running work, claim nothing new
        self.draining = False
        #: the disk gate (set by the node): disk-heavy types wait while space is short
        self.disk: DiskCheck | None = None

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> RecoveryReport:
        """Run start-up recovery, then start the loops. Returns the recovery report."""
        self._loop = asyncio.get_running_loop()
        # what an earlier run of this node left running dies before any task can run again
        reaped = await asyncio.to_thread(self.ledger.reap)
        if reaped:
            logger.warning(
                "killed %d process group(s) left by the previous run",
                len(reaped),
                extra={"action": "reap"},
            )
        self.store.subscribe(self._on_store_signal)
        self.recovery = await self.store.recover_startup(self.node_id)
        if self.recovery.snapshot or self.recovery.orphans:
            logger.warning(
                "start-up recovery: %s",
                self.recovery.summary(),
                extra={"action": "startup_recovery"},
            )
        for task in self.recovery.failed:
            await self._call_on_failed(task, ExecuteResult(error=task.error or "interrupted"))
        loops: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("poll", self._poll_loop),
            ("commit", self._commit_loop),
            ("progress", self._progress_loop),
            ("heartbeat", self._heartbeat_loop),
            ("monitor", self._monitor_loop),
        ]
        for name, fn in loops:
            loop_task = asyncio.create_task(self._guard(name, fn), name=f"fredica-{name}")
            self._loops.append(loop_task)
        return self.recovery

    async def _guard(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        try:
            await fn()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            logger.exception("engine loop %s died; stopping", name, extra={"action": "loop_died"})
            self.failure = exc
            self._stopping = True
            self._wake.set()
            self.stopped.set()

    def wake(self) -> None:
        """New work may be ready: claim now instead of at the next poll."""
        self._wake.set()

    def _on_store_signal(self, signal: Signal) -> None:
        # called on the store's thread, possibly for a commit made by another node
        if signal is Signal.READY and self._loop is not None and not self._loop.is_closed():
            self._store_wake.schedule(self._loop)

    async def stop(self, grace: float | None = None) -> None:
        """Stop claiming; let running work finish within `grace`, then release the rest back to
        pending (DESIGN §4.10)."""
        grace = self.settings.shutdown_grace if grace is None else grace
        self._stopping = True
        self._wake.set()
        await self._release_queued("node shutting down before the task started")
        jobs = [r.job for r in self._running.values() if r.job is not None]
        if jobs:
            logger.info(
                "waiting up to %.1fs for %d running task(s)",
                grace,
                len(jobs),
                extra={"action": "shutdown_wait"},
            )
            await asyncio.wait(jobs, timeout=grace)
        if self._running:
            self._releasing = True
            for running in list(self._running.values()):
                running.control.cancel("node shutting down")
            remaining = [r.job for r in self._running.values() if r.job is not None]
            if remaining:
                await asyncio.wait(remaining, timeout=10)
        # let the group commit write what is waiting for it, then stop the loops
        deadline = time.monotonic() + 30.0
        while (self._done or self._committing) and time.monotonic() < deadline:
            if self.failure is not None:
                break
            self._commit_wake.set()
            await asyncio.sleep(0.005)
        # a commit that was in flight when the stop began may have claimed ahead
        await self._release_queued("node shutting down before the task started")
        await self._flush_progress()
        for loop_task in self._loops:
            loop_task.cancel()
        for loop_task in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
        self._loops.clear()
        self.stopped.set()

    # --- control from the API --------------------------------------------------------------
    def is_running_here(self, task_id: str) -> bool:
        return task_id in self._running or task_id in self._queued

    def signal_cancel(self, task_id: str, reason: str = "cancelled by user") -> bool:
        queued = self._queued.pop(task_id, None)
        if queued is not None:  # claimed ahead, not started: it ends cancelled at once
            self._background_call(self._cancel_queued(queued.task, reason))
            return True
        running = self._running.get(task_id)
        if running is None:
            self._remember_cancel(task_id, reason)
            return False
        running.control.cancel(reason)
        return True

    def _remember_cancel(self, task_id: str, reason: str) -> None:
        now = time.monotonic()
        if len(self._early_cancels) >= EARLY_CANCELS_KEPT:
            self._early_cancels = {
                k: v for k, v in self._early_cancels.items() if now - v[1] < EARLY_CANCEL_TTL
            }
        self._early_cancels[task_id] = (reason, now)

    def _early_cancel(self, task_id: str) -> str | None:
        """The reason of a cancel that came before this task reached the engine, if any."""
        entry = self._early_cancels.pop(task_id, None) if self._early_cancels else None
        if entry is None or time.monotonic() - entry[1] > EARLY_CANCEL_TTL:
            return None
        return entry[0]

    async def pause(self, task_id: str) -> models.Task:
        running = self._require_running(task_id)
        if not self._executor_pausable(running.task):
            raise errors.IllegalTransition(f"task {task_id} ({running.task.type}) is not pausable")
        running.control.pause("paused by user")
        await self._await_pause_writes(running)
        return await self.store.get_task(task_id)

    async def resume(self, task_id: str) -> models.Task:
        running = self._require_running(task_id)
        running.control.resume()
        await self._await_pause_writes(running)
        return await self.store.get_task(task_id)

    def _require_running(self, task_id: str) -> _Running:
        running = self._running.get(task_id)
        if running is None:
            if task_id in self._queued:
                raise errors.IllegalTransition(
                    f"task {task_id} is waiting for a free slot on this node; pause it once it runs"
                )
            raise errors.IllegalTransition(f"task {task_id} is not running on this node")
        return running

    def _executor_pausable(self, task: models.Task) -> bool:
        executor = self.registry.executor(task.type)
        return executor is not None and executor.pausable

    async def _await_pause_writes(self, running: _Running) -> None:
        writes, running.pause_writes = running.pause_writes, []
        if writes:
            await asyncio.gather(*writes, return_exceptions=True)

    # --- the poll loop ---------------------------------------------------------------------
    async def _poll_loop(self) -> None:
        empty_polls = 0
        while not self._stopping:
            # Clear first, every time: a wake set while all slots are busy must not make this
            # loop spin (it would hold the GIL and starve the store thread).
            self._wake.clear()
            self._start_queued()
            await self._release_overdue()
            free, ahead, short = self._claim_plan()
            want = free + ahead
            if want <= 0:  # a finishing task wakes us as it frees its slot
                await self._wait_wake(self.settings.idle_poll_interval)
                continue
            types = self.claimable_types()
            claimed: list[models.Task] = []
            if types:
                # the commit loop may claim at the same time: each reserves what it asks for
                # until its claim returns, so together they never take more than they may
                self._reserved += want
                try:
                    flt = self._claim_filter(free, types, ahead, short)
                    claimed = await self.store.claim(flt, self.node_id)
                except errors.StoreError as exc:
                    await self._store_trouble("claim", exc)
                    continue
                finally:
                    self._reserved -= want
            self._accept(claimed)
            if claimed and len(claimed) == want:  # there may be more ready work
                empty_polls = 0
                continue
            empty_polls = 0 if claimed else empty_polls + 1
            interval = (
                self.settings.idle_poll_interval
                if empty_polls >= self.settings.idle_after_empty_polls
                else self.settings.poll_interval
            )
            await self._wait_wake(interval)

    # --- claiming ahead -----------------------------------------------------------------------
    def _claim_plan(self) -> tuple[int, int, frozenset[str]]:
        """What to claim now: (free slots, tasks to claim ahead, the short task types that may
        be claimed ahead). Ahead of the free slots a node claims only short work, and only as
        much as it expects to start within a quarter of the claim-ahead window."""
        s = self.settings
        busy = len(self._running) + len(self._queued) + self._reserved
        free = max(0, s.max_workers - busy)
        short = self._short_types()
        if not short or s.claim_ahead <= 0:
            return free, 0, short
        slowest = max(self._avg_run[t] for t in short)
        target = min(s.claim_ahead, int(s.max_workers * (s.claim_ahead_window / 4) / slowest))
        waiting = max(0, busy - s.max_workers)  # already claimed beyond the slots
        return free, max(0, target - waiting), short

    def _short_types(self) -> frozenset[str]:
        """Task types whose recent run time is short next to the claim-ahead window."""
        limit = self.settings.claim_ahead_window / 8
        return frozenset(t for t, avg in self._avg_run.items() if max(avg, 1e-6) <= limit)

    def _note_run_time(self, running: _Running) -> None:
        took = time.monotonic() - running.launched
        task_type = running.task.type
        avg = self._avg_run.get(task_type)
        self._avg_run[task_type] = took if avg is None else 0.8 * avg + 0.2 * took

    def _accept(self, claimed: list[models.Task]) -> None:
        """Queue what a claim returned (claim order) and start what the free slots allow."""
        if not claimed:
            return
        now = time.monotonic()
        for task in claimed:
            reason = self._early_cancel(task.id)
            if reason is not None:  # cancelled while the claim was in flight: it never starts
                self._background_call(self._cancel_queued(task, reason))
                continue
            self._queued[task.id] = _Queued(task, now)
        self.stats["claimed"] += len(claimed)
        self._start_queued()
        self._changed(claimed[0].pipeline_id)

    def _start_queued(self) -> None:
        if self._starting:  # a task that finished as it started: the loop below goes on
            return
        if self._starts_paused:
            return
        self._starting = True
        burst = self.settings.commit_burst if self.store.out_of_process else 0
        launched = 0
        try:
            while self._queued and len(self._running) < self.settings.max_workers:
                if self._stopping or self.quarantine.active:
                    return  # stop() and the quarantine hand the queue back
                if burst and launched >= burst and self._commit_now(burst):
                    return
                queued = self._queued.pop(next(iter(self._queued)))
                self._launch(queued.task, queued.claimed)
                launched += 1
        finally:
            self._starting = False

    def _commit_now(self, burst: int) -> bool:
        """After a burst of quick tasks, when `burst` results wait: give the commit loop the
        turn, so that the store writes them while this node runs the rest of the queue.
        With no commit in flight the starts pause until the commit loop has sent them (it
        starts the rest); with one in flight they go on at the loop's next turn, after the
        answer to that commit (if it came) was heard. False: carry on starting."""
        if len(self._done) < burst or self._loop is None:
            return False
        self._commit_wake.set()
        if not self._committing:
            self._starts_paused = True
        elif not self._resume_due:
            self._resume_due = True
            self._loop.call_soon(self._resume_starts)
        return True

    def _resume_starts(self) -> None:
        self._resume_due = False
        self._start_queued()

    async def _release_overdue(self) -> None:
        """A task claimed ahead that did not start within the window goes back for any node
        (the work here took longer than it looked)."""
        limit = time.monotonic() - self.settings.claim_ahead_window
        overdue: list[_Queued] = []
        for queued in self._queued.values():
            if queued.claimed >= limit:
                break  # claim order: the rest are younger
            overdue.append(queued)
        for queued in overdue:
            del self._queued[queued.task.id]
        for queued in overdue:
            await self._release(
                queued.task,
                f"claimed ahead but not started within {self.settings.claim_ahead_window:g}s",
            )

    async def _release_queued(self, reason: str) -> None:
        queued, self._queued = list(self._queued.values()), {}
        for entry in queued:
            await self._release(entry.task, reason)

    async def _release(self, task: models.Task, reason: str) -> None:
        try:
            await self.store.release(task.id, task.attempt, reason, self.node_id)
        except (errors.StaleAttempt, errors.IllegalTransition, errors.NotFound) as exc:
            logger.info("not released: %s", exc, extra={"action": "release"})
        except errors.StoreError as exc:
            # the claim timeout of the liveness monitor hands it back instead
            logger.warning("release of %s failed: %s", task.id, exc, extra={"action": "release"})
        else:
            self._changed(task.pipeline_id)
            self._wake.set()

    async def _cancel_queued(self, task: models.Task, reason: str) -> None:
        failure = Failure(task.id, task.attempt, reason, ErrorType.CANCELLED, None, None)
        try:
            after = await self.store.fail(failure, self.node_id)
        except errors.FredicaError as exc:
            logger.info("cancel not recorded: %s", exc, extra={"action": "cancel_queued"})
            return
        self.stats["cancelled"] += 1
        self._changed(after.pipeline_id)

    def _background_call(self, coro: Awaitable[Any]) -> None:
        future = asyncio.ensure_future(coro)
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    def set_draining(self, draining: bool) -> None:
        """Drain (claim nothing new; what was claimed ahead and not started goes back for
        the other nodes) or stop draining (claim again at once)."""
        self.draining = draining
        if draining:
            if self._queued:
                self._background_call(self._release_queued("node draining"))
        else:
            self._wake.set()

    def claimable_types(self) -> frozenset[str]:
        """Task types with an executor here whose capability this node declares and whose
        backends are not all at max_concurrent, less the disk-heavy types while the data dir
        is short of space (nothing while the node is quarantined or draining)."""
        if self.quarantine.active or self.draining:
            return frozenset()
        if self.selector is None:
            types = self.registry.task_types
        else:
            busy = self.selector.saturated_functions(self._active_by_backend)
            types = self.selector.claimable_types(self.registry.task_types, busy)
        if self.disk is not None:
            types -= self.disk.held_types(types)
        return types

    def _claim_filter(
        self,
        free: int,
        types: frozenset[str],
        ahead: int = 0,
        short: frozenset[str] = frozenset(),
    ) -> ClaimFilter:
        cloud_only, local_only = (
            self.selector.preference_gates(types, self._active_by_backend)
            if self.selector is not None
            else (None, None)
        )
        # what fills a free slot starts at once (claimed straight into running); what is
        # claimed ahead stays `claimed` until it starts (a crash hands it back without
        # counting an attempt)
        gate = self._gate(types)
        return ClaimFilter(
            limit=free,
            types=types,
            start=True,
            pausable=self._pausable,
            cloud_only_types=cloud_only,
            local_only_types=local_only,
            ahead=ahead,
            ahead_types=short & types,
            deferred_types=gate.deferred_types,
            defer_wait=self.gate.defer_window if self.gate is not None else None,
            soft_elsewhere=gate.soft_elsewhere,
            soft_wait=self.gate.defer_window if self.gate is not None else 0.0,
        )

    def _gate(self, types: frozenset[str]) -> Gate:
        """What to leave to better or preferred peers (nothing without peers)."""
        if self.gate is None or not self.gate.needs_scores():
            return NO_GATE
        mine = (
            self.selector.type_scores(types, self._active_by_backend, self.load)
            if self.selector is not None
            else {}
        )
        return self.gate.apply(types, mine)

    @property
    def active_by_backend(self) -> dict[str, int]:
        """Tasks running now per backend."""
        return dict(self._active_by_backend)

    @property
    def load(self) -> int:
        """Tasks this node holds (running or claimed ahead): its queue depth for §2.7.2."""
        return len(self._running) + len(self._queued)

    async def _wait_wake(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _launch(self, task: models.Task, claimed: float) -> None:
        control = TaskControl(task.id, task.attempt, self.ledger)
        if self.gate_for is not None:
            control.gate = self.gate_for(task.id)
        now = time.monotonic()
        running = _Running(task, control, launched=now)
        if task.status is TaskStatus.RUNNING:
            running.start_recorded = True  # claimed straight into running
        elif task.claimed_at is not None:
            # the moment it began, on the store's clock (it may have waited in the queue)
            running.started_at = task.claimed_at + (now - claimed)
        older = self._running.get(task.id)
        if older is not None:
            # This node claimed the task again (it was reclaimed while this node slept): the
            # older attempt lost it and stops; only the new one heartbeats and reports.
            older.lost = f"attempt {older.task.attempt} was superseded by attempt {task.attempt}"
            older.control.cancel(older.lost)
        self._running[task.id] = running

        def on_pause(paused: bool, reason: str | None) -> None:
            write = asyncio.ensure_future(self._record_pause(running, paused, reason))
            running.pause_writes.append(write)

        control.on_pause_change(on_pause)
        name = f"task-{task.id}"
        executor = self.registry.executor(task.type)
        if executor is not None and executor.starts_inline:
            # quick work that may finish without waiting needs no asyncio task of its own
            running.job = eager.start(self._dispatch(running), name)
        else:
            running.job = asyncio.create_task(self._dispatch(running), name=name)

    async def _record_pause(self, running: _Running, paused: bool, reason: str | None) -> None:
        task = running.task
        try:
            await self._record_start(running)
            await self.store.set_paused(task.id, task.attempt, paused, reason, self.node_id)
            self._changed(task.pipeline_id)
        except (errors.StaleAttempt, errors.IllegalTransition) as exc:
            logger.info("pause flag not recorded: %s", exc, extra={"action": "pause_record"})

    async def _record_start(self, running: _Running) -> None:
        """Write the start now if the group commit has not yet (a pause needs `running`)."""
        if running.start_recorded:
            return
        task = running.task
        with contextlib.suppress(errors.IllegalTransition):  # the commit loop was faster
            await self.store.start(task.id, task.attempt, self.node_id)
        running.start_recorded = True

    # --- dispatch --------------------------------------------------------------------------
    async def _dispatch(self, running: _Running) -> None:
        task = running.task
        executor = self.registry.executor(task.type)
        ctx = TaskContext(
            task=task,
            control=running.control,
            node_id=self.node_id,
            data_dir=self.settings.data_dir,
            sink=self,
            peer_files=self.peer_files,
        )
        try:
            await self._run_and_report(running, executor, ctx)
        except errors.BackendBusy as exc:
            # claimed in a race with another task for the last backend slot: hand it back
            await self.store.release(
                task.id, task.attempt, f"backend busy: {exc.message}", self.node_id
            )
        except errors.StaleAttempt as exc:
            logger.warning("dropping result: %s", exc, extra={"action": "fenced"})
        except Exception:
            logger.exception(
                "could not record the outcome of task %s",
                task.id,
                extra={"action": "report_failed"},
            )
        finally:
            if running.choice is not None:
                backend = running.choice.backend
                left = self._active_by_backend[backend] - 1
                if left:
                    self._active_by_backend[backend] = left
                else:  # no zero entries: an idle node's load is an empty dict
                    del self._active_by_backend[backend]
            self._note_run_time(running)
            self._forget(running)
            self._start_queued()
            if not running.completed:  # a completion claims more work in its own commit
                self._wake.set()

    def _forget(self, running: _Running) -> None:
        """Drop `running` from the running set, unless a newer attempt replaced it."""
        running.control.detach()  # no cycle left behind (`TaskControl.detach`)
        if self._running.get(running.task.id) is running:
            del self._running[running.task.id]
            self._progress.pop(running.task.id, None)

    async def _run_and_report(
        self, running: _Running, executor: TaskExecutor | None, ctx: TaskContext
    ) -> None:
        """Run the executor and report its outcome; a TaskError is a classified failure, any
        other exception a TRANSIENT one."""
        task = running.task
        try:
            if executor is None:
                raise errors.PermanentError(f"no executor for task type {task.type} here")
            if task.cancel_requested:
                raise errors.TaskCancelled("cancelled by user")
            running.choice = self._choose_backend(running, ctx)
            existing = await executor.can_skip(task, ctx)
            if existing is not None:
                await self._complete(running, existing, "outputs already exist; skipped run")
                return
            disk = self.disk if self.disk is not None and self.disk.applies(task.type) else None
            short = await asyncio.to_thread(disk.shortfall, task) if disk is not None else None
            if short is not None:  # no room for its output: back to pending, not a retry
                await self.store.release(task.id, task.attempt, short, self.node_id)
                self._changed(task.pipeline_id)
                return
            outcome = await executor.execute(task, ctx)
            if running.control.cancelled:
                raise errors.TaskCancelled(running.control.cancel_reason)
            if not outcome.ok:
                raise _error_from_result(outcome)
            await self._complete(running, outcome.result_json or {}, None)
        except errors.TaskError as exc:
            await self._fail(running, executor, exc)
        except (asyncio.CancelledError, errors.BackendBusy, errors.StaleAttempt):
            raise
        except Exception as exc:
            logger.exception("task %s raised", task.id, extra={"action": "task_exception"})
            await self._fail(
                running, executor, errors.TransientError(f"{type(exc).__name__}: {exc}")
            )

    def _choose_backend(self, running: _Running, ctx: TaskContext) -> BackendChoice | None:
        """Pick the backend (seed 001 §2.7); it counts as active until the task ends and is
        recorded with the outcome, in the same transaction."""
        if self.selector is None:
            return None
        # the load modifier counts the other work this node holds (seed 001 §2.7.2)
        choice = self.selector.choose(
            running.task, self._active_by_backend, pending=max(0, self.load - 1)
        )
        ctx.backend = choice.backend
        ctx.backend_config = dict(choice.config)
        if choice.model:
            ctx.backend_config.setdefault("model", choice.model)
        self._active_by_backend[choice.backend] = self._active_by_backend.get(choice.backend, 0) + 1
        running.backend = BackendNote(choice.backend, choice.note, self.clock.now())
        return choice

    async def _complete(self, running: _Running, result: dict[str, Any], note: str | None) -> None:
        """Hand the result to the group commit; the slot is free at once (the commit loop
        records the outcome, and fails the task if its owner refuses the result)."""
        if running.lost:
            raise errors.StaleAttempt(f"task {running.task.id}: {running.lost}")
        self._progress.pop(running.task.id, None)
        task = running.task
        started = None if running.start_recorded else running.started_at
        if result:  # files by path under the data dir, fetchable from this node
            result = outputs.portable(result, self.settings.data_dir)
        item = CompletionItem(task.id, task.attempt, result, note, running.backend, started)
        running.completed = True
        self._done.append((item, running))
        self._commit_wake.set()

    async def _fail(
        self, running: _Running, executor: TaskExecutor | None, exc: errors.TaskError
    ) -> None:
        task = running.task
        if running.lost:
            raise errors.StaleAttempt(f"task {task.id}: {running.lost}")
        if exc.error_type is ErrorType.RESOURCE:
            self.quarantine.failed_for_resources(task.type, exc.message)
            if self.quarantine.active and self._queued:
                # what this node claimed ahead goes back for the others at once
                self._background_call(self._release_queued("node quarantined"))
        if isinstance(exc, errors.TaskCancelled) and self._releasing:
            await self.store.release(
                task.id, task.attempt, "node shut down before the task finished", self.node_id
            )
            self._changed(task.pipeline_id)
            return
        after = await self.store.fail(
            Failure(
                task.id,
                task.attempt,
                exc.message,
                exc.error_type,
                exc.retry_after_sec,
                running.backend,
                None if running.start_recorded else running.started_at,
            ),
            self.node_id,
        )
        self._changed(task.pipeline_id)
        if after.status is TaskStatus.PENDING:
            self.stats["retried"] += 1
            logger.info("task %s will retry: %s", task.id, exc.message, extra={"action": "retry"})
            self._wake.set()
            return
        self.stats["cancelled" if after.status is TaskStatus.CANCELLED else "failed"] += 1
        if executor is not None:
            await self._call_on_failed(
                after, ExecuteResult(error=exc.message, error_type=exc.error_type), executor
            )

    async def _call_on_failed(
        self, task: models.Task, result: ExecuteResult, executor: TaskExecutor | None = None
    ) -> None:
        executor = executor or self.registry.executor(task.type)
        if executor is None:
            return
        try:
            await executor.on_task_failed(task, result)
        except Exception:  # a failing hook must never crash the worker
            logger.exception(
                "on_task_failed of %s raised", task.type, extra={"action": "on_task_failed"}
            )

    # --- group commit ------------------------------------------------------------------------
    async def _commit_loop(self) -> None:
        """One transaction for everything the workers produced since the last one: the starts
        of tasks that have run for `start_record_delay`, the completions, and a claim for the
        slots (and claim-ahead) they free."""
        while True:
            self._commit_wake.clear()
            starts = self._due_starts()
            if not self._done and not starts:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._commit_wake.wait(), self._next_start_due())
                continue
            batch, self._done = self._done, []
            if self._starts_paused:  # the rest of the queue runs while the store writes
                self._starts_paused = False
                asyncio.get_running_loop().call_soon(self._start_queued)
            self._committing = True
            try:
                await self._commit(batch, starts)
            finally:
                self._committing = False

    def _due_starts(self) -> list[StartItem]:
        limit = time.monotonic() - self.settings.start_record_delay
        return [
            StartItem(r.task.id, r.task.attempt, r.started_at)
            for r in self._running.values()
            if not r.start_recorded and r.started_at is not None and r.launched <= limit
        ]

    def _next_start_due(self) -> float | None:
        """Seconds until the next unrecorded start is due (None: none is waiting)."""
        waiting = [r.launched for r in self._running.values() if not r.start_recorded]
        if not waiting:
            return None
        return max(0.0, min(waiting) + self.settings.start_record_delay - time.monotonic())

    async def _commit(
        self, batch: list[tuple[CompletionItem, _Running]], starts: list[StartItem]
    ) -> None:
        free, ahead, short = (0, 0, frozenset[str]()) if self._stopping else self._claim_plan()
        types = self.claimable_types() if free + ahead > 0 else frozenset()
        flt = self._claim_filter(free, types, ahead, short) if types else None
        reserved = flt.limit + flt.ahead if flt is not None else 0
        self._reserved += reserved
        try:
            outcomes, claimed = await self.store.complete_and_claim(
                [item for item, _ in batch], flt, self.node_id, starts
            )
        except errors.StoreError as exc:
            # nothing was written: the batch waits (still heartbeated) and is tried again
            self._done[:0] = batch
            await self._store_trouble("group commit", exc)
            return
        finally:
            self._reserved -= reserved
        for start in starts:
            running = self._running.get(start.task_id)
            if running is not None and running.task.attempt == start.attempt:
                running.start_recorded = True
        pipelines: set[str | None] = set()
        for (_, running), outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, Completed):
                pipelines.add(outcome.pipeline_id)
                self.stats["completed"] += 1
                self.quarantine.succeeded()
            elif isinstance(
                outcome, errors.StaleAttempt | errors.NotFound | errors.IllegalTransition
            ):
                logger.warning("dropping result: %s", outcome, extra={"action": "fenced"})
            else:
                # the owner refused the result (e.g. its pipeline hook rejected it): fail the task
                self._background_call(self._refused(running, outcome))
        self._accept(claimed)
        for pipeline_id in pipelines:
            self._changed(pipeline_id)

    async def _refused(self, running: _Running, outcome: BaseException) -> None:
        executor = self.registry.executor(running.task.type)
        try:
            await self._fail(
                running, executor, errors.PermanentError(f"result rejected: {outcome}")
            )
        except Exception:
            logger.exception(
                "could not record the failure of task %s",
                running.task.id,
                extra={"action": "report_failed"},
            )

    # --- progress (ContextSink) ----------------------------------------------------------------
    def progress(self, task: models.Task, pct: int, note: str | None) -> None:
        self._progress[task.id] = (task.attempt, pct, note)
        self._progress_dirty.set()

    def event(self, task: models.Task, event_type: str, message: str | None) -> None:
        future = asyncio.ensure_future(self._record_event(task, event_type, message))
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    async def _record_event(self, task: models.Task, event_type: str, message: str | None) -> None:
        try:
            await self.store.record_event(task.id, event_type, message, self.node_id)
        except Exception:
            logger.exception("could not record event", extra={"action": "record_event"})

    async def _store_trouble(self, what: str, exc: errors.StoreError) -> None:
        """The store refused (disk full, database down): say so and wait a poll interval; the
        loop goes on, so the node recovers by itself when the store does."""
        logger.warning("%s: %s", what, exc.message, extra={"action": "store_trouble"})
        await asyncio.sleep(max(self.settings.poll_interval, 0.05))

    async def _progress_loop(self) -> None:
        while True:
            await self._progress_dirty.wait()
            await asyncio.sleep(self.settings.progress_flush_interval)
            try:
                await self._flush_progress()
            except errors.StoreError as exc:
                await self._store_trouble("progress", exc)

    async def _flush_progress(self) -> None:
        self._progress_dirty.clear()
        if not self._progress:
            return
        pending, self._progress = self._progress, {}
        updates = [(tid, a, p, n) for tid, (a, p, n) in pending.items()]
        await self.store.progress(updates, self.node_id)
        for tid in pending:
            running = self._running.get(tid)
            if running is not None:
                self._changed(running.task.pipeline_id)

    # --- heartbeats and liveness -----------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            try:
                await self.heartbeat_once()
            except errors.StoreError as exc:
                await self._store_trouble("heartbeat", exc)

    async def heartbeat_once(self) -> None:
        """Heartbeat every running task; stop work that lost its task or must be cancelled."""
        self._last_heartbeat = time.monotonic()
        pairs = [(tid, r.task.attempt) for tid, r in self._running.items()]
        pairs += [(tid, q.task.attempt) for tid, q in self._queued.items()]
        pairs += [(item.task_id, item.attempt) for item, _ in self._done]
        if not pairs:
            return
        feedback = await self.store.heartbeat(pairs, self.node_id)
        for fb in feedback:
            # the answer may be about another attempt than the one held now: the task was
            # claimed again while the heartbeat was on its way, or an older attempt's result
            # still waits for the group commit; it says nothing about the newer attempt
            queued = self._queued.get(fb.task_id)
            if queued is not None and fb.attempt not in (None, queued.task.attempt):
                queued = None
            if queued is not None and (not fb.still_owned or fb.cancel_requested):
                del self._queued[fb.task_id]
                if fb.still_owned:  # cancelled before it started
                    self._background_call(self._cancel_queued(queued.task, "cancelled by user"))
                continue
            running = self._running.get(fb.task_id)
            if running is None or fb.attempt not in (None, running.task.attempt):
                continue
            if not fb.still_owned:
                status = fb.status.value if fb.status else "gone"
                running.lost = f"attempt {running.task.attempt} lost the task (now {status})"
                running.control.cancel(running.lost)
            elif fb.cancel_requested:
                running.control.cancel("cancelled by user")

    async def _monitor_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.effective_monitor_interval)
            try:
                await self.monitor_once()
            except errors.StoreError as exc:
                await self._store_trouble("liveness monitor", exc)

    async def monitor_once(self) -> None:
        if time.monotonic() - self._last_heartbeat > self.settings.heartbeat_interval:
            # This node was not running (a laptop asleep, SIGSTOP) or fell behind: what it runs
            # is alive, so say so before judging silence, or it would reclaim its own work.
            await self.heartbeat_once()
        report = await self.store.monitor(
            Liveness(
                self.settings.stale_after, self.settings.reclaim_after, self.settings.claim_timeout
            )
        )
        if not report.empty:
            logger.warning(
                "liveness: stale=%s reclaimed=%s released=%s",
                report.stale,
                report.reclaimed,
                report.released,
                extra={"action": "liveness"},
            )
            self._changed(None)
            self._wake.set()
        for task in report.failed:
            await self._call_on_failed(task, ExecuteResult(error=task.error or "reclaimed"))

    def _changed(self, pipeline_id: str | None) -> None:
        if self._on_change is not None:
            self._on_change(pipeline_id or "")

    @property
    def running_count(self) -> int:
        return len(self._running)

    def running_ids(self) -> list[str]:
        return list(self._running)

    def held_tasks(self) -> list[models.Task]:
        """The tasks running here or claimed ahead (their files must not be cleaned up)."""
        return [r.task for r in self._running.values()] + [q.task for q in self._queued.values()]


class Quarantine:
    """A node whose last `after` claimed tasks all failed for lack of resources (a broken tool,
    no memory, no disk) claims nothing for a cool-down that doubles on each repeat, so one
    broken node cannot grab and fail every job; a success ends it. Monotonic time."""

    def __init__(
        self, after: int, cooldown: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.after = after
        self.cooldown = cooldown
        self._now = monotonic
        self.streak = 0
        self.rounds = 0
        self.until = 0.0
        self.reason: str | None = None

    @property
    def active(self) -> bool:
        return self._now() < self.until

    @property
    def remaining(self) -> float:
        return max(0.0, self.until - self._now())

    def succeeded(self) -> None:
        self.streak = self.rounds = 0
        self.reason = None

    def failed_for_resources(self, task_type: str, message: str) -> None:
        self.streak += 1
        if not self.after or self.streak < self.after:
            return
        self.streak = 0
        self.rounds += 1
        seconds = self.cooldown * 2 ** (self.rounds - 1)
        self.until = self._now() + seconds
        self.reason = f"{self.after} tasks in a row failed for lack of resources ({task_type}: "
        self.reason += f"{message[:200]})"
        logger.warning(
            "quarantined for %.0fs: %s", seconds, self.reason, extra={"action": "quarantine"}
        )


def _error_from_result(result: ExecuteResult) -> errors.TaskError:
    """Map a failed ExecuteResult (seed 000 style) to the TaskError of its class."""
    message = result.error or "failed"
    classes: dict[ErrorType, type[errors.TaskError]] = {
        ErrorType.RESOURCE: errors.ResourceError,
        ErrorType.PERMANENT: errors.PermanentError,
        ErrorType.PAYLOAD_ERROR: errors.PayloadError,
        ErrorType.AWAITING_CREDENTIAL: errors.AwaitingCredentialError,
        ErrorType.CANCELLED: errors.TaskCancelled,
    }
    if result.error_type is ErrorType.RATE_LIMITED:
        return errors.RateLimitedError(message, retry_after_sec=result.retry_after or 30.0)
    cls = classes.get(result.error_type or ErrorType.TRANSIENT, errors.TransientError)
    return cls(message)
