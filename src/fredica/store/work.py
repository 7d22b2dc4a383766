"""Claims and worker reports, as functions of one transaction (`Tx`).

Every report is fenced by `(claimed_by, attempt)`: a zombie of an earlier attempt, even on the
same node, cannot overwrite a newer state (DESIGN §4.1).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from fredica.domain import errors, retry
from fredica.domain.models import Affinity, CachePolicy, ErrorType, Task, TaskStatus
from fredica.domain.spawn import SpawnInput
from fredica.store.base import (
    BackendNote,
    ClaimFilter,
    CompletionItem,
    Failure,
    HeartbeatFeedback,
    SpawnHookLookup,
)
from fredica.store.rows import PIPELINE_COLUMNS, TASK_COLUMNS, Row, dumps, row_to_pipeline
from fredica.store.rows import row_to_task as to_task
from fredica.store.tx import Tx

logger = logging.getLogger(__name__)

S = TaskStatus
_REPORTABLE = (S.RUNNING, S.STALE, S.CLAIMED)


# --- claiming -------------------------------------------------------------------------------
def claim(tx: Tx, flt: ClaimFilter) -> list[Task]:
    """Claim up to `flt.limit` ready tasks for `tx.node_id` (see `TaskStore.claim`)."""
    if flt.limit <= 0 or (flt.types is not None and not flt.types):
        return []
    node_id = tx.node_id
    where = [
        "status = 'pending'",
        "unmet_deps = 0",
        tx.own_sql,
        "(retry_after IS NULL OR retry_after <= ?)",
        "excluded_nodes NOT LIKE ?",
        "(affinity_kind IS NULL OR affinity_kind = 'SOFT' OR affinity_node_id = ?)",
    ]
    params: list[Any] = [*tx.own_params, tx.now, f'%"{node_id}"%', node_id]
    if flt.types is not None:
        where.append(f"type IN ({','.join('?' for _ in flt.types)})")
        params.extend(sorted(flt.types))
    for preference, allowed in (
        ("cloud_only", flt.cloud_only_types),
        ("local_only", flt.local_only_types),
    ):
        if allowed is not None:
            marks = ",".join("?" for _ in allowed) or "NULL"
            where.append(f"(cloud_preference != ? OR type IN ({marks}))")
            params += [preference, *sorted(allowed)]
    params.append(flt.limit)
    rows = tx.q(
        f"SELECT {TASK_COLUMNS} FROM task {tx.dialect.claim_hint} WHERE {' AND '.join(where)} "
        f"ORDER BY priority DESC, created_at ASC LIMIT ?{tx.dialect.skip_locked}",
        params,
    ).fetchall()
    return [_claim_row(tx, row, flt) for row in rows]


def _claim_row(tx: Tx, row: Row, flt: ClaimFilter) -> Task:
    sets: dict[str, Any] = {
        "claimed_by": tx.node_id,
        "claimed_at": tx.now,
        "heartbeat_at": tx.now,
        "attempt": row["attempt"] + 1,
        "original_claimed_by": row["original_claimed_by"] or tx.node_id,
        "is_paused": 0,
        "cancel_requested": 0,
        "progress": 0,
        "progress_note": None,
    }
    pausable = flt.pausable.get(row["type"])
    if pausable is not None:
        sets["is_pausable"] = int(pausable)
    if flt.start:
        # one write for both steps; the timeline still shows claimed then running
        tx.transition(row, S.RUNNING, event_type="claimed", started_at=tx.now, **sets)
        tx.event(row["id"], "running")
    else:
        tx.transition(row, S.CLAIMED, **sets)
    return to_task(tx.task_row(row["id"]))


def fenced(tx: Tx, task_id: str, attempt: int) -> Row:
    """The task's row if `tx.node_id` still holds it at `attempt`; else `StaleAttempt`."""
    row = tx.task_row(task_id)
    if row["claimed_by"] != tx.node_id or row["attempt"] != attempt:
        raise errors.StaleAttempt(
            f"task {task_id}: attempt {attempt} of {tx.node_id} no longer owns it "
            f"(now attempt {row['attempt']} of {row['claimed_by']}, {row['status']})"
        )
    return row


def start(tx: Tx, task_id: str, attempt: int) -> Task:
    row = fenced(tx, task_id, attempt)
    tx.transition(row, S.RUNNING, started_at=tx.now, heartbeat_at=tx.now)
    return to_task(tx.task_row(task_id))


def release(tx: Tx, task_id: str, attempt: int, reason: str) -> Task:
    row = fenced(tx, task_id, attempt)
    tx.transition(
        row,
        S.PENDING,
        event_type="released",
        message=reason,
        claimed_by=None,
        is_paused=0,
        progress=0,
        heartbeat_at=None,
    )
    return to_task(tx.task_row(task_id))


# --- reports ----------------------------------------------------------------------------------
def heartbeat(tx: Tx, tasks: Sequence[tuple[str, int]]) -> list[HeartbeatFeedback]:
    feedback: list[HeartbeatFeedback] = []
    for task_id, attempt in tasks:
        row = tx.q(
            f"SELECT {TASK_COLUMNS} FROM task WHERE id = ?{tx.dialect.lock}", (task_id,)
        ).fetchone()
        if row is None:
            feedback.append(HeartbeatFeedback(task_id, False, None, False))
            continue
        status = TaskStatus(row["status"])
        owns = row["claimed_by"] == tx.node_id and row["attempt"] == attempt
        if owns and status == S.STALE:
            tx.transition(
                row,
                S.RUNNING,
                event_type="recovered",
                message="heartbeat resumed",
                heartbeat_at=tx.now,
                stale_at=None,
            )
            status = S.RUNNING
        elif owns and status in (S.RUNNING, S.CLAIMED):
            tx.q("UPDATE task SET heartbeat_at = ? WHERE id = ?", (tx.now, task_id))
        feedback.append(
            HeartbeatFeedback(
                task_id,
                owns and status in (S.RUNNING, S.CLAIMED),
                status,
                bool(row["cancel_requested"]),
            )
        )
    return feedback


def progress(tx: Tx, updates: Sequence[tuple[str, int, int, str | None]]) -> None:
    for task_id, attempt, pct, note in updates:
        tx.q(
            "UPDATE task SET progress = ?, progress_note = ?, updated_at = ?, "
            "change_seq = ? WHERE id = ? AND claimed_by = ? AND attempt = ? "
            "AND status IN ('running', 'stale')",
            (pct, note, tx.now, tx.seq, task_id, tx.node_id, attempt),
        )


def set_paused(tx: Tx, task_id: str, attempt: int, paused: bool, reason: str | None) -> Task:
    row = fenced(tx, task_id, attempt)
    if TaskStatus(row["status"]) not in (S.RUNNING, S.STALE):
        raise errors.IllegalTransition(f"task {task_id} is {row['status']}, not running")
    if bool(row["is_paused"]) != paused:
        tx.q(
            "UPDATE task SET is_paused = ?, updated_at = ?, change_seq = ? WHERE id = ?",
            (int(paused), tx.now, tx.seq, task_id),
        )
        tx.event(task_id, "paused" if paused else "resumed", reason)
        if row["pipeline_id"]:
            tx.touch_pipeline(row["pipeline_id"])
    return to_task(tx.task_row(task_id))


def complete_and_claim(
    tx: Tx,
    items: Sequence[CompletionItem],
    hooks: SpawnHookLookup,
    flt: ClaimFilter | None,
) -> tuple[list[Task | errors.FredicaError], list[Task]]:
    """Group commit: each completion in its own savepoint, then claim for the freed slots."""
    outcome: list[Task | errors.FredicaError] = []
    for item in items:
        try:
            with tx.savepoint():
                outcome.append(_complete_one(tx, item, hooks))
        except errors.FredicaError as exc:
            outcome.append(exc)
        except Exception as exc:
            if tx.dialect.is_driver_error(exc):
                raise  # the database failed: the whole transaction is retried or refused
            # a bug in a template hook: refuse this item only
            logger.exception("spawn hook failed", extra={"action": "spawn_hook"})
            outcome.append(errors.InvalidRequest(f"{type(exc).__name__}: {exc}"))
    claimed = claim(tx, flt) if flt is not None else []
    return outcome, claimed


def _complete_one(tx: Tx, item: CompletionItem, hooks: SpawnHookLookup) -> Task:
    row = fenced(tx, item.task_id, item.attempt)
    if TaskStatus(row["status"]) not in _REPORTABLE:
        raise errors.IllegalTransition(
            f"task {item.task_id} is {row['status']}; only running work can complete"
        )
    note_backend(tx, item.task_id, item.backend)
    tx.transition(
        row,
        S.COMPLETED,
        message=item.message,
        result=dumps(item.result),
        progress=100,
        progress_note=None,
        completed_at=tx.now,
        error=None,
        error_type=None,
        is_paused=0,
        retry_after=None,
    )
    done = to_task(tx.task_row(item.task_id))
    if row["pipeline_id"] is not None:
        _run_hook(tx, done, hooks)
    return done


def _run_hook(tx: Tx, done: Task, hooks: SpawnHookLookup) -> None:
    pipeline_id = done.pipeline_id
    prow = tx.q(
        f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE id = ?", (pipeline_id,)
    ).fetchone()
    if prow is None:
        return
    hook = hooks(prow["template"])
    if hook is None:
        return

    def siblings() -> tuple[Task, ...]:
        return tuple(
            to_task(r)
            for r in tx.q(
                f"SELECT {TASK_COLUMNS} FROM task WHERE pipeline_id = ? "
                f"ORDER BY created_at, {tx.dialect.insertion_order}",
                (pipeline_id,),
            )
        )

    pipeline = row_to_pipeline(prow)
    plan = hook(SpawnInput(done, pipeline, siblings))
    if plan is not None and not plan.empty:
        new_ids = tx.apply_plan(plan, pipeline, prow["owner_id"])
        tx.event(
            done.id,
            "spawned",
            f"{len(new_ids)} new task(s)" + (f", skipped {len(plan.skip)}" if plan.skip else ""),
        )


def fail(tx: Tx, failure: Failure) -> Task:
    row = fenced(tx, failure.task_id, failure.attempt)
    if TaskStatus(row["status"]) not in _REPORTABLE:
        raise errors.IllegalTransition(
            f"task {failure.task_id} is {row['status']}; only running work can fail"
        )
    note_backend(tx, failure.task_id, failure.backend)
    if failure.error_type is ErrorType.CANCELLED:
        tx.transition(
            row,
            S.CANCELLED,
            message=failure.error,
            error=failure.error,
            error_type=ErrorType.CANCELLED.value,
            completed_at=tx.now,
            is_paused=0,
        )
    else:
        apply_failure(tx, row, failure.error, failure.error_type, failure.retry_after_sec)
    return to_task(tx.task_row(failure.task_id))


def note_backend(tx: Tx, task_id: str, note: BackendNote | None) -> None:
    if note is None:
        return
    tx.event(task_id, "backend", note.message, at=note.chosen_at)
    tx.q("UPDATE task SET backend = ? WHERE id = ?", (note.backend, task_id))


def apply_failure(
    tx: Tx,
    row: Row,
    error: str,
    error_type: ErrorType,
    retry_after_sec: float | None,
    event_type: str | None = None,
) -> None:
    """The retry policy of the error class decides: back to pending, or failed."""
    decision = retry.decide(
        error_type=error_type,
        retry_count=row["retry_count"],
        max_retries=row["max_retries"],
        excluded_nodes=json.loads(row["excluded_nodes"]),
        node_id=row["claimed_by"] or tx.node_id,
        now=tx.now,
        retry_after_sec=retry_after_sec,
    )
    common: dict[str, Any] = {
        "error": error,
        "error_type": decision.stored_error_type,
        "excluded_nodes": dumps(decision.excluded_nodes),
        "is_paused": 0,
        "cancel_requested": 0,
    }
    if decision.status is not S.PENDING:
        tx.transition(
            row,
            S.FAILED,
            event_type=event_type or "failed",
            message=f"{decision.stored_error_type}: {error}",
            completed_at=tx.now,
            **common,
        )
        return
    affinity = Affinity.from_columns(row["affinity_kind"], row["affinity_node_id"])
    if (
        affinity is None
        and row["cache_policy"] == CachePolicy.PREFER_ORIGINAL.value
        and row["original_claimed_by"]
    ):
        affinity = Affinity.soft(row["original_claimed_by"])
    tx.transition(
        row,
        S.PENDING,
        event_type=event_type or "retry",
        message=f"{decision.stored_error_type}: {error} (retry {decision.retry_count}/"
        f"{row['max_retries']})",
        retry_count=decision.retry_count,
        retry_after=decision.retry_after,
        claimed_by=None,
        progress=0,
        heartbeat_at=None,
        affinity_kind=affinity.kind.value if affinity else None,
        affinity_node_id=affinity.node_id if affinity else None,
        **common,
    )
