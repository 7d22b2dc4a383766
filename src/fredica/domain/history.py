"""The history filters of the pipeline and task lists (a pure value and its check)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fredica.domain import errors

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
