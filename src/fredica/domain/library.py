"""Watch folders (`libraries:`): how a file is recognised, when it is taken, and what it is.

Pure rules, no I/O and no clock of their own (time is passed in): the node's library watcher
(`node.libraries`) stats and hashes files and asks these functions what to do.

A file is identified by its path in the library, its size and mtime (cheap: every scan) and
the SHA-256 of its content (read once the file is stable). It is *stable* when the same size and
mtime have been observed for `settle_sec`: a file still being copied changes size or mtime
between scans and is not taken. Content, not path, decides what a pipeline is: the material id
is derived from the hash, so a file renamed or moved inside the library, or the same share seen
by a second node, maps to the same material and is not processed twice.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fredica.domain.models import JSON

#: how much history a file keeps (oldest entries dropped first)
HISTORY_LIMIT = 50
MATERIAL_PREFIX = "lib-"


class FileStatus(StrEnum):
    """A library file as the user sees it."""

    SETTLING = "settling"  # seen, not yet unchanged for settle_sec (in memory only)
    QUEUED = "queued"  # its pipeline was created (or found) and is known by id
    WATCHED_ELSEWHERE = "watched_elsewhere"  # another node watches this library
    GONE = "gone"  # deleted or moved away from this path
    ERROR = "error"  # unreadable, or its pipeline could not be created (`note` says why)


class Action(StrEnum):
    """What a scan does with a file it found."""

    NOTHING = "nothing"  # known, same size and mtime
    SETTLE = "settle"  # new or changed: wait until stable, then hash


class Verdict(StrEnum):
    """What a stable, hashed file is."""

    SAME = "same"  # same content as recorded (only mtime changed, or it came back)
    MOVED = "moved"  # content of a file that left another path of the library
    NEW = "new"  # never seen: a pipeline
    CHANGED = "changed"  # content changed at a known path: a new pipeline


@dataclass(frozen=True, slots=True)
class LibraryFile:
    """One row of `library_file`: a path of a library as this node last saw it."""

    id: str
    library: str
    path: str  # relative to the library folder, '/'-separated
    size: int
    mtime: float
    sha256: str | None
    status: FileStatus
    pipeline_id: str | None
    note: str
    first_seen_at: float
    updated_at: float
    history: tuple[JSON, ...] = ()

    def to_json(self) -> JSON:
        return {
            "id": self.id,
            "library": self.library,
            "path": self.path,
            "size": self.size,
            "mtime": self.mtime,
            "sha256": self.sha256,
            "status": self.status.value,
            "pipeline_id": self.pipeline_id,
            "material_id": material_id(self.sha256) if self.sha256 else None,
            "note": self.note,
            "first_seen_at": self.first_seen_at,
            "updated_at": self.updated_at,
            "history": list(self.history),
        }


def material_id(sha256: str) -> str:
    """The material id of a library file's content: the same on every node seeing the same
    bytes, so the pipeline dedupe (material id, template) spans restarts, renames and nodes."""
    return f"{MATERIAL_PREFIX}{sha256[:32]}"


def matches(path: str, include: list[str], exclude: list[str]) -> bool:
    """Is the relative `path` in the library? A pattern matches the whole relative path or
    the file name (case-sensitive, shell globs); exclude wins over include."""
    name = path.rsplit("/", 1)[-1]

    def hit(patterns: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(name, p) for p in patterns)

    return hit(include) and not hit(exclude)


def action_for(known: LibraryFile | None, size: int, mtime: float) -> Action:
    """A scan found a file of `size` and `mtime` at a path recorded as `known` (or not)."""
    if known is None or known.status is FileStatus.GONE:
        return Action.SETTLE
    if known.size == size and known.mtime == mtime and known.status is not FileStatus.ERROR:
        return Action.NOTHING
    if known.status is FileStatus.ERROR and known.size == size and known.mtime == mtime:
        return Action.NOTHING  # an error waits for a change or for "process again"
    return Action.SETTLE


def verdict(known: LibraryFile | None, sha256: str, gone_same: LibraryFile | None) -> Verdict:
    """What a stable file of content `sha256` is, given its path's record (`known`) and a
    record of the same content that left another path (`gone_same`)."""
    if known is not None and known.sha256 == sha256 and known.pipeline_id is not None:
        return Verdict.SAME
    if gone_same is not None and gone_same.pipeline_id is not None:
        return Verdict.MOVED
    if known is not None and known.sha256 is not None and known.sha256 != sha256:
        return Verdict.CHANGED
    return Verdict.NEW


def with_event(history: tuple[JSON, ...], at: float, event: str, **extra: Any) -> tuple[JSON, ...]:
    """`history` with one more entry (at most HISTORY_LIMIT kept)."""
    entry: JSON = {"at": at, "event": event, **{k: v for k, v in extra.items() if v is not None}}
    return (*history, entry)[-HISTORY_LIMIT:]


@dataclass(frozen=True, slots=True)
class PeerLibraries:
    """A peer as the watcher election sees it."""

    node_id: str | None
    reached: bool  # online, and its replica was pulled since this node started
    given_up: bool  # failed often enough to count as offline
    libraries: tuple[str, ...] = ()


def elect_watcher(self_id: str, library: str, peers: list[PeerLibraries]) -> str | None:
    """The node that watches `library`: the lowest id among this node and the reached peers
    that have it. None while a known peer is neither reached nor given up (who it is, and
    what it watches, is not known yet)."""
    candidates = [self_id]
    for peer in peers:
        if peer.node_id == self_id:
            continue
        if not peer.reached and not peer.given_up:
            return None
        if peer.reached and peer.node_id and library in peer.libraries:
            candidates.append(peer.node_id)
    return min(candidates)


@dataclass
class _Seen:
    size: int
    mtime: float
    since: float  # when this (size, mtime) was first observed


@dataclass
class SettleTracker:
    """Which files are stable: the same (size, mtime) observed for `settle_sec` (time comes
    from the caller, so a ManualClock drives it in tests)."""

    settle_sec: float
    _seen: dict[str, _Seen] = field(default_factory=dict)

    def observe(self, path: str, size: int, mtime: float, now: float) -> bool:
        """Record an observation; True once the file has not changed for `settle_sec`."""
        seen = self._seen.get(path)
        if seen is None or seen.size != size or seen.mtime != mtime:
            self._seen[path] = _Seen(size, mtime, now)
            return self.settle_sec <= 0
        return now - seen.since >= self.settle_sec

    def forget(self, path: str) -> None:
        """The file was taken, or is gone."""
        self._seen.pop(path, None)

    def keep_only(self, paths: set[str]) -> None:
        """Forget every file a scan did not find any more."""
        for path in set(self._seen) - paths:
            del self._seen[path]

    def settling(self) -> dict[str, tuple[int, float, float]]:
        """Path -> (size, mtime, since) of every file waiting to be stable."""
        return {p: (s.size, s.mtime, s.since) for p, s in self._seen.items()}

    def next_due(self, now: float) -> float | None:
        """Seconds until the earliest settling file could be stable (None: nothing settles)."""
        if not self._seen:
            return None
        return max(0.0, min(s.since for s in self._seen.values()) + self.settle_sec - now)
