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

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from fredica.domain import errors
from fredica.domain.models import JSON, Pipeline, Task, TaskEvent, TaskStatus
from fredica.domain.wire import pipeline_from_json, task_from_json
from fredica.store.base import ChangeBatch, OutboxItem, Transfer
from fredica.store.rows import (
    PIPELINE_COLUMNS,
    TASK_COLUMNS,
    TASK_FIELDS,
    Conn,
    dumps,
    row_to_pipeline,
    row_to_task,
    task_to_values,
)
from fredica.store.tx import Tx

TOMBSTONE_LOOKUP = 500  # ids per tombstone lookup statement
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


def outbox_readdress(tx: Tx, task_ids: Sequence[str], owner_id: str) -> int:
    moved = 0
    for chunk in _chunks(list(task_ids)):
        marks = ",".join("?" for _ in chunk)
        cursor = tx.q(
            f"UPDATE outbox SET owner_id = ? WHERE node_id = ? AND task_id IN ({marks})",
            (owner_id, tx.node_id, *chunk),
        )
        moved += max(0, cursor.rowcount)
    return moved


# --- replicas ---------------------------------------------------------------------------------
def apply_replica(tx: Tx, owner_id: str, batch: ChangeBatch) -> int:
    """Merge one batch of `owner_id`'s changes (rows of other owners are refused by the
    caller); returns how many rows were newer than the replica. Atomic with the cursor.
    Tombstones first: a row deleted by its owner (in this batch or an earlier one) is never
    merged again from that owner, so a batch read before the delete and applied after it (two
    pulls at once) cannot bring it back; a later owner's rows of it (ownership moved) can."""
    applied = _forget_deleted(tx, owner_id, batch)
    gone = _tombstoned(tx, "task", [t.id for t in batch.tasks], owner_id)
    gone |= _tombstoned(tx, "pipeline", [p.id for p in batch.pipelines], owner_id)
    applied += apply_rows(
        tx,
        owner_id,
        [t for t in batch.tasks if ("task", t.id) not in gone],
        [p for p in batch.pipelines if ("pipeline", p.id) not in gone],
    )
    tx.q(
        "INSERT INTO replica_cursor (owner_id, cursor, pulled_at) VALUES (?, ?, ?) "
        "ON CONFLICT (owner_id) DO UPDATE SET pulled_at = excluded.pulled_at, "
        "cursor = CASE WHEN excluded.cursor > replica_cursor.cursor "
        "THEN excluded.cursor ELSE replica_cursor.cursor END",
        (owner_id, batch.cursor, tx.now),
    )
    return applied


def apply_rows(tx: Tx, owner_id: str, tasks: Sequence[Task], pipelines: Sequence[Pipeline]) -> int:
    """Upsert replica rows of `owner_id` (see `_upsert`); returns how many were newer."""
    applied = 0
    for task in tasks:
        applied += _upsert(
            tx,
            "replica_task",
            "id, owner_id, owner_epoch, change_seq, pipeline_id, status, created_at, data",
            (
                task.id,
                owner_id,
                task.owner_epoch,
                task.change_seq,
                task.pipeline_id,
                task.status.value,
                task.created_at,
                json.dumps(task.to_json()),
            ),
            "pipeline_id = excluded.pipeline_id, ",
        )
    for pipeline in pipelines:
        applied += _upsert(
            tx,
            "replica_pipeline",
            "id, owner_id, owner_epoch, change_seq, status, created_at, data",
            (
                pipeline.id,
                owner_id,
                pipeline.owner_epoch,
                pipeline.change_seq,
                pipeline.status.value,
                pipeline.created_at,
                json.dumps(pipeline.to_json()),
            ),
            "",
        )
    return applied


def _forget_deleted(tx: Tx, owner_id: str, batch: ChangeBatch) -> int:
    """Drop the copies of rows `owner_id` deleted and keep their tombstones (stamped with the
    cursor of the batch that carried them); how many copies went."""
    deleted = batch.deleted
    if not deleted:
        return 0
    tx.values(
        "INSERT INTO replica_deleted (kind, id, owner_id, change_seq)",
        "(?, ?, ?, ?)",
        [(kind, row_id, owner_id, batch.cursor) for kind, row_id in deleted],
        " ON CONFLICT (kind, id) DO UPDATE SET owner_id = excluded.owner_id, "
        "change_seq = excluded.change_seq",
    )
    dropped = 0
    for kind, row_id in deleted:
        table = "replica_task" if kind == "task" else "replica_pipeline"
        cursor = tx.q(f"DELETE FROM {table} WHERE id = ? AND owner_id = ?", (row_id, owner_id))
        dropped += max(0, cursor.rowcount)
    return dropped


def _tombstoned(tx: Tx, kind: str, ids: list[str], owner_id: str) -> set[tuple[str, str]]:
    """Which of these rows of `kind` a batch of `owner_id` said were deleted."""
    found: set[tuple[str, str]] = set()
    for start in range(0, len(ids), TOMBSTONE_LOOKUP):
        chunk = ids[start : start + TOMBSTONE_LOOKUP]
        rows = tx.q(
            f"SELECT id FROM replica_deleted WHERE kind = ? AND owner_id = ? AND id IN "
            f"({', '.join('?' for _ in chunk)})",
            (kind, owner_id, *chunk),
        )
        found.update((kind, str(r["id"])) for r in rows)
    return found


def _upsert(tx: Tx, table: str, columns: str, values: tuple[Any, ...], extra: str) -> int:
    """Insert or replace a replica row. A row of a newer owner epoch replaces the one held
    whatever their change sequences (each owner numbers its own changes); within one epoch
    (one owner) the newer change wins. So a returning old owner's rows never replace its
    successor's."""
    marks = ", ".join("?" for _ in values)
    cursor = tx.q(
        f"INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT (id) DO UPDATE SET "
        "owner_id = excluded.owner_id, owner_epoch = excluded.owner_epoch, "
        f"change_seq = excluded.change_seq, {extra}"
        "status = excluded.status, created_at = excluded.created_at, data = excluded.data "
        f"WHERE excluded.owner_epoch > {table}.owner_epoch OR "
        f"(excluded.owner_epoch = {table}.owner_epoch AND "
        f"excluded.change_seq > {table}.change_seq)",
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


# --- ownership that moves (DESIGN §4.11) --------------------------------------------------------
def export_pipeline(conn: Conn, pipeline_id: str) -> Transfer:
    """A pipeline this store owns, whole: its row, its tasks and their events (a hand-off)."""
    row = conn.execute(
        f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE id = ?", (pipeline_id,)
    ).fetchone()
    if row is None:
        raise errors.NotFound(f"pipeline {pipeline_id} not found")
    tasks = [
        row_to_task(r)
        for r in conn.execute(
            f"SELECT {TASK_COLUMNS} FROM task WHERE pipeline_id = ? ORDER BY ord", (pipeline_id,)
        )
    ]
    events = [
        TaskEvent(
            str(r["id"]),
            r["task_id"],
            r["node_id"],
            r["event_type"],
            r["message"],
            r["occurred_at"],
        )
        for r in conn.execute(
            "SELECT e.id, e.task_id, e.node_id, e.event_type, e.message, e.occurred_at "
            "FROM task JOIN task_event e ON e.task_ord = task.ord AND e.task_id = task.id "
            "WHERE task.pipeline_id = ? ORDER BY e.occurred_at, e.id",
            (pipeline_id,),
        )
    ]
    return Transfer(row_to_pipeline(row), tuple(tasks), tuple(events))


def replica_transfer(conn: Conn, pipeline_id: str) -> Transfer:
    """A pipeline this node holds a replica of, as a transfer (a takeover: no events)."""
    pipeline = replica_pipeline(conn, pipeline_id)
    if pipeline is None:
        raise errors.NotFound(f"no replica of pipeline {pipeline_id}")
    tasks = replica_tasks(conn, pipeline_id, [], 1_000_000, 0)
    return Transfer(pipeline, tuple(tasks), ())


def adopt(tx: Tx, transfer: Transfer, epoch: int, move: JSON) -> bool:
    """Make `transfer`'s pipeline this store's own at `epoch` (one transaction): its rows
    with `owner_id` this node, a new change sequence, the dependency edges and counters
    rebuilt, running work counted as heard from now (its claimers could not reach the old
    owner). The replica of it is dropped. False (and nothing written) when this store already
    holds the pipeline at `epoch` or a newer one: an adoption repeated is harmless."""
    pipeline = transfer.pipeline
    held = tx.q("SELECT owner_epoch FROM pipeline_instance WHERE id = ?", (pipeline.id,)).fetchone()
    if held is not None:
        if int(held["owner_epoch"]) >= epoch:
            return False
        remove_pipeline_rows(tx, pipeline.id, tombstones=False)
    owner = tx.node_id
    history = [*pipeline.owner_history, {**move, "owner": owner, "epoch": epoch, "at": tx.now}]
    tx.q(
        "INSERT INTO pipeline_instance (id, material_id, template, status, params, "
        "cancel_requested, detected_language, created_by, owner_id, owner_epoch, publisher_id, "
        "change_seq, created_at, updated_at, completed_at, owner_history) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            pipeline.id,
            pipeline.material_id,
            pipeline.template,
            pipeline.status.value,
            dumps(pipeline.params),
            int(pipeline.cancel_requested),
            pipeline.detected_language,
            pipeline.created_by,
            owner,
            epoch,
            pipeline.publisher_id,
            tx.seq,
            pipeline.created_at,
            tx.now,
            pipeline.completed_at,
            dumps(history),
        ),
    )
    status_of = {t.id: t.status for t in transfer.tasks}
    rows = []
    for task in transfer.tasks:
        unmet = sum(
            1 for p in task.depends_on if p in status_of and not status_of[p].satisfies_dependency
        )
        alive = task.status in (TaskStatus.CLAIMED, TaskStatus.RUNNING, TaskStatus.STALE)
        moved = dataclasses.replace(
            task,
            owner_id=owner,
            owner_epoch=epoch,
            change_seq=tx.seq,
            heartbeat_at=tx.now if alive else task.heartbeat_at,
        )
        rows.append((*task_to_values(moved), unmet))
    ords = _insert_whole(tx, rows)
    edges = [(p, t.id) for t in transfer.tasks for p in t.depends_on if p in status_of]
    if edges:
        tx.qmany("INSERT INTO task_dep (parent_id, task_id) VALUES (?, ?)", edges)
    events = [
        (e.task_id, ords[e.task_id], e.event_type, e.message, e.occurred_at, e.node_id)
        for e in transfer.events
        if e.task_id in ords
    ]
    if events:
        tx.qmany(
            "INSERT INTO task_event (task_id, task_ord, event_type, message, occurred_at, "
            "node_id) VALUES (?, ?, ?, ?, ?, ?)",
            events,
        )
    note = f"owner {move.get('previous')} -> {owner} (epoch {epoch}, {move.get('how')})"
    tx.events_of([(t.id, ords[t.id], "owner_changed", note, None) for t in transfer.tasks])
    ids = [pipeline.id] + [t.id for t in transfer.tasks]
    for chunk in _chunks(ids):
        marks = ",".join("?" for _ in chunk)
        tx.q(f"DELETE FROM replica_task WHERE id IN ({marks})", chunk)
        tx.q(f"DELETE FROM replica_pipeline WHERE id IN ({marks})", chunk)
        tx.q(f"DELETE FROM deleted_row WHERE id IN ({marks})", chunk)
    # what is ready here is ready from now (the starvation window runs on this owner's clock)
    tx.q(
        "UPDATE task SET ready_since = ? WHERE pipeline_id = ? AND status = ? AND unmet_deps = 0",
        (tx.now, pipeline.id, TaskStatus.PENDING.value),
    )
    tx.recount(pipeline.id)
    tx.ready = True
    return True


def _insert_whole(tx: Tx, rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """Insert whole task rows (`TASK_COLUMNS` values, then `unmet_deps`); returns each task's
    insertion order (`ord`), numbered by the database where it numbers them."""
    head = f"INSERT INTO task ({TASK_COLUMNS}, unmet_deps"
    marks = ", ".join("?" for _ in range(len(TASK_FIELDS) + 1))
    ids = [r[0] for r in rows]
    if tx.dialect.numbers_task_ord:
        tx.values(f"{head})", f"({marks})", rows)
        ords: dict[str, int] = {}
        for chunk in _chunks(ids):
            ords.update(
                tx.tuples(
                    f"SELECT id, ord FROM task WHERE id IN ({','.join('?' for _ in chunk)})",
                    chunk,
                )
            )
        return ords
    base = tx.tuples("SELECT COALESCE(MAX(ord), 0) FROM task")[0][0]
    numbered = {task_id: base + 1 + n for n, task_id in enumerate(ids)}
    tx.values(f"{head}, ord)", f"({marks}, ?)", [(*r, numbered[r[0]]) for r in rows])
    return numbered


def remove_pipeline_rows(tx: Tx, pipeline_id: str, tombstones: bool = True) -> list[str]:
    """Delete a pipeline with its tasks, their events and dependency edges; with
    `tombstones`, the replicas of these rows on other nodes drop them too. Returns the ids of
    the tasks removed."""
    owner_row = tx.q(
        "SELECT owner_id FROM pipeline_instance WHERE id = ?", (pipeline_id,)
    ).fetchone()
    task_ids = [
        r[0] for r in tx.tuples("SELECT id FROM task WHERE pipeline_id = ?", (pipeline_id,))
    ]
    in_pipeline = "SELECT id FROM task WHERE pipeline_id = ?"
    # events are indexed by their task's insertion order: name it, or every event is read
    tx.q(
        "DELETE FROM task_event WHERE task_ord IN (SELECT ord FROM task WHERE pipeline_id = ?) "
        f"AND task_id IN ({in_pipeline})",
        (pipeline_id, pipeline_id),
    )
    tx.q(f"DELETE FROM task_dep WHERE task_id IN ({in_pipeline})", (pipeline_id,))
    tx.q(f"DELETE FROM task_dep WHERE parent_id IN ({in_pipeline})", (pipeline_id,))
    tx.q("DELETE FROM task WHERE pipeline_id = ?", (pipeline_id,))
    tx.q("DELETE FROM pipeline_instance WHERE id = ?", (pipeline_id,))
    if tombstones and owner_row is not None:
        owner = owner_row["owner_id"]
        tx.qmany(
            "INSERT INTO deleted_row (kind, id, owner_id, change_seq) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (kind, id) DO UPDATE SET change_seq = excluded.change_seq, "
            "owner_id = excluded.owner_id",
            [("pipeline", pipeline_id, owner, tx.seq)]
            + [("task", task_id, owner, tx.seq) for task_id in task_ids],
        )
    else:
        tx.mark_changed()
    return task_ids


def demote(tx: Tx, transfer: Transfer) -> list[str]:
    """This store's pipeline now belongs to the owner of `transfer` (its newer epoch): the
    own rows go (the replicas of this node's feed drop them), and the new owner's rows are
    held as a replica until its own feed brings newer ones. Returns the task ids demoted; []
    when this store does not own the pipeline at an older epoch."""
    pipeline = transfer.pipeline
    held = tx.q("SELECT owner_epoch FROM pipeline_instance WHERE id = ?", (pipeline.id,)).fetchone()
    if held is None or int(held["owner_epoch"]) >= pipeline.owner_epoch:
        return []
    task_ids = remove_pipeline_rows(tx, pipeline.id)
    apply_rows(tx, pipeline.owner_id, transfer.tasks, (pipeline,))
    return task_ids


def moved_away(conn: Conn, created_by: str) -> list[tuple[str, str, int]]:
    """(pipeline id, owner, epoch) of the pipelines `created_by` created that another node
    owns now, as far as this node knows (its own rows and its replicas)."""
    out = [
        (r["id"], r["owner_id"], int(r["owner_epoch"]))
        for r in conn.execute(
            "SELECT id, owner_id, owner_epoch FROM pipeline_instance "
            "WHERE created_by = ? AND owner_id <> ?",
            (created_by, created_by),
        )
    ]
    for r in conn.execute(
        "SELECT id, owner_id, owner_epoch, data FROM replica_pipeline WHERE owner_id <> ?",
        (created_by,),
    ):
        if json.loads(r["data"]).get("created_by") == created_by:
            out.append((r["id"], r["owner_id"], int(r["owner_epoch"])))
    return sorted(set(out))


def adopted(conn: Conn, node_id: str) -> list[tuple[str, str, int]]:
    """(pipeline id, creator, epoch) of the pipelines `node_id` owns that moved at least once."""
    return [
        (r["id"], r["created_by"], int(r["owner_epoch"]))
        for r in conn.execute(
            "SELECT id, created_by, owner_epoch FROM pipeline_instance "
            "WHERE owner_id = ? AND owner_epoch > 0 ORDER BY id",
            (node_id,),
        )
    ]


def _chunks(ids: list[str], size: int = 500) -> list[list[str]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


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
