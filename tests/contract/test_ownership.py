"""Ownership that moves (DESIGN §4.11): a pipeline adopted by another node's store, from a
hand-off (rows and events) or from a replica (a takeover), and the old owner demoted to a
replica of it. Home-cluster stores only: on PostgreSQL the database owns every row."""

from __future__ import annotations

from pathlib import Path

import pytest

from fredica.domain import errors
from fredica.domain.clock import ManualClock
from fredica.domain.models import NewTask, TaskStatus
from fredica.store.base import ChangeBatch, ClaimFilter, CompletionItem
from fredica.store.sqlite import SQLiteTaskStore

from .conftest import PG_KINDS, claim_one, complete, make_pipeline

ORPHANS = (
    "SELECT COUNT(*) FROM task_event e WHERE e.task_ord <> 0 "
    "AND NOT EXISTS (SELECT 1 FROM task t WHERE t.id = e.task_id)"
)

OLD, NEW, PEER = "node-o", "node-n", "node-p"
MOVE = {"previous": OLD, "how": "takeover"}


@pytest.fixture
async def nodes(tmp_path: Path, clock: ManualClock):
    """Three nodes with a SQLite file each: the old owner, its successor, a third peer."""
    stores = {n: SQLiteTaskStore(tmp_path / f"{n}.db", n, clock=clock) for n in (OLD, NEW, PEER)}
    yield stores
    for s in stores.values():
        await s.close()


async def feed(owner, cursor: int = 0) -> ChangeBatch:
    return await owner.changes_since(owner.node_id, cursor)


async def _owner_with_work(old) -> str:
    pid = await make_pipeline(
        old,
        NewTask("T", id="t1", priority=9),
        NewTask("T", id="t2", depends_on=("t1",)),
        NewTask("T", id="t3", priority=8),
    )
    await complete(old, await claim_one(old, node_id=PEER))  # t1 done by the peer
    await claim_one(old, node_id=PEER)  # t3 running on the peer
    return pid


async def test_a_takeover_from_the_replica_makes_the_successor_the_owner(nodes, clock) -> None:
    old, new = nodes[OLD], nodes[NEW]
    pid = await _owner_with_work(old)
    await new.apply_replica(OLD, await feed(old))

    transfer = await new.replica_transfer(pid)
    clock.advance(5000)  # the old owner has been silent for a long time
    assert await new.adopt_pipeline(transfer, 1, MOVE) is True
    assert await new.adopt_pipeline(transfer, 1, MOVE) is False  # repeated: harmless

    pipeline = await new.get_pipeline(pid)
    assert (pipeline.owner_id, pipeline.owner_epoch) == (NEW, 1)
    assert pipeline.created_by == OLD
    assert pipeline.owner_history[-1]["how"] == "takeover"
    assert pipeline.owner_since == clock.now()
    assert pipeline.done_tasks == 1 and pipeline.total_tasks == 3
    assert await new.replica_pipeline(pid) is None and await new.replica_task("t1") is None
    # t2's parent is done: ready at the new owner; t3 still runs on the peer, heard from now
    ready = await new.claim(ClaimFilter(limit=5, start=True))
    assert [t.id for t in ready] == ["t2"]
    t3 = await new.get_task("t3")
    assert t3.status is TaskStatus.RUNNING and t3.claimed_by == PEER
    assert t3.heartbeat_at == clock.now()
    # the peer's running attempt reports to the new owner as it did to the old one
    done, _ = await new.complete_and_claim(
        [CompletionItem("t3", t3.attempt, {"ok": True})], node_id=PEER
    )
    assert not isinstance(done[0], errors.FredicaError)
    assert [e.event_type for e in await new.task_events("t3")][-1] == "completed"
    assert "owner_changed" in [e.event_type for e in await new.task_events("t3")]
    assert await new.moved_away(OLD) == [(pid, NEW, 1)]


async def test_a_hand_off_carries_the_events_and_demotes_the_old_owner(nodes) -> None:
    old, new, peer = nodes[OLD], nodes[NEW], nodes[PEER]
    pid = await _owner_with_work(old)
    await peer.apply_replica(OLD, await feed(old))
    before = await old.task_events("t1")

    transfer = await old.export_pipeline(pid)
    assert await new.adopt_pipeline(transfer, 1, {"previous": OLD, "how": "handoff"})
    assert [e.event_type for e in await new.task_events("t1")][: len(before)] == [
        e.event_type for e in before
    ]
    cursor = await old.latest_cursor()
    demoted = await old.demote_pipeline(await new.export_pipeline(pid))
    assert sorted(demoted) == ["t1", "t2", "t3"]
    assert await old.demote_pipeline(await new.export_pipeline(pid)) == []  # once
    with pytest.raises(errors.NotFound):
        await old.get_pipeline(pid)
    # its events left with its tasks: no event that names a task order lacks its task (the
    # charts' read relies on it, `SQLStore.timeline_rows`)
    assert await old._read(lambda conn: conn.execute(ORPHANS).fetchone()[0]) == 0
    replica = await old.replica_pipeline(pid)
    assert replica is not None and (replica.owner_id, replica.owner_epoch) == (NEW, 1)

    # the peer: the old owner's feed drops its copies, the new owner's brings them back
    await peer.apply_replica(OLD, await feed(old, cursor))
    assert await peer.replica_pipeline(pid) is None
    await peer.apply_replica(NEW, await feed(new))
    assert (await peer.replica_pipeline(pid)).owner_id == NEW  # type: ignore[union-attr]
    assert await peer.digest(NEW, replica=True) == await new.digest(NEW, replica=False)


async def test_an_old_owners_rows_never_replace_its_successors(nodes) -> None:
    old, new, peer = nodes[OLD], nodes[NEW], nodes[PEER]
    pid = await _owner_with_work(old)
    stale = await feed(old)
    await new.apply_replica(OLD, stale)
    await new.adopt_pipeline(await new.replica_transfer(pid), 1, MOVE)
    await peer.apply_replica(NEW, await feed(new))
    # the old owner, back from sleep, still changes its copy and its feed arrives late
    await complete(old, await old.get_task("t3"))
    await peer.apply_replica(OLD, await feed(old))
    assert (await peer.replica_task("t3")).owner_id == NEW  # type: ignore[union-attr]
    assert (await peer.replica_task("t3")).status is TaskStatus.RUNNING  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_results_in_the_outbox_follow_the_task_to_its_new_owner(store) -> None:
    await store.outbox_put(OLD, "t1", 1, "complete", {"result": {}})
    await store.outbox_put(OLD, "x9", 1, "complete", {"result": {}})
    assert await store.outbox_readdress(["t1"], NEW) == 1
    assert {i.task_id: i.owner_id for i in await store.outbox_list()} == {"t1": NEW, "x9": OLD}


@pytest.mark.parametrize("kind", PG_KINDS)
async def test_postgres_refuses_to_move_a_pipeline(store) -> None:
    pid = await make_pipeline(store, NewTask("T", id="p1"))
    transfer = await store.export_pipeline(pid)
    with pytest.raises(errors.InvalidRequest, match="PostgreSQL"):
        await store.adopt_pipeline(transfer, 1, MOVE)
    with pytest.raises(errors.InvalidRequest, match="PostgreSQL"):
        await store.demote_pipeline(transfer)


async def test_a_store_lists_the_pipelines_that_moved_to_it(nodes) -> None:
    old, new = nodes[OLD], nodes[NEW]
    pid = await _owner_with_work(old)
    await make_pipeline(new, NewTask("T", id="own1"))  # never moved: not listed
    assert await new.adopted() == []
    await new.adopt_pipeline(await old.export_pipeline(pid), 1, MOVE)
    assert await new.adopted() == [(pid, OLD, 1)]


async def test_a_takeover_settles_what_the_replica_missed_with_the_peers_word(nodes, clock) -> None:
    """The replica was pulled before the old owner granted its last claims and accepted its
    last result (node/settle.py): the peer's word makes those rows right before anything of
    the pipeline can be claimed at the successor, so nothing runs twice."""
    from fredica.cluster import protocol
    from fredica.node import settle

    old, new = nodes[OLD], nodes[NEW]
    pid = await make_pipeline(
        old,
        NewTask("T", id="t1", priority=9),
        NewTask("T", id="t2", depends_on=("t1",)),
        NewTask("T", id="t3", priority=8),
        NewTask("T", id="t4", priority=1),
    )
    await new.apply_replica(OLD, await feed(old))  # every task pending in the replica
    t1 = await claim_one(old, node_id=PEER)
    done = CompletionItem("t1", t1.attempt, {"by": "peer"})
    await old.complete_and_claim([done], node_id=PEER)  # accepted, not replicated
    t3 = await claim_one(old, node_id=PEER)  # granted, not replicated
    assert t3.id == "t3"
    answer = {
        "node_id": PEER,
        "running": [{"task_id": "t3", "attempt": t3.attempt}],
        "reports": [
            {"kind": "complete", "attempt": t1.attempt, "body": protocol.completion_to_json(done)},
            # a zombie's word (an attempt older than the replica knows) changes nothing
            {"kind": "complete", "attempt": -1, "body": {"task_id": "t4", "attempt": -1}},
        ],
    }
    words = settle.words_of(answer)
    transfer, reports = settle.patch(await new.replica_transfer(pid), words, clock.now())
    assert [w.task_id for w in reports] == ["t1"]

    assert await new.adopt_pipeline(transfer, 1, MOVE)
    for word in reports:
        item = protocol.completion_from_json(word.body)
        outcome = (await new.complete_and_claim([item], None, word.node_id))[0][0]
        assert not isinstance(outcome, errors.FredicaError)
    # t1 is done with the peer's result, t3 runs on the peer: only t2 and t4 are claimable
    assert (await new.get_task("t1")).result == {"by": "peer"}
    assert (await new.get_task("t1")).status is TaskStatus.COMPLETED
    running = await new.get_task("t3")
    assert (running.status, running.claimed_by, running.attempt) == (
        TaskStatus.RUNNING,
        PEER,
        t3.attempt,
    )
    ready = await new.claim(ClaimFilter(limit=10, start=True))
    assert sorted(t.id for t in ready) == ["t2", "t4"]
    # the peer's running attempt reports to the new owner
    outcome = (await new.complete_and_claim([CompletionItem("t3", t3.attempt, {})], node_id=PEER))[
        0
    ][0]
    assert not isinstance(outcome, errors.FredicaError)
