"""Task transitions and their refusals, retries per error class, derived pipeline status."""

from __future__ import annotations

import pytest

from fredica.domain import errors
from fredica.domain.models import ErrorType, NewTask, PipelineStatus, TaskStatus
from fredica.store.base import ClaimFilter, CompletionItem, Failure

from .conftest import NODE, claim_one, complete, make_pipeline

S = TaskStatus


async def test_claim_start_complete_records_every_transition(store, clock) -> None:
    pid = await make_pipeline(store, NewTask("T", id="a"))
    clock.set(101.0)
    task = await claim_one(store, start=False)
    assert (task.status, task.attempt, task.claimed_by) == (S.CLAIMED, 1, NODE)
    clock.set(101.5)
    running = await store.start("a", 1)
    assert running.status is S.RUNNING and running.started_at == 101.5
    clock.set(102.0)
    done = await complete(store, running, result={"x": 1})
    assert done.status is S.COMPLETED and done.result == {"x": 1} and done.progress == 100
    assert [e.event_type for e in await store.task_events("a")] == [
        "created",
        "claimed",
        "running",
        "completed",
    ]
    pipeline = await store.get_pipeline(pid)
    assert pipeline.status is PipelineStatus.COMPLETED
    assert (pipeline.total_tasks, pipeline.done_tasks) == (1, 1)
    assert pipeline.completed_at == 102.0


@pytest.mark.parametrize("action", ["complete", "start", "fail", "retry", "skip", "cancel"])
async def test_illegal_transitions_are_refused_and_change_nothing(store, clock, action) -> None:
    await make_pipeline(store, NewTask("T", id="a"))
    clock.set(101.0)
    task = await claim_one(store)
    clock.set(102.0)
    done = await complete(store, task)
    before = await store.get_task("a")
    clock.set(103.0)
    with pytest.raises((errors.IllegalTransition, errors.StaleAttempt)):
        if action == "complete":
            await complete(store, done)
        elif action == "start":
            await store.start("a", done.attempt)
        elif action == "fail":
            await store.fail(Failure("a", done.attempt, "x", ErrorType.TRANSIENT))
        elif action == "retry":
            await store.retry_task("a")
        elif action == "skip":
            await store.skip_task("a")
        else:
            await store.cancel_task("a")
    assert await store.get_task("a") == before


async def test_retry_of_a_running_task_is_refused(store) -> None:
    await make_pipeline(store, NewTask("T", id="a"))
    await claim_one(store)
    with pytest.raises(errors.IllegalTransition, match="only failed or cancelled"):
        await store.retry_task("a")
    with pytest.raises(errors.IllegalTransition, match="only pending, failed or cancelled"):
        await store.skip_task("a")


@pytest.mark.parametrize(
    ("error_type", "retry_count", "status", "stored"),
    [
        (ErrorType.TRANSIENT, 1, S.PENDING, "TRANSIENT"),
        (ErrorType.RESOURCE, 1, S.PENDING, "RESOURCE"),
        (ErrorType.RATE_LIMITED, 1, S.PENDING, "RATE_LIMITED"),
        (ErrorType.PERMANENT, 0, S.FAILED, "PERMANENT"),
        (ErrorType.PAYLOAD_ERROR, 0, S.FAILED, "PERMANENT"),
        (ErrorType.AWAITING_CREDENTIAL, 0, S.FAILED, "AWAITING_CREDENTIAL"),
        (ErrorType.CANCELLED, 0, S.CANCELLED, "CANCELLED"),
    ],
)
async def test_retry_per_error_class(store, error_type, retry_count, status, stored) -> None:
    await make_pipeline(store, NewTask("T", id="a", max_retries=3))
    task = await claim_one(store)
    after = await store.fail(Failure("a", task.attempt, "boom", error_type))
    assert (after.status, after.retry_count, after.error_type) == (status, retry_count, stored)


async def test_retries_exhaust_into_failed(store, clock) -> None:
    await make_pipeline(store, NewTask("T", id="a", max_retries=2))
    for i in range(3):
        clock.set(101.0 + i)
        task = await claim_one(store)
        clock.set(101.5 + i)
        after = await store.fail(Failure("a", task.attempt, "net", ErrorType.TRANSIENT))
    assert after.status is S.FAILED and after.retry_count == 2 and after.attempt == 3


@pytest.mark.parametrize(
    ("outcomes", "cancel", "expected"),
    [
        (["completed", "completed"], False, PipelineStatus.COMPLETED),
        (["completed", "skipped"], False, PipelineStatus.COMPLETED),
        (["completed", "failed"], False, PipelineStatus.PARTIAL_FAILED),
        (["failed", "failed"], False, PipelineStatus.FAILED),
        (["completed", "cancelled"], False, PipelineStatus.COMPLETED),
        (["completed", "cancelled"], True, PipelineStatus.CANCELLED),
    ],
)
async def test_pipeline_status_for_each_outcome(store, clock, outcomes, cancel, expected) -> None:
    pid = await make_pipeline(
        store, NewTask("T", id="t0", max_retries=0), NewTask("T", id="t1", max_retries=0)
    )
    assert (await store.get_pipeline(pid)).status is PipelineStatus.PENDING
    clock.set(101.0)
    for i, outcome in enumerate(outcomes):
        tid = f"t{i}"
        if outcome == "skipped":
            await store.skip_task(tid)
            continue
        if outcome == "cancelled":
            if cancel:
                await store.cancel_pipeline(pid)
            else:
                await store.cancel_task(tid)
            continue
        task = (await store.claim(ClaimFilter(limit=1, start=True)))[0]
        assert (await store.get_pipeline(pid)).status is PipelineStatus.RUNNING
        if outcome == "completed":
            await complete(store, task)
        else:
            await store.fail(Failure(task.id, task.attempt, "x", ErrorType.PERMANENT))
    pipeline = await store.get_pipeline(pid)
    assert pipeline.status is expected
    assert pipeline.completed_at is not None
    # the incrementally maintained counters agree with a full recount
    clock.set(200.0)
    recounted = await store.recalculate(pid)
    ignore = {"updated_at": 0, "change_seq": 0}
    assert recounted.to_json() | ignore == pipeline.to_json() | ignore


async def test_cancel_running_task_is_requested_not_applied(store, clock) -> None:
    pid = await make_pipeline(store, NewTask("T", id="a"), NewTask("T", id="b"))
    running = await claim_one(store)
    clock.set(102.0)
    outcome = await store.cancel_task(running.id)
    assert not outcome.cancelled and outcome.running_on == NODE
    assert (await store.get_task(running.id)).cancel_requested
    clock.set(102.5)
    outcomes = await store.cancel_pipeline(pid)
    assert [o.task_id for o in outcomes] == [running.id]
    assert (await store.get_pipeline(pid)).status is PipelineStatus.CANCELLING
    clock.set(103.0)
    await store.fail(Failure(running.id, running.attempt, "cancelled", ErrorType.CANCELLED))
    assert (await store.get_pipeline(pid)).status is PipelineStatus.CANCELLED
    with pytest.raises(errors.IllegalTransition):
        await store.cancel_pipeline(pid)


async def test_complete_and_claim_in_one_transaction(store, clock) -> None:
    await make_pipeline(
        store,
        NewTask("T", id="a"),
        NewTask("T", id="b", depends_on=("a",)),
        NewTask("T", id="c"),
    )
    clock.set(101.0)
    first = (await store.claim(ClaimFilter(limit=1, start=True)))[0]
    assert first.id == "a"
    cursor_before = await store.latest_cursor()
    clock.set(102.0)
    done, claimed = await store.complete_and_claim(
        [CompletionItem("a", first.attempt, {"ok": 1})], ClaimFilter(limit=5, start=True)
    )
    # the completion made b ready inside the same transaction, so b is claimed with c
    assert [t.status for t in done if not isinstance(t, Exception)] == [S.COMPLETED]
    assert sorted(t.id for t in claimed) == ["b", "c"]
    assert all(t.status is S.RUNNING and t.claimed_by == NODE for t in claimed)
    # one transaction: every row it touched carries the same change sequence, the only one
    # after the cursor taken before it
    seqs = {(await store.get_task(t)).change_seq for t in ("a", "b", "c")}
    assert len(seqs) == 1 and seqs.pop() > cursor_before
    batch = await store.changes_since(None, cursor_before)
    assert sorted(t.id for t in batch.tasks) == ["a", "b", "c"]
    assert len({t.change_seq for t in batch.tasks} | {p.change_seq for p in batch.pipelines}) == 1
    # a refused completion does not stop the claim
    clock.set(103.0)
    done, claimed = await store.complete_and_claim(
        [CompletionItem("a", first.attempt, {})], ClaimFilter(limit=1)
    )
    assert isinstance(done[0], errors.IllegalTransition) and claimed == []


async def test_a_task_every_runnable_node_excluded_fails_and_a_retry_clears_them(store) -> None:
    await make_pipeline(store, NewTask("ASR", id="a", max_retries=3), NewTask("OCR", id="b"))
    (task,) = await store.claim(ClaimFilter(limit=1, types=frozenset({"ASR"})))
    await store.fail(Failure(task.id, task.attempt, "no GPU", ErrorType.RESOURCE))
    # node-b may still run ASR: the task waits for it; OCR was never excluded anywhere
    assert await store.fail_stranded({"ASR": [NODE, "node-b"], "OCR": [NODE]}) == []
    # node-b went offline: nobody left that may run it
    assert await store.fail_stranded({"ASR": [NODE], "OCR": [NODE]}) == ["a"]
    failed = await store.get_task("a")
    assert (failed.status, failed.error_type) == (TaskStatus.FAILED, ErrorType.RESOURCE)
    assert "no online node may run it any more" in (failed.error or "")
    assert "no GPU" in (failed.error or "")
    assert (await store.get_task("b")).status is TaskStatus.PENDING
    retried = await store.retry_task("a")
    assert (retried.status, retried.excluded_nodes, retried.retry_count) == (
        TaskStatus.PENDING,
        [],
        0,
    )
