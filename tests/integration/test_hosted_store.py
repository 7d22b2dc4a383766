"""The embedded store in a process of its own (`store.hosted`): the contract's calls cross the
socket with their arguments, results, errors and signals; the child dies with the node and is
replaced when it dies alone; the engine overlaps its commits with the work it runs."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fredica.domain import errors
from fredica.domain.models import NewPipeline, NewTask, TaskStatus
from fredica.node import compose
from fredica.store import hosted
from fredica.store.base import ClaimFilter, CompletionItem, NodeRecord, Signal, TaskStore
from fredica.store.sql import SQLStore

from .test_engine import fast_settings, wait_for

NODE = "node-h"
CHILD = "fredica.node.store_child"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[TaskStore]:
    opened = hosted.open_hosted(CHILD, tmp_path / "fredica.db", NODE)
    yield opened
    await opened.close()


def _pipeline(n: int, material: str = "m1") -> NewPipeline:
    return NewPipeline(
        template="custom",
        material_id=material,
        tasks=[NewTask(type="TEST_INLINE", payload={"i": i}) for i in range(n)],
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead
        return f.read().split(") ")[-1][0] != "Z"


def _child_pid(store: TaskStore) -> int:
    assert isinstance(store, hosted.HostedStore)
    child = store._child
    assert child is not None
    return child.pid


async def test_the_contracts_calls_cross_with_their_values_errors_and_signals(
    store: TaskStore,
) -> None:
    heard: list[Signal] = []
    store.subscribe(heard.append)
    pipeline, deduplicated = await store.create_pipeline(_pipeline(3))
    assert (pipeline.total_tasks, deduplicated) == (3, False)
    assert Signal.READY in heard  # the child's commit signal reached this process
    again, deduplicated = await store.create_pipeline(_pipeline(3))
    assert (again.id, deduplicated) == (pipeline.id, True)

    claimed = await store.claim(ClaimFilter(limit=2, start=True))
    assert [t.status for t in claimed] == [TaskStatus.RUNNING] * 2
    assert {t.payload["i"] for t in claimed} <= {0, 1, 2}
    first, second = claimed
    outcomes, more = await store.complete_and_claim(
        [
            CompletionItem(first.id, first.attempt, {"ok": 1}),
            CompletionItem(second.id, second.attempt + 1, {"ok": 2}),  # a stale attempt
        ],
        ClaimFilter(limit=5, start=True),
    )
    assert outcomes[0].task_id == first.id  # type: ignore[union-attr]
    assert isinstance(outcomes[1], errors.StaleAttempt)  # an error as a value keeps its class
    assert len(more) == 1
    done = await store.get_task(first.id)
    assert (done.status, done.result) == (TaskStatus.COMPLETED, {"ok": 1})
    assert [e.event_type for e in await store.task_events(first.id)] == [
        "created",
        "claimed",
        "completed",
    ]
    with pytest.raises(errors.NotFound, match="nope"):  # a raised error keeps its class
        await store.get_task("nope")
    with pytest.raises(errors.IllegalTransition):
        await store.retry_task(second.id)  # running: nothing to retry

    await store.set_config("k", "v")
    assert await store.get_config("k") == "v"
    record = NodeRecord(NODE, "host", [], "online", 2, await store.now(), None, {"x": 1})
    await store.upsert_node(record)
    assert [n.info for n in await store.list_nodes()] == [{"x": 1}]
    page = await store.page_tasks(limit=2)
    assert len(page.items) == 2 and page.next_cursor is not None
    assert (await store.count_by_status())["completed"] == 1


async def test_engine_writes_go_before_queued_api_calls() -> None:
    """The same split as `SQLStore._work`: its engine writes are the urgent calls here."""
    urgent = {
        name
        for name in TaskStore.__abstractmethods__
        if "self._work(" in inspect.getsource(getattr(SQLStore, name))
    }
    assert urgent == hosted.URGENT_CALLS


async def test_the_child_dies_with_the_node(tmp_path: Path) -> None:
    src = Path(hosted.__file__).resolve().parents[2]
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(src)!r})
        from fredica.store import hosted
        store = hosted.open_hosted({CHILD!r}, {str(tmp_path / "fredica.db")!r}, "n")
        print(store._child.pid, flush=True)
        asyncio.run(asyncio.sleep(60))
        """
    )
    node = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert node.stdout is not None
        child = int(node.stdout.readline())
        assert _pid_alive(child)
        node.send_signal(signal.SIGKILL)  # no clean stop: the kernel's parent-death signal
        node.wait()
        deadline = time.monotonic() + 10
        while _pid_alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _pid_alive(child)
    finally:
        node.kill()
        node.wait()
        if node.stdout is not None:
            node.stdout.close()


async def test_a_child_that_dies_alone_fails_its_callers_and_is_replaced(
    store: TaskStore,
) -> None:
    pipeline, _ = await store.create_pipeline(_pipeline(1))
    old = _child_pid(store)
    os.kill(old, signal.SIGKILL)
    with pytest.raises(errors.StoreError, match="store's process"):
        for _ in range(200):  # the first call after the death notices it
            await store.get_pipeline(pipeline.id)
            await asyncio.sleep(0.01)
    assert (await store.get_pipeline(pipeline.id)).id == pipeline.id  # a new child, same file
    assert _child_pid(store) != old


async def test_a_database_the_child_cannot_open_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "fredica.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(errors.StoreError, match="cannot open the database"):
        hosted.open_hosted(CHILD, bad, NODE)


async def test_a_node_overlaps_its_commits_with_a_burst_of_quick_tasks(tmp_path: Path) -> None:
    base_settings = fast_settings(tmp_path)
    assert base_settings.engine is not None
    burst = base_settings.engine.commit_burst
    engine = dataclasses.replace(base_settings.engine, claim_ahead=1000)
    settings = dataclasses.replace(base_settings, store_process=True, engine=engine)
    node = compose.build_node(settings)
    assert node._store.out_of_process
    await node.start()
    sizes: list[int] = []
    complete_and_claim = node._store.complete_and_claim

    async def counted(items, *args, **kwargs):  # type: ignore[no-untyped-def]
        sizes.append(len(items))
        return await complete_and_claim(items, *args, **kwargs)

    node.engine.store.complete_and_claim = counted  # type: ignore[method-assign]
    try:
        pipeline, _ = await node._store.create_pipeline(_pipeline(600))
        node.engine.wake()

        async def finished() -> bool:
            return (await node._store.get_pipeline(pipeline.id)).done_tasks == 600

        assert await wait_for(finished, timeout=60)
    finally:
        await node.stop(grace=2)
    # The first claim takes the free slots only (the engine does not know yet that the tasks
    # are quick); the next one the other 598. Their results went to the store in parts, while
    # the rest of that claim still waited, not all at once after the last one ran.
    assert sizes[0] == 2, sizes
    assert len(sizes) >= 3 and max(sizes) <= 598 - burst, sizes
    assert sum(sizes) == 600
    tasks = [t for t in await _all_tasks(tmp_path) if t[1] != "completed" or t[2] != 1]
    assert tasks == []  # every task completed, each by its first attempt


async def _all_tasks(tmp_path: Path) -> list[tuple[str, str, int]]:
    import sqlite3

    conn = sqlite3.connect(tmp_path / "fredica.db")
    try:
        return conn.execute("SELECT id, status, attempt FROM task").fetchall()
    finally:
        conn.close()
