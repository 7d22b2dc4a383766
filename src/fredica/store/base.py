"""The `TaskStore` seam: the operations the engine and the API need, named for what they do.

A store implements every operation as one atomic transaction. Reports from a worker (start,
heartbeat, progress, pause flag, complete, fail, release) are fenced: they carry
`(task_id, attempt)` and are refused with `StaleAttempt` unless the task is still claimed by that
node at that attempt (DESIGN §4.1). The SQLite implementation is `fredica.store.sqlite`; a
PostgreSQL store must pass the same contract tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fredica.domain import errors
from fredica.domain.models import (
    ErrorType,
    NewPipeline,
    NewTask,
    Pipeline,
    Task,
    TaskEvent,
    TaskStatus,
)
from fredica.domain.spawn import SpawnHook

SpawnHookLookup = Callable[[str], SpawnHook | None]
"""Maps a pipeline template name to its post-completion hook."""


@dataclass(frozen=True, slots=True)
class ClaimFilter:
    """What a node may claim.

    `types=None` means any type; `start=True` claims straight into `running` (both transitions
    are recorded as events); `pausable` sets `is_pausable` per type from the node's executors.
    """

    limit: int = 1
    types: frozenset[str] | None = None
    start: bool = False
    pausable: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BackendNote:
    """The backend chosen for an attempt, recorded with its outcome (one transaction)."""

    backend: str
    message: str
    chosen_at: float


@dataclass(frozen=True, slots=True)
class CompletionItem:
    task_id: str
    attempt: int
    result: dict[str, Any]
    message: str | None = None
    backend: BackendNote | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatFeedback:
    """Per-task answer to a heartbeat (seed 001 §7.3 `task_status_feedback`)."""

    task_id: str
    still_owned: bool
    status: TaskStatus | None
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """`cancelled` if the task ended at once; otherwise it runs on `running_on` and must be
    signalled there."""

    task_id: str
    cancelled: bool
    running_on: str | None
    attempt: int | None


@dataclass(frozen=True, slots=True)
class MonitorReport:
    stale: list[str]
    reclaimed: list[str]
    released: list[str]
    failed: list[Task]


@dataclass
class RecoveryReport:
    snapshot: list[Task] = field(default_factory=list)
    requeued: int = 0
    requeued_after_interrupt: int = 0
    failed: list[Task] = field(default_factory=list)
    orphans: int = 0
    pipelines_reconciled: int = 0

    def summary(self) -> dict[str, int]:
        return {
            "interrupted": len(self.snapshot),
            "requeued": self.requeued,
            "requeued_after_interrupt": self.requeued_after_interrupt,
            "failed": len(self.failed),
            "orphans": self.orphans,
            "pipelines_reconciled": self.pipelines_reconciled,
        }


class TaskStore(ABC):
    """Durable tasks and pipelines. Every write is one transaction."""

    node_id: str

    # configuration
    @abstractmethod
    def get_config(self, key: str) -> str | None:
        """Read an `app_config` value."""

    @abstractmethod
    def set_config(self, key: str, value: str, now: float) -> None:
        """Write an `app_config` value."""

    # creation
    @abstractmethod
    def create_pipeline(self, spec: NewPipeline, now: float) -> tuple[Pipeline, bool]:
        """Create a pipeline and its tasks atomically; returns (pipeline, deduplicated).
        An active pipeline for the same (material_id, template) is returned instead."""

    @abstractmethod
    def add_task(self, spec: NewTask, now: float, pipeline_id: str | None = None) -> Task:
        """Insert one task (an active task with the same idempotency key is returned instead)."""

    # claiming and worker reports
    @abstractmethod
    def claim(self, node_id: str, flt: ClaimFilter, now: float) -> list[Task]:
        """Atomically claim up to `flt.limit` ready tasks in (priority DESC, created_at) order.
        Each claim increments the task's `attempt` (fencing token)."""

    @abstractmethod
    def start(self, task_id: str, attempt: int, node_id: str, now: float) -> Task:
        """claimed -> running."""

    @abstractmethod
    def release(self, task_id: str, attempt: int, node_id: str, now: float, reason: str) -> Task:
        """Give a claimed/running task back (-> pending) without counting a retry (shutdown)."""

    @abstractmethod
    def heartbeat(
        self, node_id: str, tasks: Sequence[tuple[str, int]], now: float
    ) -> list[HeartbeatFeedback]:
        """Refresh `heartbeat_at` (stale -> running); report lost tasks and cancel requests."""

    @abstractmethod
    def progress(
        self, updates: Sequence[tuple[str, int, int, str | None]], node_id: str, now: float
    ) -> None:
        """Write (task_id, attempt, pct, note) progress updates; stale attempts are ignored."""

    @abstractmethod
    def set_paused(
        self, task_id: str, attempt: int, node_id: str, paused: bool, reason: str | None, now: float
    ) -> Task:
        """Record that a running task is (no longer) paused."""

    @abstractmethod
    def record_event(
        self, task_id: str, node_id: str, event_type: str, message: str | None, now: float
    ) -> None:
        """Append a task event (executors' notes, e.g. the tool they ran)."""

    @abstractmethod
    def complete_many(
        self, items: Sequence[CompletionItem], node_id: str, now: float, hooks: SpawnHookLookup
    ) -> list[Task | errors.FredicaError]:
        """Accept completions (group commit). Each runs its pipeline template's hook in the same
        transaction; per item the completed task or the error that refused it."""

    @abstractmethod
    def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        node_id: str,
        now: float,
        hooks: SpawnHookLookup,
        claim: ClaimFilter | None,
    ) -> tuple[list[Task | errors.FredicaError], list[Task]]:
        """`complete_many`, then claim (like `claim`) for the slots the batch frees, in one
        transaction: one round trip acknowledges finished work and fetches the next."""

    @abstractmethod
    def fail(
        self,
        task_id: str,
        attempt: int,
        node_id: str,
        error: str,
        error_type: ErrorType,
        now: float,
        retry_after_sec: float | None = None,
        backend: BackendNote | None = None,
    ) -> Task:
        """Record a failure; the retry policy of its error class decides pending or failed.
        CANCELLED ends the task `cancelled`."""

    # user control
    @abstractmethod
    def cancel_task(self, task_id: str, now: float, reason: str = ...) -> CancelOutcome:
        """Cancel at once unless running; a running task gets `cancel_requested`."""

    @abstractmethod
    def cancel_pipeline(
        self, pipeline_id: str, now: float, reason: str = ...
    ) -> list[CancelOutcome]:
        """Mark the pipeline cancelling, cancel what is not running, flag what is."""

    @abstractmethod
    def retry_task(self, task_id: str, now: float) -> Task:
        """failed/cancelled -> pending (retry_count reset); dependents cancelled because of it
        are revived."""

    @abstractmethod
    def skip_task(self, task_id: str, now: float, reason: str = ...) -> Task:
        """pending/failed/cancelled -> skipped (satisfies dependents)."""

    # liveness and recovery
    @abstractmethod
    def monitor(
        self, now: float, stale_after: float, reclaim_after: float, claim_timeout: float
    ) -> MonitorReport:
        """running without heartbeat -> stale -> reclaimed -> pending/failed; stuck claims ->
        pending. Judged by this owner's own clock only."""

    @abstractmethod
    def recover_startup(self, node_id: str, now: float) -> RecoveryReport:
        """Seed 000's five start-up steps for this node."""

    @abstractmethod
    def reconcile_non_terminal(self, now: float) -> int:
        """Recount and re-derive every non-terminal pipeline; returns how many."""

    @abstractmethod
    def recalculate(self, pipeline_id: str, now: float) -> Pipeline:
        """Recount one pipeline's tasks and re-derive its status."""

    # nodes
    @abstractmethod
    def upsert_node(
        self,
        node_id: str,
        hostname: str,
        capabilities: list[dict[str, Any]],
        status: str,
        max_workers: int,
        address: str | None,
        info: dict[str, Any],
        now: float,
    ) -> None:
        """Register or refresh a node in `worker_node`."""

    @abstractmethod
    def list_nodes(self) -> list[dict[str, Any]]:
        """Every known node."""

    # reads
    @abstractmethod
    def get_task(self, task_id: str) -> Task:
        """One task (NotFound if absent)."""

    @abstractmethod
    def get_pipeline(self, pipeline_id: str) -> Pipeline:
        """One pipeline (NotFound if absent)."""

    @abstractmethod
    def list_pipelines(
        self, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Pipeline]:
        """Pipelines, newest first."""

    @abstractmethod
    def list_tasks(
        self,
        pipeline_id: str | None = None,
        status: Sequence[str] | None = None,
        task_type: str | None = None,
        limit: int = 500,
        offset: int = 0,
    ) -> list[Task]:
        """Tasks (of a pipeline in creation order, else newest first)."""

    @abstractmethod
    def task_events(self, task_id: str) -> list[TaskEvent]:
        """A task's events in order."""

    @abstractmethod
    def count_created_since(self, publisher_id: str, since: float) -> int:
        """Tasks a publisher created after `since` (daily quotas)."""

    @abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """How many tasks are in each status."""

    @abstractmethod
    def restart_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest `restart_task_log` rows."""

    @abstractmethod
    def changes_since(self, seq: int, limit: int = 1000) -> tuple[list[Task], list[Pipeline], int]:
        """Rows changed after change sequence `seq`, and the current sequence."""

    @abstractmethod
    def local_running(self, node_id: str) -> list[Task]:
        """Tasks claimed by `node_id` that are claimed, running or stale."""
