"""The history filters of the pipeline and task lists (`?q=&template=&node=&since=&until=`),
read once for both routes as a `ListFilter`.

Times are ISO 8601 (`2026-12-03`, `2026-12-03T08:00:00+08:00`; no zone: UTC) or seconds since
the epoch. `since` is inclusive, `until` exclusive; a bare date as `until` means the end of
that day, so `since=2026-12-03&until=2026-12-03` is that whole day.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from typing import Annotated

from fastapi import Query

from fredica.domain import errors, history
from fredica.domain.history import ListFilter

MAX_NAME_CHARS = 200  # template and node names longer than this match nothing anyway
MAX_TIME_CHARS = 40
LATEST = datetime(9999, 12, 31, tzinfo=UTC).timestamp()
NO_FILTER = ListFilter()  # what a route gets when called without the dependency

Q_HELP = (
    "Search text (case-insensitive): an id or material id by prefix, a pipeline's source "
    "(file name, path or URL) or title anywhere; tasks match it through their id, type, "
    "material or pipeline."
)
TIME_HELP = "ISO 8601 date or date-time (no zone: UTC), or seconds since the epoch."


def history_filter(
    q: Annotated[str | None, Query(max_length=history.MAX_QUERY_CHARS, description=Q_HELP)] = None,
    template: Annotated[
        str | None,
        Query(max_length=MAX_NAME_CHARS, description="Only pipelines of this template."),
    ] = None,
    node: Annotated[
        str | None,
        Query(
            max_length=MAX_NAME_CHARS,
            description="Tasks claimed by this node id; pipelines it owns or ran a task of.",
        ),
    ] = None,
    since: Annotated[
        str | None,
        Query(max_length=MAX_TIME_CHARS, description=f"Created at or after. {TIME_HELP}"),
    ] = None,
    until: Annotated[
        str | None,
        Query(
            max_length=MAX_TIME_CHARS,
            description=f"Created before (a bare date: before the end of that day). {TIME_HELP}",
        ),
    ] = None,
) -> ListFilter:
    """The query's history filters; a malformed time or `since` after `until` answers 422."""
    where = ListFilter(
        q=q.strip() or None if q is not None else None,
        template=template or None,
        node=node or None,
        since=parse_time("since", since),
        until=parse_time("until", until, end_of_day=True),
    )
    history.check_filter(where)
    return where


def parse_time(name: str, value: str | None, end_of_day: bool = False) -> float | None:
    """`value` as seconds since the epoch; `InvalidRequest` naming `name` if it is none of the
    accepted forms (see the module's doc)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = _iso_seconds(name, text, end_of_day)
    if not math.isfinite(seconds) or not 0 <= seconds <= LATEST:
        raise errors.InvalidRequest(f"{name}: {value!r} is outside the years 1970-9999")
    return seconds


def _iso_seconds(name: str, text: str, end_of_day: bool) -> float:
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return (start + timedelta(days=1) if end_of_day else start).timestamp()
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, OverflowError):
        raise errors.InvalidRequest(
            f"{name}: {text!r} is not a date; use e.g. 2026-12-03, 2026-12-03T08:00:00+08:00 "
            "or seconds since the epoch"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
