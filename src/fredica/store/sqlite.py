"""The SQLite task store (WAL, one `BEGIN IMMEDIATE` transaction per operation).

State changes go through `fredica.store.tx.Tx.transition`; reports from workers are fenced by
`(claimed_by, attempt)`. This class is synchronous and is used from one thread; the engine runs
it on a dedicated thread (`fredica.store.runner`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fredica.domain import errors, retry
from fredica.domain.models import (
    CachePolicy,
    ErrorType,
    NewPipeline,
    NewTask,
    Pipeline,
    PipelineStatus,
    Task,
    TaskEvent,
    TaskStatus,
)
from fredica.domain.spawn import SpawnInput
from fredica.store import schema
from fredica.store.base import (
    BackendNote,
    CancelOutcome,
    ClaimFilter,
    CompletionItem,
    HeartbeatFeedback,
    MonitorReport,
    RecoveryReport,
    SpawnHookLookup,
    TaskStore,
)
from fredica.store.rows import (
    PIPELINE_COLUMNS,
    TASK_COLUMNS,
    connect,
    dumps,
    migrate,
    row_to_pipeline,
    row_to_task,
)
from fredica.store.tx import Tx

logger = logging.getLogger(__name__)

S = TaskStatus
_CANCELLABLE_DIRECTLY = (S.PENDING, S.CLAIMED, S.STALE, S.RECLAIMED)


class SQLiteTaskStore(TaskStore):
    """`TaskStore` on a SQLite file (see the module docstring)."""

    def __init__(self, path: Path | str, node_id: str) -> None:
        self.path = Path(path)
        self.node_id = node_id
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = connect(self.path)
        migrate(self._conn)

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _tx(self, now: float, node_id: str | None = None) -> Iterator[Tx]:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise errors.StoreError(f"could not start a transaction: {exc}") from exc
        tx = Tx(self._conn, node_id or self.node_id, now)
        try:
            yield tx
            tx.flush_pipelines()
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    @contextmanager
    def _savepoint(self) -> Iterator[None]:
        self._conn.execute("SAVEPOINT item")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK TO item")
            self._conn.execute("RELEASE item")
            raise
        self._conn.execute("RELEASE item")

    # --- app_config ---------------------------------------------------------------------------
    def get_config(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM app_config WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_config(self, key: str, value: str, now: float) -> None:
        self._conn.execute(
            "INSERT INTO app_config (key, value, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at",
            (key, value, now),
        )

    # --- creation -------------------------------------------------------------------------------
    def create_pipeline(self, spec: NewPipeline, now: float) -> tuple[Pipeline, bool]:
        with self._tx(now) as tx:
            existing = tx.q(
                f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE material_id = ? "
                "AND template = ? AND status NOT IN "
                "('completed', 'failed', 'cancelled', 'partial_failed') LIMIT 1",
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
                    self.node_id,
                    self.node_id,
                    spec.publisher_id,
                    tx.seq,
                    now,
                    now,
                ),
            )
            for task_spec in spec.tasks:
                task_id, inserted = tx.insert_task(
                    task_spec, pipeline_id, spec.material_id, self.node_id
                )
                if not inserted:
                    # Reusing another pipeline's active task would leave this pipeline's
                    # routing hooks unfired (they run for the task's own pipeline): refuse.
                    raise errors.Conflict(
                        f"an active {task_spec.type} task ({task_id}) already does this work "
                        f"for material {spec.material_id}; wait for it or cancel it"
                    )
            tx.touch_pipeline(pipeline_id)
        pipeline = self.get_pipeline(pipeline_id)
        return pipeline, False

    def add_task(self, spec: NewTask, now: float, pipeline_id: str | None = None) -> Task:
        with self._tx(now) as tx:
            if (
                pipeline_id is not None
                and tx.q("SELECT 1 FROM pipeline_instance WHERE id = ?", (pipeline_id,)).fetchone()
                is None
            ):
                raise errors.NotFound(f"pipeline {pipeline_id} not found")
            task_id, _ = tx.insert_task(spec, pipeline_id, spec.material_id, self.node_id)
        return self.get_task(task_id)

    # --- claiming -----------------------------------------------------------------------------
    def claim(self, node_id: str, flt: ClaimFilter, now: float) -> list[Task]:
        if flt.limit <= 0 or (flt.types is not None and not flt.types):
            return []
        with self._tx(now, node_id) as tx:
            claimed = self._claim_in_tx(tx, node_id, flt, now)
        return [self.get_task(t) for t in claimed]

    def _claim_in_tx(self, tx: Tx, node_id: str, flt: ClaimFilter, now: float) -> list[str]:
        if flt.limit <= 0 or (flt.types is not None and not flt.types):
            return []
        where = [
            "status = 'pending'",
            "unmet_deps = 0",
            "(retry_after IS NULL OR retry_after <= ?)",
            "(excluded_nodes = '[]' OR NOT EXISTS "
            "(SELECT 1 FROM json_each(task.excluded_nodes) WHERE value = ?))",
            "(node_affinity IS NULL OR substr(node_affinity, 1, 5) != 'HARD:' "
            "OR node_affinity = 'HARD:' || ?)",
        ]
        params: list[Any] = [now, node_id, node_id]
        if flt.types is not None:
            where.append(f"type IN ({','.join('?' for _ in flt.types)})")
            params.extend(sorted(flt.types))
        sql = (
            f"SELECT {TASK_COLUMNS} FROM task INDEXED BY task_ready WHERE {' AND '.join(where)} "
            "ORDER BY priority DESC, created_at ASC LIMIT ?"
        )
        params.append(flt.limit)
        claimed: list[str] = []
        for row in tx.q(sql, params).fetchall():
            sets: dict[str, Any] = {
                "claimed_by": node_id,
                "claimed_at": now,
                "heartbeat_at": now,
                "attempt": row["attempt"] + 1,
                "original_claimed_by": row["original_claimed_by"] or node_id,
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
                tx.transition(row, S.RUNNING, event_type="claimed", started_at=now, **sets)
                tx.event(row["id"], "running")
            else:
                tx.transition(row, S.CLAIMED, **sets)
            claimed.append(row["id"])
        return claimed

    def _fenced(self, tx: Tx, task_id: str, attempt: int, node_id: str) -> sqlite3.Row:
        row = tx.task_row(task_id)
        if row["claimed_by"] != node_id or row["attempt"] != attempt:
            raise errors.StaleAttempt(
                f"task {task_id}: attempt {attempt} of {node_id} no longer owns it "
                f"(now attempt {row['attempt']} of {row['claimed_by']}, {row['status']})"
            )
        return row

    def start(self, task_id: str, attempt: int, node_id: str, now: float) -> Task:
        with self._tx(now, node_id) as tx:
            row = self._fenced(tx, task_id, attempt, node_id)
            tx.transition(row, S.RUNNING, started_at=now, heartbeat_at=now)
        return self.get_task(task_id)

    def release(self, task_id: str, attempt: int, node_id: str, now: float, reason: str) -> Task:
        with self._tx(now, node_id) as tx:
            row = self._fenced(tx, task_id, attempt, node_id)
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
        return self.get_task(task_id)

    # --- reports from the worker ------------------------------------------------------------------
    def heartbeat(
        self, node_id: str, tasks: Sequence[tuple[str, int]], now: float
    ) -> list[HeartbeatFeedback]:
        feedback: list[HeartbeatFeedback] = []
        with self._tx(now, node_id) as tx:
            for task_id, attempt in tasks:
                row = tx.q(f"SELECT {TASK_COLUMNS} FROM task WHERE id = ?", (task_id,)).fetchone()
                if row is None:
                    feedback.append(HeartbeatFeedback(task_id, False, None, False))
                    continue
                status = TaskStatus(row["status"])
                owns = row["claimed_by"] == node_id and row["attempt"] == attempt
                if owns and status == S.STALE:
                    tx.transition(
                        row,
                        S.RUNNING,
                        event_type="recovered",
                        message="heartbeat resumed",
                        heartbeat_at=now,
                        stale_at=None,
                    )
                    status = S.RUNNING
                elif owns and status in (S.RUNNING, S.CLAIMED):
                    tx.q(
                        "UPDATE task SET heartbeat_at = ? WHERE id = ?",
                        (now, task_id),
                    )
                feedback.append(
                    HeartbeatFeedback(
                        task_id,
                        owns and status in (S.RUNNING, S.CLAIMED),
                        status,
                        bool(row["cancel_requested"]),
                    )
                )
        return feedback

    def progress(
        self,
        updates: Sequence[tuple[str, int, int, str | None]],
        node_id: str,
        now: float,
    ) -> None:
        with self._tx(now, node_id) as tx:
            for task_id, attempt, pct, note in updates:
                tx.q(
                    "UPDATE task SET progress = ?, progress_note = ?, updated_at = ?, "
                    "change_seq = ? WHERE id = ? AND claimed_by = ? AND attempt = ? "
                    "AND status IN ('running', 'stale')",
                    (pct, note, now, tx.seq, task_id, node_id, attempt),
                )

    def set_paused(
        self, task_id: str, attempt: int, node_id: str, paused: bool, reason: str | None, now: float
    ) -> Task:
        with self._tx(now, node_id) as tx:
            row = self._fenced(tx, task_id, attempt, node_id)
            if TaskStatus(row["status"]) not in (S.RUNNING, S.STALE):
                raise errors.IllegalTransition(f"task {task_id} is {row['status']}, not running")
            if bool(row["is_paused"]) != paused:
                tx.q(
                    "UPDATE task SET is_paused = ?, updated_at = ?, change_seq = ? WHERE id = ?",
                    (int(paused), now, tx.seq, task_id),
                )
                tx.event(task_id, "paused" if paused else "resumed", reason)
                if row["pipeline_id"]:
                    tx.touch_pipeline(row["pipeline_id"])
        return self.get_task(task_id)

    def record_event(
        self, task_id: str, node_id: str, event_type: str, message: str | None, now: float
    ) -> None:
        with self._tx(now, node_id) as tx:
            tx.event(task_id, event_type, message)

    def complete_many(
        self, items: Sequence[CompletionItem], node_id: str, now: float, hooks: SpawnHookLookup
    ) -> list[Task | errors.FredicaError]:
        """Group commit: each item in its own savepoint, all in one transaction."""
        return self.complete_and_claim(items, node_id, now, hooks, None)[0]

    def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        node_id: str,
        now: float,
        hooks: SpawnHookLookup,
        claim: ClaimFilter | None,
    ) -> tuple[list[Task | errors.FredicaError], list[Task]]:
        """Group commit, then claim work for the slots it frees, in the same transaction."""
        outcome: list[str | errors.FredicaError] = []
        claimed: list[str] = []
        with self._tx(now, node_id) as tx:
            for item in items:
                try:
                    with self._savepoint():
                        self._complete_one(tx, item, node_id, hooks)
                except errors.FredicaError as exc:
                    outcome.append(exc)
                except Exception as exc:  # a bug in a template hook: refuse this item only
                    logger.exception("spawn hook failed", extra={"action": "spawn_hook"})
                    outcome.append(errors.InvalidRequest(f"{type(exc).__name__}: {exc}"))
                else:
                    outcome.append(item.task_id)
            if claim is not None:
                claimed = self._claim_in_tx(tx, node_id, claim, now)
        done = [self.get_task(o) if isinstance(o, str) else o for o in outcome]
        return done, [self.get_task(t) for t in claimed]

    def _complete_one(
        self, tx: Tx, item: CompletionItem, node_id: str, hooks: SpawnHookLookup
    ) -> None:
        row = self._fenced(tx, item.task_id, item.attempt, node_id)
        if TaskStatus(row["status"]) not in (S.RUNNING, S.STALE, S.CLAIMED):
            raise errors.IllegalTransition(
                f"task {item.task_id} is {row['status']}; only running work can complete"
            )
        self._note_backend(tx, item.task_id, item.backend)
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
        if row["pipeline_id"] is None:
            return
        prow = tx.q(
            f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE id = ?", (row["pipeline_id"],)
        ).fetchone()
        if prow is None:
            return
        hook = hooks(prow["template"])
        if hook is None:
            return
        pipeline_id = row["pipeline_id"]

        def siblings() -> tuple[Task, ...]:
            return tuple(
                row_to_task(r)
                for r in tx.q(
                    f"SELECT {TASK_COLUMNS} FROM task WHERE pipeline_id = ? "
                    "ORDER BY created_at, rowid",
                    (pipeline_id,),
                )
            )

        done = row_to_task(tx.task_row(item.task_id))
        plan = hook(SpawnInput(done, row_to_pipeline(prow), siblings))
        if plan is not None and not plan.empty:
            new_ids = tx.apply_plan(plan, row_to_pipeline(prow), prow["owner_id"])
            tx.event(
                item.task_id,
                "spawned",
                f"{len(new_ids)} new task(s)"
                + (f", skipped {len(plan.skip)}" if plan.skip else ""),
            )

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
        with self._tx(now, node_id) as tx:
            row = self._fenced(tx, task_id, attempt, node_id)
            if TaskStatus(row["status"]) not in (S.RUNNING, S.STALE, S.CLAIMED):
                raise errors.IllegalTransition(
                    f"task {task_id} is {row['status']}; only running work can fail"
                )
            self._note_backend(tx, task_id, backend)
            if error_type is ErrorType.CANCELLED:
                tx.transition(
                    row,
                    S.CANCELLED,
                    message=error,
                    error=error,
                    error_type=ErrorType.CANCELLED.value,
                    completed_at=now,
                    is_paused=0,
                )
            else:
                self._apply_failure(tx, row, error, error_type, retry_after_sec)
        return self.get_task(task_id)

    @staticmethod
    def _note_backend(tx: Tx, task_id: str, note: BackendNote | None) -> None:
        if note is None:
            return
        tx.event(task_id, "backend", note.message, at=note.chosen_at)
        tx.q("UPDATE task SET backend = ? WHERE id = ?", (note.backend, task_id))

    def _apply_failure(
        self,
        tx: Tx,
        row: sqlite3.Row,
        error: str,
        error_type: ErrorType,
        retry_after_sec: float | None,
        event_type: str | None = None,
    ) -> None:
        decision = retry.decide(
            error_type=error_type,
            retry_count=row["retry_count"],
            max_retries=row["max_retries"],
            excluded_nodes=json.loads(row["excluded_nodes"]),
            node_id=tx.node_id,
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
        if decision.status is S.PENDING:
            affinity = row["node_affinity"]
            if row["cache_policy"] == CachePolicy.PREFER_ORIGINAL.value and not affinity:
                affinity = f"SOFT:{row['original_claimed_by']}"
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
                node_affinity=affinity,
                **common,
            )
        else:
            tx.transition(
                row,
                S.FAILED,
                event_type=event_type or "failed",
                message=f"{decision.stored_error_type}: {error}",
                completed_at=tx.now,
                **common,
            )

    # --- control --------------------------------------------------------------------------------
    @staticmethod
    def _cancel_row(tx: Tx, row: sqlite3.Row, reason: str) -> CancelOutcome:
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

    def cancel_task(
        self, task_id: str, now: float, reason: str = "cancelled by user"
    ) -> CancelOutcome:
        with self._tx(now) as tx:
            row = tx.task_row(task_id)
            status = TaskStatus(row["status"])
            if status.is_terminal:
                raise errors.IllegalTransition(f"task {task_id} is already {status.value}")
            return self._cancel_row(tx, row, reason)

    def cancel_pipeline(
        self, pipeline_id: str, now: float, reason: str = "pipeline cancelled"
    ) -> list[CancelOutcome]:
        outcomes: list[CancelOutcome] = []
        with self._tx(now) as tx:
            prow = tx.q(
                "SELECT status FROM pipeline_instance WHERE id = ?", (pipeline_id,)
            ).fetchone()
            if prow is None:
                raise errors.NotFound(f"pipeline {pipeline_id} not found")
            if PipelineStatus(prow["status"]).is_terminal:
                raise errors.IllegalTransition(
                    f"pipeline {pipeline_id} is already {prow['status']}"
                )
            tx.q(
                "UPDATE pipeline_instance SET cancel_requested = 1, change_seq = ? WHERE id = ?",
                (tx.seq, pipeline_id),
            )
            tx.touch_pipeline(pipeline_id)
            ids = [
                r["id"]
                for r in tx.q(
                    f"SELECT id FROM task WHERE pipeline_id = ? AND status IN "
                    f"{schema.ACTIVE_SQL} ORDER BY created_at DESC",
                    (pipeline_id,),
                )
            ]
            for task_id in ids:
                row = tx.task_row(task_id)  # an earlier cascade may have changed it
                if TaskStatus(row["status"]).is_terminal:
                    continue
                outcome = self._cancel_row(tx, row, reason)
                if not outcome.cancelled:
                    outcomes.append(outcome)
        return outcomes

    def retry_task(self, task_id: str, now: float) -> Task:
        with self._tx(now) as tx:
            row = tx.task_row(task_id)
            status = TaskStatus(row["status"])
            if status not in (S.FAILED, S.CANCELLED):
                raise errors.IllegalTransition(
                    f"task {task_id} is {status.value}; "
                    "only failed or cancelled tasks can be retried"
                )
            if row["pipeline_id"]:
                tx.q(
                    "UPDATE pipeline_instance SET cancel_requested = 0 WHERE id = ?",
                    (row["pipeline_id"],),
                )
            tx.transition(
                row,
                S.PENDING,
                event_type="retried",
                message="manual retry",
                retry_count=0,
                retry_after=None,
                error=None,
                error_type=None,
                completed_at=None,
                claimed_by=None,
                progress=0,
                cancel_requested=0,
            )
        return self.get_task(task_id)

    def skip_task(self, task_id: str, now: float, reason: str = "skipped by user") -> Task:
        with self._tx(now) as tx:
            row = tx.task_row(task_id)
            status = TaskStatus(row["status"])
            if status not in (S.PENDING, S.FAILED, S.CANCELLED):
                raise errors.IllegalTransition(
                    f"task {task_id} is {status.value}; only pending, failed or cancelled "
                    "tasks can be skipped"
                )
            tx.transition(
                row, S.SKIPPED, message=reason, completed_at=now, claimed_by=None, error=None
            )
        return self.get_task(task_id)

    # --- liveness (the owner's monitor) ----------------------------------------------------------
    def monitor(
        self, now: float, stale_after: float, reclaim_after: float, claim_timeout: float
    ) -> MonitorReport:
        stale: list[str] = []
        reclaimed: list[str] = []
        released: list[str] = []
        failed: list[Task] = []
        with self._tx(now) as tx:
            for row in tx.q(
                f"SELECT {TASK_COLUMNS} FROM task WHERE status = 'running' AND heartbeat_at < ?",
                (now - stale_after,),
            ).fetchall():
                tx.transition(
                    row,
                    S.STALE,
                    message=f"no heartbeat for {now - row['heartbeat_at']:.1f}s",
                    stale_at=now,
                )
                stale.append(row["id"])
            for row in tx.q(
                f"SELECT {TASK_COLUMNS} FROM task WHERE status = 'stale' AND heartbeat_at < ?",
                (now - reclaim_after,),
            ).fetchall():
                tx.transition(
                    row,
                    S.RECLAIMED,
                    message=f"no heartbeat for {now - row['heartbeat_at']:.1f}s; reclaimed",
                    reclaimed_at=now,
                )
                self._apply_failure(
                    tx,
                    tx.task_row(row["id"]),
                    f"worker {row['claimed_by']} stopped sending heartbeats",
                    ErrorType.TRANSIENT,
                    None,
                    event_type="requeued",
                )
                reclaimed.append(row["id"])
                after = row_to_task(tx.task_row(row["id"]))
                if after.status is S.FAILED:
                    failed.append(after)
            for row in tx.q(
                f"SELECT {TASK_COLUMNS} FROM task WHERE status = 'claimed' AND claimed_at < ?",
                (now - claim_timeout,),
            ).fetchall():
                tx.transition(
                    row,
                    S.PENDING,
                    event_type="released",
                    message="claimed but never started",
                    claimed_by=None,
                )
                released.append(row["id"])
        return MonitorReport(stale, reclaimed, released, failed)

    # --- start-up recovery (seed 000, five steps; DESIGN §4.6) --------------------------------
    def recover_startup(self, node_id: str, now: float) -> RecoveryReport:
        report = RecoveryReport()
        with self._tx(now, node_id) as tx:
            # 1. snapshot every non-terminal task this node was working on
            snapshot = tx.q(
                f"SELECT {TASK_COLUMNS} FROM task WHERE claimed_by = ? "
                "AND status IN ('claimed', 'running', 'stale')",
                (node_id,),
            ).fetchall()
            report.snapshot = [row_to_task(r) for r in snapshot]
            # 2. reset zombies: claimed -> pending; running/stale -> TRANSIENT failure
            for row in snapshot:
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
                    self._apply_failure(
                        tx, row, "interrupted by restart", ErrorType.TRANSIENT, None
                    )
                    action = "interrupted"
                after = row_to_task(tx.task_row(row["id"]))
                if after.status is S.FAILED:
                    report.failed.append(after)
                elif action == "interrupted":
                    report.requeued_after_interrupt += 1
                else:
                    report.requeued += 1
                # 3. restart log
                tx.q(
                    "INSERT INTO restart_task_log (restarted_at, node_id, task_id, pipeline_id, "
                    "task_type, previous_status, new_status, action, message) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        now,
                        node_id,
                        row["id"],
                        row["pipeline_id"],
                        row["type"],
                        prev,
                        after.status.value,
                        action,
                        after.error,
                    ),
                )
            # 4. orphans: active tasks without a pipeline
            for row in tx.q(
                f"SELECT {TASK_COLUMNS} FROM task WHERE status IN {schema.ACTIVE_SQL} AND "
                "(pipeline_id IS NULL OR pipeline_id NOT IN (SELECT id FROM pipeline_instance))",
            ).fetchall():
                tx.transition(
                    row,
                    S.FAILED,
                    event_type="orphaned",
                    message="no pipeline owns this task",
                    error="orphaned: no pipeline owns this task",
                    error_type=ErrorType.PERMANENT.value,
                    completed_at=now,
                    claimed_by=row["claimed_by"],
                )
                report.orphans += 1
                tx.q(
                    "INSERT INTO restart_task_log (restarted_at, node_id, task_id, pipeline_id, "
                    "task_type, previous_status, new_status, action, message) "
                    "VALUES (?, ?, ?, ?, ?, ?, 'failed', 'orphaned', ?)",
                    (
                        now,
                        node_id,
                        row["id"],
                        row["pipeline_id"],
                        row["type"],
                        row["status"],
                        "no pipeline owns this task",
                    ),
                )
            # 5. reconcile every non-terminal pipeline from its task rows
            report.pipelines_reconciled = self._reconcile(tx)
        return report

    def _reconcile(self, tx: Tx) -> int:
        ids = [
            r["id"]
            for r in tx.q(
                "SELECT id FROM pipeline_instance WHERE status NOT IN "
                "('completed', 'failed', 'cancelled', 'partial_failed')"
            )
        ]
        for pipeline_id in ids:
            tx.recount(pipeline_id)
        return len(ids)

    def reconcile_non_terminal(self, now: float) -> int:
        with self._tx(now) as tx:
            return self._reconcile(tx)

    def recalculate(self, pipeline_id: str, now: float) -> Pipeline:
        with self._tx(now) as tx:
            tx.recount(pipeline_id)
        return self.get_pipeline(pipeline_id)

    # --- nodes ----------------------------------------------------------------------------------
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
        self._conn.execute(
            "INSERT INTO worker_node (id, hostname, capabilities, status, max_workers, "
            "last_seen_at, address, info) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET hostname = excluded.hostname, "
            "capabilities = excluded.capabilities, status = excluded.status, "
            "max_workers = excluded.max_workers, last_seen_at = excluded.last_seen_at, "
            "address = excluded.address, info = excluded.info",
            (
                node_id,
                hostname,
                dumps(capabilities),
                status,
                max_workers,
                now,
                address,
                dumps(info),
            ),
        )

    def list_nodes(self) -> list[dict[str, Any]]:
        out = []
        for r in self._conn.execute("SELECT * FROM worker_node ORDER BY id"):
            d = dict(r)
            d["capabilities"] = json.loads(d["capabilities"])
            d["info"] = json.loads(d["info"])
            out.append(d)
        return out

    # --- reads ----------------------------------------------------------------------------------
    def get_task(self, task_id: str) -> Task:
        row = self._conn.execute(
            f"SELECT {TASK_COLUMNS} FROM task WHERE id = ?", (task_id,)
        ).fetchone()
        if row is None:
            raise errors.NotFound(f"task {task_id} not found")
        return row_to_task(row)

    def get_pipeline(self, pipeline_id: str) -> Pipeline:
        row = self._conn.execute(
            f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE id = ?", (pipeline_id,)
        ).fetchone()
        if row is None:
            raise errors.NotFound(f"pipeline {pipeline_id} not found")
        return row_to_pipeline(row)

    def list_pipelines(
        self, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[Pipeline]:
        sql = f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance"
        params: list[Any] = []
        if status:
            sql += " WHERE status = ?"
            params.append(status)
        sql += " ORDER BY created_at DESC LIMIT ? OFFSET ?"
        params += [limit, offset]
        return [row_to_pipeline(r) for r in self._conn.execute(sql, params)]

    def list_tasks(
        self,
        pipeline_id: str | None = None,
        status: Sequence[str] | None = None,
        task_type: str | None = None,
        limit: int = 500,
        offset: int = 0,
    ) -> list[Task]:
        where: list[str] = []
        params: list[Any] = []
        if pipeline_id:
            where.append("pipeline_id = ?")
            params.append(pipeline_id)
        if status:
            where.append(f"status IN ({','.join('?' for _ in status)})")
            params.extend(status)
        if task_type:
            where.append("type = ?")
            params.append(task_type)
        sql = f"SELECT {TASK_COLUMNS} FROM task"
        if where:
            sql += " WHERE " + " AND ".join(where)
        order = "created_at ASC, rowid ASC" if pipeline_id else "created_at DESC, rowid DESC"
        sql += f" ORDER BY {order} LIMIT ? OFFSET ?"
        params += [limit, offset]
        return [row_to_task(r) for r in self._conn.execute(sql, params)]

    def task_events(self, task_id: str) -> list[TaskEvent]:
        return [
            TaskEvent(
                r["id"], r["task_id"], r["node_id"], r["event_type"], r["message"], r["occurred_at"]
            )
            for r in self._conn.execute(
                "SELECT * FROM task_event WHERE task_id = ? ORDER BY occurred_at, rowid",
                (task_id,),
            )
        ]

    def count_created_since(self, publisher_id: str, since: float) -> int:
        """Tasks a publisher created after `since` (daily quotas)."""
        row = self._conn.execute(
            "SELECT COUNT(*) FROM task WHERE publisher_id = ? AND created_at > ?",
            (publisher_id, since),
        ).fetchone()
        return int(row[0])

    def count_by_status(self) -> dict[str, int]:
        counts = {s.value: 0 for s in TaskStatus}
        for r in self._conn.execute("SELECT status, COUNT(*) AS n FROM task GROUP BY status"):
            counts[r["status"]] = r["n"]
        return counts

    def restart_log(self, limit: int = 100) -> list[dict[str, Any]]:
        return [
            dict(r)
            for r in self._conn.execute(
                "SELECT * FROM restart_task_log ORDER BY id DESC LIMIT ?", (limit,)
            )
        ]

    def changes_since(self, seq: int, limit: int = 1000) -> tuple[list[Task], list[Pipeline], int]:
        tasks = [
            row_to_task(r)
            for r in self._conn.execute(
                f"SELECT {TASK_COLUMNS} FROM task WHERE change_seq > ? ORDER BY change_seq LIMIT ?",
                (seq, limit),
            )
        ]
        pipelines = [
            row_to_pipeline(r)
            for r in self._conn.execute(
                f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE change_seq > ? "
                "ORDER BY change_seq LIMIT ?",
                (seq, limit),
            )
        ]
        row = self._conn.execute("SELECT seq FROM change_counter WHERE id = 1").fetchone()
        return tasks, pipelines, int(row["seq"])

    def local_running(self, node_id: str) -> list[Task]:
        return [
            row_to_task(r)
            for r in self._conn.execute(
                f"SELECT {TASK_COLUMNS} FROM task WHERE claimed_by = ? "
                "AND status IN ('claimed', 'running', 'stale')",
                (node_id,),
            )
        ]
