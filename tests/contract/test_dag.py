"""The DAG: claim order, children wait for every parent, skipped satisfies, upstream failure
cascades and a retry revives, a pipeline with an unknown dependency writes nothing."""

from __future__ import annotations

import pytest

from fredica.domain import errors
from fredica.domain.models import ErrorType, NewPipeline, NewTask, PipelineStatus, TaskStatus
from fredica.store.base import ClaimFilter, Failure

from .conftest import claim_one, complete, make_pipeline

S = TaskStatus


async def test_dag_order_priority_then_fifo(store, clock) -> None:
    await make_pipeline(
        store,
        NewTask("T", id="low-old", priority=1),
        NewTask("T", id="parent", priority=9),
        NewTask("T", id="child", priority=10, depends_on=("parent",)),
        NewTask("T", id="mid", priority=5),
    )
    clock.set(100.5)
    await store.create_pipeline(
        NewPipeline("custom", "m2", (NewTask("T", id="low-new", priority=1),))
    )
    clock.set(101.0)
    order = [t.id for t in await store.claim(ClaimFilter(limit=10))]
    assert order == ["parent", "mid", "low-old", "low-new"]  # child blocked by its parent
    parent = await store.start("parent", 1)
    await complete(store, parent)
    clock.set(103.0)
    assert [t.id for t in await store.claim(ClaimFilter(limit=10))] == ["child"]


async def test_children_wait_for_all_parents_and_skipped_satisfies(store, clock) -> None:
    await make_pipeline(
        store,
        NewTask("T", id="p1"),
        NewTask("T", id="p2"),
        NewTask("T", id="c", depends_on=("p1", "p2")),
    )
    clock.set(100.5)
    await store.skip_task("p2")
    clock.set(101.0)
    tasks = await store.claim(ClaimFilter(limit=10, start=True))
    assert [t.id for t in tasks] == ["p1"]
    await complete(store, tasks[0])
    clock.set(103.0)
    assert [t.id for t in await store.claim(ClaimFilter(limit=10))] == ["c"]


async def test_a_child_stays_blocked_until_its_last_parent_completes(store) -> None:
    await make_pipeline(
        store,
        NewTask("T", id="p1"),
        NewTask("T", id="p2"),
        NewTask("T", id="c", depends_on=("p1", "p2")),
    )
    parents = await store.claim(ClaimFilter(limit=10, start=True))
    assert sorted(t.id for t in parents) == ["p1", "p2"]
    await complete(store, parents[0])
    assert await store.claim(ClaimFilter(limit=10)) == []
    await complete(store, parents[1])
    assert [t.id for t in await store.claim(ClaimFilter(limit=10))] == ["c"]


async def test_failure_cascades_to_dependents_and_retry_revives_them(store, clock) -> None:
    pid = await make_pipeline(
        store,
        NewTask("T", id="a", max_retries=0),
        NewTask("T", id="b", depends_on=("a",)),
        NewTask("T", id="c", depends_on=("b",)),
    )
    task = await claim_one(store)
    clock.set(102.0)
    await store.fail(Failure("a", task.attempt, "bad", ErrorType.PERMANENT))
    for tid in ("b", "c"):
        t = await store.get_task(tid)
        assert (t.status, t.error_type) == (S.CANCELLED, "UPSTREAM_FAILED")
    assert (await store.get_pipeline(pid)).status is PipelineStatus.FAILED
    clock.set(103.0)
    await store.retry_task("a")
    assert [(await store.get_task(t)).status for t in "abc"] == [S.PENDING] * 3
    # every task is pending again: the derived status is back to pending (DESIGN §4.7)
    assert (await store.get_pipeline(pid)).status is PipelineStatus.PENDING
    clock.set(104.0)
    assert [t.id for t in await store.claim(ClaimFilter(limit=10))] == ["a"]


async def test_unknown_dependency_writes_nothing(store) -> None:
    with pytest.raises(errors.InvalidRequest, match="unknown task"):
        await store.create_pipeline(
            NewPipeline("custom", "m", (NewTask("T", id="a"), NewTask("T", depends_on=("zz",))))
        )
    assert await store.list_pipelines() == [] and await store.list_tasks() == []
