"""What the data dir holds and when each part may go (seed 001 §7.7). Pure: the sweeper
(`node.sweeper`) scans the disk and the store, this module decides, the sweeper deletes.

The data dir:

    <data_dir>/
      fredica.db, worker.yaml, .lock     the node's own files (never swept)
      run/                               the process ledger (never swept)
      downloads/<material>/video.*       DOWNLOAD_VIDEO            intermediate
      audio/<material>/audio.wav         EXTRACT_AUDIO             intermediate
      chunks/<material>/<n>s/chunk_*.wav SPLIT_AUDIO               intermediate
      frames/<material>/...              EXTRACT_FRAMES            intermediate
      results/<task_id>/...              each task's own outputs   result
      ocr/ detect/ transcoded/ thumbnails/ scenes/ <material>...,
      fingerprints/<material>.json       per-material outputs      result
      logs/tasks/<task_id>/<attempt>.log what each attempt printed result (goes with it)
      cache/peers/<node_id>/<path>       copies of peers' files    cache

When each goes (seed §7.7's table, made safe for retries and shared materials):
- An intermediate entry (`<kind>/<material>`) is kept while a pipeline of its material holds
  it: an active pipeline holds the entries that an unfinished task of it reads or writes (so
  chunks go once every TRANSCRIBE_CHUNK completed, the audio once SPLIT_AUDIO and
  DETECT_LANGUAGE did), and its download until it ends. A pipeline that ended `failed` or
  `partial_failed` holds them like an active one for `results_retain_days`, so that a retry of
  its failed tasks still finds its inputs; `completed` and `cancelled` pipelines hold nothing
  (but a completed download of cache policy PREFER_ORIGINAL stays for the retention). An entry
  no pipeline holds is removed; one of a material no pipeline here knows stays for the
  retention (its pipeline may not have reached this node's replica yet).
- Results (a task's `results/<id>` and log, the per-material outputs) stay
  `results_retain_days` after they were last written (0: forever), longer while their task's
  pipeline is active, and always while the task's completion waits in the outbox for its
  owner (seed §7.4: nothing is cleaned before the owner acknowledged).
- A peer copy goes once no unfinished task reads it and it has not been used for a while
  (`peer_copy_idle_sec`), and the least recently used copies go when the cache is over its
  size limit (never one a task running here reads).
- `intermediate_cleanup: never` keeps every intermediate entry.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fredica.domain.models import CachePolicy, PipelineStatus, TaskStatus
from fredica.executors import download

INTERMEDIATE_DIRS = ("downloads", "audio", "chunks", "frames")
MATERIAL_RESULT_DIRS = ("ocr", "detect", "fingerprints", "transcoded", "thumbnails", "scenes")
RESULTS_DIR = "results"
LOGS_DIR = "logs/tasks"
PEER_CACHE_DIR = "cache/peers"
#: first components of the relative paths that name swept files in payloads and results
SWEPT_ROOTS = frozenset({*INTERMEDIATE_DIRS, *MATERIAL_RESULT_DIRS, RESULTS_DIR})
#: a task in one of these statuses no longer reads or writes its files
DONE = frozenset({TaskStatus.COMPLETED, TaskStatus.SKIPPED, TaskStatus.CANCELLED})
#: pipelines that end like this keep their inputs for a retry during the retention
RETRYABLE_END = frozenset({PipelineStatus.FAILED, PipelineStatus.PARTIAL_FAILED})
DAY = 86400.0  # seconds
BUSY = "named by a task running here or by a result waiting in the outbox for its owner"


class Kind(enum.StrEnum):
    INTERMEDIATE = "intermediate"
    MATERIAL_RESULT = "material_result"
    TASK_RESULT = "task_result"
    TASK_LOG = "task_log"
    PEER_COPY = "peer_copy"


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing the sweeper may delete: a directory or file, by its path under the data dir.
    `key` is the material dir, the task id, or (peer copies) the peer's own relative path."""

    rel: str
    kind: Kind
    key: str
    mtime: float
    atime: float = 0.0
    size: int = 0  # known for peer copies (files); the sweeper measures the others on removal
    peer: str = ""  # the node a peer copy came from

    @property
    def category(self) -> str:
        return self.rel.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """What the decisions need of a task: its paths (relative to the data dir of the node that
    holds them), and where its attempts' logs are."""

    id: str
    type: str
    status: TaskStatus
    refs: frozenset[str] = frozenset()  # every swept path its payload or result names
    outputs: frozenset[str] = frozenset()  # the paths its payload says it writes
    cache_policy: CachePolicy = CachePolicy.NONE
    attempt: int = 0
    claimed_by: str | None = None
    pipeline_live: bool = False  # its pipeline is not finished


@dataclass(frozen=True, slots=True)
class PipelineFacts:
    id: str
    mdir: str
    status: PipelineStatus
    ended_at: float | None
    tasks: tuple[TaskFacts, ...] = ()


@dataclass(frozen=True, slots=True)
class Policy:
    keep_intermediate: bool = False
    retain_sec: float = 7 * DAY  # 0: results are kept forever
    peer_cache_max_bytes: int = 10 << 30
    #: a peer copy no unfinished task reads goes once unused this long (a retry, or the next
    #: pipeline of the same material, may still want it a moment after)
    peer_copy_idle_sec: float = 600.0

    def retained(self, since: float | None, now: float) -> bool:
        """Whether something of `since` is still within the retention."""
        return not self.retain_sec or since is None or now - since < self.retain_sec

    @property
    def idle(self) -> float:
        return self.peer_copy_idle_sec

    @property
    def days(self) -> str:
        return f"{self.retain_sec / DAY:g} day(s)"


@dataclass(frozen=True, slots=True)
class Decision:
    entry: Entry
    remove: bool
    reason: str
    #: (task id, attempt) whose log on this node gets a line about the removal
    log_to: tuple[str, int] | None = None


@dataclass(frozen=True)
class Facts:
    """What the sweeper learnt from the store and the engine for one sweep."""

    pipelines: tuple[PipelineFacts, ...] = ()
    tasks: Mapping[str, TaskFacts | None] = field(default_factory=dict)  # None: unknown here
    outbox: frozenset[str] = frozenset()  # tasks whose result waits for its owner
    busy: frozenset[str] = frozenset()  # paths the tasks running (or queued) here name
    node_id: str = ""


# --- paths ------------------------------------------------------------------------------------
def swept_path(value: str, data_dir: str) -> str | None:
    """`value` as a path relative to the data dir when it names a swept file (absolute under
    `data_dir`, or relative with a swept first component), else None."""
    if value.startswith("/"):
        prefix = data_dir.rstrip("/") + "/"
        if not value.startswith(prefix):
            return None
        value = value[len(prefix) :]
    if not value or "\n" in value or len(value) > 4096:
        return None
    parts = PurePosixPath(value).parts
    if not parts or parts[0] not in SWEPT_ROOTS or ".." in parts:
        return None
    return "/".join(parts)


def paths_in(value: Any, data_dir: str) -> set[str]:
    """Every swept path a payload or result names (strings at any depth; file:// sources)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            local = download.local_source(item) if item.startswith("file:") else None
            rel = swept_path(str(local) if local is not None else item, data_dir)
            if rel is not None:
                found.add(rel)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def touches(refs: Iterable[str], rel: str) -> bool:
    """Whether any of `refs` is `rel`, inside it, or a directory holding it."""
    return any(under(r, rel) or under(rel, r) for r in refs)


def material_key(category: str, name: str) -> str:
    """The material dir an entry of a per-material directory belongs to."""
    if category == "fingerprints" and name.endswith(".json"):
        return name[: -len(".json")]
    return name


# --- decisions --------------------------------------------------------------------------------
def plan(entries: Iterable[Entry], facts: Facts, policy: Policy, now: float) -> list[Decision]:
    """A decision for every entry (module doc). Peer copies are decided together, for the
    size limit."""
    by_mdir: dict[str, list[PipelineFacts]] = {}
    for pipeline in facts.pipelines:
        by_mdir.setdefault(pipeline.mdir, []).append(pipeline)
    out: list[Decision] = []
    copies: list[Entry] = []
    for entry in entries:
        if entry.kind is Kind.PEER_COPY:
            copies.append(entry)
        elif entry.kind is Kind.INTERMEDIATE:
            out.append(_intermediate(entry, by_mdir.get(entry.key, []), facts, policy, now))
        elif entry.kind is Kind.MATERIAL_RESULT:
            out.append(_material_result(entry, by_mdir.get(entry.key, []), facts.busy, policy, now))
        else:
            out.append(_task_dir(entry, facts, policy, now))
    out.extend(_peer_copies(copies, facts, policy, now))
    return out


def _age(entry: Entry, now: float) -> str:
    return f"{max(0.0, now - entry.mtime) / DAY:.1f} day(s)"


def _intermediate(
    entry: Entry, users: list[PipelineFacts], facts: Facts, policy: Policy, now: float
) -> Decision:
    if policy.keep_intermediate:
        return Decision(entry, False, "storage.intermediate_cleanup is never")
    if touches(facts.busy, entry.rel):
        return Decision(entry, False, BUSY)
    if not users:
        if policy.retained(entry.mtime, now):
            return Decision(entry, False, "no pipeline of this material is known here (yet)")
        return Decision(
            entry, True, f"no pipeline of this material is known here; untouched {_age(entry, now)}"
        )
    for pipeline in users:
        held = _held_by(pipeline, entry, policy, now)
        if held is not None:
            return Decision(entry, False, held)
    return Decision(entry, True, _why_free(entry, users), _producer(entry, users, facts.node_id))


def _held_by(pipeline: PipelineFacts, entry: Entry, policy: Policy, now: float) -> str | None:
    """Why `pipeline` still needs `entry`, or None."""
    live = not pipeline.status.is_terminal or (
        pipeline.status in RETRYABLE_END and policy.retained(pipeline.ended_at, now)
    )
    name = f"pipeline {pipeline.id} ({pipeline.status.value})"
    if live:
        if entry.category == "downloads":
            if pipeline.status.is_terminal:
                return f"{name} may be retried within {policy.days}: its download stays"
            return f"{name} has not ended: its download stays until it does"
        for task in pipeline.tasks:
            if task.status not in DONE and touches(task.refs, entry.rel):
                return f"task {task.id} ({task.type}, {task.status.value}) of {name} uses it"
        return None
    if (
        entry.category == "downloads"
        and pipeline.status is PipelineStatus.COMPLETED
        and policy.retained(pipeline.ended_at, now)
        and any(
            t.cache_policy is CachePolicy.PREFER_ORIGINAL and touches(t.refs, entry.rel)
            for t in pipeline.tasks
        )
    ):
        return f"{name} downloaded it with cache policy PREFER_ORIGINAL: kept {policy.days}"
    return None


def _why_free(entry: Entry, users: list[PipelineFacts]) -> str:
    active = [p for p in users if not p.status.is_terminal]
    if active:
        p = active[0]
        return f"no unfinished task of pipeline {p.id} ({p.status.value}) uses it any more"
    ended = ", ".join(f"{p.id} {p.status.value}" for p in users[:3])
    return f"its pipeline(s) ended: {ended}"


def _producer(entry: Entry, users: list[PipelineFacts], node_id: str) -> tuple[str, int] | None:
    """The task of this node that wrote the entry (its log gets a line about the removal)."""
    for pipeline in users:
        for task in pipeline.tasks:
            if task.claimed_by == node_id and task.attempt and touches(task.outputs, entry.rel):
                return task.id, task.attempt
    return None


def _material_result(
    entry: Entry, users: list[PipelineFacts], busy: frozenset[str], policy: Policy, now: float
) -> Decision:
    if touches(busy, entry.rel):
        return Decision(entry, False, BUSY)
    active = [p for p in users if not p.status.is_terminal]
    if active:
        return Decision(entry, False, f"pipeline {active[0].id} of this material has not ended")
    if policy.retained(entry.mtime, now):
        return Decision(entry, False, f"within the retention ({policy.days})")
    return Decision(
        entry, True, f"result kept {_age(entry, now)}, beyond results_retain_days ({policy.days})"
    )


def _task_dir(entry: Entry, facts: Facts, policy: Policy, now: float) -> Decision:
    if entry.key in facts.outbox:
        return Decision(entry, False, "its result waits in the outbox for its owner")
    if policy.retained(entry.mtime, now):
        return Decision(entry, False, f"within the retention ({policy.days})")
    task = facts.tasks.get(entry.key)
    if task is None:
        return Decision(
            entry, True, f"no task {entry.key} is known here; untouched {_age(entry, now)}"
        )
    if task.status not in DONE and task.status is not TaskStatus.FAILED:
        return Decision(entry, False, f"task {task.id} is {task.status.value}")
    if task.pipeline_live:
        return Decision(entry, False, f"the pipeline of task {task.id} has not ended")
    what = "result" if entry.kind is Kind.TASK_RESULT else "log"
    return Decision(
        entry,
        True,
        f"{what} of task {task.id} ({task.status.value}) kept {_age(entry, now)}, beyond "
        f"results_retain_days ({policy.days})",
    )


def _peer_copies(copies: list[Entry], facts: Facts, policy: Policy, now: float) -> list[Decision]:
    """After use (and `peer_copy_idle_sec` unused), then least recently used beyond the size
    limit."""
    wanted: set[str] = set()
    for pipeline in facts.pipelines:
        if pipeline.status.is_terminal and pipeline.status not in RETRYABLE_END:
            continue
        for task in pipeline.tasks:
            if task.status not in DONE:
                wanted |= task.refs
    out: list[Decision] = []
    kept: list[Entry] = []
    for copy in copies:
        if touches(facts.busy, copy.key):
            out.append(Decision(copy, False, BUSY))
        elif touches(wanted, copy.key) or now - max(copy.atime, copy.mtime) < policy.idle:
            kept.append(copy)
        else:
            reason = f"copy from node {copy.peer}: no unfinished task reads it"
            out.append(Decision(copy, True, f"{reason}, unused {policy.idle:g} s"))
    total = sum(c.size for c in kept) + sum(d.entry.size for d in out if not d.remove)
    limit = policy.peer_cache_max_bytes
    for copy in sorted(kept, key=lambda c: max(c.atime, c.mtime)):
        if total > limit:
            total -= copy.size
            reason = f"peer cache over its limit ({limit} bytes): least recently used"
            out.append(Decision(copy, True, reason))
        else:
            out.append(Decision(copy, False, "an unfinished task may read it, or did just now"))
    return out
