"""Races between writers on one database.

Many claimers never claim a task twice: threads (a store each) and processes (each opens its
own store in the child). On SQLite the claimers are processes of the owner node (a SQLite store
claims only its node's rows); on PostgreSQL they are different nodes. Concurrent creations
deduplicate, and a recount never loses a concurrent completion."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fredica.domain.clock import ManualClock
from fredica.domain.models import NewPipeline, NewTask, Task
from fredica.store.base import ClaimFilter, CompletionItem, TaskStore

from .conftest import NODE, PG_KINDS, open_store

StartLine = Any  # a threading or multiprocessing Barrier

CLAIM = ClaimFilter(limit=3, start=True)
IDLE_ROUNDS = 20  # empty claims in a row before a claimer decides the work is done
JOIN_TIMEOUT = 60.0  # seconds


def claimer_node(kind: str, i: int) -> str:
    return NODE if kind == "sqlite" else f"node-{i}"


async def claim_until_done(
    kind: str, target: str, node: str, start: StartLine
) -> list[list[object]]:
    """Claim and complete until nothing is left; every claim as [task_id, attempt]."""
    store = open_store(kind, target, node, ManualClock(1000.0))
    claimed: list[list[object]] = []
    try:
        start.wait(JOIN_TIMEOUT)  # every claimer has its store open: they race from here
        batch, idle = [], 0
        while idle < IDLE_ROUNDS:
            if not batch:
                batch = await store.claim(CLAIM)
                idle = 0 if batch else idle + 1
                continue
            claimed += [[t.id, t.attempt] for t in batch]
            done, batch = await store.complete_and_claim(
                [CompletionItem(t.id, t.attempt, {"by": node}) for t in batch], CLAIM
            )
            refused = [d for d in done if isinstance(d, Exception)]
            assert not refused, refused
    finally:
        await store.close()
    return claimed


def claimer(kind: str, target: str, node: str, out: str, start: StartLine) -> None:
    """A claimer thread or process: its own event loop and its own store."""
    claimed = asyncio.run(claim_until_done(kind, target, node, start))
    Path(out).write_text(json.dumps(claimed))


async def seed(store: TaskStore, n: int) -> list[str]:
    tasks: list[NewTask] = []
    # chains of 3 so that readiness changes while the claimers run
    for i in range(n // 3):
        a, b, c = f"t{i}a", f"t{i}b", f"t{i}c"
        tasks += [
            NewTask("T", id=a),
            NewTask("T", id=b, depends_on=(a,)),
            NewTask("T", id=c, depends_on=(b,)),
        ]
    await store.create_pipeline(NewPipeline("custom", "m", tuple(tasks)))
    return [t.id for t in tasks if t.id]


async def check(store: TaskStore, ids: list[str], outs: list[Path]) -> None:
    claims: list[str] = []
    for out in outs:
        for tid, attempt in json.loads(out.read_text()):
            assert attempt == 1, f"{tid} was claimed at attempt {attempt}"
            claims.append(tid)
    counts = Counter(claims)
    assert [t for t, c in counts.items() if c > 1] == [], "a task was claimed twice"
    assert sorted(counts) == sorted(ids)
    assert (await store.count_by_status())["completed"] == len(ids)
    [pipeline] = await store.list_pipelines()
    assert (pipeline.status.value, pipeline.done_tasks) == ("completed", len(ids))
    # the claimers really shared the work
    assert sum(1 for out in outs if json.loads(out.read_text())) >= 2


async def test_processes_never_double_claim(store, kind, target, tmp_path) -> None:
    ids = await seed(store, 450)
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"claims-{i}.json" for i in range(3)]
    start = ctx.Barrier(len(outs))
    procs = [
        ctx.Process(target=claimer, args=(kind, target, claimer_node(kind, i), str(out), start))
        for i, out in enumerate(outs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(JOIN_TIMEOUT)
        assert p.exitcode == 0
    await check(store, ids, outs)


async def test_threads_never_double_claim(store, kind, target, tmp_path) -> None:
    # enough work that a claimer waiting in SQLite's busy handler (sleeps up to 100 ms) gets in
    # before another has done it all: the race has to happen for the test to mean anything
    ids = await seed(store, 900)
    outs = [tmp_path / f"claims-{i}.json" for i in range(4)]
    start = threading.Barrier(len(outs))
    threads = [
        threading.Thread(
            target=claimer, args=(kind, target, claimer_node(kind, i), str(out), start)
        )
        for i, out in enumerate(outs)
    ]
    for t in threads:
        t.start()
    # the claimers' stores are not this loop's: joining here blocks nothing they need
    await asyncio.get_running_loop().run_in_executor(None, join_all, threads)
    assert not any(t.is_alive() for t in threads)
    await check(store, ids, outs)


def join_all(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(JOIN_TIMEOUT)


async def test_concurrent_creations_of_one_pipeline_dedupe(make_store) -> None:
    # several processes of a node (or nodes of a cluster) submit the same material at once
    stores = [make_store() for _ in range(4)]
    for material in ("m1", "m2", "m3"):
        spec = NewPipeline("custom", material, (NewTask("T"),))
        out = await asyncio.gather(*(s.create_pipeline(spec) for s in stores for _ in range(2)))
        assert len({p.id for p, _ in out}) == 1, f"{material}: several active pipelines"
        assert sorted(dedup for _, dedup in out) == [False] + [True] * 7
    assert len(await stores[0].list_pipelines()) == 3
    assert len(await stores[0].list_tasks()) == 3


async def test_concurrent_adds_of_one_idempotency_key_dedupe(make_store) -> None:
    stores = [make_store() for _ in range(4)]
    for key in ("k1", "k2", "k3"):
        spec = NewTask("T", idempotency_key=key)
        out = await asyncio.gather(*(s.add_task(spec) for s in stores for _ in range(2)))
        assert len({t.id for t in out}) == 1, f"{key}: several active tasks"
    assert len(await stores[0].list_tasks()) == 3


async def test_recalculate_during_completions_keeps_exact_counters(make_store, store) -> None:
    pipeline, _ = await store.create_pipeline(
        NewPipeline("custom", "m", tuple(NewTask("T", id=f"t{i}") for i in range(120)))
    )
    tasks = await store.claim(ClaimFilter(limit=120, start=True))
    completers = [make_store() for _ in range(3)]
    recounter = make_store()
    completing = True

    async def complete_each(s: TaskStore, mine: list[Task]) -> None:
        for t in mine:
            await s.complete_and_claim([CompletionItem(t.id, t.attempt, {})])

    async def recount_meanwhile() -> int:
        rounds = 0
        while completing:
            await recounter.recalculate(pipeline.id)
            rounds += 1
        return rounds

    recounts = asyncio.create_task(recount_meanwhile())
    await asyncio.gather(*(complete_each(s, tasks[i::3]) for i, s in enumerate(completers)))
    completing = False
    assert await recounts > 0
    # every task completed: the counters the completions maintained must say so by themselves
    after = await store.get_pipeline(pipeline.id)
    assert (after.status.value, after.done_tasks, after.running_tasks) == ("completed", 120, 0)


@pytest.mark.parametrize("kind", PG_KINDS)
async def test_postgres_recount_does_not_overwrite_a_concurrent_completion(
    kind, store, target
) -> None:
    """The interleaving behind the test above, made deterministic: a completion has written its
    task and its counter delta but not committed yet when a recount starts."""
    pipeline, _ = await store.create_pipeline(NewPipeline("custom", "m", (NewTask("T", id="a"),)))
    await store.claim(ClaimFilter(limit=1, start=True))
    with psycopg.connect(target) as completion, psycopg.connect(target, autocommit=True) as watch:
        # what a completing node's transaction writes (tx.transition, then flush_pipelines)
        completion.execute("UPDATE task SET status = 'completed' WHERE id = 'a'")
        completion.execute(
            "UPDATE pipeline_instance SET n_running = n_running - 1, "
            "n_completed = n_completed + 1 WHERE id = %s",
            (pipeline.id,),
        )
        recount = asyncio.create_task(store.recalculate(pipeline.id))
        await wait_until_blocked_on_a_lock(watch, recount)
        completion.commit()
        await recount
    after = await store.get_pipeline(pipeline.id)
    assert (after.status.value, after.done_tasks, after.running_tasks) == ("completed", 1, 0)


async def wait_until_blocked_on_a_lock(watch: psycopg.Connection, op: asyncio.Task) -> None:
    """Wait (bounded) until some other backend of this database waits for a row lock."""
    deadline = asyncio.get_running_loop().time() + JOIN_TIMEOUT
    while asyncio.get_running_loop().time() < deadline and not op.done():
        row = watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        ).fetchone()
        if row and row[0]:
            return
        await asyncio.sleep(0.01)  # polling a condition, with a deadline
    raise AssertionError("the recount never waited for the completion's row lock")
