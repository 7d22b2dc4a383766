"""List cost at a large backlog: do the task and pipeline lists stay fast at a million tasks?

A real SQLite data dir is filled with `backlog` tasks by bulk SQL inserts into the migrated
schema (`fredica.store.sqlite.connect/migrate`): pipelines of 4-16 tasks created over 30 days,
the older 70% finished (mostly completed; some failed with their dependents cancelled, some
cancelled by the user, some with a skipped step), the newest 30% waiting (a few running on
another node), plus a thousandth of standalone finished tasks. Pipeline counters, totals and
status are those the store would keep. Task dependencies are not stored (no list reads them).

Then a real `fredica serve` process on loopback serves that data dir. Its engine claims nothing:
the tasks' types have no executor on the node. Over HTTP, each the median of `samples`
requests: the first page of pending tasks (`?status=pending&limit=100`), a page 10,000 pending
tasks deep reached by following `next_cursor` (only the deep request is timed), the unfiltered
first page (`?limit=100`) and the first page of pipelines. `plans` holds the `EXPLAIN QUERY
PLAN` of the SQL the store runs for each list (captured from a store opened on the same file).
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.util import log, rnd, served
from fredica.domain import states
from fredica.domain.models import TaskStatus
from fredica.node.service import DB_FILENAME
from fredica.store.sqlite import SQLiteTaskStore, connect, migrate

NODE_ID = "bench-list-node"
PEER_ID = "bench-list-peer"  # the node the few running tasks run on (never this node)
TYPES = ("BENCH_LIST_FETCH", "BENCH_LIST_TRANSCRIBE", "BENCH_LIST_TRANSLATE", "BENCH_LIST_RENDER")
PAGE = 100
DEEP = 10_000  # tasks before the deep page
SAMPLES = 15
SPAN_SEC = 30 * 86400.0  # the backlog was created over this many seconds
WAITING_SHARE = 0.3  # the newest pipelines are still waiting
RUNNING_SHARE = 0.01  # of the waiting pipelines, these have their first task running
STANDALONE_EVERY = 1000  # one standalone (finished) task per this many tasks
START_TIMEOUT = 600.0  # seconds for the node to recover and answer /healthz at a big backlog
REQUEST_TIMEOUT = 120.0  # seconds one request may take (the old list took seconds at 1M)

CONFIG = f"""\
node:
  id: {NODE_ID}
  max_workers: 2
cluster:
  stale_after_sec: 86400
  reclaim_after_sec: 172800
"""

_TASK_SQL = (
    "INSERT INTO task (id, type, pipeline_id, material_id, status, priority, payload, result, "
    "error, error_type, created_by, owner_id, claimed_by, attempt, progress, change_seq, "
    "unmet_deps, created_at, updated_at, claimed_at, started_at, completed_at, heartbeat_at) "
    "VALUES (?, ?, ?, ?, ?, 5, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?)"
)
_PIPELINE_SQL = (
    "INSERT INTO pipeline_instance (id, material_id, template, status, params, total_tasks, "
    "done_tasks, n_pending, n_claimed, n_running, n_stale, n_reclaimed, n_completed, n_failed, "
    "n_cancelled, n_skipped, cancel_requested, created_by, owner_id, change_seq, created_at, "
    "updated_at, completed_at) "
    "VALUES (?, ?, 'custom', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _pipeline_statuses(rng: random.Random, size: int, waiting: bool) -> tuple[list[str], bool]:
    """The task statuses of one pipeline (in step order) and whether a cancel was requested."""
    if waiting:
        first = "running" if rng.random() < RUNNING_SHARE else "pending"
        return [first] + ["pending"] * (size - 1), False
    roll = rng.random()
    if roll < 0.04:  # a step failed; its dependents were cancelled (upstream failed)
        k = rng.randrange(size)
        return ["completed"] * k + ["failed"] + ["cancelled"] * (size - k - 1), False
    if roll < 0.06:  # cancelled by the user part way
        k = rng.randrange(size)
        return ["completed"] * k + ["cancelled"] * (size - k), True
    if roll < 0.07:  # one step skipped by the user
        statuses = ["completed"] * size
        statuses[rng.randrange(size)] = "skipped"
        return statuses, False
    return ["completed"] * size, False


def _task_row(
    rng: random.Random, status: str, step: int, pipeline_id: str | None, at: float, seq: int
) -> tuple[Any, ...]:
    """One task row (see `_TASK_SQL`)."""
    source = f"https://media.example/v/{seq}.mp4"
    payload = json.dumps({"source": source, "step": step, "quality": "balanced"})
    result = error = error_type = claimed_by = None
    claimed_at = started_at = completed_at = heartbeat_at = None
    attempt, progress = 0, 0
    if status in ("completed", "failed", "running"):
        claimed_by, attempt = NODE_ID, 1
        claimed_at = started_at = at + 1 + step * 30
        heartbeat_at = started_at
    if status == "completed":
        result = json.dumps({"ok": True, "bytes": rng.randrange(1, 10**9), "path": source})
        completed_at, progress = started_at + rng.uniform(1, 60), 100  # type: ignore[operator]
    elif status == "failed":
        error, error_type = "ffmpeg exited with status 1: invalid data", "PERMANENT"
        completed_at = started_at + rng.uniform(1, 60)  # type: ignore[operator]
    elif status == "running":
        claimed_by, progress = PEER_ID, 40
        heartbeat_at = time.time()
    elif status in ("cancelled", "skipped"):
        completed_at = at + 60
    updated = completed_at or heartbeat_at or at
    return (
        str(uuid.uuid4()),
        TYPES[step % len(TYPES)],
        pipeline_id,
        f"material-{seq}",
        status,
        payload,
        result,
        error,
        error_type,
        NODE_ID,
        NODE_ID,
        claimed_by,
        attempt,
        progress,
        seq,
        at,
        updated,
        claimed_at,
        started_at,
        completed_at,
        heartbeat_at,
    )


def _pipeline_row(
    pipeline_id: str, statuses: list[str], cancel: bool, at: float, seq: int, refs: dict[str, str]
) -> tuple[Any, ...]:
    counts = states.StatusCounts.from_mapping(
        {s.value: statuses.count(s.value) for s in TaskStatus}
    )
    status = states.derive_pipeline_status(counts, cancel)
    params = json.dumps({"source": f"https://media.example/v/{seq}.mp4", "refs": refs})
    completed_at = at + 3600 if status.is_terminal else None
    return (
        pipeline_id,
        f"material-{seq}",
        status.value,
        params,
        counts.total,
        counts.done,
        *(getattr(counts, s.value) for s in TaskStatus),
        int(cancel),
        NODE_ID,
        NODE_ID,
        seq,
        at,
        completed_at or at,
        completed_at,
    )


def _generate(
    backlog: int, seed: int
) -> Iterator[tuple[tuple[Any, ...] | None, list[tuple[Any, ...]]]]:
    """(pipeline row or None for a standalone task, its task rows) in creation order."""
    rng = random.Random(seed)
    start = time.time() - SPAN_SEC
    made = seq = 0
    standalone_at = STANDALONE_EVERY // 2
    while made < backlog:
        seq += 1
        at = start + SPAN_SEC * made / backlog
        waiting = made >= backlog * (1 - WAITING_SHARE)
        if made >= standalone_at and not waiting:  # (an active one would be failed as orphan)
            standalone_at += STANDALONE_EVERY
            status = "failed" if rng.random() < 0.1 else "completed"
            yield None, [_task_row(rng, status, 0, None, at, seq)]
            made += 1
            continue
        size = min(rng.randint(4, 16), backlog - made)
        statuses, cancel = _pipeline_statuses(rng, size, waiting)
        pipeline_id = str(uuid.uuid4())
        rows = [_task_row(rng, s, i, pipeline_id, at, seq) for i, s in enumerate(statuses)]
        refs = {f"step{i}": row[0] for i, row in enumerate(rows)}
        yield _pipeline_row(pipeline_id, statuses, cancel, at, seq, refs), rows
        made += size


def build(data_dir: Path, backlog: int, seed: int = 7) -> dict[str, Any]:
    """Fill `data_dir/fredica.db` with `backlog` tasks (see the module docstring)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / DB_FILENAME
    t0 = time.perf_counter()
    conn = connect(path)
    try:
        migrate(conn)
        conn.execute("PRAGMA cache_size = -1000000")  # the build only: indexes stay in memory
        conn.execute("BEGIN IMMEDIATE")
        tasks: list[tuple[Any, ...]] = []
        pipelines: list[tuple[Any, ...]] = []
        last_seq = 0
        for pipeline, rows in _generate(backlog, seed):
            if pipeline is not None:
                pipelines.append(pipeline)
            tasks.extend(rows)
            last_seq = rows[-1][14]
            if len(tasks) >= 50_000:
                conn.executemany(_TASK_SQL, tasks)
                conn.executemany(_PIPELINE_SQL, pipelines)
                tasks, pipelines = [], []
        conn.executemany(_TASK_SQL, tasks)
        conn.executemany(_PIPELINE_SQL, pipelines)
        conn.execute("UPDATE change_counter SET seq = ? WHERE id = 1", (last_seq,))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        counts = dict(conn.execute("SELECT status, COUNT(*) FROM task GROUP BY status").fetchall())
        n_pipelines = conn.execute("SELECT COUNT(*) FROM pipeline_instance").fetchone()[0]
    finally:
        conn.close()
    return {
        "tasks": sum(counts.values()),
        "pipelines": n_pipelines,
        "task_counts": counts,
        "build_s": rnd(time.perf_counter() - t0, 1),
    }


# --- query plans -------------------------------------------------------------------------------
async def _plans(path: Path) -> dict[str, list[str]]:
    """`EXPLAIN QUERY PLAN` of the SELECT each measured list runs, captured from a store's
    connection (the bench keeps no copy of the SQL)."""
    store = SQLiteTaskStore(path, NODE_ID)
    conn: sqlite3.Connection = store._conn  # watched, never written through
    first = await store.page_tasks(status=["pending"], limit=PAGE)
    calls: dict[str, Callable[[], Any]] = {
        "first_page": lambda: store.page_tasks(status=["pending"], limit=PAGE),
        "deep_page": lambda: store.page_tasks(
            status=["pending"], limit=PAGE, cursor=first.next_cursor
        ),
        "unfiltered_first_page": lambda: store.page_tasks(limit=PAGE),
        "pipelines_first_page": lambda: store.page_pipelines(limit=PAGE),
        "counts": store.count_by_status,
    }
    plans: dict[str, list[str]] = {}
    try:
        for name, call in calls.items():
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            try:
                await call()
            finally:
                conn.set_trace_callback(None)
            query = next(s for s in seen if s.lstrip().upper().startswith("SELECT"))
            plans[name] = [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {query}")]
    finally:
        await store.close()
    return plans


# --- the node and the requests ---------------------------------------------------------------
def timed_get(client: httpx.Client, path: str, params: dict[str, Any], samples: int) -> float:
    """Median milliseconds of `samples` requests (after one that warms the connection)."""
    times = []
    for i in range(samples + 1):
        t0 = time.perf_counter()
        response = client.get(path, params=params)
        elapsed = (time.perf_counter() - t0) * 1000
        response.raise_for_status()
        if i:
            times.append(elapsed)
    return statistics.median(times)


def deep_cursor(client: httpx.Client, params: dict[str, Any], depth: int) -> str:
    """The cursor `depth` rows into a task list, reached by following `next_cursor`."""
    cursor: str | None = None
    for _ in range(depth // params["limit"]):
        body = client.get("/api/v1/tasks", params=params | ({"cursor": cursor} if cursor else {}))
        body.raise_for_status()
        cursor = body.json()["next_cursor"]
        if cursor is None:
            raise RuntimeError(f"the list ended before {depth} rows")
    assert cursor is not None
    return cursor


def measure(url: str, samples: int, depth: int) -> dict[str, float]:
    pending = {"status": "pending", "limit": PAGE}
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT, trust_env=False) as client:
        out = {"first_page": timed_get(client, "/api/v1/tasks", pending, samples)}
        cursor = deep_cursor(client, pending, depth)
        out["deep_page"] = timed_get(client, "/api/v1/tasks", pending | {"cursor": cursor}, samples)
        out["unfiltered_first_page"] = timed_get(client, "/api/v1/tasks", {"limit": PAGE}, samples)
        out["pipelines_first_page"] = timed_get(client, "/api/v1/pipelines", {}, samples)
        # /api/v1/status carries the counts per status (the web page's counters)
        out["status_with_counts"] = timed_get(client, "/api/v1/status", {}, samples)
    return {k: round(v, 2) for k, v in out.items()}


def run(work_dir: Path, backlog: int = 1_000_000, samples: int = SAMPLES) -> dict[str, Any]:
    """Build the backlog, serve it, measure the lists over HTTP (see the module docstring)."""
    data_dir = work_dir / "data"
    log(f"  list: building {backlog:,} tasks")
    built = build(data_dir, backlog)
    log(f"  list: built in {built['build_s']} s ({built['pipelines']:,} pipelines)")
    plans = asyncio.run(_plans(data_dir / DB_FILENAME))
    # 10,000 deep; a small backlog (the smoke test) goes half-way into its pending tasks
    depth = min(DEEP, built["task_counts"].get("pending", 0) // 2 // PAGE * PAGE)
    t0 = time.monotonic()
    with served(data_dir, CONFIG, start_timeout=START_TIMEOUT) as url:
        log(f"  list: node answered after {time.monotonic() - t0:.1f} s")
        timings = measure(url, samples, depth)
    return {
        "backlog": backlog,
        **timings,
        "deep_rows": depth,
        "plans": {name: "\n".join(lines) for name, lines in plans.items()},
        "built": built,
        "config": (
            f"fredica serve on loopback over a SQLite data dir of {backlog:,} tasks built by bulk "
            f"SQL; median of {samples} HTTP requests after one warm-up; pages of {PAGE}; the deep "
            f"page is {depth:,} pending tasks in, reached through next_cursor"
        ),
    }
