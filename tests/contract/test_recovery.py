"""Start-up recovery (seed 000's five steps) and recalculation."""

from __future__ import annotations

import pytest

from fredica.domain import errors
from fredica.domain.models import NewTask, PipelineStatus, TaskStatus
from fredica.store.base import ClaimFilter

from .conftest import NODE, make_pipeline, raw_execute

S = TaskStatus


async def test_startup_recovery_five_steps(store, clock, kind, target) -> None:
    pid = await make_pipeline(
        store,
        NewTask("T", id="running", max_retries=1),
        NewTask("T", id="running-last", max_retries=0),
        NewTask("T", id="claimed"),
        NewTask("T", id="waiting", depends_on=("running",)),
    )
    clock.set(101.0)
    await store.claim(ClaimFilter(limit=2, start=True))
    await store.claim(ClaimFilter(limit=1, start=False))
    orphan = await store.add_task(NewTask("T", id="orphan"))
    assert orphan.pipeline_id is None
    # a pipeline status left behind by a crash
    damage = "UPDATE pipeline_instance SET status = 'completed' WHERE id = ?"
    raw_execute(kind, target, damage, [pid])

    clock.set(200.0)
    report = await store.recover_startup()

    assert sorted(t.id for t in report.snapshot) == ["claimed", "running", "running-last"]
    claimed = await store.get_task("claimed")
    assert (claimed.status, claimed.retry_count) == (S.PENDING, 0)
    r = await store.get_task("running")
    assert (r.status, r.retry_count, r.error, r.error_type) == (
        S.PENDING,
        1,
        "interrupted by restart",
        "TRANSIENT",
    )
    assert (await store.get_task("running-last")).status is S.FAILED
    assert [t.id for t in report.failed] == ["running-last"]
    assert (await store.get_task("orphan")).status is S.FAILED and report.orphans == 1
    assert (report.requeued, report.requeued_after_interrupt) == (1, 1)
    log = {entry.task_id: entry for entry in await store.restart_log()}
    assert log["running"].action == "interrupted" and log["claimed"].action == "requeued"
    assert log["orphan"].action == "orphaned"
    assert {entry.node_id for entry in log.values()} == {NODE}
    assert log["running"].restarted_at == 200.0
    # step 5 repaired the pipeline status that was left behind, with exact counters
    pipeline = await store.get_pipeline(pid)
    assert pipeline.status is PipelineStatus.RUNNING
    assert (pipeline.total_tasks, pipeline.pending_tasks, pipeline.failed_tasks) == (4, 3, 1)
    clock.set(201.0)
    recounted = await store.recalculate(pid)
    ignore = {"updated_at": 0, "change_seq": 0}
    assert recounted.to_json() | ignore == pipeline.to_json() | ignore
    assert report.pipelines_reconciled >= 0


async def test_recovery_of_another_node_leaves_this_nodes_work_alone(store, clock) -> None:
    await make_pipeline(store, NewTask("T", id="mine"), NewTask("T", id="theirs"))
    await store.claim(ClaimFilter(limit=1, start=True))
    [theirs] = await store.claim(ClaimFilter(limit=1, start=True), "node-b")
    clock.set(200.0)
    report = await store.recover_startup("node-b")
    assert [t.id for t in report.snapshot] == [theirs.id]
    assert (await store.get_task(theirs.id)).status is S.PENDING
    mine = next(t for t in await store.list_tasks() if t.id != theirs.id)
    assert mine.status is S.RUNNING and mine.claimed_by == NODE


async def test_recalculate_repairs_counters(store, kind, target) -> None:
    pid = await make_pipeline(store, NewTask("T", id="a"), NewTask("T", id="b"))
    damage = "UPDATE pipeline_instance SET status = 'failed', n_pending = 0 WHERE id = ?"
    raw_execute(kind, target, damage, [pid])
    assert (await store.get_pipeline(pid)).status is PipelineStatus.FAILED
    repaired = await store.recalculate(pid)
    assert repaired.status is PipelineStatus.PENDING
    assert (repaired.total_tasks, repaired.pending_tasks) == (2, 2)
    with pytest.raises(errors.NotFound):
        await store.recalculate("no-such-pipeline")
