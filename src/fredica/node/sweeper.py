"""The clean-up sweep (seed 001 §7.7): scans the data dir, asks the store and the engine what
still needs each entry, lets `node.cleanup.plan` decide, and deletes what may go.

A sweep runs when the node starts, after changes (a pipeline that ends, a task that completes;
at most one sweep per `CHANGE_SWEEP_GAP` seconds: intermediate files and peer copies only), and
every `storage.cleanup_interval_sec` (everything, results and logs included). Deleting never
leaves the data dir: a path is walked component by component without following a symbolic link
(an entry that is one, or lies under one, is left alone), and trees are removed by
`shutil.rmtree`, which does not follow links inside them. Every deletion is logged with what,
how big and why, and in the log of the task that wrote it when that task ran here.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from fredica.cluster import files
from fredica.domain import errors, models
from fredica.domain.clock import Clock
from fredica.executors import outputs, tasklog
from fredica.node import cleanup
from fredica.node.cleanup import Entry, Kind
from fredica.node.disk import show_bytes
from fredica.store.base import TaskStore

logger = logging.getLogger(__name__)

CHANGE_SWEEP_GAP = 10.0  # seconds at least between two sweeps started by changes
PIPELINES_SCANNED = 2000  # newest finished pipelines read per sweep (every active one is read)
TASKS_PER_PIPELINE = 100_000
OUTBOX_READ = 100_000
RECENT_KEPT = 50  # removals remembered for the status page
OUTPUT_KEYS = ("output_path", "output_dir")
ACTIVE_PIPELINES = ("pending", "running", "cancelling")


class ChangeSource(Protocol):
    """The node's change feed (`node.service.ChangeFeed`)."""

    version: int

    @property
    def is_closed(self) -> bool:
        """The node is stopping: long waits end."""
        ...

    async def wait(self, after: int, timeout: float) -> int: ...


class Refused(Exception):
    """A path the sweeper will not delete (outside the data dir, or through a link)."""


@dataclass
class SweepReport:
    at: float
    full: bool
    removed: list[dict[str, Any]] = field(default_factory=list)
    kept: int = 0
    freed_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "full": self.full,
            "removed": len(self.removed),
            "kept": self.kept,
            "freed_bytes": self.freed_bytes,
        }


# --- scanning ---------------------------------------------------------------------------------
def _children(directory: Path) -> Iterable[os.DirEntry[str]]:
    """Entries of a directory that is really one (not a link), hidden names excluded."""
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return []
        with os.scandir(directory) as it:
            return [e for e in it if not e.name.startswith(".") and not e.is_symlink()]
    except OSError:
        return []


def _linked(data_dir: Path, rel: str) -> bool:
    """Whether a directory on the way to `rel` (a category like `cache/peers`) is a link."""
    path = data_dir
    for part in PurePosixPath(rel).parts:
        path = path / part
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return True
        except OSError:
            return False
    return False


def scan(data_dir: Path, full: bool) -> list[Entry]:
    """What the sweep may delete: intermediate entries and peer copies always; results, logs
    and per-material outputs when `full`."""
    groups: list[tuple[str, Kind]] = [(c, Kind.INTERMEDIATE) for c in cleanup.INTERMEDIATE_DIRS]
    if full:
        groups += [(c, Kind.MATERIAL_RESULT) for c in cleanup.MATERIAL_RESULT_DIRS]
        groups += [(cleanup.RESULTS_DIR, Kind.TASK_RESULT), (cleanup.LOGS_DIR, Kind.TASK_LOG)]
    out: list[Entry] = []
    for category, kind in groups:
        if _linked(data_dir, category):
            continue
        for child in _children(data_dir / category):
            if kind in (Kind.TASK_RESULT, Kind.TASK_LOG):
                if not tasklog.names_a_directory(child.name):
                    continue
                key = child.name
            else:
                key = cleanup.material_key(category, child.name)
            with_stat = _stat(child)
            if with_stat is not None:
                out.append(Entry(f"{category}/{child.name}", kind, key, with_stat.st_mtime))
    out += _peer_copies(data_dir)
    return out


def _stat(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except OSError:
        return None


def _peer_copies(data_dir: Path) -> list[Entry]:
    """Every file under `cache/peers/<node>/` (partial `.part` copies by the name they will
    have), with its size and last use."""
    root = data_dir / cleanup.PEER_CACHE_DIR
    if _linked(data_dir, cleanup.PEER_CACHE_DIR):
        return []
    out = []
    for peer in _children(root):
        if not peer.is_dir(follow_symlinks=False):
            continue
        for dirpath, dirnames, filenames in os.walk(peer.path, followlinks=False):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                path = Path(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                rel = path.relative_to(data_dir).as_posix()
                source = path.relative_to(peer.path)
                if name.startswith(".") and name.endswith(files.PART_SUFFIX):
                    source = source.with_name(name[1 : -len(files.PART_SUFFIX)])
                out.append(
                    Entry(
                        rel,
                        Kind.PEER_COPY,
                        source.as_posix(),
                        st.st_mtime,
                        st.st_atime,
                        st.st_size,
                        peer.name,
                    )
                )
    return out


# --- deleting ---------------------------------------------------------------------------------
def remove(data_dir: Path, rel: str) -> int:
    """Delete `<data_dir>/<rel>` (a file or a tree); returns the bytes freed (0: already gone).
    Raises `Refused` for a path with `..`, an absolute one, or one through a symbolic link."""
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or any(p in ("..", ".", "") for p in parts):
        raise Refused(f"{rel!r} is not a path inside the data dir")
    path = data_dir.resolve()
    st: os.stat_result | None = None
    for part in parts:
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return 0
        if stat.S_ISLNK(st.st_mode):
            raise Refused(f"{rel}: {path} is a symbolic link; not following it")
    assert st is not None
    if not stat.S_ISDIR(st.st_mode):
        path.unlink(missing_ok=True)
        return st.st_size
    size = tree_size(path)
    shutil.rmtree(path)
    return size


def tree_size(path: Path) -> int:
    """Bytes of the regular files in a tree (links not followed)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path, followlinks=False):
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


# --- facts ------------------------------------------------------------------------------------
class StoreFacts:
    """What the store and the engine know about the entries of one sweep."""

    def __init__(
        self,
        store: TaskStore,
        node_id: str,
        data_dir: Path,
        held_tasks: Callable[[], list[models.Task]],
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.data_dir = str(data_dir.resolve())
        self.raw_dir = str(data_dir)
        self.held_tasks = held_tasks

    def refs(self, value: Any) -> set[str]:
        found = cleanup.paths_in(value, self.data_dir)
        if self.raw_dir != self.data_dir:
            found |= cleanup.paths_in(value, self.raw_dir)
        return found

    async def gather(
        self, entries: list[Entry], policy: cleanup.Policy, now: float
    ) -> cleanup.Facts:
        mdirs = {e.key for e in entries if e.kind in (Kind.INTERMEDIATE, Kind.MATERIAL_RESULT)}
        mdirs |= {
            e.key.split("/")[1]
            for e in entries
            if e.kind is Kind.PEER_COPY and e.key.count("/") >= 2 and e.category != "results"
        }
        task_ids = {
            e.key
            for e in entries
            if e.kind in (Kind.TASK_RESULT, Kind.TASK_LOG) and not policy.retained(e.mtime, now)
        }
        busy: set[str] = set()
        for task in self.held_tasks():
            busy |= self.refs(task.payload)
        outbox: set[str] = set()
        for item in await self.store.outbox_list(OUTBOX_READ):
            outbox.add(item.task_id)
            busy |= self.refs(item.body)  # nothing it names goes before its owner has it
        return cleanup.Facts(
            pipelines=tuple(await self._pipelines(mdirs)) if mdirs else (),
            tasks=await self._tasks(task_ids) if task_ids else {},
            outbox=frozenset(outbox),
            busy=frozenset(busy),
            node_id=self.node_id,
        )

    async def _pipelines(self, mdirs: set[str]) -> list[cleanup.PipelineFacts]:
        local: dict[str, models.Pipeline] = {}
        replica: dict[str, models.Pipeline] = {}
        for status in ACTIVE_PIPELINES:
            for p in await self.store.list_pipelines(status, TASKS_PER_PIPELINE, 0):
                local[p.id] = p
        for p in await self.store.list_pipelines(None, PIPELINES_SCANNED, 0):
            local[p.id] = p
        for p in await self.store.replica_pipelines(list(ACTIVE_PIPELINES), TASKS_PER_PIPELINE):
            replica[p.id] = p
        for p in await self.store.replica_pipelines(None, PIPELINES_SCANNED):
            replica[p.id] = p
        out = []
        for source, rows in ((True, local), (False, replica)):
            for p in rows.values():
                mdir = outputs.safe_name(p.material_id)
                if mdir not in mdirs or (not source and p.id in local):
                    continue
                tasks = (
                    await self.store.list_tasks(p.id, limit=TASKS_PER_PIPELINE)
                    if source
                    else await self.store.replica_tasks(p.id, limit=TASKS_PER_PIPELINE)
                )
                live = not p.status.is_terminal
                out.append(
                    cleanup.PipelineFacts(
                        p.id,
                        mdir,
                        p.status,
                        p.completed_at or p.updated_at,
                        tuple(self._task(t, live) for t in tasks),
                    )
                )
        return out

    def _task(self, task: models.Task, pipeline_live: bool) -> cleanup.TaskFacts:
        outs = {task.payload.get(k) for k in OUTPUT_KEYS}
        return cleanup.TaskFacts(
            id=task.id,
            type=task.type,
            status=task.status,
            refs=frozenset(self.refs(task.payload) | self.refs(task.result or {})),
            outputs=frozenset(self.refs([o for o in outs if isinstance(o, str)])),
            cache_policy=task.cache_policy,
            attempt=task.attempt,
            claimed_by=task.claimed_by,
            pipeline_live=pipeline_live,
        )

    async def _tasks(self, ids: set[str]) -> dict[str, cleanup.TaskFacts | None]:
        out: dict[str, cleanup.TaskFacts | None] = {}
        live: dict[str, bool] = {}
        for task_id in ids:
            task = await self._find_task(task_id)
            if task is None:
                out[task_id] = None
                continue
            pid = task.pipeline_id
            if pid is not None and pid not in live:
                live[pid] = await self._pipeline_live(pid)
            out[task_id] = self._task(task, live.get(pid, False) if pid else False)
        return out

    async def _find_task(self, task_id: str) -> models.Task | None:
        try:
            return await self.store.get_task(task_id)
        except errors.NotFound:
            return await self.store.replica_task(task_id)

    async def _pipeline_live(self, pipeline_id: str) -> bool:
        try:
            pipeline: models.Pipeline | None = await self.store.get_pipeline(pipeline_id)
        except errors.NotFound:
            pipeline = await self.store.replica_pipeline(pipeline_id)
        return pipeline is not None and not pipeline.status.is_terminal


# --- the sweeper ------------------------------------------------------------------------------
class Sweeper:
    """Runs sweeps (module doc) and remembers what they removed."""

    def __init__(
        self,
        data_dir: Path,
        facts: StoreFacts,
        policy: cleanup.Policy,
        clock: Clock,
        interval: float,
        on_freed: Callable[[], None] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.facts = facts
        self.policy = policy
        self.clock = clock
        self.interval = interval
        self.on_freed = on_freed
        self.last: SweepReport | None = None
        self.removed_total = 0
        self.freed_total = 0
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_KEPT)
        self._lock = asyncio.Lock()

    async def sweep(self, full: bool = True) -> SweepReport:
        """One sweep (one at a time); returns what it did."""
        async with self._lock:
            now = self.clock.now()
            entries = await asyncio.to_thread(scan, self.data_dir, full)
            report = SweepReport(now, full)
            if entries:
                facts = await self.facts.gather(entries, self.policy, now)
                decisions = cleanup.plan(entries, facts, self.policy, now)
                report.kept = sum(1 for d in decisions if not d.remove)
                gone = [d for d in decisions if d.remove]
                if gone:
                    await asyncio.to_thread(self._apply, gone, report)
            self.last = report
            if report.freed_bytes and self.on_freed is not None:
                self.on_freed()
            return report

    def _apply(self, decisions: list[cleanup.Decision], report: SweepReport) -> None:
        for decision in decisions:
            rel = decision.entry.rel
            try:
                size = remove(self.data_dir, rel)
            except Refused as exc:
                logger.warning("not removed: %s", exc, extra={"action": "cleanup_refused"})
                continue
            except OSError as exc:
                logger.warning("could not remove %s: %s", rel, exc, extra={"action": "cleanup"})
                continue
            text = f"removed {rel} ({show_bytes(size)}): {decision.reason}"
            logger.info(text, extra={"action": "cleanup"})
            if decision.log_to is not None:  # the attempt that wrote it ran here
                tasklog.TaskLog(tasklog.log_path(self.data_dir, *decision.log_to)).line(
                    f"fredica clean-up: {text}"
                )
            item = {
                "path": rel,
                "kind": decision.entry.kind.value,
                "bytes": size,
                "reason": decision.reason,
                "at": report.at,
            }
            report.removed.append(item)
            report.freed_bytes += size
            self.recent.appendleft(item)
            self.removed_total += 1
            self.freed_total += size

    async def run(self, changes: ChangeSource) -> None:
        """Sweep at start, after changes and every `interval` seconds, until cancelled; a
        failing sweep is logged and the next one tried."""
        gap = min(self.interval, CHANGE_SWEEP_GAP)
        version = changes.version
        next_full = 0.0
        # ends when the feed closes (the node stops), not only when cancelled: a cancel that
        # arrives as the feed wakes up may be swallowed by `asyncio.wait_for` on Python 3.11
        while not changes.is_closed:
            full = time.monotonic() >= next_full
            if full:
                next_full = time.monotonic() + self.interval
            try:
                await self.sweep(full)
            except errors.StoreError as exc:
                logger.warning("clean-up sweep: %s", exc.message, extra={"action": "cleanup"})
            except Exception:
                logger.exception("clean-up sweep failed", extra={"action": "cleanup"})
            await asyncio.sleep(gap)
            version = await changes.wait(version, max(0.0, next_full - time.monotonic()))

    def state(self) -> dict[str, Any]:
        """What `GET /api/v1/status` shows under `disk.cleanup`."""
        return {
            "intermediate_cleanup": (
                "never" if self.policy.keep_intermediate else "on_pipeline_complete"
            ),
            "results_retain_days": self.policy.retain_sec / cleanup.DAY,
            "peer_cache_max_bytes": self.policy.peer_cache_max_bytes,
            "interval_sec": self.interval,
            "last_sweep": self.last.to_json() if self.last else None,
            "removed_total": self.removed_total,
            "freed_bytes_total": self.freed_total,
            "recent": list(self.recent)[:10],
        }
