"""Tasks: list, show with events, logs, user actions; and the seed's `WorkerTaskListRoute`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import PlainTextResponse

from fredica.api import deps, history
from fredica.domain import errors
from fredica.domain.history import ListFilter
from fredica.domain.models import Pipeline, Task, TaskStatus
from fredica.node.service import Node

MAX_OFFSET = 1_000_000_000  # deeper pages answer 422 instead of overflowing the database
router = APIRouter()

CURSOR_HELP = (
    "Continue a list after the page that returned this `next_cursor` (opaque; pass it "
    "unchanged, with the same filters). The cost of a page does not grow with its depth, and "
    "rows created meanwhile never shift or repeat rows of later pages."
)
OFFSET_HELP = (
    "Rows to skip (after `cursor`, if given). Its cost grows with the offset: page with "
    "`cursor` instead."
)

TASK_ACTIONS = ("cancel", "pause", "resume", "retry", "skip")


@router.get("/api/v1/tasks")
async def list_tasks(
    node: deps.NodeDep,
    pipeline_id: Annotated[
        str | None, Query(description="Only this pipeline's tasks (then oldest first).")
    ] = None,
    status: Annotated[
        str | None, Query(description="Only tasks in these statuses, comma-separated: `a,b`.")
    ] = None,
    type: Annotated[str | None, Query(description="Only tasks of this type.")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000, description="Rows per page.")] = 500,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description=OFFSET_HELP)] = 0,
    cursor: Annotated[str | None, Query(description=CURSOR_HELP)] = None,
    scope: Annotated[Scope, Query(description=SCOPE_HELP)] = "local",
    where: Annotated[ListFilter, Depends(history.history_filter)] = history.NO_FILTER,
) -> dict[str, Any]:
    """Tasks, newest first (`created_at`, then creation order); a pipeline's tasks oldest
    first; searched and filtered (the history). `next_cursor` continues the list with the
    same filters (null on its last page); a malformed cursor or time answers 422."""
    if scope == "cluster":
        check_cluster_page(limit, offset, cursor)
        tasks = await node.cluster_tasks(pipeline_id, _statuses(status), type, limit, offset, where)
        return {"tasks": await marked(node, tasks), "next_cursor": None}
    page = await node.page_tasks(pipeline_id, _statuses(status), type, limit, cursor, offset, where)
    return {"tasks": [t.to_json() for t in page.items], "next_cursor": page.next_cursor}


Scope = Literal["local", "cluster"]
SCOPE_HELP = (
    "`local`: the rows this node owns. `cluster`: also its replicas of every other node's "
    "rows, each marked with `replica` (the owner and how fresh the copy is), searched and "
    "filtered alike; pages with `offset` (at most 1000 rows deep), not `cursor`."
)
CLUSTER_DEPTH = 1000


def check_cluster_page(limit: int, offset: int, cursor: str | None) -> None:
    if cursor is not None:
        raise errors.InvalidRequest("scope=cluster pages with offset, not cursor")
    if limit + offset > CLUSTER_DEPTH:
        raise errors.InvalidRequest(
            f"scope=cluster lists at most {CLUSTER_DEPTH} rows deep (limit + offset)"
        )


async def marked(node: Node, rows: Sequence[Task | Pipeline]) -> list[dict[str, Any]]:
    """Rows as JSON; a replica of another owner's row says so (`replica`: owner, freshness)."""
    marks = await node.replica_marks()
    return [
        {**r.to_json(), "replica": marks.get(r.owner_id) if r.owner_id != node.node_id else None}
        for r in rows
    ]


@router.get("/api/v1/tasks/{task_id}")
async def get_task(task_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """One task with every column and its events (claims, backend, progress notes, failures,
    retries) in time order."""
    task, events = await node.task_with_events(task_id)
    return {**task.to_json(), "events": [e.to_json() for e in events]}


@router.get("/api/v1/tasks/{task_id}/events")
async def task_events(task_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """A task's events in time order, of any owner's task: this node's own, else as its owner
    has them now (none while that owner cannot be reached: the replica holds no events)."""
    task, events = await node.task_with_events(task_id)
    return {"task_id": task.id, "owner_id": task.owner_id, "events": [e.to_json() for e in events]}


@router.get("/api/v1/tasks/{task_id}/log", response_class=PlainTextResponse)
async def task_log(
    task_id: str,
    node: deps.NodeDep,
    attempt: Annotated[
        int | None, Query(ge=1, description="Which attempt (default: the latest one logged).")
    ] = None,
    offset: Annotated[
        int,
        Query(
            ge=0,
            description="Only the text after this byte: the `X-Log-End` of an earlier answer "
            "(follow a running task's log).",
        ),
    ] = 0,
) -> PlainTextResponse:
    """What an attempt printed (its commands, their stderr, its executor's log records; the
    last 1 MiB), from this node or from the node that ran the attempt (any owner's task, with
    the cluster secret between the nodes). Headers: `X-Log-Attempt`, `X-Log-Attempts` (every
    attempt with a log, on any node), `X-Log-End` (pass as `offset` to read only what comes
    next). 404 naming what is missing."""
    chunk = await node.task_log(task_id, attempt, offset)
    return PlainTextResponse(
        chunk.text,
        headers={
            "X-Log-Attempt": str(chunk.attempt),
            "X-Log-Attempts": ",".join(str(a) for a in chunk.attempts),
            "X-Log-Start": str(chunk.start),
            "X-Log-End": str(chunk.end),
            "Cache-Control": "no-store",
        },
    )


@router.post("/api/v1/tasks/{task_id}/{action}")
async def task_action(task_id: str, action: str, node: deps.NodeDep) -> dict[str, Any]:
    """`cancel`, `pause`, `resume`, `retry` or `skip` one task (forwarded to the node that runs
    it or owns it); an action its state does not allow is a 409 that changes nothing."""
    if action not in TASK_ACTIONS:
        raise errors.NotFound(f"unknown action {action!r}; use {', '.join(TASK_ACTIONS)}")
    return (await node.task_action(task_id, action)).to_json()


@router.get("/api/v1/WorkerTaskListRoute")
async def worker_task_list(node: deps.NodeDep, pipeline_id: str | None = None) -> dict[str, Any]:
    """Every task of this node (or of one pipeline), without paging (kept for older clients;
    `GET /api/v1/tasks` pages and filters)."""
    rows = await node.list_tasks(pipeline_id, None, None, 10_000)
    return {"tasks": [t.to_json() for t in rows]}


def _statuses(status: str | None) -> list[str] | None:
    """`?status=a,b` as a list; an unknown status is refused with the valid ones."""
    statuses = [s for s in status.split(",") if s] if status else None
    for s in statuses or []:
        if s not in TaskStatus.__members__.values():
            valid = ", ".join(t.value for t in TaskStatus)
            raise errors.InvalidRequest(f"status: unknown status {s!r}; valid: {valid}")
    return statuses
