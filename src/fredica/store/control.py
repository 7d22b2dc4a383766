"""Creation, user control, liveness and start-up recovery, as functions of one transaction.

Liveness and recovery act only on the rows the store is authoritative for (`tx.own_sql`).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence

from fredica.domain import errors, retry
from fredica.domain.models import (
    ErrorType,
    NewPipeline,
    NewTask,
    Pipeline,
    PipelineStatus,
    Task,
    TaskStatus,
)
from fredica.store import peering, schema
from fredica.store.base import CancelOutcome, Liveness, MonitorReport, RecoveryReport
from fredica.store.rows import PIPELINE_COLUMNS, TASK_COLUMNS, Row, dumps, row_to_pipeline
from fredica.store.rows import row_to_task as to_task
from fredica.store.tx import Tx
from fredica.store.work import apply_failure

S = TaskStatus
_CANCELLABLE_DIRECTLY = (S.PENDING, S.CLAIMED, S.STALE, S.RECLAIMED)
_RETRYABLE = (S.FAILED, S.CANCELLED)
_TERMINAL_PIPELINES = "('completed', 'failed', 'cancelled', 'partial_failed')"


# --- creation ---------------------------------------------------------------------------------
def create_pipeline(tx: Tx, spec: NewPipeline) -> tuple[Pipeline, bool]:
    if tx.dialect.key_lock:
        # two nodes creating the same (material, template) at once: the second waits, then
        # finds the first one's pipeline
        tx.q(tx.dialect.key_lock, (f"pipeline\x1f{spec.material_id}\x1f{spec.template}",))
    existing = tx.q(
        f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE material_id = ? "
        f"AND template = ? AND status NOT IN {_TERMINAL_PIPELINES} LIMIT 1",
        (spec.material_id, spec.template),
    ).fetchone()
    if existing is not None:
        return row_to_pipeline(existing), True
    pipeline_id = spec.id or str(uuid.uuid4())
    tx.q(
        "INSERT INTO pipeline_instance (id, material_id, template, status, params, "
        "created_by, owner_id, publisher_id, change_seq, created_at, updated_at) "
        "VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?)",
        (
            pipeline_id,
            spec.material_id,
            spec.template,
            dumps(spec.params),
            tx.node_id,
            tx.node_id,
            spec.publisher_id,
            tx.seq,
            tx.now,
            tx.now,
        ),
    )
    # A new pipeline never adopts another pipeline's active task (that pipeline's routing and
    # spawn hooks run for the task's own pipeline, and this one's dependents would wait on a
    # row it does not own): a task whose idempotency key is active elsewhere is its own.
    tx.insert_tasks(spec.tasks, pipeline_id, spec.material_id, tx.node_id, adopt=False)
    tx.touch_pipeline(pipeline_id)
    tx.flush_pipelines()
    return get_pipeline(tx, pipeline_id), False


def add_task(tx: Tx, spec: NewTask, pipeline_id: str | None) -> Task:
    if (
        pipeline_id is not None
        and tx.q("SELECT id FROM pipeline_instance WHERE id = ?", (pipeline_id,)).fetchone() is None
    ):
        raise errors.NotFound(f"pipeline {pipeline_id} not found")
    task_id, _ = tx.insert_task(spec, pipeline_id, spec.material_id, tx.node_id)
    return to_task(tx.task_row(task_id))


def get_pipeline(tx: Tx, pipeline_id: str, lock: bool = False) -> Pipeline:
    """The pipeline (NotFound if absent); with `lock`, its row is locked for this transaction
    where the database locks rows."""
    row = tx.q(
        f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE id = ?"
        f"{tx.dialect.lock if lock else ''}",
        (pipeline_id,),
    ).fetchone()
    if row is None:
        raise errors.NotFound(f"pipeline {pipeline_id} not found")
    return row_to_pipeline(row)


# --- user control -------------------------------------------------------------------------------
def _cancel_row(tx: Tx, row: Row, reason: str) -> CancelOutcome:
    """Cancel a non-running task at once; flag a running one for its claimer to stop."""
    if TaskStatus(row["status"]) in _CANCELLABLE_DIRECTLY:
        tx.transition(
            row,
            S.CANCELLED,
            message=reason,
            error=reason,
            error_type=ErrorType.CANCELLED.value,
            completed_at=tx.now,
        )
        return CancelOutcome(row["id"], cancelled=True, running_on=None, attempt=None)
    tx.q(
        "UPDATE task SET cancel_requested = 1, updated_at = ?, change_seq = ? WHERE id = ?",
        (tx.now, tx.seq, row["id"]),
    )
    tx.event(row["id"], "cancel_requested", reason)
    return CancelOutcome(row["id"], False, row["claimed_by"], row["attempt"])


def cancel_task(tx: Tx, task_id: str, reason: str) -> CancelOutcome:
    row = tx.task_row(task_id)
    status = TaskStatus(row["status"])
    if status.is_terminal:
        raise errors.IllegalTransition(f"task {task_id} is already {status.value}")
    return _cancel_row(tx, row, reason)


def cancel_pipeline(tx: Tx, pipeline_id: str, reason: str) -> list[CancelOutcome]:
    prow = tx.q(
        f"SELECT status FROM pipeline_instance WHERE id = ?{tx.dialect.lock}", (pipeline_id,)
    ).fetchone()
    if prow is None:
        raise errors.NotFound(f"pipeline {pipeline_id} not found")
    if PipelineStatus(prow["status"]).is_terminal:
        raise errors.IllegalTransition(f"pipeline {pipeline_id} is already {prow['status']}")
    tx.q(
        "UPDATE pipeline_instance SET cancel_requested = 1, change_seq = ? WHERE id = ?",
        (tx.seq, pipeline_id),
    )
    tx.touch_pipeline(pipeline_id)
    ids = [
        r["id"]
        for r in tx.q(
            f"SELECT id FROM task WHERE pipeline_id = ? AND status IN {schema.ACTIVE_SQL} "
            "ORDER BY created_at DESC",
            (pipeline_id,),
        )
    ]
    outcomes: list[CancelOutcome] = []
    for task_id in ids:
        row = tx.task_row(task_id)  # an earlier cascade may have changed it
        if TaskStatus(row["status"]).is_terminal:
            continue
        outcome = _cancel_row(tx, row, reason)
        if not outcome.cancelled:
            outcomes.append(outcome)
    return outcomes


def retry_task(tx: Tx, task_id: str) -> Task:
    row = tx.task_row(task_id)
    status = TaskStatus(row["status"])
    if status not in _RETRYABLE:
        raise errors.IllegalTransition(
            f"task {task_id} is {status.value}; only failed or cancelled tasks can be retried"
        )
    if row["pipeline_id"]:
        tx.q(
            "UPDATE pipeline_instance SET cancel_requested = 0 WHERE id = ?",
            (row["pipeline_id"],),
        )
    _retry_row(tx, row)
    return to_task(tx.task_row(task_id))


def _retry_row(tx: Tx, row: Row) -> None:
    """failed/cancelled -> pending as if new (the retry budget is whole again, and no node is
    excluded any more: the user retries because something changed)."""
    tx.transition(
        row,
        S.PENDING,
        event_type="retried",
        message="manual retry",
        retry_count=0,
        retry_after=None,
        excluded_nodes="[]",
        error=None,
        error_type=None,
        completed_at=None,
        claimed_by=None,
        progress=0,
        cancel_requested=0,
    )


def retry_pipeline(tx: Tx, pipeline_id: str) -> list[str]:
    """Every failed or cancelled task of the pipeline back to pending, oldest first: a parent
    retried first revives the dependents cancelled because of it, the rest are retried as
    they come. Returns the ids now pending again."""
    get_pipeline(tx, pipeline_id, lock=True)
    ids = [
        r["id"]
        for r in tx.q(
            "SELECT id FROM task WHERE pipeline_id = ? AND status IN ('failed', 'cancelled') "
            "ORDER BY created_at, ord",
            (pipeline_id,),
        )
    ]
    if not ids:
        raise errors.IllegalTransition(
            f"pipeline {pipeline_id} has no failed or cancelled tasks to retry"
        )
    tx.q("UPDATE pipeline_instance SET cancel_requested = 0 WHERE id = ?", (pipeline_id,))
    tx.touch_pipeline(pipeline_id)
    for task_id in ids:
        row = tx.task_row(task_id)
        if TaskStatus(row["status"]) in _RETRYABLE:  # else revived by a parent's retry
            _retry_row(tx, row)
    return ids


def delete_pipeline(tx: Tx, pipeline_id: str) -> list[str]:
    """Remove a finished pipeline: its row (and with it its counters), its tasks, their
    events and dependency edges. Returns the ids of the tasks removed."""
    get_pipeline(tx, pipeline_id, lock=True)
    rows = list(
        tx.q(
            f"SELECT id, status FROM task WHERE pipeline_id = ? ORDER BY id{tx.dialect.lock}",
            (pipeline_id,),
        )
    )
    active = sum(1 for r in rows if not TaskStatus(r["status"]).is_terminal)
    if active:
        raise errors.Conflict(
            f"pipeline {pipeline_id} has {active} active task{'s' if active != 1 else ''}; "
            "cancel it and wait until they end before deleting it"
        )
    peering.remove_pipeline_rows(tx, pipeline_id)
    return [r["id"] for r in rows]


def fail_stranded(tx: Tx, runnable_on: Mapping[str, Sequence[str]]) -> list[str]:
    """Fail the pending tasks owned here that no online node may run any more (see
    `retry.stranded`; `runnable_on`: task type -> online nodes that can run it; a type not in
    it is left alone). Returns their ids."""
    rows = tx.q(
        f"SELECT {TASK_COLUMNS} FROM task WHERE status = 'pending' AND excluded_nodes <> '[]' "
        f"AND {tx.own_sql} ORDER BY id{tx.dialect.lock}",
        tx.own_params,
    )
    out = []
    for row in list(rows):
        excluded = json.loads(row["excluded_nodes"])
        if row["type"] not in runnable_on or not retry.stranded(excluded, runnable_on[row["type"]]):
            continue
        reason = retry.stranded_reason(excluded, row["error"])
        tx.transition(
            row,
            S.FAILED,
            event_type="stranded",
            message=reason,
            error=reason,
            error_type=ErrorType.RESOURCE.value,
            completed_at=tx.now,
        )
        out.append(row["id"])
    return out


def skip_task(tx: Tx, task_id: str, reason: str) -> Task:
    row = tx.task_row(task_id)
    status = TaskStatus(row["status"])
    if status not in (S.PENDING, S.FAILED, S.CANCELLED):
        raise errors.IllegalTransition(
            f"task {task_id} is {status.value}; only pending, failed or cancelled "
            "tasks can be skipped"
        )
    tx.transition(row, S.SKIPPED, message=reason, completed_at=tx.now, claimed_by=None, error=None)
    return to_task(tx.task_row(task_id))


# --- liveness (the owner's monitor) ----------------------------------------------------------
def _scan(tx: Tx, condition: str, params: tuple[float, ...]) -> list[Row]:
    return list(
        tx.q(
            f"SELECT {TASK_COLUMNS} FROM task WHERE {condition} AND {tx.own_sql} "
            f"ORDER BY id{tx.dialect.skip_locked}",
            (*params, *tx.own_params),
        )
    )


def monitor(tx: Tx, liveness: Liveness, reachable_since: float | None = None) -> MonitorReport:
    """Mark silent running work stale, reclaim stale work, release work claimed but never
    started. `reachable_since` (store clock): the database could not be reached before then, so
    no node could report: silence is only counted from then on."""
    now = tx.now
    since = reachable_since if reachable_since is not None else -math.inf
    report = MonitorReport([], [], [], [])
    if since < now - liveness.stale_after:
        _mark_stale(tx, now, liveness, report)
    if since < now - liveness.reclaim_after:
        _reclaim(tx, now, liveness, report)
    if since < now - liveness.claim_timeout:
        _release_unstarted(tx, now, liveness, report)
    return report


def _mark_stale(tx: Tx, now: float, liveness: Liveness, report: MonitorReport) -> None:
    for row in _scan(tx, "status = 'running' AND heartbeat_at < ?", (now - liveness.stale_after,)):
        tx.transition(
            row, S.STALE, message=f"no heartbeat for {now - row['heartbeat_at']:.1f}s", stale_at=now
        )
        report.stale.append(row["id"])


def _reclaim(tx: Tx, now: float, liveness: Liveness, report: MonitorReport) -> None:
    stale_rows = _scan(tx, "status = 'stale' AND heartbeat_at < ?", (now - liveness.reclaim_after,))
    for row in stale_rows:
        tx.transition(
            row,
            S.RECLAIMED,
            message=f"no heartbeat for {now - row['heartbeat_at']:.1f}s; reclaimed",
            reclaimed_at=now,
        )
        apply_failure(
            tx,
            tx.task_row(row["id"]),
            f"worker {row['claimed_by']} stopped sending heartbeats",
            ErrorType.TRANSIENT,
            None,
            event_type="requeued",
        )
        report.reclaimed.append(row["id"])
        after = to_task(tx.task_row(row["id"]))
        if after.status is S.FAILED:
            report.failed.append(after)


def _release_unstarted(tx: Tx, now: float, liveness: Liveness, report: MonitorReport) -> None:
    for row in _scan(tx, "status = 'claimed' AND claimed_at < ?", (now - liveness.claim_timeout,)):
        tx.transition(
            row,
            S.PENDING,
            event_type="released",
            message="claimed but never started",
            claimed_by=None,
        )
        report.released.append(row["id"])


# --- start-up recovery (seed 000, five steps; DESIGN §4.6) ----------------------------------
_LOG_INSERT = (
    "INSERT INTO restart_task_log (restarted_at, node_id, task_id, pipeline_id, task_type, "
    "previous_status, new_status, action, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def recover_startup(tx: Tx) -> RecoveryReport:
    report = RecoveryReport()
    # 1. snapshot every non-terminal task this node was working on
    snapshot = list(
        tx.q(
            f"SELECT {TASK_COLUMNS} FROM task WHERE claimed_by = ? "
            f"AND status IN ('claimed', 'running', 'stale') AND {tx.own_sql} "
            f"ORDER BY id{tx.dialect.lock}",
            (tx.node_id, *tx.own_params),
        )
    )
    report.snapshot = [to_task(r) for r in snapshot]
    # 2. reset zombies (claimed -> pending; running/stale -> TRANSIENT failure), 3. log them
    for row in snapshot:
        _reset_zombie(tx, row, report)
    # 4. orphans: active tasks without a pipeline
    for row in tx.q(
        f"SELECT {TASK_COLUMNS} FROM task WHERE status IN {schema.ACTIVE_SQL} AND {tx.own_sql} "
        "AND (pipeline_id IS NULL OR pipeline_id NOT IN (SELECT id FROM pipeline_instance)) "
        f"ORDER BY id{tx.dialect.lock}",
        tx.own_params,
    ).fetchall():
        _fail_orphan(tx, row)
        report.orphans += 1
    # 5. reconcile every non-terminal pipeline from its task rows
    report.pipelines_reconciled = reconcile(tx)
    return report


def _reset_zombie(tx: Tx, row: Row, report: RecoveryReport) -> None:
    prev = row["status"]
    if prev == S.CLAIMED.value:
        tx.transition(
            row,
            S.PENDING,
            event_type="released",
            message="claimed when the node stopped; requeued",
            claimed_by=None,
        )
        action = "requeued"
    else:
        apply_failure(tx, row, "interrupted by restart", ErrorType.TRANSIENT, None)
        action = "interrupted"
    after = to_task(tx.task_row(row["id"]))
    if after.status is S.FAILED:
        report.failed.append(after)
    elif action == "interrupted":
        report.requeued_after_interrupt += 1
    else:
        report.requeued += 1
    tx.q(
        _LOG_INSERT,
        (
            tx.now,
            tx.node_id,
            row["id"],
            row["pipeline_id"],
            row["type"],
            prev,
            after.status.value,
            action,
            after.error,
        ),
    )


def _fail_orphan(tx: Tx, row: Row) -> None:
    message = "no pipeline owns this task"
    tx.transition(
        row,
        S.FAILED,
        event_type="orphaned",
        message=message,
        error=f"orphaned: {message}",
        error_type=ErrorType.PERMANENT.value,
        completed_at=tx.now,
        claimed_by=row["claimed_by"],
    )
    tx.q(
        _LOG_INSERT,
        (
            tx.now,
            tx.node_id,
            row["id"],
            row["pipeline_id"],
            row["type"],
            row["status"],
            "failed",
            "orphaned",
            message,
        ),
    )


def reconcile(tx: Tx) -> int:
    """Recount and re-derive every non-terminal pipeline this store owns."""
    ids = [
        r["id"]
        for r in tx.q(
            f"SELECT id FROM pipeline_instance WHERE status NOT IN {_TERMINAL_PIPELINES} "
            f"AND {tx.own_sql} ORDER BY id",
            tx.own_params,
        )
    ]
    for pipeline_id in ids:
        tx.recount(pipeline_id)
    return len(ids)
