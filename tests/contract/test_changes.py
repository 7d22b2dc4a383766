"""The change feed: `changes_since` from an opaque cursor, per owner, in whole transactions."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

import pytest

from fredica.domain.models import NewTask, TaskStatus
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.store.base import ClaimFilter, CompletionItem

from .conftest import NODE, PG_KINDS, claim_one, make_pipeline

WAIT = 10.0  # seconds: an upper bound, never a sleep


async def test_changes_since_follows_the_change_sequence(store) -> None:
    await make_pipeline(store, NewTask("T", id="a"))
    cursor = (await store.changes_since(None, 0)).cursor
    task = await claim_one(store)
    batch = await store.changes_since(None, cursor)
    assert [t.id for t in batch.tasks] == ["a"] and batch.cursor > cursor
    assert batch.tasks[0].status is TaskStatus.RUNNING
    assert cursor < task.change_seq <= batch.cursor
    assert (await store.changes_since(None, batch.cursor)).tasks == []


async def test_from_zero_everything_then_only_later_changes(make_store, store) -> None:
    other = make_store("node-z")
    mine = await make_pipeline(store, NewTask("T", id="a1"), NewTask("T", id="a2"))
    theirs = await make_pipeline(other, NewTask("T", id="z1"), material="m2")
    everything = await store.changes_since(None, 0)
    assert sorted(t.id for t in everything.tasks) == ["a1", "a2", "z1"]
    assert sorted(p.id for p in everything.pipelines) == sorted([mine, theirs])
    assert everything.cursor == await store.latest_cursor()

    claimed = await claim_one(store)
    later = await store.changes_since(None, everything.cursor)
    assert [t.id for t in later.tasks] == [claimed.id]
    assert [p.id for p in later.pipelines] == [mine]  # its counters changed
    assert later.tasks[0].status is TaskStatus.RUNNING and later.cursor > everything.cursor


async def test_a_page_never_splits_a_transaction(store) -> None:
    start = await store.latest_cursor()
    await store.add_task(NewTask("T", id="before-1"))
    await store.add_task(NewTask("T", id="before-2"))
    pid = await make_pipeline(store, *(NewTask("T", id=f"p{i}") for i in range(10)))
    await store.add_task(NewTask("T", id="after-1"))
    await store.add_task(NewTask("T", id="after-2"))

    batches = []
    cursor = start
    for _ in range(20):
        batch = await store.changes_since(None, cursor, limit=3)
        if not batch.tasks and not batch.pipelines:
            break
        assert batch.cursor > cursor
        batches.append(batch)
        cursor = batch.cursor
    else:
        raise AssertionError("the feed never ran dry")

    seen = [t.id for b in batches for t in b.tasks]
    assert sorted(seen) == sorted(
        ["before-1", "before-2", "after-1", "after-2", *(f"p{i}" for i in range(10))]
    )  # nothing lost, nothing repeated
    # the pipeline's ten tasks (and its row) arrive together, in one batch
    [whole] = [b for b in batches if any(t.id == "p0" for t in b.tasks)]
    assert {f"p{i}" for i in range(10)} <= {t.id for t in whole.tasks}
    assert [p.id for p in whole.pipelines] == [pid]
    # every transaction's rows are in exactly one batch
    batches_of_seq: defaultdict[int, set[int]] = defaultdict(set)
    for n, b in enumerate(batches):
        for row in [*b.tasks, *b.pipelines]:
            batches_of_seq[row.change_seq].add(n)
    assert all(len(ns) == 1 for ns in batches_of_seq.values())
    assert (await store.changes_since(None, cursor, limit=3)).tasks == []


async def test_changes_since_filters_by_owner(make_store, store) -> None:
    other = make_store("node-z")
    await make_pipeline(store, NewTask("T", id="a1"))
    await make_pipeline(other, NewTask("T", id="z1"), NewTask("T", id="z2"), material="m2")
    mine = await store.changes_since(NODE, 0)
    theirs = await store.changes_since("node-z", 0)
    assert [t.id for t in mine.tasks] == ["a1"]
    assert {t.owner_id for t in mine.tasks} | {p.owner_id for p in mine.pipelines} == {NODE}
    assert sorted(t.id for t in theirs.tasks) == ["z1", "z2"]
    assert [p.owner_id for p in theirs.pipelines] == ["node-z"]
    assert (await store.changes_since("node-nobody", 0)).tasks == []


async def test_latest_cursor_then_no_changes_is_an_empty_batch(store) -> None:
    await make_pipeline(store, NewTask("T", id="a"))
    await store.claim(ClaimFilter(limit=1))
    cursor = await store.latest_cursor()
    batch = await store.changes_since(None, cursor)
    assert (batch.tasks, batch.pipelines) == ([], [])
    assert batch.cursor >= cursor
    assert (await store.changes_since(NODE, await store.latest_cursor(NODE))).tasks == []


@pytest.mark.parametrize("kind", PG_KINDS)
async def test_postgres_a_transaction_that_commits_late_is_not_skipped(
    kind, make_store, store
) -> None:
    """Transactions commit out of order on PostgreSQL: a reader that saw a later one must still
    receive the earlier one when it commits."""
    entered, release = threading.Event(), threading.Event()

    def slow_hook(done: SpawnInput) -> SpawnPlan | None:
        entered.set()  # the completion has written its row, and not committed
        assert release.wait(WAIT)
        return None

    store.set_hooks(lambda template: slow_hook)
    await make_pipeline(store, NewTask("T", id="early"))
    task = await claim_one(store)
    cursor = await store.latest_cursor()
    loop = asyncio.get_running_loop()
    slow = asyncio.create_task(
        store.complete_and_claim([CompletionItem(task.id, task.attempt, {})])
    )
    try:
        assert await loop.run_in_executor(None, entered.wait, WAIT)
        await make_store("node-z").add_task(NewTask("T", id="late"))  # commits first
        seen = await store.changes_since(None, cursor)
        assert "early" not in {t.id for t in seen.tasks}
    finally:
        release.set()
        await slow
    resumed = await store.changes_since(None, seen.cursor)
    ids = {t.id for t in seen.tasks} | {t.id for t in resumed.tasks}
    assert {"early", "late"} <= ids
    early = next(t for t in resumed.tasks if t.id == "early")
    assert early.status is TaskStatus.COMPLETED
