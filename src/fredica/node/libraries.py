"""Watch folders (`libraries:` in worker.yaml): every new or changed file becomes a pipeline once.

One side loop per library scans its folder every `scan_interval_sec` (the base that always
works, on every filesystem and share), sooner while a file settles, and at once when inotify
(Linux, `inotify_simple`) reports a change. What to do with a file is decided by the pure rules
of `domain.library`; this module stats, hashes, records (`library_file`) and submits.

Cluster: libraries with the same name on several nodes are one library (the same share). One
node watches it (the lowest node id among the online peers that have it, decided only once
every known peer was reached or given up); the others record what they see as
`watched_elsewhere`. Before creating a pipeline, the watcher looks for one of the same material
(derived from the content hash) and template among its own pipelines and its replicas of the
others', so a takeover or a lost database does not process a file twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from fredica.config.schema import LibraryConfig
from fredica.domain import errors
from fredica.domain import library as rules
from fredica.domain.clock import Clock
from fredica.domain.library import FileStatus, LibraryFile
from fredica.domain.models import JSON
from fredica.pipelines.request import PipelineRequest
from fredica.store.base import TaskStore

logger = logging.getLogger(__name__)

HASH_CHUNK = 1 << 20  # bytes read at a time while hashing
SETTLE_POLLS = 4  # scans per settle time while a file settles
MIN_POLL_SEC = 0.1  # seconds: the quickest rescan while a file settles
ERROR_RETRY_SEC = 5.0  # seconds: the folder is missing or unreadable: look again after

#: create a pipeline: (pipeline id, deduplicated)
Create = Callable[[PipelineRequest], Awaitable[tuple[str, bool]]]
#: an existing pipeline of (material id, template) on this node or a replica, or None
Existing = Callable[[str, str], Awaitable[str | None]]
#: which node watches a library (None: not decided yet, the cluster is still being reached)
WatcherOf = Callable[[str], str | None]


@dataclasses.dataclass(frozen=True, slots=True)
class Found:
    """A regular file a scan found."""

    size: int
    mtime: float


def walk(
    folder: Path, include: list[str], exclude: list[str]
) -> tuple[dict[str, Found], list[str]]:
    """The matching regular files below `folder` (relative '/' paths) and every directory
    (absolute, for inotify). Symlinked directories are not followed (no loops)."""
    if not folder.is_dir():
        raise errors.NotFound(f"library folder {folder} does not exist or is not a directory")
    found: dict[str, Found] = {}
    dirs: list[str] = []
    for root, dirnames, filenames in os.walk(folder, followlinks=False):
        dirs.append(root)
        dirnames.sort()
        base = Path(root).relative_to(folder).as_posix()
        for name in filenames:
            rel = name if base == "." else f"{base}/{name}"
            if not rules.matches(rel, include, exclude):
                continue
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue  # vanished between the listing and the stat
            if os.path.isfile(os.path.join(root, name)):
                found[rel] = Found(st.st_size, st.st_mtime)
    return found, dirs


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's content (read in chunks)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class Inotify:
    """inotify on a library's directories: any change sets `wake`. Absent (None from
    `Inotify.open`) where the kernel or the package is missing; scans work without it."""

    def __init__(self, handle: Any, flags: int, wake: asyncio.Event) -> None:
        self._handle = handle
        self._flags = flags
        self._wake = wake
        self._watched: set[str] = set()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(handle.fileno(), self._readable)

    @classmethod
    def open(cls, wake: asyncio.Event) -> Inotify | None:
        try:
            import inotify_simple  # type: ignore[import-untyped]
        except ImportError:
            return None
        f = inotify_simple.flags
        mask = f.CREATE | f.CLOSE_WRITE | f.MODIFY | f.MOVED_TO | f.MOVED_FROM | f.DELETE
        mask |= f.ATTRIB | f.DELETE_SELF
        try:
            return cls(inotify_simple.INotify(), int(mask), wake)
        except OSError as exc:
            logger.info("inotify unavailable: %s", exc, extra={"action": "library_inotify"})
            return None

    def watch(self, dirs: Sequence[str]) -> None:
        for path in dirs:
            if path in self._watched:
                continue
            try:
                self._handle.add_watch(path, self._flags)
            except OSError as exc:  # e.g. ENOSPC: max_user_watches; scans still find it
                logger.info(
                    "inotify cannot watch %s: %s", path, exc, extra={"action": "library_inotify"}
                )
                continue
            self._watched.add(path)

    def _readable(self) -> None:
        try:
            self._handle.read(timeout=0)
        except OSError:
            return
        self._wake.set()

    def close(self) -> None:
        self._loop.remove_reader(self._handle.fileno())
        self._handle.close()


@dataclasses.dataclass
class Watch:
    """One library while the node runs."""

    config: LibraryConfig
    tracker: rules.SettleTracker
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    inotify: Inotify | None = None
    last_scan_at: float | None = None
    error: str | None = None
    files_seen: int = 0
    #: hashes of stable files not yet recorded (path -> (size, mtime, sha256))
    hashes: dict[str, tuple[int, float, str]] = dataclasses.field(default_factory=dict)


class Libraries:
    """Every library of this node: the side loops, and the use cases behind the API."""

    def __init__(
        self,
        configs: Sequence[LibraryConfig],
        node_id: str,
        store: TaskStore,
        clock: Clock,
        create: Create,
        existing: Existing,
        watcher_of: WatcherOf,
        known_templates: Callable[[], list[str]],
    ) -> None:
        self.node_id = node_id
        self._store = store
        #: the time of settle decisions (a ManualClock in tests)
        self.clock = clock
        self._create = create
        self._existing = existing
        self._watcher_of = watcher_of
        self._known_templates = known_templates
        self._configs = list(configs)
        self._watches: dict[str, Watch] = {}
        self._loops: list[asyncio.Task[None]] = []

    def names(self) -> list[str]:
        """The enabled libraries (what peers are told)."""
        return [c.name for c in self._configs if c.enabled]

    def check(self) -> None:
        """Refuse a library whose template does not exist (at start-up, naming the key)."""
        known = self._known_templates()
        for i, cfg in enumerate(self._configs):
            if cfg.template not in known:
                raise errors.ConfigError(
                    f"worker.yaml: libraries[{i}].template: unknown template {cfg.template!r} "
                    f"(known: {', '.join(known)})"
                )

    def _watch(self, name: str) -> Watch:
        watch = self._watches.get(name)
        if watch is None:
            cfg = next((c for c in self._configs if c.name == name), None)
            if cfg is None:
                known = ", ".join(c.name for c in self._configs) or "none"
                raise errors.NotFound(f"no library named {name!r} (configured: {known})")
            watch = self._watches[name] = Watch(cfg, rules.SettleTracker(cfg.settle_sec))
        return watch

    # --- side loops -----------------------------------------------------------------------
    def start(self) -> None:
        """One loop per enabled library (after the engine started)."""
        self.check()
        for name in self.names():
            watch = self._watch(name)
            if watch.config.inotify:
                watch.inotify = Inotify.open(watch.wake)
            self._loops.append(asyncio.create_task(self._run(watch), name=f"fredica-lib-{name}"))

    async def stop(self) -> None:
        for loop in self._loops:
            loop.cancel()
        for loop in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        self._loops.clear()
        for watch in self._watches.values():
            if watch.inotify is not None:
                watch.inotify.close()
                watch.inotify = None

    async def _run(self, watch: Watch) -> None:
        cfg = watch.config
        while True:
            watch.wake.clear()
            try:
                await self.scan(cfg.name)
            except Exception:  # a failing scan is logged; the loop goes on
                logger.exception("scan of library %s failed", cfg.name, extra={"action": "library"})
            wait = cfg.scan_interval_sec
            if watch.tracker.settling() or watch.hashes:
                wait = min(wait, max(MIN_POLL_SEC, cfg.settle_sec / SETTLE_POLLS))
            if watch.error is not None:
                wait = min(wait, ERROR_RETRY_SEC)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.wake.wait(), wait)

    # --- use cases ------------------------------------------------------------------------
    async def overview(self) -> list[JSON]:
        """Every configured library with its state and counts."""
        out: list[JSON] = []
        for cfg in self._configs:
            watch = self._watch(cfg.name)
            counts: dict[str, int] = {}
            for item in await self._store.library_files(cfg.name):
                counts[item.status.value] = counts.get(item.status.value, 0) + 1
            if watch.tracker.settling():
                counts[FileStatus.SETTLING.value] = len(watch.tracker.settling())
            out.append(
                {
                    "name": cfg.name,
                    "folder": cfg.folder,
                    "template": cfg.template,
                    "params": cfg.params,
                    "include": cfg.include,
                    "exclude": cfg.exclude,
                    "scan_interval_sec": cfg.scan_interval_sec,
                    "settle_sec": cfg.settle_sec,
                    "enabled": cfg.enabled,
                    "inotify": watch.inotify is not None,
                    "watcher": self._watcher_of(cfg.name) if cfg.enabled else None,
                    "last_scan_at": watch.last_scan_at,
                    "error": watch.error,
                    "counts": counts,
                }
            )
        return out

    async def files(self, name: str) -> list[JSON]:
        """The files of a library: recorded ones and those still settling."""
        watch = self._watch(name)
        rows = [f.to_json() for f in await self._store.library_files(name)]
        recorded = {r["path"] for r in rows if r["status"] != FileStatus.GONE.value}
        for path, (size, mtime, since) in sorted(watch.tracker.settling().items()):
            if path not in recorded:
                rows.append(
                    {
                        "id": None,
                        "library": name,
                        "path": path,
                        "size": size,
                        "mtime": mtime,
                        "status": FileStatus.SETTLING.value,
                        "first_seen_at": since,
                        "pipeline_id": None,
                        "history": [],
                    }
                )
        return rows

    async def rescan(self, name: str) -> JSON:
        """Scan a library now; returns what the scan did."""
        self._watch(name)
        return await self.scan(name)

    async def reprocess(self, name: str, file_id: str) -> JSON:
        """Process a recorded file again: a new pipeline (an active one of the same content and
        template is returned instead, as for any pipeline)."""
        watch = self._watch(name)
        item = await self._store.library_file(file_id)
        if item is None or item.library != name:
            raise errors.NotFound(f"library {name!r} has no file {file_id!r}")
        if item.status is FileStatus.GONE:
            raise errors.Conflict(f"{item.path} is gone from library {name!r}; nothing to process")
        path = Path(watch.config.folder) / item.path
        if item.sha256 is None or not path.is_file():
            raise errors.Conflict(f"{item.path} is not in library {name!r} any more")
        pipeline_id, dedup = await self._create(self._request(watch.config, item.path, item.sha256))
        now = self.clock.now()
        event = "reprocess" if not dedup else "reprocess_active"
        await self._store.save_library_file(
            dataclasses.replace(
                item,
                status=FileStatus.QUEUED,
                pipeline_id=pipeline_id,
                note="",
                updated_at=now,
                history=rules.with_event(item.history, now, event, pipeline_id=pipeline_id),
            )
        )
        return {"file_id": item.id, "pipeline_id": pipeline_id, "deduplicated": dedup}

    # --- the scan -------------------------------------------------------------------------
    async def scan(self, name: str) -> JSON:
        """Look at the folder once: settle, hash and submit what is new or changed, record
        what is gone. Returns counts of what happened."""
        watch = self._watch(name)
        async with watch.lock:
            return await self._scan(watch)

    async def _scan(self, watch: Watch) -> JSON:
        cfg = watch.config
        folder = Path(cfg.folder).expanduser()
        try:
            found, dirs = await asyncio.to_thread(walk, folder, cfg.include, cfg.exclude)
        except (errors.NotFound, OSError) as exc:
            # a share that is not mounted must not make every file "gone"
            watch.error = str(exc)
            logger.warning("library %s: %s", cfg.name, exc, extra={"action": "library_scan"})
            return {"error": watch.error}
        watch.error = None
        watch.last_scan_at = self.clock.now()
        watch.files_seen = len(found)
        if watch.inotify is not None:
            watch.inotify.watch(dirs)
        known = {f.path: f for f in await self._store.library_files(cfg.name)}
        summary = {"found": len(found), "taken": 0, "settling": 0, "gone": 0}
        for rel, stat in found.items():
            outcome = await self._look_at(watch, folder, rel, stat, known)
            if outcome:
                summary[outcome] += 1
        watch.tracker.keep_only(set(found))
        for path in set(watch.hashes) - set(found):
            del watch.hashes[path]
        for rel, record in known.items():
            if rel not in found and record.status is not FileStatus.GONE:
                await self._mark_gone(record)
                summary["gone"] += 1
        return summary

    async def _look_at(
        self, watch: Watch, folder: Path, rel: str, stat: Found, known: dict[str, LibraryFile]
    ) -> str:
        """One file a scan found: "taken", "settling", or "" (nothing to do)."""
        record = known.get(rel)
        if (
            record is not None
            and record.status is FileStatus.WATCHED_ELSEWHERE
            and (record.size, record.mtime) == (stat.size, stat.mtime)
            and record.sha256
        ):
            return "taken" if await self._recheck_elsewhere(watch.config, record) else ""
        if rules.action_for(record, stat.size, stat.mtime) is rules.Action.NOTHING:
            watch.tracker.forget(rel)
            return ""
        if not watch.tracker.observe(rel, stat.size, stat.mtime, self.clock.now()):
            return "settling"
        return "taken" if await self._take(watch, folder, rel, stat, known) else "settling"

    async def _take(
        self, watch: Watch, folder: Path, rel: str, stat: Found, known: dict[str, LibraryFile]
    ) -> bool:
        """A stable file: hash it, decide, record. False if it is not taken yet."""
        cfg = watch.config
        cached = watch.hashes.get(rel)
        if cached is not None and cached[:2] == (stat.size, stat.mtime):
            sha = cached[2]
        else:
            try:
                sha = await asyncio.to_thread(sha256_of, folder / rel)
                again = await asyncio.to_thread(os.stat, folder / rel)
            except OSError as exc:
                await self._save_error(cfg, rel, stat, known.get(rel), f"cannot read: {exc}")
                watch.tracker.forget(rel)
                return True
            if (again.st_size, again.st_mtime) != (stat.size, stat.mtime):
                return False  # written to while hashed: settle again
            watch.hashes[rel] = (stat.size, stat.mtime, sha)
        record = known.get(rel)
        gone_same = next(
            (
                f
                for f in known.values()
                if f.status is FileStatus.GONE and f.sha256 == sha and f.path != rel
            ),
            None,
        )
        verdict = rules.verdict(record, sha, gone_same)
        now = self.clock.now()
        if verdict is rules.Verdict.SAME and record is not None:
            event = "back" if record.status is FileStatus.GONE else "touched"
            status = record.status
            if status is not FileStatus.WATCHED_ELSEWHERE:
                status = FileStatus.QUEUED
            await self._save(cfg, rel, stat, sha, record, status, record.pipeline_id, "", event)
        elif verdict is rules.Verdict.MOVED and gone_same is not None:
            await self._save(
                cfg,
                rel,
                stat,
                sha,
                record,
                FileStatus.QUEUED,
                gone_same.pipeline_id,
                "",
                "moved_here",
                from_path=gone_same.path,
            )
            await self._store.save_library_file(
                dataclasses.replace(
                    gone_same,
                    note=f"moved to {rel}",
                    updated_at=now,
                    history=rules.with_event(gone_same.history, now, "moved_away", to_path=rel),
                )
            )
        else:
            decided = await self._submit(cfg, rel, stat, sha, record, verdict.value)
            if not decided:
                return False
        watch.tracker.forget(rel)
        watch.hashes.pop(rel, None)
        return True

    async def _submit(
        self,
        cfg: LibraryConfig,
        rel: str,
        stat: Found,
        sha: str,
        record: LibraryFile | None,
        reason: str,
    ) -> bool:
        """Create (or find) the pipeline of a new or changed file; False while the cluster has
        not decided who watches the library."""
        watcher = self._watcher_of(cfg.name)
        if watcher is None:
            return False
        material = rules.material_id(sha)
        existing = await self._existing(material, cfg.template)
        if watcher != self.node_id:
            await self._save(
                cfg,
                rel,
                stat,
                sha,
                record,
                FileStatus.WATCHED_ELSEWHERE,
                existing,
                f"watched by {watcher}",
                reason,
            )
            return True
        if existing is not None:
            await self._save(
                cfg, rel, stat, sha, record, FileStatus.QUEUED, existing, "", reason, found=True
            )
            return True
        try:
            pipeline_id, _ = await self._create(self._request(cfg, rel, sha))
        except errors.FredicaError as exc:
            await self._save(cfg, rel, stat, sha, record, FileStatus.ERROR, None, str(exc), reason)
            logger.warning(
                "library %s: %s: no pipeline: %s", cfg.name, rel, exc, extra={"action": "library"}
            )
            return True
        logger.info(
            "library %s: %s (%s) -> pipeline %s",
            cfg.name,
            rel,
            reason,
            pipeline_id,
            extra={"action": "library_pipeline"},
        )
        await self._save(cfg, rel, stat, sha, record, FileStatus.QUEUED, pipeline_id, "", reason)
        return True

    async def _recheck_elsewhere(self, cfg: LibraryConfig, record: LibraryFile) -> bool:
        """A file another node watched: this node may watch the library now (the other left),
        or the other's pipeline has reached this node's replica."""
        assert record.sha256 is not None
        watcher = self._watcher_of(cfg.name)
        if watcher is None:
            return False
        if watcher != self.node_id:
            if record.pipeline_id is None:
                found = await self._existing(rules.material_id(record.sha256), cfg.template)
                if found is not None:
                    await self._store.save_library_file(
                        dataclasses.replace(record, pipeline_id=found, updated_at=self.clock.now())
                    )
            return False
        stat = Found(record.size, record.mtime)
        return await self._submit(cfg, record.path, stat, record.sha256, record, "taken_over")

    def _request(self, cfg: LibraryConfig, rel: str, sha: str) -> PipelineRequest:
        source = str(Path(cfg.folder).expanduser() / rel)
        return PipelineRequest(
            template=cfg.template,
            source=source,
            params=dict(cfg.params),
            material_id=rules.material_id(sha),
        )

    async def _save(
        self,
        cfg: LibraryConfig,
        rel: str,
        stat: Found,
        sha: str | None,
        record: LibraryFile | None,
        status: FileStatus,
        pipeline_id: str | None,
        note: str,
        event: str,
        **extra: Any,
    ) -> None:
        now = self.clock.now()
        history = record.history if record is not None else ()
        await self._store.save_library_file(
            LibraryFile(
                id=record.id if record is not None else uuid.uuid4().hex[:16],
                library=cfg.name,
                path=rel,
                size=stat.size,
                mtime=stat.mtime,
                sha256=sha,
                status=status,
                pipeline_id=pipeline_id,
                note=note,
                first_seen_at=record.first_seen_at if record is not None else now,
                updated_at=now,
                history=rules.with_event(
                    history, now, event, pipeline_id=pipeline_id, sha256=sha, **extra
                ),
            )
        )

    async def _save_error(
        self,
        cfg: LibraryConfig,
        rel: str,
        stat: Found,
        record: LibraryFile | None,
        note: str,
    ) -> None:
        await self._save(cfg, rel, stat, None, record, FileStatus.ERROR, None, note, "error")

    async def _mark_gone(self, record: LibraryFile) -> None:
        now = self.clock.now()
        await self._store.save_library_file(
            dataclasses.replace(
                record,
                status=FileStatus.GONE,
                updated_at=now,
                history=rules.with_event(record.history, now, "gone"),
            )
        )
