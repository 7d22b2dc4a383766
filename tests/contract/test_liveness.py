"""The owner's monitor, judged by the store's clock: running -> stale -> reclaimed -> pending,
stuck claims released."""

from __future__ import annotations

from fredica.domain.models import Affinity, CachePolicy, NewTask, TaskStatus
from fredica.store.base import Liveness

from .conftest import NODE, claim_one, make_pipeline

S = TaskStatus
LIVENESS = Liveness(stale_after=60, reclaim_after=300, claim_timeout=60)


async def test_liveness_stale_recover_reclaim(store, clock) -> None:
    await make_pipeline(
        store, NewTask("T", id="a", max_retries=1, cache_policy=CachePolicy.PREFER_ORIGINAL)
    )
    task = await claim_one(store)  # at 100.0
    clock.set(150.0)
    assert (await store.monitor(LIVENESS)).stale == []
    clock.set(161.0)
    assert (await store.monitor(LIVENESS)).stale == ["a"]
    # the worker comes back: stale -> running
    clock.set(170.0)
    fb = await store.heartbeat([("a", task.attempt)])
    assert fb[0].still_owned and (await store.get_task("a")).status is S.RUNNING
    clock.set(231.0)
    assert (await store.monitor(LIVENESS)).stale == ["a"]
    clock.set(471.0)
    report = await store.monitor(LIVENESS)
    assert report.reclaimed == ["a"] and report.failed == []
    t = await store.get_task("a")
    assert (t.status, t.retry_count, t.claimed_by) == (S.PENDING, 1, None)
    # PREFER_ORIGINAL: the retry prefers the node that held the task (soft, not pinned)
    assert t.affinity == Affinity.soft(NODE) and t.reclaimed_at == 471.0
    events = [e.event_type for e in await store.task_events("a")]
    assert events[-4:] == ["recovered", "stale", "reclaimed", "requeued"]
    # the zombie learns it lost the task; the answer names the attempt it is about
    clock.set(472.0)
    [late] = await store.heartbeat([("a", task.attempt)])
    assert not late.still_owned and late.attempt == task.attempt


async def test_reclaim_without_retries_left_fails_the_task(store, clock) -> None:
    await make_pipeline(store, NewTask("T", id="a", max_retries=0))
    await claim_one(store)
    clock.set(161.0)
    await store.monitor(LIVENESS)
    clock.set(401.0)
    report = await store.monitor(LIVENESS)
    assert report.reclaimed == ["a"] and [t.id for t in report.failed] == ["a"]
    assert (await store.get_task("a")).status is S.FAILED


async def test_stuck_claims_are_released(store, clock) -> None:
    await make_pipeline(store, NewTask("T", id="a"))
    await claim_one(store, start=False)  # at 100.0
    clock.set(200.0)
    assert (await store.monitor(LIVENESS)).released == ["a"]
    assert (await store.get_task("a")).status is S.PENDING
