"""Row mapping and the small driver seam shared by the SQL stores (SQLite and PostgreSQL).

Both stores run the same SQL (`?` placeholders; the PostgreSQL connection rewrites them) through
`Tx`; `Dialect` holds the few places where the databases differ.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
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

    def executemany(self, sql: str, params: Sequence[Sequence[Any]], /) -> Any: ...


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
    #: the database numbers a new task's `ord` (insertion order) itself (an identity column);
    #: else the store numbers it
    numbers_task_ord: bool = False
    #: read many rows in one database step: `SELECT json_group_array(json_array(cols))` over
    #: the query (SQLite: every step of a multi-row read lets another thread take the
    #: interpreter lock); only for columns without floating point values (JSON keeps 15 digits)
    one_step_rows: bool = False
    #: run a query and return plain tuples (no per-column name lookups: the hot path)
    tuples: Callable[[Conn, str, Sequence[Any]], list[tuple[Any, ...]]] | None = None
    #: the clause after a table name that makes a list walk the index `{index}` in list order
    #: (store/lists.py); "" where the planner's statistics choose well
    index_hint: str = ""
    #: each arm of a list merged from several index walks (`UNION ALL`) needs its own ORDER BY
    #: and LIMIT: PostgreSQL plans an arm with a WHERE clause as a subquery blind to the
    #: outer order, and merges (Merge Append) only arms that are ordered themselves. SQLite
    #: merges a plain compound select and does not allow an arm its own ORDER BY.
    union_arm_limits: bool = False
    #: the text of key `{key}` of the JSON object in column `{column}` (NULL when absent)
    json_text: str = "json_extract({column}, '$.{key}')"

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
TASK_FIELDS = tuple(c.strip() for c in TASK_COLUMNS.split(","))
PIPELINE_COLUMNS = (
    "id, material_id, template, status, params, total_tasks, done_tasks, n_pending, n_claimed, "
    "n_running, n_stale, n_reclaimed, n_completed, n_failed, n_cancelled, n_skipped, "
    "cancel_requested, detected_language, created_by, owner_id, owner_epoch, publisher_id, "
    "change_seq, created_at, updated_at, completed_at, owner_history"
)


_EMPTY_JSON = {"[]": list, "{}": dict}
_STATUS = {s.value: s for s in TaskStatus}
_CACHE = {c.value: c for c in CachePolicy}
_CLOUD = {c.value: c for c in CloudPreference}


def loads_opt(text: str | None) -> Any:
    return None if text is None else json_loads(text)


def json_loads(text: str) -> Any:
    """`json.loads`, with the empty list and object (most rows' values) built directly."""
    empty = _EMPTY_JSON.get(text)
    return empty() if empty is not None else json.loads(text)


def dumps(value: Any) -> str:
    if not value and isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_JSON_COLUMNS = frozenset({"depends_on", "payload", "excluded_nodes"})
_FLAG_COLUMNS = frozenset({"is_paused", "is_pausable", "cancel_requested"})


def task_to_values(task: Task) -> tuple[Any, ...]:
    """A task as its row's values in `TASK_COLUMNS` order (the inverse of `task_from_values`):
    for rows that move between stores whole (an ownership hand-off or takeover)."""
    out: list[Any] = []
    for name in TASK_FIELDS:
        if name == "affinity_kind":
            out.append(task.affinity.kind.value if task.affinity else None)
        elif name == "affinity_node_id":
            out.append(task.affinity.node_id if task.affinity else None)
        else:
            value = getattr(task, name)
            if name in _JSON_COLUMNS:
                value = dumps(value)
            elif name == "result":
                value = None if value is None else dumps(value)
            elif name in _FLAG_COLUMNS:
                value = int(bool(value))
            elif isinstance(value, enum.Enum):
                value = value.value
            out.append(value)
    return tuple(out)


def row_to_task(row: Row) -> Task:
    return task_from_values([row[name] for name in TASK_FIELDS])


# A Task is built field by field through its slots: the claim builds hundreds per batch, and
# a frozen dataclass's `__init__` (one `object.__setattr__` per field, 43 keywords) costs about
# twice as much. `_TASK_SLOTS` is in field order, which `task_from_values` follows.
_TASK_SLOTS = tuple(getattr(Task, f.name).__set__ for f in dataclasses.fields(Task))
_new_task = object.__new__


def task_from_values(v: Sequence[Any]) -> Task:
    """`row_to_task` for a plain tuple in `TASK_COLUMNS` order."""
    task: Task = _new_task(Task)
    values = (
        v[0],  # id
        v[1],  # type
        v[2],  # pipeline_id
        v[3],  # material_id
        _STATUS[v[4]],  # status
        v[5],  # priority
        json_loads(v[6]),  # depends_on
        json_loads(v[7]),  # payload
        loads_opt(v[8]),  # result
        v[9],  # error
        v[10],  # error_type
        _CACHE[v[11]],  # cache_policy
        _CLOUD[v[12]],  # cloud_preference
        v[13],  # publisher_id
        v[14],  # idempotency_key
        json_loads(v[15]),  # excluded_nodes
        v[16],  # retry_count
        v[17],  # max_retries
        v[18],  # retry_after
        v[19],  # created_by
        v[20],  # owner_id
        v[21],  # owner_epoch
        v[22],  # claimed_by
        v[23],  # original_claimed_by
        v[24],  # file_node_id
        Affinity.from_columns(v[25], v[26]) if v[25] is not None else None,  # affinity
        v[27],  # result_acked_at
        v[28],  # progress
        v[29],  # progress_note
        bool(v[30]),  # is_paused
        bool(v[31]),  # is_pausable
        v[32],  # attempt
        bool(v[33]),  # cancel_requested
        v[34],  # backend
        v[35],  # change_seq
        v[36],  # created_at
        v[37],  # updated_at
        v[38],  # claimed_at
        v[39],  # started_at
        v[40],  # completed_at
        v[41],  # heartbeat_at
        v[42],  # stale_at
        v[43],  # reclaimed_at
    )
    for set_slot, value in zip(_TASK_SLOTS, values, strict=True):
        set_slot(task, value)
    return task


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
        owner_history=tuple(json_loads(row["owner_history"])),
    )


def counts_of(row: Row) -> states.StatusCounts:
    return states.StatusCounts(**{s.value: row[f"n_{s.value}"] for s in TaskStatus})
