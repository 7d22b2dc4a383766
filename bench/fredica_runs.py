"""Benchmarks that run a real fredica Node in this process: no-op throughput, idle latency
(create -> start) and DAG fan-out.

Every run gets a fresh data dir and a Node with the store's defaults (SQLite WAL,
synchronous=NORMAL) and the engine's default timing unless a parameter says otherwise. Results
are read back from the stored rows (`created_at`, `started_at`, `completed_at`), not from
timers around the engine, so what is measured is what the database recorded.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import noop_plugin
from bench.util import async_wait_until, log, mean, percentile, rnd, throughput_result
from fredica.domain.models import NewPipeline, NewTask
from fredica.engine.worker import EngineSettings
from fredica.node import compose
from fredica.node.service import DB_FILENAME, Node, NodeSettings
from fredica.pipelines.request import PipelineRequest, TaskSpecIn
from fredica.store.sqlite import SQLiteTaskStore

NODE_ID = "bench-node"
PLUGIN = "bench.noop_plugin"
STOP_GRACE = 5.0  # seconds; only no-op tasks can be running when a node stops here
TASK_TIMEOUT = 60.0  # seconds one latency sample may take before the run is declared broken


def node_settings(
    data_dir: Path,
    max_workers: int = 2,
    poll_interval: float | None = None,
    idle_poll_interval: float | None = None,
) -> NodeSettings:
    """A node with the engine's defaults (poll 1 s, idle back-off 5 s) unless overridden."""
    engine = EngineSettings(node_id=NODE_ID, data_dir=data_dir, max_workers=max_workers)
    if poll_interval is not None:
        engine = replace(engine, poll_interval=poll_interval)
    if idle_poll_interval is not None:
        engine = replace(engine, idle_poll_interval=idle_poll_interval)
    # the store in a process of its own, as `fredica serve` runs it (`store.process`)
    return NodeSettings(
        node_id=NODE_ID, data_dir=data_dir, engine=engine, plugins=(PLUGIN,), store_process=True
    )


def _query(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the stored rows after the node stopped (a plain connection: the bench reads columns
    the TaskStore interface has no reason to aggregate)."""
    conn = sqlite3.connect(str(db))
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _db_bytes(data_dir: Path) -> dict[str, int]:
    out = {}
    for suffix in ("", "-wal", "-shm"):
        path = data_dir / f"{DB_FILENAME}{suffix}"
        out[f"{DB_FILENAME}{suffix}"] = path.stat().st_size if path.exists() else 0
    return out


def _check_engine(node: Node) -> None:
    if node.engine.failure is not None:
        raise RuntimeError(f"fredica engine loop died: {node.engine.failure!r}")


# --- no-op throughput ---------------------------------------------------------------------------
async def noop_throughput(
    data_dir: Path, n_tasks: int, pipeline_size: int, max_workers: int, deadline_s: float
) -> dict[str, Any]:
    """Create `n_tasks` independent no-op tasks (custom pipelines of `pipeline_size`) through
    `node.create_pipeline` while the engine runs, and time first create -> last completion.

    If the deadline passes first, the rate is what completed by then (`timed_out: true`)."""
    node = compose.build_node(node_settings(data_dir, max_workers=max_workers))
    await node.start()
    try:
        # Requests are built inside the timed section: building them is part of creating work
        # through the node's API, as serialising a message is part of a peer's enqueue.
        t0 = time.time()
        for start in range(0, n_tasks, pipeline_size):
            count = min(pipeline_size, n_tasks - start)
            request = PipelineRequest(
                template="custom",
                tasks=[TaskSpecIn(ref=f"t{i}", type=noop_plugin.NOOP) for i in range(count)],
            )
            await node.create_pipeline(request)
        t_created = time.time()
        finished = await async_wait_until(
            lambda: node.engine.stats["completed"] >= n_tasks or node.engine.failure is not None,
            timeout=max(0.0, t0 + deadline_s - time.time()),
        )
        _check_engine(node)
    finally:
        await node.stop(grace=STOP_GRACE)
    [(completed, last_done)] = _query(
        data_dir / DB_FILENAME,
        "SELECT COUNT(*), MAX(completed_at) FROM task WHERE status = 'completed' AND type = ?",
        (noop_plugin.NOOP,),
    )
    return {
        **throughput_result(n_tasks, completed, finished, t0, t_created, last_done),
        "config": (
            f"fredica Node in-process with its SQLite store in a process of its own "
            f"(store.process, as fredica serve runs it), max_workers {max_workers}, SQLite WAL + "
            f"synchronous=NORMAL, custom pipelines of {pipeline_size} independent tasks "
            "created with node.create_pipeline while the engine runs"
        ),
    }


# --- idle latency ---------------------------------------------------------------------------------
async def idle_latency(
    data_dir: Path,
    push_samples: int,
    poll_samples: int,
    poll_interval: float,
    idle_poll_interval: float,
    push_gap: tuple[float, float] = (0.1, 0.3),
) -> dict[str, Any]:
    """create -> start (`started_at - created_at` of the stored row) for one task at a time.

    push: created through `node.create_pipeline`, which wakes the engine.
    poll only: inserted through a second SQLiteTaskStore connection on the same file, so the
    engine sees it only at its next poll. Each sample waits until the engine is in its idle
    back-off, then inserts at a random point of the idle interval (a fixed pause would lock onto
    the poll timer's phase and report one latency over and over)."""
    node = compose.build_node(
        node_settings(data_dir, poll_interval=poll_interval, idle_poll_interval=idle_poll_interval)
    )
    await node.start()
    engine = node.engine.settings
    other = SQLiteTaskStore(data_dir / DB_FILENAME, NODE_ID)
    push_ids: list[str] = []
    poll_ids: list[str] = []

    async def wait_done(target: int) -> None:
        ok = await async_wait_until(
            lambda: node.engine.stats["completed"] >= target or node.engine.failure is not None,
            TASK_TIMEOUT,
            step=0.002,
        )
        _check_engine(node)
        if not ok:
            raise RuntimeError("a latency sample did not complete in time")

    try:
        for _ in range(push_samples):
            pipeline, _ = await node.create_pipeline(
                PipelineRequest(
                    template="custom", tasks=[TaskSpecIn(ref="t", type=noop_plugin.NOOP)]
                )
            )
            push_ids.append(pipeline.params["refs"]["t"])
            await wait_done(node.engine.stats["completed"] + 1)
            await asyncio.sleep(random.uniform(*push_gap))
        # After a completion the engine polls `idle_after_empty_polls` times at poll_interval,
        # then backs off to idle_poll_interval; wait for that, then pick a random moment.
        settle = engine.poll_interval * max(0, engine.idle_after_empty_polls - 1) + 0.25
        for i in range(poll_samples):
            log(f"  poll-only latency sample {i + 1}/{poll_samples}")
            await asyncio.sleep(settle + random.uniform(0.0, idle_poll_interval))
            task_id = str(uuid.uuid4())
            spec = NewPipeline(
                template="custom",
                material_id=f"bench-latency:{task_id}",
                tasks=(NewTask(type=noop_plugin.NOOP, id=task_id),),
            )
            await other.create_pipeline(spec)
            poll_ids.append(task_id)
            await wait_done(node.engine.stats["completed"] + 1)
        push_ms = [await _latency_ms(node, t) for t in push_ids]
        poll_ms = [await _latency_ms(node, t) for t in poll_ids]
    finally:
        await other.close()
        await node.stop(grace=STOP_GRACE)
    return {
        "push_samples": len(push_ms),
        "poll_samples": len(poll_ms),
        "p50": rnd(percentile(push_ms, 50)),
        "p99": rnd(percentile(push_ms, 99)),
        "mean": rnd(mean(push_ms)),
        "poll_only_p50": rnd(percentile(poll_ms, 50)),
        "poll_only_p99": rnd(percentile(poll_ms, 99)),
        "poll_only_mean": rnd(mean(poll_ms)),
        "poll_interval_s": engine.poll_interval,
        "idle_poll_interval_s": engine.idle_poll_interval,
        "idle_after_empty_polls": engine.idle_after_empty_polls,
        "config": (
            f"one no-op task at a time on an idle node (max_workers {engine.max_workers}, poll "
            f"{engine.poll_interval:g} s, idle back-off {engine.idle_poll_interval:g} s after "
            f"{engine.idle_after_empty_polls} empty polls); push = node.create_pipeline (wakes "
            "the engine), poll only = insert through a second SQLiteTaskStore connection at a "
            "random moment of the idle interval"
        ),
    }


async def _latency_ms(node: Node, task_id: str) -> float:
    task = await node.get_task(task_id)
    if task.started_at is None:
        raise RuntimeError(f"task {task_id} never started")
    return (task.started_at - task.created_at) * 1000.0


# --- DAG fan-out -------------------------------------------------------------------------------
async def fanout(
    data_dir: Path, chunks: int, max_workers: int, deadline_s: float
) -> dict[str, Any]:
    """One `bench_fanout` pipeline: SPLIT spawns `chunks` no-op chunks in its completion
    transaction, MERGE waits for all of them. Wall time from the pipeline's stored created_at
    to its completed_at, and the database size right after (before the node stops, because a
    clean close checkpoints and removes the WAL)."""
    node = compose.build_node(node_settings(data_dir, max_workers=max_workers))
    await node.start()
    total = chunks + 2
    try:
        pipeline, _ = await node.create_pipeline(
            PipelineRequest(template=noop_plugin.FANOUT_TEMPLATE, params={"chunks": chunks})
        )
        finished = await async_wait_until(
            lambda: node.engine.stats["completed"] >= total or node.engine.failure is not None,
            deadline_s,
        )
        _check_engine(node)
        sizes = _db_bytes(data_dir)
        stored = await node.get_pipeline(pipeline.id)
        done = node.engine.stats["completed"]
    finally:
        await node.stop(grace=STOP_GRACE)
    wall = (stored.completed_at - stored.created_at) if stored.completed_at else None
    return {
        "chunks": chunks,
        "tasks": stored.total_tasks,
        "completed": done,
        "status": stored.status.value,
        "timed_out": not finished,
        "wall_s": rnd(wall),
        "db_bytes": sizes[DB_FILENAME] + sizes[f"{DB_FILENAME}-wal"],
        "files": sizes,
        "config": (
            f"template bench_fanout (SPLIT -> {chunks} chunks spawned by the post-completion "
            f"hook -> MERGE), no-op work, max_workers {max_workers}"
        ),
    }
