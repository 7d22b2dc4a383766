"""The owner-store contract: the operations the engine and the node service need, named for
what they do (DESIGN §4.14).

A store is the authority for some rows: an embedded SQLite store for the rows its node owns
(`owner_id` = the node), a PostgreSQL store for every row in its database. Claims, liveness and
start-up recovery act only on those rows. Every operation is one atomic transaction; reports
from a worker (start, heartbeat, progress, pause flag, complete, fail, release) are fenced: they
carry `(task_id, attempt)` and are refused with `StaleAttempt` unless the task is still claimed
by that node at that attempt (DESIGN §4.1).

The store reads its own clock (injected, so tests use `ManualClock`; PostgreSQL defaults to the
database's clock so a whole cluster judges liveness by one clock), runs the spawn/route hooks it
was given once at composition, returns typed rows, and turns every driver error into a
`StoreError` (a busy or locked database is retried inside the store first). Every
implementation passes the same contract suite (`tests/contract/`).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from fredica.domain import errors
from fredica.domain.history import ListFilter
from fredica.domain.library import LibraryFile
from fredica.domain.models import (
    JSON,
    ErrorType,
    NewPipeline,
    NewTask,
    Pipeline,
    Task,
    TaskEvent,
    TaskStatus,
)
from fredica.domain.spawn import SpawnHook
from fredica.domain.timeseries import Timeline, TimelineRows

T = TypeVar("T")

SpawnHookLookup = Callable[[str], SpawnHook | None]
"""Maps a pipeline template name to its post-completion hook."""


def no_hooks(_: str) -> SpawnHook | None:
    """The hook lookup of a store composed without templates."""
    return None


class Signal(enum.StrEnum):
    """What a store tells its subscribers after a commit (possibly made by another process)."""

    READY = "ready"  # work may have become claimable
    CHANGED = "changed"  # some rows changed


SignalListener = Callable[[Signal], None]
"""Called from the store's own thread: a listener must be thread-safe and quick."""


@dataclass(frozen=True, slots=True)
class ClaimFilter:
    """What a node may claim.

    `types=None` means any type; `start=True` claims straight into `running` (both transitions
    are recorded as events); `pausable` sets `is_pausable` per type from the node's executors.
    `cloud_only_types` / `local_only_types` (None: no limit) are the types this node can run
    with a cloud / a local backend: a `cloud_only` or `local_only` task of another type is left
    for a node that can honour its preference, instead of being claimed and failed.
    """

    limit: int = 1
    types: frozenset[str] | None = None
    start: bool = False
    pausable: dict[str, bool] = field(default_factory=dict)
    cloud_only_types: frozenset[str] | None = None
    local_only_types: frozenset[str] | None = None
    #: then up to `ahead` more of `ahead_types` (short work), claimed but not started: the
    #: node's claim-ahead queue
    ahead: int = 0
    ahead_types: frozenset[str] = frozenset()
    #: types a better node is free to run (seed 001 §6.3 score gate): of these only tasks
    #: pinned to this node (HARD or SOFT affinity) are claimed, and a task that has been ready
    #: for `defer_wait` seconds (its `ready_since`, on the owner's clock): the starvation guard
    #: (None: no guard)
    deferred_types: frozenset[str] = frozenset()
    defer_wait: float | None = None
    #: nodes online with free slots: a task SOFT-pinned to one of them is left to it until it
    #: has been ready for `soft_wait` seconds (seed 001 §2.6)
    soft_elsewhere: frozenset[str] = frozenset()
    soft_wait: float = 0.0

    @property
    def asks_nothing(self) -> bool:
        """No task can match: no room asked for, or an empty set of types."""
        return (self.limit <= 0 and self.ahead <= 0) or (self.types is not None and not self.types)


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
    #: when the executor really began (a task claimed ahead waited in the node's queue)
    started_at: float | None = None


@dataclass(frozen=True, slots=True)
class Completed:
    """A completion the store accepted (read the task for its whole row)."""

    task_id: str
    attempt: int
    pipeline_id: str | None
    status: TaskStatus = TaskStatus.COMPLETED


@dataclass(frozen=True, slots=True)
class StartItem:
    """A claimed task whose executor began at `started_at` (the store's clock)."""

    task_id: str
    attempt: int
    started_at: float


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed attempt as the worker reports it."""

    task_id: str
    attempt: int
    error: str
    error_type: ErrorType
    retry_after_sec: float | None = None
    backend: BackendNote | None = None
    #: when the executor began, if the store does not have it yet (see `CompletionItem`)
    started_at: float | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatFeedback:
    """Per-task answer to a heartbeat (seed 001 §7.3 `task_status_feedback`)."""

    task_id: str
    still_owned: bool
    status: TaskStatus | None
    cancel_requested: bool
    #: the attempt this answer is about (the one heartbeated): a node that claimed the task
    #: again meanwhile must not apply an answer about the older attempt to the newer one.
    #: None from a peer older than this field.
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """`cancelled` if the task ended at once; otherwise it runs on `running_on` and must be
    signalled there."""

    task_id: str
    cancelled: bool
    running_on: str | None
    attempt: int | None


@dataclass(frozen=True, slots=True)
class Liveness:
    """When silent work is marked stale, reclaimed, or (never started) released. Seconds."""

    stale_after: float = 180.0
    reclaim_after: float = 900.0
    claim_timeout: float = 60.0


@dataclass(frozen=True, slots=True)
class MonitorReport:
    stale: list[str]
    reclaimed: list[str]
    released: list[str]
    failed: list[Task]

    @property
    def empty(self) -> bool:
        return not (self.stale or self.reclaimed or self.released)


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


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One row of the node registry (`worker_node`)."""

    id: str
    hostname: str
    capabilities: list[JSON]
    status: str
    max_workers: int
    last_seen_at: float
    address: str | None
    info: JSON

    def to_json(self) -> JSON:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class RestartLogEntry:
    """One row of `restart_task_log` (what start-up recovery did to a task)."""

    id: int
    restarted_at: float
    node_id: str
    task_id: str
    pipeline_id: str | None
    task_type: str
    previous_status: str
    new_status: str
    action: str
    message: str | None

    def to_json(self) -> JSON:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """Rows changed after a cursor, and the cursor to resume from.

    The cursor is opaque to callers; a batch never splits the rows of one transaction, so
    resuming from `cursor` loses nothing and repeats nothing.
    """

    tasks: list[Task]
    pipelines: list[Pipeline]
    cursor: int
    #: rows deleted in the same span, as (`task` | `pipeline`, id): replicas drop them
    deleted: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Transfer:
    """A pipeline moving to another owner (DESIGN §4.11): its row, its tasks and, from a
    hand-off, their events (a takeover from a replica has none)."""

    pipeline: Pipeline
    tasks: tuple[Task, ...]
    events: tuple[TaskEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A result this node computed for a task another node owns, not yet acknowledged by that
    owner (seed 001 §7.4). `kind` is `complete` or `fail`; `body` is the report as sent."""

    id: int
    owner_id: str
    task_id: str
    attempt: int
    kind: str
    body: JSON
    created_at: float
    tries: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list and the cursor of the next page (None: this page is the last).

    The cursor is opaque to callers: passed back unchanged it continues the list after this
    page's last row, however many rows were added meanwhile (keyset pagination)."""

    items: list[T]
    next_cursor: str | None


class WorkStore(Protocol):
    """What a worker needs of the store of the tasks it runs: a `TaskStore` for its own rows,
    or, in a home cluster, the router that sends each report to the owner of its task
    (`cluster.router.OwnerRouter`)."""

    @property
    def out_of_process(self) -> bool:
        """See `TaskStore.out_of_process`."""
        ...

    def subscribe(self, listener: SignalListener) -> None: ...

    async def claim(self, flt: ClaimFilter, node_id: str | None = None) -> list[Task]: ...

    async def start(self, task_id: str, attempt: int, node_id: str | None = None) -> Task: ...

    async def release(
        self, task_id: str, attempt: int, reason: str, node_id: str | None = None
    ) -> Task: ...

    async def heartbeat(
        self, tasks: Sequence[tuple[str, int]], node_id: str | None = None
    ) -> list[HeartbeatFeedback]: ...

    async def progress(
        self, updates: Sequence[tuple[str, int, int, str | None]], node_id: str | None = None
    ) -> None: ...

    async def set_paused(
        self,
        task_id: str,
        attempt: int,
        paused: bool,
        reason: str | None,
        node_id: str | None = None,
    ) -> Task: ...

    async def record_event(
        self, task_id: str, event_type: str, message: str | None, node_id: str | None = None
    ) -> None: ...

    async def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        claim: ClaimFilter | None = None,
        node_id: str | None = None,
        starts: Sequence[StartItem] = (),
    ) -> tuple[list[Completed | errors.FredicaError], list[Task]]: ...

    async def fail(self, failure: Failure, node_id: str | None = None) -> Task: ...

    async def get_task(self, task_id: str) -> Task: ...

    async def monitor(self, liveness: Liveness) -> MonitorReport: ...

    async def recover_startup(self, node_id: str | None = None) -> RecoveryReport: ...


class TaskStore(ABC):
    """Durable tasks and pipelines; every write is one transaction (see the module docstring)."""

    node_id: str
    """The node this store serves: reports and claims are made in its name by default."""

    degraded: str | None = None
    """Why the store cannot write right now (`disk_full`), or None; cleared by the next write
    that succeeds."""

    out_of_process: bool = False
    """Does the store do its work in another process (not on this process's interpreter lock),
    so that the engine gains by overlapping its commits with the tasks it runs?"""

    # lifecycle and composition
    @abstractmethod
    def set_hooks(self, hooks: SpawnHookLookup) -> None:
        """Register the spawn/route hooks (once, at composition)."""

    @abstractmethod
    def subscribe(self, listener: SignalListener) -> None:
        """Call `listener` after commits that may matter to this node (see `Signal`)."""

    @abstractmethod
    async def now(self) -> float:
        """The store's clock (Unix seconds): the time it stamps on what it writes."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections and threads; the store is unusable afterwards."""

    # configuration
    @abstractmethod
    async def get_config(self, key: str) -> str | None:
        """Read an `app_config` value of this node."""

    @abstractmethod
    async def set_config(self, key: str, value: str) -> None:
        """Write an `app_config` value of this node."""

    # creation
    @abstractmethod
    async def create_pipeline(self, spec: NewPipeline) -> tuple[Pipeline, bool]:
        """Create a pipeline and its tasks atomically; returns (pipeline, deduplicated).
        An active pipeline for the same (material_id, template) is returned instead."""

    @abstractmethod
    async def add_task(self, spec: NewTask, pipeline_id: str | None = None) -> Task:
        """Insert one task (an active task with the same idempotency key is returned instead)."""

    # claiming and worker reports
    @abstractmethod
    async def claim(self, flt: ClaimFilter, node_id: str | None = None) -> list[Task]:
        """Atomically claim up to `flt.limit` ready tasks in (priority DESC, created_at) order.
        Each claim increments the task's `attempt` (fencing token)."""

    @abstractmethod
    async def start(self, task_id: str, attempt: int, node_id: str | None = None) -> Task:
        """claimed -> running."""

    @abstractmethod
    async def release(
        self, task_id: str, attempt: int, reason: str, node_id: str | None = None
    ) -> Task:
        """Give a claimed/running task back (-> pending) without counting a retry."""

    @abstractmethod
    async def heartbeat(
        self, tasks: Sequence[tuple[str, int]], node_id: str | None = None
    ) -> list[HeartbeatFeedback]:
        """Refresh `heartbeat_at` as received now by the store (stale -> running); report lost
        tasks and cancel requests."""

    @abstractmethod
    async def progress(
        self, updates: Sequence[tuple[str, int, int, str | None]], node_id: str | None = None
    ) -> None:
        """Write (task_id, attempt, pct, note) progress updates; stale attempts are ignored."""

    @abstractmethod
    async def set_paused(
        self,
        task_id: str,
        attempt: int,
        paused: bool,
        reason: str | None,
        node_id: str | None = None,
    ) -> Task:
        """Record that a running task is (no longer) paused."""

    @abstractmethod
    async def record_event(
        self, task_id: str, event_type: str, message: str | None, node_id: str | None = None
    ) -> None:
        """Append a task event (executors' notes, e.g. the tool they ran)."""

    @abstractmethod
    async def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        claim: ClaimFilter | None = None,
        node_id: str | None = None,
        starts: Sequence[StartItem] = (),
    ) -> tuple[list[Completed | errors.FredicaError], list[Task]]:
        """The engine's group commit, one transaction: record `starts` (claimed -> running, at
        the time each really began; a refused start is left out, the heartbeat tells the
        worker), accept the completions (each runs its pipeline's spawn hook in the same
        transaction), then claim for the slots the batch frees. Per item, `Completed` or the
        error that refused it."""

    @abstractmethod
    async def fail(self, failure: Failure, node_id: str | None = None) -> Task:
        """Record a failure; the retry policy of its error class decides pending or failed.
        CANCELLED ends the task `cancelled`."""

    # user control
    @abstractmethod
    async def cancel_task(self, task_id: str, reason: str = "cancelled by user") -> CancelOutcome:
        """Cancel at once unless running; a running task gets `cancel_requested`."""

    @abstractmethod
    async def cancel_pipeline(
        self, pipeline_id: str, reason: str = "pipeline cancelled"
    ) -> list[CancelOutcome]:
        """Mark the pipeline cancelling, cancel what is not running, flag what is."""

    @abstractmethod
    async def retry_task(self, task_id: str) -> Task:
        """failed/cancelled -> pending (retry_count reset); dependents cancelled because of it
        are revived."""

    @abstractmethod
    async def fail_stranded(self, runnable_on: Mapping[str, Sequence[str]]) -> list[str]:
        """pending -> failed (RESOURCE, with the reason) for the tasks owned here that every
        online node able to run them has excluded (`runnable_on`: task type -> those nodes;
        other types are left alone). Returns their ids; `retry_task` runs them again."""

    @abstractmethod
    async def skip_task(self, task_id: str, reason: str = "skipped by user") -> Task:
        """pending/failed/cancelled -> skipped (satisfies dependents)."""

    @abstractmethod
    async def retry_pipeline(self, pipeline_id: str) -> list[str]:
        """Every failed or cancelled task of the pipeline -> pending in one transaction, as
        `retry_task` does for one (dependents cancelled because of them are revived; the
        pipeline's cancel request is withdrawn). Returns the ids of those tasks;
        `IllegalTransition` if it has none, `NotFound` if the pipeline does not exist."""

    @abstractmethod
    async def delete_pipeline(self, pipeline_id: str) -> list[str]:
        """Remove a pipeline whose tasks are all terminal, with its tasks, their events and
        dependency edges, in one transaction; its counters leave `count_by_status` with it.
        Returns the ids of the tasks removed (their files are the caller's). `Conflict`
        naming how many tasks are still active, else `NotFound`."""

    # liveness and recovery (only rows this store is authoritative for)
    @abstractmethod
    async def monitor(self, liveness: Liveness) -> MonitorReport:
        """running without heartbeat -> stale -> reclaimed -> pending/failed; stuck claims ->
        pending. Judged by this store's clock only."""

    @abstractmethod
    async def recover_startup(self, node_id: str | None = None) -> RecoveryReport:
        """Seed 000's five start-up steps for `node_id` (default: this store's node)."""

    @abstractmethod
    async def recalculate(self, pipeline_id: str) -> Pipeline:
        """Recount one pipeline's tasks and re-derive its status."""

    # nodes
    @abstractmethod
    async def upsert_node(self, record: NodeRecord) -> None:
        """Register or refresh a node (`last_seen_at` is set by the store's clock)."""

    @abstractmethod
    async def list_nodes(self) -> list[NodeRecord]:
        """Every known node."""

    # reads
    @abstractmethod
    async def get_task(self, task_id: str) -> Task:
        """One task (NotFound if absent)."""

    @abstractmethod
    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        """One pipeline (NotFound if absent)."""

    @abstractmethod
    async def list_pipelines(
        self,
        status: str | None = None,
        limit: int = 100,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> list[Pipeline]:
        """Pipelines, newest first (`created_at`, then id), matching `where`."""

    @abstractmethod
    async def page_pipelines(
        self,
        status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> Page[Pipeline]:
        """A page of `list_pipelines`: the rows after `cursor` (a `next_cursor` of an earlier
        page; None: from the start), skipping `offset` of them. A cursor that is not one of
        this list is refused with `InvalidRequest`. Costs the same at any depth."""

    @abstractmethod
    async def list_tasks(
        self,
        pipeline_id: str | None = None,
        status: Sequence[str] | None = None,
        task_type: str | None = None,
        limit: int = 500,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> list[Task]:
        """Tasks (of a pipeline oldest first, else newest first: `created_at`, then the order
        of insertion), in any of `status` (None or empty: any), matching `where`. A filter
        no list can answer (`since` not before `until`, `q` too long, a NUL character) is
        refused with `InvalidRequest` (`history.check_filter`)."""

    @abstractmethod
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
        """A page of `list_tasks` after `cursor` (see `page_pipelines`)."""

    @abstractmethod
    async def task_events(self, task_id: str) -> list[TaskEvent]:
        """A task's events in order."""

    @abstractmethod
    async def count_created_since(self, publisher_id: str, since: float) -> int:
        """Tasks a publisher created after `since` (daily quotas)."""

    @abstractmethod
    async def count_by_status(self) -> dict[str, int]:
        """How many tasks are in each status (every status, 0 included). Read from counters
        the store maintains, not by counting the task rows."""

    @abstractmethod
    async def restart_log(self, limit: int = 100) -> list[RestartLogEntry]:
        """The newest `restart_task_log` rows."""

    @abstractmethod
    async def task_timeline(self, since: float, until: float, limit: int = 200_000) -> Timeline:
        """For the charts (`domain.timeseries`), over the tasks this store holds: how many
        unfinished tasks were in each status at `since` and untouched since (`baseline`), the
        status at `since` of the others that existed then (from their last status event before
        it), and the status events in [since, until) in time order (at most `limit`, the
        oldest first)."""

    @abstractmethod
    async def timeline_rows(self, since: float, until: float, limit: int = 200_000) -> TimelineRows:
        """`task_timeline` of the same window, lean: each event a plain tuple, with the task
        row's type and start only on `completed` events and its status only on `requeued`
        ones (`domain.timeseries.EventRow`), all the charts' replay reads. The charts'
        endpoint reads this; `series_of_rows` of it equals `series` of `task_timeline`."""

    @abstractmethod
    async def changes_since(
        self, owner_id: str | None, cursor: int, limit: int = 1000
    ) -> ChangeBatch:
        """Rows of `owner_id` (None: every owner this store holds) changed after `cursor`
        (0: from the beginning; `latest_cursor()`: nothing yet)."""

    @abstractmethod
    async def latest_cursor(self, owner_id: str | None = None) -> int:
        """A cursor after every change committed so far."""

    # the home cluster: outbox, replicas of other owners, digests (store/peering.py)
    @abstractmethod
    async def outbox_put(
        self, owner_id: str, task_id: str, attempt: int, kind: str, body: JSON
    ) -> None:
        """Keep a result for `owner_id` until it is acknowledged (once per task attempt)."""

    @abstractmethod
    async def outbox_list(self, limit: int = 100) -> list[OutboxItem]:
        """This node's unacknowledged results, oldest first."""

    @abstractmethod
    async def outbox_done(self, item_id: int) -> None:
        """The owner acknowledged (or definitively refused) the result: forget it."""

    @abstractmethod
    async def outbox_tried(self, item_id: int, error: str) -> None:
        """A delivery failed; count it and keep why."""

    @abstractmethod
    async def apply_replica(self, owner_id: str, batch: ChangeBatch) -> int:
        """Merge `owner_id`'s changed rows into the replica by `(owner_id, change_seq)`, and
        advance its cursor, atomically. Rows of any other owner are refused (InvalidRequest).
        A row the owner deleted (a tombstone in this or an earlier batch) is never merged
        again, whatever order the batches come in. Returns how many rows were newer than the
        replica."""

    @abstractmethod
    async def replica_cursor(self, owner_id: str) -> int:
        """How far `owner_id`'s changes have been read (0: never)."""

    @abstractmethod
    async def replica_freshness(self) -> dict[str, float]:
        """Per owner, when its changes were last read (this store's clock)."""

    @abstractmethod
    async def replica_tasks(
        self,
        pipeline_id: str | None = None,
        status: Sequence[str] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Task]:
        """Replicated tasks of other owners (a pipeline's oldest first, else newest first)."""

    @abstractmethod
    async def replica_pipelines(
        self, status: Sequence[str] | None = None, limit: int = 100, offset: int = 0
    ) -> list[Pipeline]:
        """Replicated pipelines of other owners, newest first."""

    @abstractmethod
    async def replica_task(self, task_id: str) -> Task | None:
        """One replicated task (None if there is no replica of it)."""

    @abstractmethod
    async def replica_pipeline(self, pipeline_id: str) -> Pipeline | None:
        """One replicated pipeline (None if there is no replica of it)."""

    @abstractmethod
    async def digest(self, owner_id: str, replica: bool) -> str:
        """sha256 of `owner_id`'s rows as (id, change_seq): its own rows (`replica=False`, on
        the owner) or their replica here; equal when the replica is up to date."""

    # ownership that moves (DESIGN §4.11; the home cluster: PostgreSQL owns every row itself)
    @abstractmethod
    async def export_pipeline(self, pipeline_id: str) -> Transfer:
        """One of this store's own pipelines whole: row, tasks and events (`NotFound`)."""

    @abstractmethod
    async def replica_transfer(self, pipeline_id: str) -> Transfer:
        """A pipeline this store holds a replica of, as a transfer (`NotFound`)."""

    @abstractmethod
    async def adopt_pipeline(self, transfer: Transfer, epoch: int, move: JSON) -> bool:
        """Make the pipeline of `transfer` this store's own at owner `epoch`, atomically:
        the rows rebuilt with this node as owner, a new change sequence, running work counted
        as heard from now, the replica of it dropped, `move` (previous owner, how) appended to
        its `owner_history`. False, with nothing written, if this store already owns it at
        `epoch` or a newer one."""

    @abstractmethod
    async def demote_pipeline(self, transfer: Transfer) -> list[str]:
        """The pipeline of `transfer` belongs to its newer owner: drop this store's own rows
        of it (the replicas of them drop them too) and hold the new owner's as a replica.
        Returns the task ids demoted ([] unless this store owned it at an older epoch)."""

    @abstractmethod
    async def moved_away(self, created_by: str) -> list[tuple[str, str, int]]:
        """(pipeline id, owner, epoch) of pipelines `created_by` created that another node
        owns now, from this store's own rows and its replicas."""

    @abstractmethod
    async def adopted(self) -> list[tuple[str, str, int]]:
        """(pipeline id, creator, epoch) of this store's own pipelines that moved at least
        once (a hand-off or a takeover brought them here, or back)."""

    @abstractmethod
    async def outbox_readdress(self, task_ids: Sequence[str], owner_id: str) -> int:
        """Results waiting for these tasks' old owner go to `owner_id` now; returns how many."""

    @abstractmethod
    async def forgive_silence(self) -> int:
        """After this owner's own downtime: running tasks claimed by other nodes count as
        heard from now. Returns how many."""

    @abstractmethod
    async def local_running(self, node_id: str | None = None) -> list[Task]:
        """Tasks claimed by `node_id` that are claimed, running or stale."""

    # watch folders (the files this node saw in its libraries)
    @abstractmethod
    async def library_files(self, library: str) -> list[LibraryFile]:
        """Every file this node recorded in `library`, by path."""

    @abstractmethod
    async def library_file(self, file_id: str) -> LibraryFile | None:
        """One recorded library file of this node, or None."""

    @abstractmethod
    async def save_library_file(self, item: LibraryFile) -> None:
        """Insert or replace the record of (`item.library`, `item.path`)."""
