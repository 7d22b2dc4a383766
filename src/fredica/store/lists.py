"""The SQL of the task and pipeline lists and of the status counts, shared by the SQL stores.

Lists are keyset-paginated (DESIGN §4.13): a page is the rows after the last row of the
previous page in the list's order, so a page costs the same at any depth, and rows inserted
while a client pages never shift the pages after its cursor. Every filter walks an index in
the list's order (migration 3 of `store/schema.py`, 2 of `store/pg_schema.py`), so no list
sorts: tasks by `(created_at, insertion order)` newest first, or oldest first within one
pipeline; pipelines by `(created_at, id)` newest first. Several statuses are one index walk per
status merged in order (`UNION ALL` under the list's `ORDER BY`: SQLite's merge of a compound
select, PostgreSQL's Merge Append), never a sort of every row in those statuses.

A cursor is opaque to clients: the urlsafe base64 of `[kind, created_at, key]` of the last row
of a page, where `key` is the insertion order of a task (SQLite `rowid`, PostgreSQL `ord`) or a
pipeline's id. Anything else is refused with `InvalidRequest`.

History filters (`ListFilter`: text search, template, node, creation time) are conditions
checked on the rows a list walks, so a page still comes out in list order without a sort; the
creation-time bounds also narrow each index walk (`created_at` follows the walked index's
equality columns).

Status counts come from the counters each pipeline keeps (`n_pending`, ...), which every
transition maintains in its own transaction, plus the few tasks outside any pipeline (an index
range over `pipeline_id IS NULL`), in one statement, so both parts are of one snapshot.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fredica.domain import errors
from fredica.domain.history import ListFilter
from fredica.domain.models import TaskStatus
from fredica.store.rows import PIPELINE_COLUMNS, TASK_COLUMNS, Dialect, Row

TASK_CURSOR = "t"
PIPELINE_CURSOR = "p"
KEY = "list_key"  # the column every list query adds: the row's tie-breaker in list order
_CURSOR_HELP = "pass the next_cursor of the previous page unchanged"
MAX_CURSOR_CHARS = 512


@dataclass(frozen=True, slots=True)
class Position:
    """Where a page ends: the sort key of its last row."""

    created_at: float
    key: int | str


def encode_cursor(kind: str, position: Position) -> str:
    raw = json.dumps([kind, position.created_at, position.key], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str) -> Position:
    """The position a cursor of list `kind` names; `InvalidRequest` for anything else."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise errors.InvalidRequest(f"cursor: malformed cursor; {_CURSOR_HELP}") from exc
    if (
        not isinstance(value, list)
        or len(value) != 3
        or value[0] not in (TASK_CURSOR, PIPELINE_CURSOR)
        or not _is_number(value[1])
        or not isinstance(value[2], int if value[0] == TASK_CURSOR else str)
        or isinstance(value[2], bool)
        or (isinstance(value[2], int) and not -(2**63) <= value[2] < 2**63)
    ):
        raise errors.InvalidRequest(f"cursor: malformed cursor; {_CURSOR_HELP}")
    if value[0] != kind:
        other = "pipeline" if kind == TASK_CURSOR else "task"
        raise errors.InvalidRequest(
            f"cursor: this cursor belongs to the {other} list; {_CURSOR_HELP}"
        )
    return Position(float(value[1]), value[2])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def position_of(row: Row) -> Position:
    return Position(row["created_at"], row[KEY])


# --- tasks -----------------------------------------------------------------------------------
def task_query(
    dialect: Dialect,
    pipeline_id: str | None,
    statuses: Sequence[str] | None,
    task_type: str | None,
    limit: int,
    offset: int = 0,
    after: Position | None = None,
    where: ListFilter | None = None,
) -> tuple[str, list[Any]]:
    """The SELECT of one page of tasks (`limit` rows after `offset` rows after `after`).

    The list walks one index in its order: a pipeline's (a pipeline has few tasks), else one
    walk per status merged in order, else the type's, else the creation index. The other
    filters (and `where`) are checked on the rows walked.
    """
    extra, extra_params = task_conditions(dialect, where)
    order_col = dialect.insertion_order
    ascending = bool(pipeline_id)
    drivers = _index_walks(pipeline_id, statuses, task_type)
    direction = "ASC" if ascending else "DESC"
    order = f" ORDER BY created_at {direction}, {{key}} {direction}"
    bounded = len(drivers) > 1 and dialect.union_arm_limits
    arms: list[str] = []
    params: list[Any] = []
    for index, conditions, arm_params in drivers:
        if task_type:
            conditions.append("type = ?")
            arm_params.append(task_type)
        conditions += extra
        arm_params += extra_params
        if after is not None:
            conditions.append(f"(created_at, {order_col}) {'>' if ascending else '<'} (?, ?)")
            arm_params += [after.created_at, after.key]
        hint = f" {dialect.index_hint.format(index=index)}" if dialect.index_hint else ""
        sql = f"SELECT {TASK_COLUMNS}, {order_col} AS {KEY} FROM task{hint}"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        if bounded:  # no arm contributes more rows than the page needs
            sql = f"({sql}{order.format(key=order_col)} LIMIT ?)"
            arm_params.append(limit + offset)
        arms.append(sql)
        params += arm_params
    sql = " UNION ALL ".join(arms) + order.format(key=KEY) + " LIMIT ? OFFSET ?"
    return sql, [*params, limit, offset]


def _index_walks(
    pipeline_id: str | None, statuses: Sequence[str] | None, task_type: str | None
) -> list[tuple[str, list[str], list[Any]]]:
    """(index, conditions, parameters) of each index walk a task list merges."""
    wanted = list(dict.fromkeys(statuses or ()))  # a status named twice is walked once
    if pipeline_id:
        where, params = ["pipeline_id = ?"], [pipeline_id]
        if wanted:
            where.append(f"status IN ({', '.join('?' for _ in wanted)})")
            params.extend(wanted)
        return [("task_pipeline", where, params)]
    if wanted:
        return [("task_status", ["status = ?"], [s]) for s in wanted]
    return [("task_type" if task_type else "task_created", [], [])]


# --- pipelines -------------------------------------------------------------------------------
def pipeline_query(
    status: str | None,
    limit: int,
    offset: int = 0,
    after: Position | None = None,
    dialect: Dialect | None = None,
    where: ListFilter | None = None,
) -> tuple[str, list[Any]]:
    """The SELECT of one page of pipelines, newest first (index `pipeline_status` or
    `pipeline_created`, both in list order). `where` needs the `dialect` (JSON access)."""
    conditions, params = pipeline_conditions(dialect, where)
    if status:
        conditions.append("status = ?")
        params.append(status)
    if after is not None:
        conditions.append("(created_at, id) < (?, ?)")
        params += [after.created_at, after.key]
    sql = f"SELECT {PIPELINE_COLUMNS}, id AS {KEY} FROM pipeline_instance"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    sql += " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
    return sql, [*params, limit, offset]


# --- history filters ---------------------------------------------------------------------------
def _like(text: str, anchored: bool) -> str:
    """A LIKE pattern matching `text` literally (escaped with backslash): a prefix, or anywhere."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}%" if anchored else f"%{escaped}%"


_LIKE = "lower({}) LIKE lower(?) ESCAPE '\\'"


Condition = tuple[str, list[Any]] | None
"""One SQL condition and its parameters (None: no condition)."""


def _joined(*parts: Condition) -> tuple[list[str], list[Any]]:
    conditions: list[str] = []
    params: list[Any] = []
    for part in parts:
        if part is not None:
            conditions.append(part[0])
            params += part[1]
    return conditions, params


def _created(where: ListFilter) -> tuple[Condition, Condition]:
    return (
        ("created_at >= ?", [where.since]) if where.since is not None else None,
        ("created_at < ?", [where.until]) if where.until is not None else None,
    )


def _pipeline_text(dialect: Dialect, q: str, column: str = "") -> tuple[str, list[Any]]:
    """A pipeline's text match: id or material by prefix, source or title anywhere."""
    prefix, anywhere = _like(q, True), _like(q, False)
    fields = [
        (f"{column}id", prefix),
        (f"{column}material_id", prefix),
        (dialect.json_text.format(column=f"{column}params", key="source"), anywhere),
        (dialect.json_text.format(column=f"{column}params", key="title"), anywhere),
    ]
    sql = " OR ".join(_LIKE.format(expr) for expr, _ in fields)
    return f"({sql})", [pattern for _, pattern in fields]


def pipeline_conditions(
    dialect: Dialect | None, where: ListFilter | None
) -> tuple[list[str], list[Any]]:
    """The WHERE conditions (and their parameters) of `where` on `pipeline_instance`."""
    if where is None or where.is_empty:
        return [], []
    if dialect is None:
        raise ValueError("a filtered pipeline list needs the store's dialect")
    node = where.node
    return _joined(
        *_created(where),
        ("template = ?", [where.template]) if where.template is not None else None,
        (
            "(owner_id = ? OR id IN (SELECT pipeline_id FROM task WHERE claimed_by = ?))",
            [node, node],
        )
        if node is not None
        else None,
        _pipeline_text(dialect, where.q) if where.q else None,
    )


def task_conditions(dialect: Dialect, where: ListFilter | None) -> tuple[list[str], list[Any]]:
    """The WHERE conditions (and their parameters) of `where` on `task`: the text matches
    the task's own id, pipeline id or material by prefix, its type anywhere, or its
    pipeline (`_pipeline_text`)."""
    if where is None or where.is_empty:
        return [], []
    text: Condition = None
    if where.q:
        prefix = _like(where.q, True)
        own = [_LIKE.format(c) for c in ("id", "pipeline_id", "material_id")]
        pipeline_sql, pipeline_params = _pipeline_text(dialect, where.q, "p.")
        text = (
            f"({' OR '.join(own)} OR {_LIKE.format('type')} OR pipeline_id IN "
            f"(SELECT p.id FROM pipeline_instance p WHERE {pipeline_sql}))",
            [prefix, prefix, prefix, _like(where.q, False), *pipeline_params],
        )
    return _joined(
        *_created(where),
        (
            "pipeline_id IN (SELECT id FROM pipeline_instance WHERE template = ?)",
            [where.template],
        )
        if where.template is not None
        else None,
        ("claimed_by = ?", [where.node]) if where.node is not None else None,
        text,
    )


# --- counts ----------------------------------------------------------------------------------
_STATUSES = [s.value for s in TaskStatus]
COUNT_SQL = (
    "SELECT "
    + ", ".join(f"SUM(n_{s}) AS {s}" for s in _STATUSES)
    + " FROM pipeline_instance UNION ALL SELECT "
    + ", ".join(f"SUM(CASE WHEN status = '{s}' THEN 1 ELSE 0 END) AS {s}" for s in _STATUSES)
    + " FROM task WHERE pipeline_id IS NULL"
)
"""Two rows of per-status sums: the pipelines' counters and the tasks outside any pipeline."""


def counts_from(rows: Sequence[Row]) -> dict[str, int]:
    return {s: sum(int(r[s] or 0) for r in rows) for s in _STATUSES}
