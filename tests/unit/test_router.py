"""The worker's store router (`cluster.router.OwnerRouter`) remembers which owner granted each
claim, so that the claim's heartbeats and reports reach that owner.

The owner here is answered by its real SQLite store, without HTTP: what is tested is the
router's memory of who granted which attempt (tests/cluster runs the same over real nodes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fredica.cluster.router import OwnerRouter
from fredica.domain import errors
from fredica.domain.clock import ManualClock
from fredica.domain.models import ErrorType, NewPipeline, NewTask, Task, TaskStatus
from fredica.store.base import ClaimFilter, Failure, HeartbeatFeedback, Liveness
from fredica.store.sqlite import SQLiteTaskStore

TYPE = "TEST_REMOTE"
LIVENESS = Liveness(stale_after=10.0, reclaim_after=20.0, claim_timeout=60.0)


class StoreOwner:
    """A peer as the router calls it, answered by the peer's own store."""

    def __init__(self, store: SQLiteTaskStore) -> None:
        self.node_id = store.node_id
        self._store = store

    async def claim(self, flt: ClaimFilter, node_id: str) -> list[Task]:
        return await self._store.claim(flt, node_id)

    async def heartbeat(
        self, tasks: Sequence[tuple[str, int]], node_id: str, info: Any = None
    ) -> list[HeartbeatFeedback]:
        return await self._store.heartbeat(tasks, node_id)

    async def fail(self, failure: Failure, node_id: str) -> Task:
        return await self._store.fail(failure, node_id)


class OnePeer:
    """Membership with one peer that is always reachable."""

    def __init__(self, owner: StoreOwner) -> None:
        self.owner = owner

    def owners(self) -> list[Any]:
        return [self.owner]

    def unreachable(self, owner: Any, exc: errors.StoreError) -> None:
        raise AssertionError(f"the owner's store cannot be unreachable here: {exc}")


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[SQLiteTaskStore, SQLiteTaskStore]]:
    clock = ManualClock(1_000.0)
    a = SQLiteTaskStore(tmp_path / "a.db", "a", clock)
    b = SQLiteTaskStore(tmp_path / "b.db", "b", clock)
    yield a, b
    await a.close()
    await b.close()


async def test_an_old_attempt_that_learns_late_it_lost_leaves_the_new_attempt_routed(
    stores: tuple[SQLiteTaskStore, SQLiteTaskStore],
) -> None:
    a, b = stores
    clock = a.clock
    assert isinstance(clock, ManualClock)
    await a.create_pipeline(
        NewPipeline(template="custom", material_id="m", tasks=(NewTask(type=TYPE, id="t"),))
    )
    router = OwnerRouter(b, OnePeer(StoreOwner(a)))
    flt = ClaimFilter(limit=1, types=frozenset({TYPE}), start=True)

    # b claims attempt 1 of a's task; b falls silent for longer than reclaim_after, a takes
    # the task back, and b claims it again (attempt 2) before attempt 1 heard that it lost
    [first] = await router.claim(flt, "b")
    assert first.attempt == 1
    clock.advance(LIVENESS.stale_after + 1)
    await a.monitor(LIVENESS)
    clock.advance(LIVENESS.reclaim_after)
    await a.monitor(LIVENESS)
    clock.advance(60.0)  # past any retry back-off
    [second] = await router.claim(flt, "b")
    assert (second.id, second.attempt) == ("t", 2)

    # When attempt 1 stops and reports, the owner refuses it
    with pytest.raises(errors.StaleAttempt):
        await router.fail(Failure("t", 1, "lost the task", ErrorType.CANCELLED), "b")

    # Then attempt 2's heartbeats still go to a, which still counts it as b's
    clock.advance(1.0)
    [feedback] = await router.heartbeat([("t", 2)], "b")
    assert feedback.still_owned and feedback.status is TaskStatus.RUNNING
    row = await a.get_task("t")
    assert (row.attempt, row.claimed_by, row.heartbeat_at) == (2, "b", clock.now())

    # and its end reaches a too, after which the router forgets the claim
    done = await router.fail(Failure("t", 2, "bad input", ErrorType.PERMANENT), "b")
    assert done.status is TaskStatus.FAILED
    assert (await a.get_task("t")).status is TaskStatus.FAILED


class SilentOwner(StoreOwner):
    """An owner whose failure report never returns while `hold` is unset (a suspended
    owner: the request waits for its timeout)."""

    def __init__(self, store: SQLiteTaskStore) -> None:
        super().__init__(store)
        self.hold = asyncio.Event()

    async def fail(self, failure: Failure, node_id: str) -> Task:
        await self.hold.wait()
        return await super().fail(failure, node_id)


async def test_claims_of_says_what_this_node_runs_sent_and_keeps_for_an_owner(
    stores: tuple[SQLiteTaskStore, SQLiteTaskStore],
) -> None:
    """What a successor asks before it takes a silent owner's pipelines over: the claims held
    there, the reports on their way, acknowledged, or waiting in the outbox."""
    a, b = stores
    tasks = tuple(NewTask(type=TYPE, id=f"t{i}", priority=9 - i) for i in range(3))
    await a.create_pipeline(NewPipeline(template="custom", material_id="m", tasks=tasks))
    owner = SilentOwner(a)
    router = OwnerRouter(b, OnePeer(owner))
    flt = ClaimFilter(limit=3, types=frozenset({TYPE}), start=True)
    t0, t1, t2 = await router.claim(flt)
    # t0: failed, acknowledged by the owner; t1: its failure on the way; t2: still running
    owner.hold.set()
    await router.fail(Failure(t0.id, t0.attempt, "boom", ErrorType.PERMANENT))
    owner.hold.clear()
    pending = asyncio.create_task(
        router.fail(Failure(t1.id, t1.attempt, "late", ErrorType.PERMANENT))
    )
    await asyncio.sleep(0.01)
    # and a result kept in the outbox for that owner
    await b.outbox_put(a.node_id, "t9", 1, "complete", {"task_id": "t9", "attempt": 1})

    said = await router.claims_of(a.node_id)
    assert said["node_id"] == b.node_id
    assert said["running"] == [
        {"task_id": t1.id, "attempt": t1.attempt},
        {"task_id": t2.id, "attempt": t2.attempt},
    ]
    reports = {(r["kind"], r["body"]["task_id"], r["body"].get("error")) for r in said["reports"]}
    assert reports == {("fail", "t0", "boom"), ("fail", "t1", "late"), ("complete", "t9", None)}
    assert (await router.claims_of("somebody-else")) == {
        "node_id": b.node_id,
        "running": [],
        "reports": [],
    }
    owner.hold.set()
    await pending
    # once acknowledged, the on-the-way report is kept as acknowledged (once)
    kinds = [r["body"]["task_id"] for r in (await router.claims_of(a.node_id))["reports"]]
    assert sorted(kinds) == ["t0", "t1", "t9"]
