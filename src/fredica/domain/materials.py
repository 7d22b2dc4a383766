"""A material as the user knows it (seed 001 §9.2): a title, a duration, a thumbnail when one
exists, and one status badge derived from all its pipelines (pure functions; the node service
gathers the rows)."""

from __future__ import annotations

import posixpath
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

from fredica.domain.models import Pipeline, PipelineStatus, Task, TaskStatus

P = PipelineStatus
#: task types whose result `duration_sec` is the whole material's (not a chunk's)
DURATION_TYPES = ("EXTRACT_AUDIO", "TRANSCODE", "FINGERPRINT_VIDEO", "GENERATE_THUMBNAIL")
THUMBNAIL_TYPE = "GENERATE_THUMBNAIL"
ACTIVE = (P.RUNNING, P.CANCELLING)


def title_of(source: str, results: Iterable[dict[str, Any]] = ()) -> str:
    """The downloader's `title` when a result carries one, else the file name of a path or
    URL, else the URL's host, else the source itself."""
    for result in results:
        title = result.get("title")
        if isinstance(title, str) and title.strip():
            return title.strip()
    text = source.strip()
    if "://" in text:
        parsed = urllib.parse.urlsplit(text)
        name = posixpath.basename(urllib.parse.unquote(parsed.path.rstrip("/")))
        if parsed.scheme == "file" or (name and "." in name):
            return name or text
        query = urllib.parse.parse_qs(parsed.query)
        video = (query.get("v") or [""])[0]  # youtube watch?v=...
        tail = video or name
        return f"{parsed.hostname or text}{' · ' + tail if tail else ''}"
    return posixpath.basename(text.replace("\\", "/").rstrip("/")) or text


def duration_of(tasks: Iterable[Task]) -> float | None:
    """The media's duration in seconds from a completed task that measured the whole file."""
    found: dict[str, float] = {}
    for task in tasks:
        value = (
            (task.result or {}).get("duration_sec") if task.status is TaskStatus.COMPLETED else None
        )
        if task.type in DURATION_TYPES and isinstance(value, int | float) and value > 0:
            found.setdefault(task.type, float(value))
    return next((found[t] for t in DURATION_TYPES if t in found), None)


def status_of(pipelines: Sequence[Pipeline]) -> str:
    """One badge for a material (pipelines newest first): `running` while any pipeline runs or
    is cancelling, else `pending` while any waits, else the newest pipeline's end status."""
    if not pipelines:
        return "none"
    statuses = {p.status for p in pipelines}
    if statuses & set(ACTIVE):
        return P.RUNNING.value
    if P.PENDING in statuses:
        return P.PENDING.value
    return pipelines[0].status.value
