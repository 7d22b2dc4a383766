"""Claims and worker reports, as functions of one transaction (`Tx`).

Every report is fenced by `(claimed_by, attempt)`: a zombie of an earlier attempt, even on the
same node, cannot overwrite a newer state (DESIGN §4.1).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from fredica.domain import errors, retry
from fredica.domain.models import Affinity, CachePolicy, ErrorType, Task, TaskStatus
from fredica.domain.spawn import SpawnInput
from fredica.store.base import (
    BackendNote,
    ClaimFilter,
    Completed,
    CompletionItem,
    Failure,
    HeartbeatFeedback,
    SpawnHookLookup,
    StartItem,
)
from fredica.store.rows import (
    PIPELINE_COLUMNS,
    TASK_COLUMNS,
    TASK_FIELDS,
    Row,
    dumps,
    row_to_pipeline,
    task_from_values,
)
from fredica.store.rows import row_to_task as to_task
from fredica.store.tx import Tx

logger = logging.getLogger(__name__)

S = TaskStatus
_REPORTABLE = (S.RUNNING, S.STALE, S.CLAIMED)


# --- claiming -------------------------------------------------------------------------------
ClaimedRows = list[tuple[Any, ...]]  # claimed task rows in `TASK_COLUMNS` order, claim order

_PRIORITY, _CREATED_AT, _PIPELINE, _ATTEMPT = (
    TASK_FIELDS.index("priority"),
    TASK_FIELDS.index("created_at"),
    TASK_FIELDS.index("pipeline_id"),
    TASK_FIELDS.index("attempt"),
)


def tasks_of(rows: ClaimedRows) -> list[Task]:
    """The tasks of claimed rows. The stores build them after the transaction, on the
    caller's thread: the store's thread, which every write waits for, only writes."""
    return list(map(task_from_values, rows))


def claim_rows(tx: Tx, flt: ClaimFilter) -> ClaimedRows:
    """Claim up to `flt.limit` ready tasks for `tx.node_id` (see `TaskStore.claim`), then up
    to `flt.ahead` more of `flt.ahead_types`, claimed but not started.

    Each part is one set-based `UPDATE … WHERE id IN (ready scan) RETURNING`: the claimed rows
    come back as written, so nothing is read twice. A claim that starts the tasks at once
    writes one event for both steps (`claimed`, "started at once")."""
    claimed = _claim_part(tx, flt, flt.limit, flt.types, flt.start)
    if flt.ahead > 0:
        ahead_types = flt.ahead_types if flt.types is None else flt.ahead_types & flt.types
        claimed += _claim_part(tx, flt, flt.ahead, ahead_types, False)
    return claimed


def _ready_where(
    tx: Tx, flt: ClaimFilter, types: frozenset[str] | None
) -> tuple[list[str], list[Any]]:
    """The predicates (and parameters) of the ready tasks `flt` lets this node claim."""
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
    if types is not None:
        where.append(f"type IN ({','.join('?' for _ in types)})")
        params.extend(sorted(types))
    if flt.deferred_types:
        marks = ",".join("?" for _ in flt.deferred_types)
        starved = "" if flt.defer_wait is None else " OR ready_since <= ?"
        where.append(f"(type NOT IN ({marks}) OR affinity_node_id = ?{starved})")
        params += [*sorted(flt.deferred_types), node_id]
        if flt.defer_wait is not None:
            params.append(tx.now - flt.defer_wait)
    if flt.soft_elsewhere:
        marks = ",".join("?" for _ in flt.soft_elsewhere)
        where.append(
            f"(affinity_kind IS NULL OR affinity_kind <> 'SOFT' OR affinity_node_id NOT IN "
            f"({marks}) OR updated_at <= ?)"
        )
        params += [*sorted(flt.soft_elsewhere), tx.now - flt.soft_wait]
    for preference, allowed in (
        ("cloud_only", flt.cloud_only_types),
        ("local_only", flt.local_only_types),
    ):
        if allowed is not None:
            marks = ",".join("?" for _ in allowed) or "NULL"
            where.append(f"(cloud_preference != ? OR type IN ({marks}))")
            params += [preference, *sorted(allowed)]
    return where, params


def _claim_part(
    tx: Tx, flt: ClaimFilter, limit: int, types: frozenset[str] | None, start: bool
) -> ClaimedRows:
    if limit <= 0 or (types is not None and not types):
        return []
    node_id = tx.node_id
    where, params = _ready_where(tx, flt, types)
    params.append(limit)
    ids = [
        r[0]
        for r in tx.rows_of(
            f"SELECT id FROM task {tx.dialect.claim_hint} WHERE {' AND '.join(where)} "
            f"ORDER BY priority DESC, created_at ASC LIMIT ?{tx.dialect.skip_locked}",
            params,
            ("id",),
        )
    ]
    if not ids:
        return []
    status = S.RUNNING if start else S.CLAIMED
    sets = (
        "status = ?, claimed_by = ?, claimed_at = ?, heartbeat_at = ?, attempt = attempt + 1, "
        "original_claimed_by = COALESCE(original_claimed_by, ?), is_paused = 0, "
        "cancel_requested = 0, progress = 0, progress_note = NULL, updated_at = ?, change_seq = ?"
    )
    set_params: list[Any] = [status.value, node_id, tx.now, tx.now, node_id, tx.now, tx.seq]
    if start:
        sets += ", started_at = ?"
        set_params.append(tx.now)
    if flt.pausable:
        cases = " ".join("WHEN ? THEN ?" for _ in flt.pausable)
        sets += f", is_pausable = CASE type {cases} ELSE is_pausable END"
        for task_type, pausable in sorted(flt.pausable.items()):
            set_params += [task_type, int(pausable)]
    rows = tx.tuples(
        f"UPDATE task SET {sets} WHERE id IN ({','.join('?' for _ in ids)}) "
        f"RETURNING {TASK_COLUMNS}, ord",
        [*set_params, *ids],
    )
    if not rows:
        return []
    rows.sort(key=lambda r: (-r[_PRIORITY], r[_CREATED_AT]))
    message = "started at once" if start else None
    tx.events_of(
        [
            (
                r[0],
                r[-1] or 0,
                "claimed",
                f"{message} (attempt {r[_ATTEMPT]})" if message else None,
                None,
            )
            for r in rows
        ]
    )
    for pipeline_id, n in Counter(r[_PIPELINE] for r in rows).items():
        tx.bump(pipeline_id, S.PENDING, status, n)
    return rows


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
            feedback.append(HeartbeatFeedback(task_id, False, None, False, attempt))
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
                attempt,
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
    starts: Sequence[StartItem] = (),
) -> tuple[list[Completed | errors.FredicaError], ClaimedRows]:
    """Group commit of starts and completions, then a claim for the freed slots, in one
    transaction.

    The rows are read once (locked), each report is checked against its fence, and the
    completions of pipelines without a spawn hook are written set-based; a completion whose
    pipeline has a hook runs it in its own savepoint, so a failing hook refuses that item only.
    """
    completing = {item.task_id for item in items}
    starts = [s for s in starts if s.task_id not in completing]  # completion covers the start
    current = _fences(tx, [*completing, *(s.task_id for s in starts)])
    _start_many(tx, starts, current)
    hooked = _hooked_pipelines(tx, [current[i] for i in completing if i in current], hooks)
    outcome: list[Completed | errors.FredicaError | None] = []
    plain: list[tuple[CompletionItem, _Fence]] = []
    seen: set[str] = set()
    for item in items:
        fence = None if item.task_id in seen else current.get(item.task_id)
        seen.add(item.task_id)
        try:
            fence = _reportable(tx, item.task_id, item.attempt, fence, "complete")
        except errors.FredicaError as exc:
            outcome.append(exc)
            continue
        if fence.pipeline_id in hooked:
            outcome.append(_complete_hooked(tx, item, hooks))
        else:
            plain.append((item, fence))
            outcome.append(None)
    _complete_plain(tx, plain)
    done = iter(Completed(item.task_id, item.attempt, f.pipeline_id) for item, f in plain)
    results = [o if o is not None else next(done) for o in outcome]
    name_pipelines(
        tx,
        [
            (r.pipeline_id, item.result)
            for item, r in zip(items, results, strict=True)
            if isinstance(r, Completed) and r.pipeline_id is not None
        ],
    )
    claimed = claim_rows(tx, flt) if flt is not None else []
    return results, claimed


MATERIAL_TITLE = "material_title"
"""The result key naming a pipeline's material (the downloader's title of a URL source)."""


def name_pipelines(tx: Tx, completed: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """A completed task whose result carries `material_title` gives its pipeline that
    `title` param (once: a title the user gave, or an earlier one, is kept). The pipeline's
    change sequence moves with it, so replicas carry the title too."""
    for pipeline_id, result in completed:
        title = result.get(MATERIAL_TITLE) if isinstance(result, dict) else None
        if not isinstance(title, str) or not title.strip():
            continue
        row = tx.q("SELECT params FROM pipeline_instance WHERE id = ?", (pipeline_id,)).fetchone()
        if row is None:
            continue
        params = json.loads(row["params"]) if row["params"] else {}
        if isinstance(params.get("title"), str) and params["title"].strip():
            continue
        params["title"] = title.strip()[:500]
        tx.q(
            "UPDATE pipeline_instance SET params = ? WHERE id = ?",
            (json.dumps(params), pipeline_id),
        )
        tx.touch_pipeline(pipeline_id)


class _Fence(NamedTuple):
    """What a report is checked against (and what its counters need)."""

    id: str
    status: str
    pipeline_id: str | None
    claimed_by: str | None
    attempt: int
    ord: int | None


def _fences(tx: Tx, task_ids: Sequence[str]) -> dict[str, _Fence]:
    """The fences of `task_ids`, their rows locked for this transaction, by id."""
    unique = list(dict.fromkeys(task_ids))
    if not unique:
        return {}
    marks = ",".join("?" for _ in unique)
    rows = tx.rows_of(
        "SELECT id, status, pipeline_id, claimed_by, attempt, ord FROM task "
        f"WHERE id IN ({marks}){tx.dialect.lock}",
        unique,
        _Fence._fields,
    )
    return {r[0]: _Fence(*r) for r in rows}


def _start_many(tx: Tx, starts: Sequence[StartItem], current: dict[str, _Fence]) -> None:
    """claimed -> running for the starts that still hold their claim (set-based)."""
    ok: list[tuple[StartItem, _Fence]] = []
    for item in starts:
        fence = current.get(item.task_id)
        if (
            fence is not None
            and fence.claimed_by == tx.node_id
            and fence.attempt == item.attempt
            and fence.status == S.CLAIMED.value
        ):
            ok.append((item, fence))
    if not ok:
        return
    tx.qmany(
        "UPDATE task SET status = 'running', started_at = ?, heartbeat_at = ?, updated_at = ?, "
        "change_seq = ? WHERE id = ? AND attempt = ? AND status = 'claimed'",
        [(i.started_at, tx.now, tx.now, tx.seq, i.task_id, i.attempt) for i, _ in ok],
    )
    tx.events_of([(i.task_id, f.ord or 0, "running", None, i.started_at) for i, f in ok])
    for _, fence in ok:
        tx.bump(fence.pipeline_id, S.CLAIMED, S.RUNNING)


def _hooked_pipelines(tx: Tx, fences: Iterable[_Fence], hooks: SpawnHookLookup) -> set[str]:
    """The pipelines among `fences` whose template has a spawn hook."""
    pipelines = sorted({f.pipeline_id for f in fences if f.pipeline_id is not None})
    if not pipelines:
        return set()
    marks = ",".join("?" for _ in pipelines)
    found = tx.tuples(
        f"SELECT id, template FROM pipeline_instance WHERE id IN ({marks})", pipelines
    )
    return {pid for pid, template in found if hooks(template) is not None}


def _reportable(tx: Tx, task_id: str, attempt: int, fence: _Fence | None, verb: str) -> _Fence:
    """`fence` if `tx.node_id` still holds the task at `attempt` and it is running work."""
    if fence is None:
        raise errors.NotFound(f"task {task_id} not found")
    if fence.claimed_by != tx.node_id or fence.attempt != attempt:
        raise errors.StaleAttempt(
            f"task {task_id}: attempt {attempt} of {tx.node_id} no longer owns it "
            f"(now attempt {fence.attempt} of {fence.claimed_by}, {fence.status})"
        )
    if S(fence.status) not in _REPORTABLE:
        raise errors.IllegalTransition(
            f"task {task_id} is {fence.status}; only running work can {verb}"
        )
    return fence


def _complete_hooked(
    tx: Tx, item: CompletionItem, hooks: SpawnHookLookup
) -> Completed | errors.FredicaError:
    try:
        with tx.savepoint():
            done = _complete_one(tx, item, hooks)
            return Completed(done.id, done.attempt, done.pipeline_id)
    except errors.FredicaError as exc:
        return exc
    except Exception as exc:
        if tx.dialect.is_driver_error(exc):
            raise  # the database failed: the whole transaction is retried or refused
        # a bug in a template hook: refuse this item only
        logger.exception("spawn hook failed", extra={"action": "spawn_hook"})
        return errors.InvalidRequest(f"{type(exc).__name__}: {exc}")


def _complete_plain(tx: Tx, plain: Sequence[tuple[CompletionItem, _Fence]]) -> None:
    """Complete checked rows set-based: one statement, the events, the counters, the
    dependents."""
    if not plain:
        return
    now, seq = tx.now, tx.seq
    # one statement for the batch: the reports as a VALUES list joined to their rows
    tx.values(
        "WITH v (id, attempt, result, backend, started_at) AS (",
        "(CAST(? AS TEXT), CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS TEXT), "
        "CAST(? AS DOUBLE PRECISION))",
        [
            (
                item.task_id,
                item.attempt,
                dumps(item.result),
                item.backend.backend if item.backend else None,
                item.started_at,
            )
            for item, _ in plain
        ],
        ") UPDATE task SET status = 'completed', result = v.result, progress = 100, "
        "progress_note = NULL, completed_at = ?, error = NULL, error_type = NULL, "
        "is_paused = 0, retry_after = NULL, updated_at = ?, change_seq = ?, "
        "backend = COALESCE(v.backend, task.backend), "
        "started_at = COALESCE(v.started_at, task.started_at) "
        "FROM v WHERE task.id = v.id AND task.attempt = v.attempt AND task.claimed_by = ?",
        (now, now, seq, tx.node_id),
    )
    tx.events_of(
        [(i.task_id, f.ord or 0, "completed", _completion_message(i), None) for i, f in plain]
    )
    moved: Counter[tuple[str | None, str]] = Counter(
        (fence.pipeline_id, fence.status) for _, fence in plain
    )
    for (pipeline_id, status), n in moved.items():
        tx.bump(pipeline_id, S(status), S.COMPLETED, n)
    tx.parents_satisfied([item.task_id for item, _ in plain])


def _completion_message(item: CompletionItem) -> str | None:
    """The completion event names the backend that ran (one event for both facts)."""
    if item.backend is None:
        return item.message
    ran = f"backend {item.backend.message}"
    return f"{item.message}; {ran}" if item.message else ran


def _complete_one(tx: Tx, item: CompletionItem, hooks: SpawnHookLookup) -> Task:
    row = fenced(tx, item.task_id, item.attempt)
    if TaskStatus(row["status"]) not in _REPORTABLE:
        raise errors.IllegalTransition(
            f"task {item.task_id} is {row['status']}; only running work can complete"
        )
    sets: dict[str, Any] = {} if item.started_at is None else {"started_at": item.started_at}
    if item.backend is not None:
        sets["backend"] = item.backend.backend
    tx.transition(
        row,
        S.COMPLETED,
        message=_completion_message(item),
        result=dumps(item.result),
        progress=100,
        progress_note=None,
        completed_at=tx.now,
        error=None,
        error_type=None,
        is_paused=0,
        retry_after=None,
        **sets,
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
    if failure.started_at is not None and row["started_at"] is None:
        tx.q("UPDATE task SET started_at = ? WHERE id = ?", (failure.started_at, failure.task_id))
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
