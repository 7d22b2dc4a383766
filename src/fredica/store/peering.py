"""What a node of a home cluster keeps about the others (DESIGN §6), as statements on one
transaction or connection; `sql.SqlTaskStore` runs them.

- The outbox (seed 001 §7.4): a result this node computed for a task another node owns, kept
  until that owner acknowledged it.
- Replicas: read-only copies of other owners' tasks and pipelines, merged by
  `(owner_id, change_seq)` (a row is replaced only by a newer change of its owner, so applying
  a batch twice, or batches out of order, ends in the same state), and how far each owner's
  changes have been read.
- Digests: a hash of (id, change_seq) of an owner's rows, the same on the owner and on every
  replica that is up to date with it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fredica.domain.models import JSON, Pipeline, Task
from fredica.domain.wire import pipeline_from_json, task_from_json
from fredica.store.base import ChangeBatch, OutboxItem
from fredica.store.rows import Conn
from fredica.store.tx import Tx

OUTBOX_COLUMNS = "id, owner_id, task_id, attempt, kind, body, created_at, tries, last_error"


# --- outbox -----------------------------------------------------------------------------------
def outbox_put(tx: Tx, owner_id: str, task_id: str, attempt: int, kind: str, body: JSON) -> None:
    tx.q(
        "INSERT INTO outbox (node_id, owner_id, task_id, attempt, kind, body, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id, attempt) DO NOTHING",
        (tx.node_id, owner_id, task_id, attempt, kind, json.dumps(body), tx.now),
    )


def outbox_list(conn: Conn, node_id: str, limit: int) -> list[OutboxItem]:
    rows = conn.execute(
        f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE node_id = ? ORDER BY id LIMIT ?",
        (node_id, limit),
    )
    return [
        OutboxItem(
            id=int(r["id"]),
            owner_id=r["owner_id"],
            task_id=r["task_id"],
            attempt=int(r["attempt"]),
            kind=r["kind"],
            body=json.loads(r["body"]),
            created_at=float(r["created_at"]),
            tries=int(r["tries"]),
            last_error=r["last_error"],
        )
        for r in rows
    ]


def outbox_done(tx: Tx, item_id: int) -> None:
    tx.q("DELETE FROM outbox WHERE id = ? AND node_id = ?", (item_id, tx.node_id))


def outbox_tried(tx: Tx, item_id: int, error: str) -> None:
    tx.q(
        "UPDATE outbox SET tries = tries + 1, last_error = ? WHERE id = ? AND node_id = ?",
        (error[:1000], item_id, tx.node_id),
    )


# --- replicas ---------------------------------------------------------------------------------
def apply_replica(tx: Tx, owner_id: str, batch: ChangeBatch) -> int:
    """Merge one batch of `owner_id`'s changes (rows of other owners are refused by the
    caller); returns how many rows were newer than the replica. Atomic with the cursor."""
    applied = 0
    for task in batch.tasks:
        applied += _upsert(
            tx,
            "replica_task",
            "id, owner_id, change_seq, pipeline_id, status, created_at, data",
            (
                task.id,
                owner_id,
                task.change_seq,
                task.pipeline_id,
                task.status.value,
                task.created_at,
                json.dumps(task.to_json()),
            ),
            "pipeline_id = excluded.pipeline_id, ",
        )
    for pipeline in batch.pipelines:
        applied += _upsert(
            tx,
            "replica_pipeline",
            "id, owner_id, change_seq, status, created_at, data",
            (
                pipeline.id,
                owner_id,
                pipeline.change_seq,
                pipeline.status.value,
                pipeline.created_at,
                json.dumps(pipeline.to_json()),
            ),
            "",
        )
    for kind, row_id in batch.deleted:
        table = "replica_task" if kind == "task" else "replica_pipeline"
        cursor = tx.q(f"DELETE FROM {table} WHERE id = ? AND owner_id = ?", (row_id, owner_id))
        applied += max(0, cursor.rowcount)
    tx.q(
        "INSERT INTO replica_cursor (owner_id, cursor, pulled_at) VALUES (?, ?, ?) "
        "ON CONFLICT (owner_id) DO UPDATE SET pulled_at = excluded.pulled_at, "
        "cursor = CASE WHEN excluded.cursor > replica_cursor.cursor "
        "THEN excluded.cursor ELSE replica_cursor.cursor END",
        (owner_id, batch.cursor, tx.now),
    )
    return applied


def _upsert(tx: Tx, table: str, columns: str, values: tuple[Any, ...], extra: str) -> int:
    marks = ", ".join("?" for _ in values)
    cursor = tx.q(
        f"INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT (id) DO UPDATE SET "
        f"owner_id = excluded.owner_id, change_seq = excluded.change_seq, {extra}"
        "status = excluded.status, created_at = excluded.created_at, data = excluded.data "
        f"WHERE excluded.change_seq > {table}.change_seq",
        values,
    )
    return max(0, cursor.rowcount)


def replica_cursor(conn: Conn, owner_id: str) -> int:
    row = conn.execute(
        "SELECT cursor FROM replica_cursor WHERE owner_id = ?", (owner_id,)
    ).fetchone()
    return int(row["cursor"]) if row is not None else 0


def replica_freshness(conn: Conn) -> dict[str, float]:
    """When each owner's changes were last read (this node's clock)."""
    return {
        r["owner_id"]: float(r["pulled_at"])
        for r in conn.execute("SELECT owner_id, pulled_at FROM replica_cursor")
    }


def replica_tasks(
    conn: Conn, pipeline_id: str | None, statuses: list[str], limit: int, offset: int
) -> list[Task]:
    where, params = _filters(pipeline_id, statuses)
    order = "created_at, id" if pipeline_id else "created_at DESC, id DESC"
    rows = conn.execute(
        f"SELECT data FROM replica_task{where} ORDER BY {order} LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )
    return [task_from_json(json.loads(r["data"])) for r in rows]


def replica_pipelines(conn: Conn, statuses: list[str], limit: int, offset: int) -> list[Pipeline]:
    where, params = _filters(None, statuses)
    rows = conn.execute(
        f"SELECT data FROM replica_pipeline{where} ORDER BY created_at DESC, id DESC "
        "LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )
    return [pipeline_from_json(json.loads(r["data"])) for r in rows]


def replica_pipeline(conn: Conn, pipeline_id: str) -> Pipeline | None:
    row = conn.execute("SELECT data FROM replica_pipeline WHERE id = ?", (pipeline_id,)).fetchone()
    return pipeline_from_json(json.loads(row["data"])) if row is not None else None


def replica_task(conn: Conn, task_id: str) -> Task | None:
    row = conn.execute("SELECT data FROM replica_task WHERE id = ?", (task_id,)).fetchone()
    return task_from_json(json.loads(row["data"])) if row is not None else None


def _filters(pipeline_id: str | None, statuses: list[str]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if pipeline_id is not None:
        clauses.append("pipeline_id = ?")
        params.append(pipeline_id)
    if statuses:
        clauses.append(f"status IN ({', '.join('?' for _ in statuses)})")
        params += statuses
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


# --- digests ------------------------------------------------------------------------------------
def digest(conn: Conn, owner_id: str, replica: bool) -> str:
    """sha256 of the (id, change_seq) of `owner_id`'s tasks and pipelines: on the owner
    (`replica=False`) its own rows, elsewhere the replica of them."""
    tables = ("replica_task", "replica_pipeline") if replica else ("task", "pipeline_instance")
    h = hashlib.sha256()
    for table in tables:
        for r in conn.execute(
            f"SELECT id, change_seq FROM {table} WHERE owner_id = ? ORDER BY id", (owner_id,)
        ):
            h.update(f"{r['id']}:{r['change_seq']};".encode())
        h.update(b"|")
    return h.hexdigest()


# --- liveness after the owner's own downtime ---------------------------------------------
def forgive_silence(tx: Tx) -> int:
    """This owner was down: the silence of peers running its tasks meanwhile is not theirs.
    Their running claims count as heard from now (DESIGN §4.2: judged from when the owner
    received a heartbeat, and it could receive none)."""
    cursor = tx.q(
        "UPDATE task SET heartbeat_at = ? WHERE owner_id = ? AND status = 'running' "
        "AND claimed_by IS NOT NULL AND claimed_by <> ?",
        (tx.now, tx.node_id, tx.node_id),
    )
    return max(0, cursor.rowcount)
