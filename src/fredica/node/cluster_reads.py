"""Reads that make a home cluster look like one (docs/cluster-reads.md): the per-attempt log
of a task, wherever the attempt ran, and the history's search and filters over the replicas of
the other owners' rows (`scope=cluster`).

A task's log is written by the node that executed the attempt, into its own data dir
(`executors.tasklog`); the owner keeps the task's row and events, not the log. To show any
attempt's log on any node, the reading node asks every node the task's events name (each
claimer writes its `claimed` event under its own id) through `GET /cluster/tasks/log`, with
the cluster secret, concurrently and once per read: each answers the attempts it holds and
the text of the asked one (or of its latest) from the asked offset. The reader merges the
attempts of all of them and returns the asked (else the latest) attempt's text from whichever
node holds it. A node that cannot be reached now is named in the answer when what was asked
is not found elsewhere.

History: this node's own rows are searched by its store (SQL, `store.lists`); the replicas
hold each row as its JSON, so they are read newest first in batches of `SCAN_BATCH` and
matched by the same rules in Python (`domain.history`) until the page is full, or, with a
`since`, until the rows are older than it. A search that matches few rows therefore reads the
whole replica: milliseconds per thousand rows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fredica.cluster.remote import RemoteOwner
from fredica.domain import errors, history
from fredica.domain.history import ListFilter
from fredica.domain.models import JSON, Pipeline, Task
from fredica.executors import tasklog
from fredica.store.base import TaskStore

logger = logging.getLogger(__name__)

LOG_PATH = "/cluster/tasks/log"
SCAN_BATCH = 500  # replica rows read per step of a filtered cluster list
R = TypeVar("R", Task, Pipeline)


@dataclass(frozen=True, slots=True)
class _Found:
    """What one node holds of a task's logs: its attempts, and the chunk it was asked for."""

    node_id: str
    attempts: tuple[int, ...]
    chunk: tasklog.LogChunk | None


def chunk_to_json(chunk: tasklog.LogChunk) -> JSON:
    return {
        "attempt": chunk.attempt,
        "text": chunk.text,
        "start": chunk.start,
        "end": chunk.end,
        "dropped": chunk.dropped,
    }


def chunk_from_json(d: Any, attempts: tuple[int, ...]) -> tasklog.LogChunk:
    """A chunk a peer sent (a malformed one is a `StoreError`, like an unreachable peer)."""
    try:
        return tasklog.LogChunk(
            attempt=int(d["attempt"]),
            text=str(d["text"]),
            start=int(d["start"]),
            end=int(d["end"]),
            dropped=int(d["dropped"]),
            attempts=attempts,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise errors.StoreError(f"a peer's task log answer is malformed: {exc}") from None


def local_log(data_dir: Path, task_id: str, attempt: int | None, offset: int) -> JSON:
    """What `GET /cluster/tasks/log` answers: the attempts of `task_id` logged on this node and
    the text of `attempt` (None: the latest here) from `offset`, or `log: null` if this node
    has no log of it."""
    logged = tasklog.attempts(data_dir, task_id)
    want = attempt if attempt is not None else (logged[-1] if logged else None)
    chunk = None
    if want is not None and want in logged:
        chunk = chunk_to_json(tasklog.read(data_dir, task_id, want, offset))
    return {"task_id": task_id, "attempts": logged, "log": chunk}


async def read_log(
    data_dir: Path,
    task_id: str,
    executors: Iterable[str],
    peer: Callable[[str], RemoteOwner | None],
    attempt: int | None,
    offset: int,
) -> tasklog.LogChunk:
    """The log of `attempt` (None: the latest logged anywhere) of `task_id` from `offset`,
    read here or from one of `executors` (the other nodes that ran attempts of it; `peer`
    names how to reach one). `NotFound` names what is missing, and the nodes that could not
    be asked."""
    here = await asyncio.to_thread(local_log, data_dir, task_id, attempt, offset)
    found = [_found("", here)]
    unreachable: list[str] = []
    asks = sorted(set(executors))
    answers = await asyncio.gather(*(_ask(peer, n, task_id, attempt, offset) for n in asks))
    for node_id, answer in zip(asks, answers, strict=True):
        if answer is None:
            unreachable.append(node_id)
        else:
            found.append(answer)
    logged = tuple(sorted({a for f in found for a in f.attempts}))
    want = attempt if attempt is not None else (logged[-1] if logged else None)
    for item in found:
        if item.chunk is not None and item.chunk.attempt == want:
            return tasklog.LogChunk(
                item.chunk.attempt,
                item.chunk.text,
                item.chunk.start,
                item.chunk.end,
                item.chunk.dropped,
                logged,
            )
    raise errors.NotFound(_missing(task_id, want, logged, unreachable))


def _found(node_id: str, answer: Any) -> _Found:
    if not isinstance(answer, dict) or not isinstance(answer.get("attempts"), list):
        raise errors.StoreError(f"node {node_id}: a malformed task log answer")
    attempts = tuple(int(a) for a in answer["attempts"])
    log = answer.get("log")
    return _Found(node_id, attempts, None if log is None else chunk_from_json(log, attempts))


async def _ask(
    peer: Callable[[str], RemoteOwner | None],
    node_id: str,
    task_id: str,
    attempt: int | None,
    offset: int,
) -> _Found | None:
    """One executor's logs of the task (None: it cannot be reached now)."""
    remote = peer(node_id)
    if remote is None:
        return None
    params: dict[str, Any] = {"task_id": task_id, "offset": offset}
    if attempt is not None:
        params["attempt"] = attempt
    try:
        return _found(node_id, await remote.call("GET", LOG_PATH, **params))
    except errors.StoreError as exc:
        logger.info(
            "task log of %s not read from %s: %s",
            task_id,
            node_id,
            exc,
            extra={"action": "task_log_remote"},
        )
        return None


def _missing(
    task_id: str, want: int | None, logged: tuple[int, ...], unreachable: list[str]
) -> str:
    if not logged:
        message = f"task {task_id} has no log yet (no attempt wrote any output)"
    else:
        have = ", ".join(str(a) for a in logged)
        message = f"task {task_id} has no log of attempt {want} (logged: {have})"
    if unreachable:
        message += (
            f"; node{'s' if len(unreachable) > 1 else ''} {', '.join(unreachable)} that ran "
            "attempts of it cannot be reached now"
        )
    return message


# --- history over the replicas --------------------------------------------------------------
async def replica_tasks(
    store: TaskStore,
    pipeline_id: str | None,
    statuses: list[str] | None,
    task_type: str | None,
    want: int,
    where: ListFilter | None,
) -> list[Task]:
    """The first `want` replicated tasks (a pipeline's oldest first, else newest first) of
    `task_type` that pass `where`."""
    pipelines: dict[str, Pipeline | None] = {}

    async def keep(task: Task) -> bool:
        if task_type is not None and task.type != task_type:
            return False
        if where is None or where.is_empty:
            return True
        pid = task.pipeline_id
        if pid is not None and pid not in pipelines:
            pipelines[pid] = await store.replica_pipeline(pid)
        return history.task_matches(where, task, pipelines.get(pid or ""))

    async def fetch(offset: int) -> list[Task]:
        return await store.replica_tasks(pipeline_id, statuses, SCAN_BATCH, offset)

    return await _scan(fetch, keep, want, where if pipeline_id is None else None)


async def replica_pipelines(
    store: TaskStore, statuses: list[str] | None, want: int, where: ListFilter | None
) -> list[Pipeline]:
    """The first `want` replicated pipelines, newest first, that pass `where`."""

    async def keep(pipeline: Pipeline) -> bool:
        if where is None or where.is_empty:
            return True
        claimers = await _claimers(store, pipeline, where)
        return history.pipeline_matches(where, pipeline, claimers.__contains__)

    async def fetch(offset: int) -> list[Pipeline]:
        return await store.replica_pipelines(statuses, SCAN_BATCH, offset)

    return await _scan(fetch, keep, want, where)


async def _scan(
    fetch: Callable[[int], Awaitable[list[R]]],
    keep: Callable[[R], Awaitable[bool]],
    want: int,
    newest_first: ListFilter | None,
) -> list[R]:
    """The first `want` rows `fetch` (from an offset) returns that `keep` keeps; rows of a
    newest-first list (`newest_first`: its filter) end at the first one older than `since`."""
    found: list[R] = []
    offset = 0
    while len(found) < want:
        rows = await fetch(offset)
        offset += len(rows)
        for row in rows:
            if _older(newest_first, row.created_at):
                return found
            if await keep(row):
                found.append(row)
                if len(found) == want:
                    return found
        if len(rows) < SCAN_BATCH:
            break
    return found


async def _claimers(store: TaskStore, pipeline: Pipeline, where: ListFilter) -> set[str]:
    """The nodes that claimed a task of the pipeline, read only when the `node` filter needs
    them (the pipeline is not that node's own)."""
    if where.node is None or pipeline.owner_id == where.node:
        return set()
    tasks = await store.replica_tasks(pipeline.id, None, 100_000, 0)
    return {t.claimed_by for t in tasks if t.claimed_by is not None}


def _older(where: ListFilter | None, created_at: float) -> bool:
    """A row older than `since`: in a newest-first list, every row after it is too."""
    return where is not None and where.since is not None and created_at < where.since
