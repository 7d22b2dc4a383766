"""Which rows a store is authoritative for. SQLite: the rows its node owns (`owner_id`), so
another owner's rows in the same file (replicas) are never claimed, marked stale, reclaimed or
recovered by it. PostgreSQL: the database owns every row, so any node claims and reclaims any
task. Each kind asserts its documented behaviour."""

from __future__ import annotations

from fredica.domain.models import NewTask, TaskStatus
from fredica.store.base import ClaimFilter, Liveness

from .conftest import NODE, make_pipeline

S = TaskStatus
LIVENESS = Liveness(stale_after=60, reclaim_after=300, claim_timeout=60)


async def test_claims_take_only_the_rows_the_store_is_authoritative_for(
    kind, make_store, store
) -> None:
    other = make_store("node-z")
    await make_pipeline(other, NewTask("T", id="z1"), material="mz")
    await make_pipeline(store, NewTask("T", id="a1"), material="ma")
    assert (await store.get_task("z1")).owner_id == "node-z"

    claimed = await store.claim(ClaimFilter(limit=10))

    if kind == "sqlite":
        assert [t.id for t in claimed] == ["a1"]
        assert (await store.get_task("z1")).status is S.PENDING
        # the owner itself can claim it: the row is not merely unclaimable
        [z1] = await other.claim(ClaimFilter(limit=10))
        assert (z1.id, z1.claimed_by) == ("z1", "node-z")
    else:
        assert sorted(t.id for t in claimed) == ["a1", "z1"]
        assert {t.claimed_by for t in claimed} == {NODE}


async def test_monitor_acts_only_on_the_rows_the_store_is_authoritative_for(
    kind, make_store, store, clock
) -> None:
    other = make_store("node-z")
    await make_pipeline(other, NewTask("T", id="z1"), NewTask("T", id="z2"), material="mz")
    await other.claim(ClaimFilter(limit=1, start=True))
    await other.claim(ClaimFilter(limit=1))  # at 100.0: one running, one claimed
    statuses = {t.id: t.status for t in await other.list_tasks()}
    assert sorted(statuses.values()) == [S.CLAIMED, S.RUNNING]
    running_id = next(i for i, s in statuses.items() if s is S.RUNNING)
    claimed_id = next(i for i, s in statuses.items() if s is S.CLAIMED)

    clock.set(200.0)
    first = await store.monitor(LIVENESS)
    clock.set(1000.0)
    second = await store.monitor(LIVENESS)

    if kind == "sqlite":
        assert first.empty and second.empty
        after = {t.id: t.status for t in await store.list_tasks()}
        assert after == statuses
        # the owner's monitor does act on them
        report = await other.monitor(LIVENESS)
        assert (report.stale, report.released) == ([running_id], [claimed_id])
    else:
        assert (first.stale, first.released) == ([running_id], [claimed_id])
        assert second.reclaimed == [running_id]
        reclaimed = await store.get_task(running_id)
        assert (reclaimed.status, reclaimed.claimed_by) == (S.PENDING, None)
        assert (await store.get_task(claimed_id)).status is S.PENDING


async def test_recovery_acts_only_on_the_rows_the_store_is_authoritative_for(
    kind, make_store, store, clock
) -> None:
    other = make_store("node-z")
    await make_pipeline(other, NewTask("T", id="z-run"), material="mz")
    await other.claim(ClaimFilter(limit=1, start=True))
    await other.add_task(NewTask("T", id="z-orphan"))

    clock.set(200.0)
    report = await store.recover_startup("node-z")

    if kind == "sqlite":
        assert (report.snapshot, report.orphans, report.failed) == ([], 0, [])
        assert (await store.get_task("z-run")).status is S.RUNNING
        assert (await store.get_task("z-orphan")).status is S.PENDING
        assert await store.restart_log() == []
        # node-z's own recovery does reset them
        own = await other.recover_startup()
        assert [t.id for t in own.snapshot] == ["z-run"] and own.orphans == 1
    else:
        assert [t.id for t in report.snapshot] == ["z-run"] and report.orphans == 1
        assert (await store.get_task("z-run")).status is S.PENDING
        assert (await store.get_task("z-orphan")).status is S.FAILED
        assert {e.task_id for e in await store.restart_log()} == {"z-run", "z-orphan"}
