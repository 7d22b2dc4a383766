"""Tasks, pipelines and their enums (seed 001 §2.1, §5; seed 000)."""

from __future__ import annotations

import enum
import operator
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

JSON = dict[str, Any]


class TaskStatus(enum.StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    RUNNING = "running"
    STALE = "stale"
    RECLAIMED = "reclaimed"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES

    @property
    def satisfies_dependency(self) -> bool:
        """Children may run once every parent is completed or skipped (DESIGN §4.7)."""
        return self in (TaskStatus.COMPLETED, TaskStatus.SKIPPED)


TERMINAL_STATUSES = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.SKIPPED}
)
ACTIVE_STATUSES = frozenset(set(TaskStatus) - TERMINAL_STATUSES)


class PipelineStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    COMPLETED = "completed"
    FAILED = "failed"
    PARTIAL_FAILED = "partial_failed"

    @property
    def is_terminal(self) -> bool:
        return self in (
            PipelineStatus.CANCELLED,
            PipelineStatus.COMPLETED,
            PipelineStatus.FAILED,
            PipelineStatus.PARTIAL_FAILED,
        )


class ErrorType(enum.StrEnum):
    """Stored error classes: seed 001 §7.6 plus seed 000's special types (DESIGN §4.5)."""

    TRANSIENT = "TRANSIENT"
    RESOURCE = "RESOURCE"
    PERMANENT = "PERMANENT"
    RATE_LIMITED = "RATE_LIMITED"
    CANCELLED = "CANCELLED"
    AWAITING_CREDENTIAL = "AWAITING_CREDENTIAL"
    PAYLOAD_ERROR = "PAYLOAD_ERROR"
    #: A parent failed or was cancelled, so this task can never run (set by the cascade).
    UPSTREAM_FAILED = "UPSTREAM_FAILED"


class CachePolicy(enum.StrEnum):
    NONE = "NONE"
    CHECK_EXISTING = "CHECK_EXISTING"
    PREFER_ORIGINAL = "PREFER_ORIGINAL"


class CloudPreference(enum.StrEnum):
    AUTO = "auto"
    PREFER_LOCAL = "prefer_local"
    PREFER_CLOUD = "prefer_cloud"
    LOCAL_ONLY = "local_only"
    CLOUD_ONLY = "cloud_only"


class AffinityKind(enum.StrEnum):
    """HARD: only that node may claim the task. SOFT: that node first; others fetch the input
    from `file_node_id` (seed 001 §2.6)."""

    HARD = "HARD"
    SOFT = "SOFT"


@dataclass(frozen=True, slots=True)
class Affinity:
    """Where a task should run; stored as (`affinity_kind`, `affinity_node_id`)."""

    kind: AffinityKind
    node_id: str

    @classmethod
    def hard(cls, node_id: str) -> Affinity:
        return cls(AffinityKind.HARD, node_id)

    @classmethod
    def soft(cls, node_id: str) -> Affinity:
        return cls(AffinityKind.SOFT, node_id)

    @classmethod
    def from_columns(cls, kind: str | None, node_id: str | None) -> Affinity | None:
        if kind is None or node_id is None:
            return None
        return cls(AffinityKind(kind), node_id)

    def allows(self, node_id: str) -> bool:
        """May `node_id` claim a task with this affinity?"""
        return self.kind is AffinityKind.SOFT or self.node_id == node_id

    def to_json(self) -> JSON:
        return {"kind": self.kind.value, "node_id": self.node_id}


class ShutdownType(enum.StrEnum):
    CLEAN = "CLEAN"
    CRASH = "CRASH"
    PENDING_CHECK = "PENDING_CHECK"
    FIRST_START = "FIRST_START"


def _slots_json(obj: Any) -> JSON:
    """Every slot of a frozen dataclass as JSON-ready values (enums as their values)."""
    names, read, special = _slot_plan(type(obj))
    out: JSON = dict(zip(names, read(obj), strict=True))
    for name in special:  # only the slots whose type can hold an enum or an Affinity
        value = out[name]
        if isinstance(value, enum.Enum):
            out[name] = value.value
        elif isinstance(value, Affinity):
            out[name] = value.to_json()
    return out


_SLOT_PLANS: dict[
    type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], tuple[str, ...]]
] = {}


def _slot_plan(
    cls: type,
) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], tuple[str, ...]]:
    """A class's slot names, one getter for all of them, and the slots to convert (a page of a
    thousand tasks is serialised without looking at every value's type)."""
    plan = _SLOT_PLANS.get(cls)
    if plan is None:
        names = tuple(cls.__slots__)  # type: ignore[attr-defined]
        try:
            hints = typing.get_type_hints(cls)
            special = tuple(n for n in names if _may_convert(hints.get(n)))
        except (NameError, TypeError):  # unresolvable annotations: look at every slot
            special = names
        getter = operator.attrgetter(*names)
        read = getter if len(names) > 1 else (lambda o: (getter(o),))
        plan = _SLOT_PLANS[cls] = (names, read, special)
    return plan


def _may_convert(hint: Any) -> bool:
    """Whether a slot of this type may hold an enum or an Affinity at its top level (anything
    not plainly another type counts, to be safe)."""
    if hint is None or hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin in (dict, list, tuple, set, frozenset):
        return False  # a container: its items are never converted
    kinds = typing.get_args(hint) if origin is not None else (hint,)
    return any(
        k is Any
        or k is object
        or not isinstance(k, type)
        or issubclass(k, enum.Enum)
        or issubclass(k, Affinity)
        for k in kinds
    )


@dataclass(frozen=True, slots=True)
class Task:
    """One row of the `task` table (every column of seed 001 §5.1 plus seed 000 and DESIGN §4)."""

    id: str
    type: str
    pipeline_id: str | None
    material_id: str | None
    status: TaskStatus
    priority: int
    depends_on: list[str]
    payload: JSON
    result: JSON | None
    error: str | None
    error_type: str | None
    cache_policy: CachePolicy
    cloud_preference: CloudPreference
    publisher_id: str | None
    idempotency_key: str | None
    excluded_nodes: list[str]
    retry_count: int
    max_retries: int
    retry_after: float | None
    created_by: str
    owner_id: str
    owner_epoch: int
    claimed_by: str | None
    original_claimed_by: str | None
    file_node_id: str | None
    affinity: Affinity | None
    result_acked_at: float | None
    progress: int
    progress_note: str | None
    is_paused: bool
    is_pausable: bool
    attempt: int
    cancel_requested: bool
    backend: str | None
    change_seq: int
    created_at: float
    updated_at: float
    claimed_at: float | None
    started_at: float | None
    completed_at: float | None
    heartbeat_at: float | None
    stale_at: float | None
    reclaimed_at: float | None

    def to_json(self) -> JSON:
        """Every column as a JSON object (enums as their values)."""
        return _slots_json(self)


@dataclass(frozen=True, slots=True)
class Pipeline:
    """One row of `pipeline_instance` (seed 001 §2.6/§5.1) with its derived counters."""

    id: str
    material_id: str
    template: str
    status: PipelineStatus
    params: JSON
    total_tasks: int
    done_tasks: int
    failed_tasks: int
    cancelled_tasks: int
    running_tasks: int
    pending_tasks: int
    cancel_requested: bool
    detected_language: str | None
    created_by: str
    owner_id: str
    owner_epoch: int
    publisher_id: str | None
    change_seq: int
    created_at: float
    updated_at: float
    completed_at: float | None
    #: every move of the pipeline to another owner, oldest first: {owner, epoch, previous,
    #: how ("handoff" or "takeover"), at (the new owner's clock)}
    owner_history: tuple[JSON, ...] = ()

    def to_json(self) -> JSON:
        """Every column, and the `title` people recognise it by (`display_title`)."""
        return {**_slots_json(self), "title": self.title}

    @property
    def owner_since(self) -> float:
        """When the current owner got the pipeline (its creation if it never moved)."""
        return float(self.owner_history[-1]["at"]) if self.owner_history else self.created_at

    @property
    def title(self) -> str:
        return display_title(self.params, self.material_id)


def display_title(params: JSON | None, material_id: str | None) -> str:
    """What people recognise a pipeline by: its `title` param, else its source's file name (a
    URL whole), else its material id."""
    params = params or {}
    title = params.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    source = params.get("source")
    if isinstance(source, str) and source:
        if source.startswith(("http://", "https://")):
            return source
        return PurePosixPath(source.removeprefix("file://")).name or source
    return str(material_id or "")


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to insert. `depends_on` holds task ids (already resolved from refs)."""

    type: str
    payload: JSON = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    priority: int = 5
    max_retries: int = 3
    cache_policy: CachePolicy = CachePolicy.NONE
    cloud_preference: CloudPreference = CloudPreference.AUTO
    material_id: str | None = None
    idempotency_key: str | None = None
    affinity: Affinity | None = None
    file_node_id: str | None = None
    is_pausable: bool = False
    publisher_id: str | None = None
    #: Fixed id (templates pre-assign ids so that depends_on can refer to siblings).
    id: str | None = None


@dataclass(frozen=True, slots=True)
class NewPipeline:
    """A pipeline to create together with its initial tasks, in one transaction."""

    template: str
    material_id: str
    tasks: tuple[NewTask, ...]
    params: JSON = field(default_factory=dict)
    publisher_id: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class TaskEvent:
    id: str
    task_id: str
    node_id: str
    event_type: str
    message: str | None
    occurred_at: float

    def to_json(self) -> JSON:
        return _slots_json(self)
