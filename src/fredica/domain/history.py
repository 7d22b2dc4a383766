"""The history filters of the pipeline and task lists (a pure value and its check)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fredica.domain import errors
from fredica.domain.models import Pipeline, Task

MAX_QUERY_CHARS = 200  # a search text longer than this is refused


@dataclass(frozen=True, slots=True)
class ListFilter:
    """The history filters of the pipeline and task lists, combined with AND (None: any).

    `q` (case-insensitive) matches an id or material id by prefix, or the source (file path
    or URL) or title of a pipeline anywhere; a task matches through its own id, type and
    material, or its pipeline. `template`: the pipeline's template (a task's pipeline's).
    `node`: a task claimed by that node; a pipeline owned by it or with a task claimed by it.
    `since` <= `created_at` < `until` (seconds since the epoch)."""

    q: str | None = None
    template: str | None = None
    node: str | None = None
    since: float | None = None
    until: float | None = None

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in self.__slots__)


def check_filter(where: ListFilter | None) -> None:
    """Refuse a filter no list can answer sensibly, naming the field (`InvalidRequest`)."""
    if where is None:
        return
    if where.q is not None and len(where.q) > MAX_QUERY_CHARS:
        raise errors.InvalidRequest(f"q: at most {MAX_QUERY_CHARS} characters")
    for name in ("q", "template", "node"):
        value = getattr(where, name)
        if value is not None and "\x00" in value:
            # PostgreSQL text cannot hold NUL: refuse it here rather than fail in the store
            raise errors.InvalidRequest(f"{name}: must not contain NUL characters")
    for name in ("since", "until"):
        value = getattr(where, name)
        if value is not None and not _is_time(value):
            raise errors.InvalidRequest(f"{name}: expected a finite time, got {value!r}")
    if where.since is not None and where.until is not None and where.since >= where.until:
        raise errors.InvalidRequest("since: must be before until (an empty time range)")


def _is_time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# --- the same rules on rows in hand (replicas: `scope=cluster`) ---------------------------------
def _within(where: ListFilter, created_at: float) -> bool:
    if where.since is not None and created_at < where.since:
        return False
    return where.until is None or created_at < where.until


def _prefix(value: str | None, q: str) -> bool:
    return value is not None and value.lower().startswith(q)


def _anywhere(value: object, q: str) -> bool:
    return isinstance(value, str) and q in value.lower()


def pipeline_text_matches(pipeline: Pipeline, q: str) -> bool:
    """`q` (lower case) matches the pipeline's id or material by prefix, or its source or
    title anywhere."""
    return (
        _prefix(pipeline.id, q)
        or _prefix(pipeline.material_id, q)
        or _anywhere(pipeline.params.get("source"), q)
        or _anywhere(pipeline.params.get("title"), q)
    )


def pipeline_matches(
    where: ListFilter, pipeline: Pipeline, ran_a_task: Callable[[str], bool]
) -> bool:
    """Whether `pipeline` passes `where`, by the rules of `ListFilter` (`ran_a_task(node)`:
    whether that node claimed a task of the pipeline, asked only when it decides)."""
    if not _within(where, pipeline.created_at):
        return False
    if where.template is not None and pipeline.template != where.template:
        return False
    if where.q and not pipeline_text_matches(pipeline, where.q.lower()):
        return False
    if where.node is not None and pipeline.owner_id != where.node:
        return ran_a_task(where.node)
    return True


def task_matches(where: ListFilter, task: Task, pipeline: Pipeline | None) -> bool:
    """Whether `task` passes `where`, by the rules of `ListFilter` (`pipeline`: its pipeline,
    if it has one and it is known)."""
    if not _within(where, task.created_at):
        return False
    if where.node is not None and task.claimed_by != where.node:
        return False
    if where.template is not None and (pipeline is None or pipeline.template != where.template):
        return False
    if not where.q:
        return True
    q = where.q.lower()
    return (
        _prefix(task.id, q)
        or _prefix(task.pipeline_id, q)
        or _prefix(task.material_id, q)
        or _anywhere(task.type, q)
        or (pipeline is not None and pipeline_text_matches(pipeline, q))
    )
