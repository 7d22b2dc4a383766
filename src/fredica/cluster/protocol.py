"""The store contract's values as JSON, for the cluster endpoints (DESIGN §6): what a claimer
sends an owner and what the owner answers. Both sides use these functions, so a field added to
a value is added here once. Decoding raises `InvalidRequest` naming what is malformed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fredica.domain import errors
from fredica.domain.error_table import error_class, row_for
from fredica.domain.models import JSON, ErrorType, Task, TaskStatus
from fredica.domain.wire import event_from_json, pipeline_from_json, task_from_json
from fredica.store.base import (
    BackendNote,
    ChangeBatch,
    ClaimFilter,
    Completed,
    CompletionItem,
    Failure,
    HeartbeatFeedback,
    StartItem,
    Transfer,
)

T = TypeVar("T")


def decode(what: str, fn: Callable[[Any], T], value: Any) -> T:
    """`fn(value)`, or `InvalidRequest` naming `what` was malformed."""
    try:
        return fn(value)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise errors.InvalidRequest(f"malformed {what}: {exc!r}") from None


# --- claims -------------------------------------------------------------------------------------
def filter_to_json(flt: ClaimFilter) -> JSON:
    return {
        "limit": flt.limit,
        "types": None if flt.types is None else sorted(flt.types),
        "start": flt.start,
        "pausable": dict(flt.pausable),
        "cloud_only_types": _opt_list(flt.cloud_only_types),
        "local_only_types": _opt_list(flt.local_only_types),
        "deferred_types": sorted(flt.deferred_types),
        "defer_wait": flt.defer_wait,
        "soft_elsewhere": sorted(flt.soft_elsewhere),
        "soft_wait": flt.soft_wait,
    }


def filter_from_json(d: JSON) -> ClaimFilter:
    """A peer's claim filter. Peers never claim ahead from another owner: a task claimed
    ahead would sit in a remote queue the owner cannot see."""
    return ClaimFilter(
        limit=int(d["limit"]),
        types=_opt_set(d.get("types")),
        start=bool(d.get("start", False)),
        pausable={str(k): bool(v) for k, v in dict(d.get("pausable") or {}).items()},
        cloud_only_types=_opt_set(d.get("cloud_only_types")),
        local_only_types=_opt_set(d.get("local_only_types")),
        deferred_types=_opt_set(d.get("deferred_types")) or frozenset(),
        defer_wait=None if d.get("defer_wait") is None else float(d["defer_wait"]),
        soft_elsewhere=_opt_set(d.get("soft_elsewhere")) or frozenset(),
        soft_wait=float(d.get("soft_wait") or 0.0),
    )


def _opt_list(values: frozenset[str] | None) -> list[str] | None:
    return None if values is None else sorted(values)


def _opt_set(values: Any) -> frozenset[str] | None:
    return None if values is None else frozenset(str(v) for v in values)


def tasks_from_json(items: Any) -> list[Task]:
    return [task_from_json(d) for d in items]


# --- reports ------------------------------------------------------------------------------------
def _backend_to_json(note: BackendNote | None) -> JSON | None:
    if note is None:
        return None
    return {"backend": note.backend, "message": note.message, "chosen_at": note.chosen_at}


def _backend_from_json(d: Any) -> BackendNote | None:
    if d is None:
        return None
    return BackendNote(str(d["backend"]), str(d["message"]), float(d["chosen_at"]))


def completion_to_json(item: CompletionItem) -> JSON:
    return {
        "task_id": item.task_id,
        "attempt": item.attempt,
        "result": item.result,
        "message": item.message,
        "backend": _backend_to_json(item.backend),
        "started_at": item.started_at,
    }


def completion_from_json(d: JSON) -> CompletionItem:
    result = d["result"]
    if not isinstance(result, dict):
        raise ValueError("result must be an object")
    return CompletionItem(
        task_id=str(d["task_id"]),
        attempt=int(d["attempt"]),
        result=result,
        message=d.get("message"),
        backend=_backend_from_json(d.get("backend")),
        started_at=_opt_float(d.get("started_at")),
    )


def start_to_json(item: StartItem) -> JSON:
    return {"task_id": item.task_id, "attempt": item.attempt, "started_at": item.started_at}


def start_from_json(d: JSON) -> StartItem:
    return StartItem(str(d["task_id"]), int(d["attempt"]), float(d["started_at"]))


def failure_to_json(f: Failure) -> JSON:
    return {
        "task_id": f.task_id,
        "attempt": f.attempt,
        "error": f.error,
        "error_type": f.error_type.value,
        "retry_after_sec": f.retry_after_sec,
        "backend": _backend_to_json(f.backend),
        "started_at": f.started_at,
    }


def failure_from_json(d: JSON) -> Failure:
    return Failure(
        task_id=str(d["task_id"]),
        attempt=int(d["attempt"]),
        error=str(d["error"]),
        error_type=ErrorType(d["error_type"]),
        retry_after_sec=_opt_float(d.get("retry_after_sec")),
        backend=_backend_from_json(d.get("backend")),
        started_at=_opt_float(d.get("started_at")),
    )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def pairs_from_json(items: Any) -> list[tuple[str, int]]:
    return [(str(task_id), int(attempt)) for task_id, attempt in items]


def progress_from_json(items: Any) -> list[tuple[str, int, int, str | None]]:
    return [(str(t), int(a), int(p), None if n is None else str(n)) for t, a, p, n in items]


# --- replication ------------------------------------------------------------------------------
def batch_to_json(batch: ChangeBatch) -> JSON:
    return {
        "tasks": [t.to_json() for t in batch.tasks],
        "pipelines": [p.to_json() for p in batch.pipelines],
        "cursor": batch.cursor,
        "deleted": [list(d) for d in batch.deleted],
    }


def batch_from_json(d: JSON) -> ChangeBatch:
    return ChangeBatch(
        [task_from_json(t) for t in d["tasks"]],
        [pipeline_from_json(p) for p in d["pipelines"]],
        int(d["cursor"]),
        [(str(kind), str(row_id)) for kind, row_id in d.get("deleted", [])],
    )


def transfer_to_json(transfer: Transfer) -> JSON:
    return {
        "pipeline": transfer.pipeline.to_json(),
        "tasks": [t.to_json() for t in transfer.tasks],
        "events": [e.to_json() for e in transfer.events],
    }


def transfer_from_json(d: JSON) -> Transfer:
    return Transfer(
        pipeline_from_json(d["pipeline"]),
        tuple(task_from_json(t) for t in d["tasks"]),
        tuple(event_from_json(e) for e in d.get("events", [])),
    )


# --- answers ------------------------------------------------------------------------------------
def outcome_to_json(outcome: Completed | errors.FredicaError) -> JSON:
    """One item of a completion batch: accepted, or the error that refused it (by its code)."""
    if isinstance(outcome, Completed):
        return {
            "ok": True,
            "task_id": outcome.task_id,
            "attempt": outcome.attempt,
            "pipeline_id": outcome.pipeline_id,
            "status": outcome.status.value,
        }
    row = row_for(outcome)
    return {
        "ok": False,
        "status": row.status if row else 500,
        "code": row.code if row else "internal",
        "error": outcome.message,
    }


def outcome_from_json(d: JSON) -> Completed | errors.FredicaError:
    if d["ok"]:
        return Completed(
            str(d["task_id"]), int(d["attempt"]), d.get("pipeline_id"), TaskStatus(d["status"])
        )
    return error_class(int(d["status"]), str(d["code"]))(str(d["error"]))


def feedback_to_json(fb: HeartbeatFeedback) -> JSON:
    return {
        "task_id": fb.task_id,
        "still_owned": fb.still_owned,
        "status": fb.status.value if fb.status else None,
        "cancel_requested": fb.cancel_requested,
        "attempt": fb.attempt,
    }


def feedback_from_json(d: JSON) -> HeartbeatFeedback:
    status = d.get("status")
    attempt = d.get("attempt")
    return HeartbeatFeedback(
        str(d["task_id"]),
        bool(d["still_owned"]),
        TaskStatus(status) if status else None,
        bool(d["cancel_requested"]),
        int(attempt) if attempt is not None else None,
    )
