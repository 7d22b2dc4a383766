"""Row mapping and the small driver seam shared by the SQL stores (SQLite and PostgreSQL).

Both stores run the same SQL (`?` placeholders; the PostgreSQL connection rewrites them) through
`Tx`; `Dialect` holds the few places where the databases differ.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fredica.domain import states
from fredica.domain.models import (
    Affinity,
    CachePolicy,
    CloudPreference,
    Pipeline,
    PipelineStatus,
    Task,
    TaskStatus,
)

Row = Mapping[str, Any]


class Cursor(Protocol):
    """The part of a DB-API cursor the stores use."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection that executes `?`-style SQL and returns rows readable by column name."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """Where the SQL of the two stores differs."""

    name: str
    #: appended to reads of rows the transaction will change (row locks)
    lock: str
    #: appended to claim/monitor scans: other transactions' locked rows are passed over
    skip_locked: str
    #: the claim scan's index hint
    claim_hint: str
    #: a column that orders rows by insertion
    insertion_order: str
    #: the driver's exception classes (turned into `StoreError` at the store's edge)
    driver_errors: tuple[type[BaseException], ...]
    #: a statement taking a transaction-long lock on a key (`?`), where writers run in
    #: parallel; "" where the whole database is locked for each write anyway
    key_lock: str = ""
    #: the clause after a table name that makes a list walk the index `{index}` in list order
    #: (store/lists.py); "" where the planner's statistics choose well
    index_hint: str = ""
    #: each arm of a list merged from several index walks (`UNION ALL`) needs its own ORDER BY
    #: and LIMIT: PostgreSQL plans an arm with a WHERE clause as a subquery blind to the
    #: outer order, and merges (Merge Append) only arms that are ordered themselves. SQLite
    #: merges a plain compound select and does not allow an arm its own ORDER BY.
    union_arm_limits: bool = False

    def is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self.driver_errors)


TASK_COLUMNS = (
    "id, type, pipeline_id, material_id, status, priority, depends_on, payload, result, error, "
    "error_type, cache_policy, cloud_preference, publisher_id, idempotency_key, excluded_nodes, "
    "retry_count, max_retries, retry_after, created_by, owner_id, owner_epoch, claimed_by, "
    "original_claimed_by, file_node_id, affinity_kind, affinity_node_id, result_acked_at, "
    "progress, progress_note, "
    "is_paused, is_pausable, attempt, cancel_requested, backend, change_seq, created_at, "
    "updated_at, claimed_at, started_at, completed_at, heartbeat_at, stale_at, reclaimed_at"
)
PIPELINE_COLUMNS = (
    "id, material_id, template, status, params, total_tasks, done_tasks, n_pending, n_claimed, "
    "n_running, n_stale, n_reclaimed, n_completed, n_failed, n_cancelled, n_skipped, "
    "cancel_requested, detected_language, created_by, owner_id, owner_epoch, publisher_id, "
    "change_seq, created_at, updated_at, completed_at"
)


def loads_opt(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def row_to_task(row: Row) -> Task:
    return Task(
        id=row["id"],
        type=row["type"],
        pipeline_id=row["pipeline_id"],
        material_id=row["material_id"],
        status=TaskStatus(row["status"]),
        priority=row["priority"],
        depends_on=json.loads(row["depends_on"]),
        payload=json.loads(row["payload"]),
        result=loads_opt(row["result"]),
        error=row["error"],
        error_type=row["error_type"],
        cache_policy=CachePolicy(row["cache_policy"]),
        cloud_preference=CloudPreference(row["cloud_preference"]),
        publisher_id=row["publisher_id"],
        idempotency_key=row["idempotency_key"],
        excluded_nodes=json.loads(row["excluded_nodes"]),
        retry_count=row["retry_count"],
        max_retries=row["max_retries"],
        retry_after=row["retry_after"],
        created_by=row["created_by"],
        owner_id=row["owner_id"],
        owner_epoch=row["owner_epoch"],
        claimed_by=row["claimed_by"],
        original_claimed_by=row["original_claimed_by"],
        file_node_id=row["file_node_id"],
        affinity=Affinity.from_columns(row["affinity_kind"], row["affinity_node_id"]),
        result_acked_at=row["result_acked_at"],
        progress=row["progress"],
        progress_note=row["progress_note"],
        is_paused=bool(row["is_paused"]),
        is_pausable=bool(row["is_pausable"]),
        attempt=row["attempt"],
        cancel_requested=bool(row["cancel_requested"]),
        backend=row["backend"],
        change_seq=row["change_seq"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        claimed_at=row["claimed_at"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        heartbeat_at=row["heartbeat_at"],
        stale_at=row["stale_at"],
        reclaimed_at=row["reclaimed_at"],
    )


def row_to_pipeline(row: Row) -> Pipeline:
    counts = counts_of(row)
    return Pipeline(
        id=row["id"],
        material_id=row["material_id"],
        template=row["template"],
        status=PipelineStatus(row["status"]),
        params=json.loads(row["params"]),
        total_tasks=row["total_tasks"],
        done_tasks=row["done_tasks"],
        failed_tasks=counts.failed,
        cancelled_tasks=counts.cancelled,
        running_tasks=counts.running + counts.stale,
        pending_tasks=counts.pending + counts.claimed + counts.reclaimed,
        cancel_requested=bool(row["cancel_requested"]),
        detected_language=row["detected_language"],
        created_by=row["created_by"],
        owner_id=row["owner_id"],
        owner_epoch=row["owner_epoch"],
        publisher_id=row["publisher_id"],
        change_seq=row["change_seq"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        completed_at=row["completed_at"],
    )


def counts_of(row: Row) -> states.StatusCounts:
    return states.StatusCounts(**{s.value: row[f"n_{s.value}"] for s in TaskStatus})
