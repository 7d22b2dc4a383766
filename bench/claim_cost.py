"""Claim cost versus backlog, on the store alone (no engine): does a claim stay flat as the
number of pending tasks grows? (DESIGN §4.13: readiness is an `unmet_deps` counter with a
partial index over ready tasks.)

For each size N a fresh database holds N pending no-op tasks, half of them blocked on an
unfinished parent: each pipeline has one `BENCH_GATE` task that another node has claimed and is
running, 50 ready tasks and 50 tasks depending on the gate (`bench/backlog.py`: one pipeline
through the store API, bulk copies of its rows for the rest). Then K times: `store.claim` with
limit 1 straight into running (as the engine claims) and `store.complete_and_claim` with the
real registry's hooks (as the engine completes). Both are timed separately.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import backlog, noop_plugin
from bench.util import log, mean, percentile, rnd
from fredica.engine.registry import Registry, builtin_registry
from fredica.store.base import ClaimFilter, CompletionItem, TaskStore
from fredica.store.sqlite import SQLiteTaskStore

NODE_ID = "bench-node"
PIPELINE_PENDING = backlog.PIPELINE_PENDING
SIZE_LABELS = {1_000: "1k", 10_000: "10k", 100_000: "100k", 1_000_000: "1M"}

#: a fresh store for one backlog size, and what copies rows into its database
OpenStore = Callable[[int], tuple[TaskStore, backlog.Cloner]]


def label(size: int) -> str:
    return SIZE_LABELS.get(size, str(size))


def _registry() -> Registry:
    registry = builtin_registry()
    noop_plugin.register(registry)
    return registry


async def explain_claim(store: SQLiteTaskStore) -> dict[str, Any]:
    """EXPLAIN QUERY PLAN of the exact SELECT that `store.claim` runs (captured from the
    connection's trace, so the bench never keeps its own copy of the SQL)."""
    seen: list[str] = []
    # The store's connection is private; the bench reaches in only to watch, never to write.
    conn: sqlite3.Connection = store._conn
    conn.set_trace_callback(seen.append)
    try:
        await store.claim(ClaimFilter(limit=1, types=frozenset({noop_plugin.NOOP})), NODE_ID)
    finally:
        conn.set_trace_callback(None)
    query = next(s for s in seen if s.lstrip().upper().startswith("SELECT") and " task " in s)
    plan = [str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {query}")]
    return {
        "query": " ".join(query.split()),
        "plan": plan,
        "uses_task_ready_index": any("task_ready" in line for line in plan),
        "full_scan": any(line.startswith("SCAN task") and "INDEX" not in line for line in plan),
    }


async def measure(store: TaskStore, claims: int) -> dict[str, Any]:
    flt = ClaimFilter(limit=1, types=frozenset({noop_plugin.NOOP}), start=True)
    claim_ms: list[float] = []
    complete_ms: list[float] = []
    for _ in range(claims):
        t0 = time.perf_counter()
        tasks = await store.claim(flt, NODE_ID)
        t1 = time.perf_counter()
        if len(tasks) != 1:
            raise RuntimeError(f"expected one ready task, claimed {len(tasks)}")
        task = tasks[0]
        [outcome], _ = await store.complete_and_claim(
            [CompletionItem(task.id, task.attempt, {})], None, NODE_ID
        )
        t2 = time.perf_counter()
        if isinstance(outcome, Exception):
            raise RuntimeError(f"completion refused: {outcome}")
        claim_ms.append((t1 - t0) * 1000)
        complete_ms.append((t2 - t1) * 1000)
    total = [a + b for a, b in zip(claim_ms, complete_ms, strict=True)]
    return {
        "claims": claims,
        "claim_complete_ms": rnd(mean(total), 4),
        "claim_complete_p50_ms": rnd(percentile(total, 50), 4),
        "claim_only_ms": rnd(mean(claim_ms), 4),
        "complete_only_ms": rnd(mean(complete_ms), 4),
        "claim_only_p50_ms": rnd(percentile(claim_ms, 50), 4),
        "claim_only_p99_ms": rnd(percentile(claim_ms, 99), 4),
    }


def run(data_dir: Path, sizes: list[int], claims: int) -> dict[str, Any]:
    """The SQLite store: a fresh file per backlog size."""

    def open_store(size: int) -> tuple[TaskStore, backlog.Cloner]:
        path = data_dir / f"claim-{label(size)}" / "fredica.db"
        return SQLiteTaskStore(path, NODE_ID), backlog.SQLiteCloner(path)

    return run_on(open_store, sizes, claims)


def run_on(open_store: OpenStore, sizes: list[int], claims: int) -> dict[str, Any]:
    """Claim cost on the stores `open_store(size)` opens (one fresh database per size)."""
    return asyncio.run(_run(open_store, sizes, claims))


async def _run(open_store: OpenStore, sizes: list[int], claims: int) -> dict[str, Any]:
    registry = _registry()
    per_size: dict[str, Any] = {}
    plan: dict[str, Any] | None = None
    for size in sizes:
        store, cloner = open_store(size)
        store.set_hooks(registry.spawn_hook)
        try:
            t = time.perf_counter()
            await backlog.build(store, cloner, size)
            built = time.perf_counter() - t
            counts = await store.count_by_status()
            # A quarter of the backlog at most, so the ready half is never drained mid-run.
            k = min(claims, max(1, size // 4))
            log(f"  claim cost: {size} pending built in {built:.1f}s; {k} claims")
            result = await measure(store, k)
            if plan is None and isinstance(store, SQLiteTaskStore):
                plan = await explain_claim(store)
        finally:
            await store.close()
        result.update(
            pending=counts["pending"],
            blocked=size // 2,
            build_s=rnd(built),
            build_tasks_per_s=rnd(size / built, 1),
        )
        per_size[label(size)] = result
    return {
        "sizes": per_size,
        "explain": plan,
        "config": (
            "store.claim(limit 1, start) + store.complete_and_claim with the registry hooks, on "
            f"a fresh database per size; pipelines of {PIPELINE_PENDING} pending tasks, half "
            "blocked on a parent running on another node (one pipeline through the store API, "
            "bulk copies of its rows for the rest)"
        ),
    }
