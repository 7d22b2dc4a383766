"""Whole-pipeline control: retry every failed or cancelled task at once, and delete a finished
pipeline with everything it left in the store."""

from __future__ import annotations

import pytest

from fredica.domain import errors
from fredica.domain.models import ErrorType, NewTask, PipelineStatus, TaskStatus
from fredica.store.base import ClaimFilter, Failure

from .conftest import claim_one, complete, make_pipeline, raw_execute
from .test_ownership import ORPHANS

S = TaskStatus


async def test_retry_pipeline_revives_every_failed_and_cancelled_task_at_once(store, clock) -> None:
    # Given a pipeline: a failed (its dependent cancelled upstream), b cancelled by the user,
    # c completed
    pid = await make_pipeline(
        store,
        NewTask("A", id="a", max_retries=0),
        NewTask("T", id="a-child", depends_on=("a",)),
        NewTask("B", id="b"),
        NewTask("C", id="c"),
    )
    clock.set(101.0)
    [c] = await store.claim(ClaimFilter(types=frozenset({"C"}), start=True))
    await complete(store, c)
    [a] = await store.claim(ClaimFilter(types=frozenset({"A"}), start=True))
    await store.fail(Failure(a.id, a.attempt, "broken", ErrorType.PERMANENT))
    await store.cancel_pipeline(pid)
    assert (await store.get_pipeline(pid)).status is PipelineStatus.CANCELLED
    assert (await store.get_task("a-child")).error_type == ErrorType.UPSTREAM_FAILED.value
    # When the whole pipeline is retried
    clock.set(102.0)
    retried = await store.retry_pipeline(pid)
    # Then every failed or cancelled task is pending again, as new; the completed one stays
    assert sorted(retried) == ["a", "a-child", "b"]
    for task_id in ("a", "a-child", "b"):
        task = await store.get_task(task_id)
        assert (task.status, task.error, task.error_type, task.retry_count) == (
            S.PENDING,
            None,
            None,
            0,
        )
    assert (await store.get_task("c")).status is S.COMPLETED
    pipeline = await store.get_pipeline(pid)
    assert pipeline.status is PipelineStatus.RUNNING and not pipeline.cancel_requested
    assert (pipeline.done_tasks, pipeline.total_tasks) == (1, 4)
    assert [e.event_type for e in await store.task_events("a")][-1] == "retried"
    assert [e.event_type for e in await store.task_events("a-child")][-1] == "revived"
    # and the work runs again in DAG order: a first, its child only after it
    ready = {t.id for t in await store.claim(ClaimFilter(limit=10, start=True))}
    assert ready == {"a", "b"}
    await complete(store, await store.get_task("a"))
    assert [t.id for t in await store.claim(ClaimFilter(limit=10))] == ["a-child"]


async def test_retry_pipeline_with_nothing_to_retry_is_refused_and_changes_nothing(
    store, clock
) -> None:
    pid = await make_pipeline(store, NewTask("T", id="a"), NewTask("T", id="b"))
    before = await store.get_pipeline(pid)
    with pytest.raises(errors.IllegalTransition, match="no failed or cancelled tasks"):
        await store.retry_pipeline(pid)
    assert await store.get_pipeline(pid) == before
    with pytest.raises(errors.NotFound, match="pipeline nope"):
        await store.retry_pipeline("nope")


async def test_delete_pipeline_removes_its_rows_and_counts_and_leaves_others(
    store, kind, target, clock
) -> None:
    # Given a finished pipeline (completed, failed, skipped and cancelled tasks, events,
    # dependency edges) next to an active one and a task outside any pipeline
    done = await make_pipeline(
        store,
        NewTask("A", id="d-a"),
        NewTask("B", id="d-b", depends_on=("d-a",), max_retries=0),
        NewTask("C", id="d-c", depends_on=("d-b",)),
        NewTask("D", id="d-d"),
        material="m-done",
    )
    other = await make_pipeline(store, NewTask("X", id="o-x"), material="m-other")
    await store.add_task(NewTask("S", id="solo"))
    clock.set(101.0)
    [a] = await store.claim(ClaimFilter(types=frozenset({"A"}), start=True))
    await complete(store, a)
    [b] = await store.claim(ClaimFilter(types=frozenset({"B"}), start=True))
    await store.fail(Failure(b.id, b.attempt, "broken", ErrorType.PERMANENT))
    await store.skip_task("d-d")
    assert (await store.get_pipeline(done)).status.is_terminal
    assert (await store.count_by_status())["failed"] == 1
    # When it is deleted
    removed = await store.delete_pipeline(done)
    # Then it, its tasks, their events and edges are gone, and the counts no longer hold them
    assert sorted(removed) == ["d-a", "d-b", "d-c", "d-d"]
    with pytest.raises(errors.NotFound):
        await store.get_pipeline(done)
    for task_id in removed:
        with pytest.raises(errors.NotFound):
            await store.get_task(task_id)
        assert await store.task_events(task_id) == []
    marks = ",".join("?" for _ in removed)
    for sql in (
        f"SELECT COUNT(*) FROM task_event WHERE task_id IN ({marks})",
        f"SELECT COUNT(*) FROM task_dep WHERE task_id IN ({marks}) OR parent_id IN ({marks})",
    ):
        params = removed * sql.count("IN (")
        assert raw_execute(kind, target, sql, params)[0][0] == 0
    # no event that names a task order lacks its task (the charts' read relies on it)
    assert raw_execute(kind, target, ORPHANS)[0][0] == 0
    counts = await store.count_by_status()
    assert (counts["pending"], counts["completed"], counts["failed"], counts["skipped"]) == (
        2,  # o-x, solo
        0,
        0,
        0,
    )
    assert [p.id for p in await store.list_pipelines()] == [other]
    assert {t.id for t in await store.list_tasks()} == {"o-x", "solo"}
    assert [e.event_type for e in await store.task_events("o-x")] == ["created"]
    # a pipeline for the same material and template can be created again
    again = await make_pipeline(store, NewTask("A"), material="m-done")
    assert again != done
    with pytest.raises(errors.NotFound, match=f"pipeline {done}"):
        await store.delete_pipeline(done)


async def test_delete_pipeline_with_active_tasks_is_refused_naming_how_many(store, clock) -> None:
    pid = await make_pipeline(
        store, NewTask("T", id="a"), NewTask("T", id="b"), NewTask("T", id="c")
    )
    clock.set(101.0)
    running = await claim_one(store)
    await store.skip_task("c")
    with pytest.raises(errors.Conflict, match="has 2 active tasks"):
        await store.delete_pipeline(pid)
    assert {t.id for t in await store.list_tasks(pid)} == {"a", "b", "c"}
    # cancelling leaves the running one active until its claimer stops it
    await store.cancel_pipeline(pid)
    with pytest.raises(errors.Conflict, match="has 1 active task;"):
        await store.delete_pipeline(pid)
    await store.fail(Failure(running.id, running.attempt, "stopped", ErrorType.CANCELLED))
    assert sorted(await store.delete_pipeline(pid)) == ["a", "b", "c"]
    assert await store.count_by_status() == {s.value: 0 for s in S}
