"""What a node of a home cluster keeps about the others: the result outbox, replicas of other
owners' rows merged by (owner_id, change_seq), digests, and the owner forgiving the silence of
its claimers while it was down itself."""

from __future__ import annotations

import dataclasses

import pytest

from fredica.domain import errors
from fredica.domain.models import NewTask, TaskStatus
from fredica.store.base import ChangeBatch, Liveness

from .conftest import claim_one, complete, make_pipeline

OWNER = "node-o"


async def owner_changes(owner, cursor: int = 0) -> ChangeBatch:
    return await owner.changes_since(OWNER, cursor)


async def test_a_replica_merged_in_any_order_and_twice_hashes_like_the_owner(
    make_store, store
) -> None:
    owner = make_store(OWNER)
    await make_pipeline(owner, NewTask("T", id="o1"), NewTask("T", id="o2"))
    first = await owner_changes(owner)
    task = await claim_one(owner)
    await complete(owner, task)
    second = await owner_changes(owner, first.cursor)

    # newer first, then the older batch, then the newer again: the newest change wins
    assert await store.apply_replica(OWNER, second) > 0
    assert await store.apply_replica(OWNER, first) < len(first.tasks) + len(first.pipelines)
    assert await store.apply_replica(OWNER, second) == 0

    assert await store.digest(OWNER, replica=True) == await owner.digest(OWNER, replica=False)
    replica = await store.replica_task(task.id)
    assert replica is not None and replica.status is TaskStatus.COMPLETED
    assert replica.owner_id == OWNER
    assert await store.replica_cursor(OWNER) == second.cursor
    assert OWNER in await store.replica_freshness()


async def test_a_batch_with_rows_of_another_owner_is_refused_whole(make_store, store) -> None:
    owner = make_store(OWNER)
    await make_pipeline(owner, NewTask("T", id="o1"))
    batch = await owner_changes(owner)
    stranger = dataclasses.replace(batch.tasks[0], id="x1", owner_id="node-x")
    bad = ChangeBatch([*batch.tasks, stranger], batch.pipelines, batch.cursor)
    with pytest.raises(errors.InvalidRequest, match="node-x"):
        await store.apply_replica(OWNER, bad)
    assert await store.replica_task("o1") is None
    assert await store.replica_cursor(OWNER) == 0
    with pytest.raises(errors.InvalidRequest):
        await store.apply_replica(store.node_id, batch)


async def test_replicas_list_by_pipeline_and_status(make_store, store) -> None:
    owner = make_store(OWNER)
    pid = await make_pipeline(owner, NewTask("T", id="o1"), NewTask("T", id="o2"))
    await claim_one(owner)
    await store.apply_replica(OWNER, await owner_changes(owner))
    listed = await store.replica_tasks(pipeline_id=pid)
    assert sorted(t.id for t in listed) == ["o1", "o2"]
    running = await store.replica_tasks(status=["running"])
    assert len(running) == 1 and running[0].claimed_by == OWNER
    pipelines = await store.replica_pipelines()
    assert [p.id for p in pipelines] == [pid]
    assert (await store.replica_pipeline(pid)) == pipelines[0]
    assert await store.replica_tasks(pipeline_id="nope") == []


async def test_the_outbox_keeps_one_result_per_attempt_until_done(store) -> None:
    await store.outbox_put(OWNER, "t1", 1, "complete", {"result": {"n": 1}})
    await store.outbox_put(OWNER, "t1", 1, "complete", {"result": {"n": 2}})  # a repeat
    await store.outbox_put(OWNER, "t2", 3, "fail", {"error": "boom"})
    items = await store.outbox_list()
    assert [(i.task_id, i.attempt, i.kind) for i in items] == [
        ("t1", 1, "complete"),
        ("t2", 3, "fail"),
    ]
    assert items[0].body == {"result": {"n": 1}} and items[0].owner_id == OWNER
    await store.outbox_tried(items[0].id, "owner unreachable")
    again = await store.outbox_list()
    assert again[0].tries == 1 and again[0].last_error == "owner unreachable"
    await store.outbox_done(items[0].id)
    assert [i.task_id for i in await store.outbox_list()] == ["t2"]


async def test_after_its_own_downtime_an_owner_forgives_its_claimers_silence(store, clock) -> None:
    await make_pipeline(store, NewTask("T", id="mine"), NewTask("T", id="theirs"))
    await claim_one(store)  # this node runs one
    await claim_one(store, node_id="node-b")  # a peer runs the other
    clock.advance(1000)  # the owner was down far longer than reclaim_after
    assert await store.forgive_silence() == 1
    report = await store.monitor(Liveness(stale_after=10, reclaim_after=20, claim_timeout=5))
    theirs = [t for t in (await store.list_tasks()) if t.claimed_by == "node-b"]
    assert theirs and theirs[0].status is TaskStatus.RUNNING
    assert theirs[0].id not in report.stale + report.reclaimed


async def test_a_pipeline_the_owner_deletes_leaves_the_replicas_too(make_store, store) -> None:
    owner = make_store(OWNER)
    pid = await make_pipeline(owner, NewTask("T", id="o1"), NewTask("T", id="o2"))
    await store.apply_replica(OWNER, await owner_changes(owner))
    assert await store.replica_pipeline(pid) is not None
    cursor = await store.replica_cursor(OWNER)
    # the owner finishes and deletes the pipeline
    for _ in range(2):
        await complete(owner, await claim_one(owner))
    await owner.delete_pipeline(pid)
    later = await owner_changes(owner, cursor)
    assert sorted(later.deleted) == [("pipeline", pid), ("task", "o1"), ("task", "o2")]
    # applying the feed drops the copies, and the replica hashes like the owner again
    await store.apply_replica(OWNER, later)
    assert await store.replica_pipeline(pid) is None
    assert await store.replica_tasks(pipeline_id=pid) == []
    assert await store.digest(OWNER, replica=True) == await owner.digest(OWNER, replica=False)


async def test_a_batch_read_before_a_delete_and_applied_after_it_does_not_resurrect(
    make_store, store
) -> None:
    # Given a replica that read the owner's pipeline in one pull (not applied yet)...
    owner = make_store(OWNER)
    pid = await make_pipeline(owner, NewTask("T", id="o1"))
    early = await owner_changes(owner)
    await complete(owner, await claim_one(owner))
    await owner.delete_pipeline(pid)
    # ...and the delete in a second pull that lands first
    late = await owner_changes(owner)
    assert ("pipeline", pid) in late.deleted
    await store.apply_replica(OWNER, late)

    # When the early batch is applied afterwards (twice, for good measure)
    for _ in range(2):
        assert await store.apply_replica(OWNER, early) == 0

    # Then the deleted rows stay gone and the replica hashes like the owner
    assert await store.replica_pipeline(pid) is None
    assert await store.replica_task("o1") is None
    assert await store.digest(OWNER, replica=True) == await owner.digest(OWNER, replica=False)
