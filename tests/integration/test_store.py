"""The SQLite store on a real file: transitions, refusals, derivation, DAG, dedupe, fencing."""

from __future__ import annotations

import sqlite3

import pytest

from fredica.domain import errors
from fredica.domain.models import (
    CachePolicy,
    ErrorType,
    NewPipeline,
    NewTask,
    PipelineStatus,
    TaskStatus,
)
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.store.base import ClaimFilter, CompletionItem
from fredica.store.sqlite import SQLiteTaskStore

from .conftest import NODE, make_pipeline

S = TaskStatus
NO_HOOKS = lambda template: None  # noqa: E731


def claim_one(store: SQLiteTaskStore, now: float = 101.0, node: str = NODE, start: bool = True):
    tasks = store.claim(node, ClaimFilter(limit=1, start=start), now)
    assert len(tasks) == 1
    return tasks[0]


def complete(store: SQLiteTaskStore, task, now: float = 102.0, result=None, hooks=NO_HOOKS):
    out = store.complete_many(
        [CompletionItem(task.id, task.attempt, result or {"ok": True})], task.claimed_by, now, hooks
    )
    if isinstance(out[0], Exception):
        raise out[0]
    return out[0]


def test_claim_start_complete_records_every_transition(store: SQLiteTaskStore) -> None:
    pid = make_pipeline(store, NewTask("T", id="a"))
    task = claim_one(store, start=False)
    assert (task.status, task.attempt, task.claimed_by) == (S.CLAIMED, 1, NODE)
    running = store.start("a", 1, NODE, 101.5)
    assert running.status is S.RUNNING and running.started_at == 101.5
    done = complete(store, running, result={"x": 1})
    assert done.status is S.COMPLETED and done.result == {"x": 1} and done.progress == 100
    assert [e.event_type for e in store.task_events("a")] == [
        "created",
        "claimed",
        "running",
        "completed",
    ]
    pipeline = store.get_pipeline(pid)
    assert pipeline.status is PipelineStatus.COMPLETED
    assert (pipeline.total_tasks, pipeline.done_tasks) == (1, 1)
    assert pipeline.completed_at == 102.0


@pytest.mark.parametrize("action", ["complete", "start", "fail", "retry", "skip", "cancel"])
def test_illegal_transitions_are_refused_and_change_nothing(
    store: SQLiteTaskStore, action: str
) -> None:
    make_pipeline(store, NewTask("T", id="a"))
    task = claim_one(store)
    done = complete(store, task)
    before = store.get_task("a")
    with pytest.raises((errors.IllegalTransition, errors.StaleAttempt)):
        if action == "complete":
            complete(store, done)
        elif action == "start":
            store.start("a", done.attempt, NODE, 103.0)
        elif action == "fail":
            store.fail("a", done.attempt, NODE, "x", ErrorType.TRANSIENT, 103.0)
        elif action == "retry":
            store.retry_task("a", 103.0)
        elif action == "skip":
            store.skip_task("a", 103.0)
        else:
            store.cancel_task("a", 103.0)
    assert store.get_task("a") == before


def test_retry_of_a_running_task_is_refused(store: SQLiteTaskStore) -> None:
    make_pipeline(store, NewTask("T", id="a"))
    claim_one(store)
    with pytest.raises(errors.IllegalTransition, match="only failed or cancelled"):
        store.retry_task("a", 103.0)
    with pytest.raises(errors.IllegalTransition, match="only pending, failed or cancelled"):
        store.skip_task("a", 103.0)


def test_reports_from_an_old_attempt_are_fenced_off(store: SQLiteTaskStore) -> None:
    make_pipeline(store, NewTask("T", id="a", max_retries=2))
    first = claim_one(store)
    store.fail("a", first.attempt, NODE, "net", ErrorType.TRANSIENT, 102.0)
    second = claim_one(store, now=103.0, node="node-b")
    assert second.attempt == first.attempt + 1
    # the zombie of attempt 1 (same node id as before) cannot complete or fail the task
    with pytest.raises(errors.StaleAttempt):
        complete(store, first)
    with pytest.raises(errors.StaleAttempt):
        store.fail("a", first.attempt, NODE, "late", ErrorType.PERMANENT, 104.0)
    with pytest.raises(errors.StaleAttempt):
        store.start("a", first.attempt, NODE, 104.0)
    # progress from the zombie is ignored, the owner's progress is written
    store.progress([("a", first.attempt, 99, "zombie")], NODE, 104.0)
    store.progress([("a", second.attempt, 40, "real")], "node-b", 104.0)
    assert store.get_task("a").progress == 40
    assert complete(store, second).status is S.COMPLETED


def test_dag_order_priority_then_fifo(store: SQLiteTaskStore) -> None:
    make_pipeline(
        store,
        NewTask("T", id="low-old", priority=1),
        NewTask("T", id="parent", priority=9),
        NewTask("T", id="child", priority=10, depends_on=("parent",)),
        NewTask("T", id="mid", priority=5),
        now=100.0,
    )
    store.create_pipeline(
        NewPipeline("custom", "m2", (NewTask("T", id="low-new", priority=1),)), 100.5
    )
    order = [t.id for t in store.claim(NODE, ClaimFilter(limit=10), 101.0)]
    assert order == ["parent", "mid", "low-old", "low-new"]  # child blocked by its parent
    parent = store.start("parent", 1, NODE, 101.0)
    complete(store, parent)
    assert [t.id for t in store.claim(NODE, ClaimFilter(limit=10), 103.0)] == ["child"]


def test_children_wait_for_all_parents_and_skipped_satisfies(store: SQLiteTaskStore) -> None:
    make_pipeline(
        store,
        NewTask("T", id="p1"),
        NewTask("T", id="p2"),
        NewTask("T", id="c", depends_on=("p1", "p2")),
    )
    store.skip_task("p2", 100.5)
    tasks = store.claim(NODE, ClaimFilter(limit=10, start=True), 101.0)
    assert [t.id for t in tasks] == ["p1"]
    complete(store, tasks[0])
    assert [t.id for t in store.claim(NODE, ClaimFilter(limit=10), 103.0)] == ["c"]


def test_claim_filters_types_excluded_nodes_affinity_and_retry_after(
    store: SQLiteTaskStore,
) -> None:
    make_pipeline(
        store,
        NewTask("A", id="a"),
        NewTask("B", id="b"),
        NewTask("A", id="hard-other", node_affinity="HARD:node-z"),
        NewTask("A", id="hard-me", node_affinity=f"HARD:{NODE}"),
        NewTask("A", id="soft-other", node_affinity="SOFT:node-z"),
    )
    got = store.claim(NODE, ClaimFilter(limit=10, types=frozenset({"A"})), 101.0)
    assert sorted(t.id for t in got) == ["a", "hard-me", "soft-other"]
    assert store.claim(NODE, ClaimFilter(limit=10, types=frozenset()), 101.0) == []
    # RESOURCE excludes this node; RATE_LIMITED waits for retry_after
    store.start("a", 1, NODE, 101.0)
    store.fail("a", 1, NODE, "oom", ErrorType.RESOURCE, 102.0)
    assert store.get_task("a").excluded_nodes == [NODE]
    assert store.claim(NODE, ClaimFilter(limit=10, types=frozenset({"A"})), 103.0) == []
    assert [t.id for t in store.claim("node-b", ClaimFilter(limit=10), 103.0)] == ["a", "b"]
    store.start("b", 1, "node-b", 103.0)
    store.fail("b", 1, "node-b", "429", ErrorType.RATE_LIMITED, 104.0, retry_after_sec=60)
    assert store.get_task("b").retry_after == 164.0
    assert store.claim("node-b", ClaimFilter(limit=10), 150.0) == []
    assert [t.id for t in store.claim("node-b", ClaimFilter(limit=10), 165.0)] == ["b"]


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
def test_retry_per_error_class(
    store: SQLiteTaskStore, error_type: ErrorType, retry_count: int, status: TaskStatus, stored: str
) -> None:
    make_pipeline(store, NewTask("T", id="a", max_retries=3))
    task = claim_one(store)
    after = store.fail("a", task.attempt, NODE, "boom", error_type, 102.0)
    assert (after.status, after.retry_count, after.error_type) == (status, retry_count, stored)


def test_retries_exhaust_into_failed(store: SQLiteTaskStore) -> None:
    make_pipeline(store, NewTask("T", id="a", max_retries=2))
    for i in range(3):
        task = claim_one(store, now=101.0 + i)
        after = store.fail("a", task.attempt, NODE, "net", ErrorType.TRANSIENT, 101.5 + i)
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
def test_pipeline_status_for_each_outcome(
    store: SQLiteTaskStore, outcomes: list[str], cancel: bool, expected: PipelineStatus
) -> None:
    pid = make_pipeline(
        store, NewTask("T", id="t0", max_retries=0), NewTask("T", id="t1", max_retries=0)
    )
    assert store.get_pipeline(pid).status is PipelineStatus.PENDING
    for i, outcome in enumerate(outcomes):
        tid = f"t{i}"
        if outcome == "skipped":
            store.skip_task(tid, 101.0)
            continue
        if outcome == "cancelled":
            if cancel:
                store.cancel_pipeline(pid, 101.0)
            else:
                store.cancel_task(tid, 101.0)
            continue
        task = store.claim(NODE, ClaimFilter(limit=1, start=True), 101.0)[0]
        assert store.get_pipeline(pid).status is PipelineStatus.RUNNING
        if outcome == "completed":
            complete(store, task)
        else:
            store.fail(task.id, task.attempt, NODE, "x", ErrorType.PERMANENT, 102.0)
    pipeline = store.get_pipeline(pid)
    assert pipeline.status is expected
    assert pipeline.completed_at is not None
    # the incrementally maintained counters agree with a full recount
    assert store.recalculate(pid, 200.0).to_json() | {"updated_at": 0, "change_seq": 0} == (
        pipeline.to_json() | {"updated_at": 0, "change_seq": 0}
    )


def test_failure_cascades_to_dependents_and_retry_revives_them(store: SQLiteTaskStore) -> None:
    pid = make_pipeline(
        store,
        NewTask("T", id="a", max_retries=0),
        NewTask("T", id="b", depends_on=("a",)),
        NewTask("T", id="c", depends_on=("b",)),
    )
    task = claim_one(store)
    store.fail("a", task.attempt, NODE, "bad", ErrorType.PERMANENT, 102.0)
    for tid in ("b", "c"):
        t = store.get_task(tid)
        assert (t.status, t.error_type) == (S.CANCELLED, "UPSTREAM_FAILED")
    assert store.get_pipeline(pid).status is PipelineStatus.FAILED
    store.retry_task("a", 103.0)
    assert [store.get_task(t).status for t in "abc"] == [S.PENDING] * 3
    # every task is pending again: the derived status is back to pending (DESIGN §4.7)
    assert store.get_pipeline(pid).status is PipelineStatus.PENDING
    assert [t.id for t in store.claim(NODE, ClaimFilter(limit=10), 104.0)] == ["a"]


def test_cancel_running_task_is_requested_not_applied(store: SQLiteTaskStore) -> None:
    pid = make_pipeline(store, NewTask("T", id="a"), NewTask("T", id="b"))
    running = claim_one(store)
    outcome = store.cancel_task(running.id, 102.0)
    assert not outcome.cancelled and outcome.running_on == NODE
    assert store.get_task(running.id).cancel_requested
    outcomes = store.cancel_pipeline(pid, 102.5)
    assert [o.task_id for o in outcomes] == [running.id]
    assert store.get_pipeline(pid).status is PipelineStatus.CANCELLING
    store.fail(running.id, running.attempt, NODE, "cancelled", ErrorType.CANCELLED, 103.0)
    assert store.get_pipeline(pid).status is PipelineStatus.CANCELLED
    with pytest.raises(errors.IllegalTransition):
        store.cancel_pipeline(pid, 104.0)


def test_idempotency_dedupes_active_tasks_only(store: SQLiteTaskStore) -> None:
    first = store.add_task(NewTask("T", idempotency_key="k1"), 100.0)
    dup = store.add_task(NewTask("T", idempotency_key="k1"), 100.1)
    assert dup.id == first.id
    task = claim_one(store)
    complete(store, task)
    again = store.add_task(NewTask("T", idempotency_key="k1"), 103.0)
    assert again.id != first.id and again.status is S.PENDING
    with pytest.raises(sqlite3.IntegrityError):  # the partial unique index itself enforces it
        store._conn.execute(
            "INSERT INTO task (id, type, idempotency_key, created_by, owner_id, created_at, "
            "updated_at) VALUES ('x', 'T', 'k1', 'n', 'n', 1, 1)"
        )


def test_a_new_pipeline_never_adopts_another_pipelines_active_task(
    store: SQLiteTaskStore,
) -> None:
    store.create_pipeline(NewPipeline("a", "mat", (NewTask("T", idempotency_key="k"),)), 100.0)
    with pytest.raises(errors.Conflict, match="already does this work"):
        store.create_pipeline(
            NewPipeline("b", "mat", (NewTask("U"), NewTask("T", idempotency_key="k"))), 100.5
        )
    assert len(store.list_pipelines()) == 1 and len(store.list_tasks()) == 1  # nothing written


def test_active_pipeline_dedupe_by_material_and_template(store: SQLiteTaskStore) -> None:
    a, dedup_a = store.create_pipeline(NewPipeline("custom", "mat", (NewTask("T"),)), 100.0)
    b, dedup_b = store.create_pipeline(NewPipeline("custom", "mat", (NewTask("T"),)), 100.1)
    assert (dedup_a, dedup_b, b.id) == (False, True, a.id)
    assert len(store.list_tasks(a.id)) == 1  # the duplicate wrote nothing
    other, dedup = store.create_pipeline(NewPipeline("other", "mat", (NewTask("T"),)), 100.2)
    assert not dedup and other.id != a.id
    store.cancel_pipeline(a.id, 101.0)
    c, dedup_c = store.create_pipeline(NewPipeline("custom", "mat", (NewTask("T"),)), 102.0)
    assert not dedup_c and c.id != a.id


def test_unknown_dependency_writes_nothing(store: SQLiteTaskStore) -> None:
    with pytest.raises(errors.InvalidRequest, match="unknown task"):
        store.create_pipeline(
            NewPipeline("custom", "m", (NewTask("T", id="a"), NewTask("T", depends_on=("zz",)))),
            100.0,
        )
    assert store.list_pipelines() == [] and store.list_tasks() == []


def test_spawn_hook_runs_in_the_completion_transaction(store: SQLiteTaskStore) -> None:
    pid = make_pipeline(
        store, NewTask("SPLIT", id="split"), NewTask("MERGE", id="merge", depends_on=("split",))
    )

    def hook(done: SpawnInput) -> SpawnPlan | None:
        if done.task.type != "SPLIT":
            return None
        chunks = tuple(
            NewTask("CHUNK", id=f"chunk{i}", depends_on=("split",), payload={"i": i})
            for i in range(3)
        )
        return SpawnPlan(
            new_tasks=chunks,
            add_dependencies={"merge": tuple(c.id for c in chunks)},
            patch_payloads={"merge": {"chunks": 3}},
            pipeline_updates={"detected_language": "en"},
        )

    complete(store, claim_one(store), hooks=lambda template: hook)
    merge = store.get_task("merge")
    assert merge.depends_on == ["split", "chunk0", "chunk1", "chunk2"]
    assert merge.payload == {"chunks": 3}
    pipeline = store.get_pipeline(pid)
    assert (pipeline.total_tasks, pipeline.detected_language) == (5, "en")
    ready = store.claim(NODE, ClaimFilter(limit=10, start=True), 103.0)
    assert sorted(t.id for t in ready) == ["chunk0", "chunk1", "chunk2"]
    for t in ready:
        complete(store, t)
    assert [t.id for t in store.claim(NODE, ClaimFilter(limit=10), 104.0)] == ["merge"]


def test_a_failing_hook_rolls_back_the_completion(store: SQLiteTaskStore) -> None:
    make_pipeline(store, NewTask("SPLIT", id="split"))

    def bad_hook(done: SpawnInput) -> SpawnPlan:
        return SpawnPlan(new_tasks=(NewTask("X", depends_on=("missing",)),))

    task = claim_one(store)
    out = store.complete_many(
        [CompletionItem(task.id, task.attempt, {})], NODE, 102.0, lambda t: bad_hook
    )
    assert isinstance(out[0], errors.InvalidRequest)
    assert store.get_task("split").status is S.RUNNING  # no completion without its children


def test_liveness_stale_recover_reclaim(store: SQLiteTaskStore) -> None:
    make_pipeline(
        store, NewTask("T", id="a", max_retries=1, cache_policy=CachePolicy.PREFER_ORIGINAL)
    )
    task = claim_one(store, now=100.0)
    assert store.monitor(150.0, stale_after=60, reclaim_after=300, claim_timeout=60).stale == []
    assert store.monitor(161.0, 60, 300, 60).stale == ["a"]
    # the worker comes back: stale -> running
    fb = store.heartbeat(NODE, [("a", task.attempt)], 170.0)
    assert fb[0].still_owned and store.get_task("a").status is S.RUNNING
    store.monitor(231.0, 60, 300, 60)
    report = store.monitor(471.0, 60, 300, 60)
    assert report.reclaimed == ["a"]
    t = store.get_task("a")
    assert (t.status, t.retry_count, t.claimed_by) == (S.PENDING, 1, None)
    assert t.node_affinity == f"SOFT:{NODE}" and t.reclaimed_at == 471.0
    events = [e.event_type for e in store.task_events("a")]
    assert events[-4:] == ["recovered", "stale", "reclaimed", "requeued"]
    # the zombie learns it lost the task
    assert not store.heartbeat(NODE, [("a", task.attempt)], 472.0)[0].still_owned


def test_stuck_claims_are_released(store: SQLiteTaskStore) -> None:
    make_pipeline(store, NewTask("T", id="a"))
    claim_one(store, now=100.0, start=False)
    assert store.monitor(200.0, 60, 300, claim_timeout=60).released == ["a"]
    assert store.get_task("a").status is S.PENDING


def test_startup_recovery_five_steps(store: SQLiteTaskStore) -> None:
    pid = make_pipeline(
        store,
        NewTask("T", id="running", max_retries=1),
        NewTask("T", id="running-last", max_retries=0),
        NewTask("T", id="claimed"),
        NewTask("T", id="waiting", depends_on=("running",)),
    )
    store.claim(NODE, ClaimFilter(limit=2, start=True), 101.0)
    store.claim(NODE, ClaimFilter(limit=1, start=False), 101.0)
    orphan = store.add_task(NewTask("T", id="orphan"), 101.0)
    assert orphan.pipeline_id is None
    store._conn.execute("UPDATE pipeline_instance SET status = 'completed' WHERE id = ?", (pid,))

    report = store.recover_startup(NODE, 200.0)

    assert sorted(t.id for t in report.snapshot) == ["claimed", "running", "running-last"]
    assert store.get_task("claimed").status is S.PENDING
    assert store.get_task("claimed").retry_count == 0
    r = store.get_task("running")
    assert (r.status, r.retry_count, r.error, r.error_type) == (
        S.PENDING,
        1,
        "interrupted by restart",
        "TRANSIENT",
    )
    assert store.get_task("running-last").status is S.FAILED
    assert [t.id for t in report.failed] == ["running-last"]
    assert store.get_task("orphan").status is S.FAILED and report.orphans == 1
    log = {row["task_id"]: row for row in store.restart_log()}
    assert log["running"]["action"] == "interrupted" and log["claimed"]["action"] == "requeued"
    assert log["orphan"]["action"] == "orphaned"
    # step 5 repaired the pipeline status that was left behind, with exact counters
    pipeline = store.get_pipeline(pid)
    assert pipeline.status is PipelineStatus.RUNNING
    assert (pipeline.total_tasks, pipeline.pending_tasks, pipeline.failed_tasks) == (4, 3, 1)
    assert store.recalculate(pid, 201.0).to_json() | {"updated_at": 0, "change_seq": 0} == (
        pipeline.to_json() | {"updated_at": 0, "change_seq": 0}
    )
    assert report.pipelines_reconciled >= 0


def test_changes_since_follows_the_change_sequence(store: SQLiteTaskStore) -> None:
    make_pipeline(store, NewTask("T", id="a"))
    _, _, seq = store.changes_since(0)
    task = claim_one(store)
    tasks, pipelines, seq2 = store.changes_since(seq)
    assert [t.id for t in tasks] == ["a"] and seq2 > seq
    assert tasks[0].status is S.RUNNING and task.change_seq == seq2
    assert store.changes_since(seq2)[0] == []


def test_schema_migrations_are_idempotent(tmp_path) -> None:
    path = tmp_path / "x.db"
    SQLiteTaskStore(path, NODE).close()
    s = SQLiteTaskStore(path, NODE)  # reopening applies nothing twice
    versions = [r[0] for r in s._conn.execute("SELECT version FROM schema_version")]
    assert versions == [1]
    mode = s._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    s.close()


def test_complete_and_claim_in_one_transaction(store: SQLiteTaskStore) -> None:
    make_pipeline(
        store,
        NewTask("T", id="a"),
        NewTask("T", id="b", depends_on=("a",)),
        NewTask("T", id="c"),
    )
    first = store.claim(NODE, ClaimFilter(limit=1, start=True), 101.0)[0]
    assert first.id == "a"
    seq_before = store.changes_since(0)[2]
    done, claimed = store.complete_and_claim(
        [CompletionItem("a", first.attempt, {"ok": 1})], NODE, 102.0, NO_HOOKS,
        ClaimFilter(limit=5, start=True),
    )  # fmt: skip
    # the completion made b ready inside the same transaction, so b is claimed with c
    assert [t.status for t in done if not isinstance(t, Exception)] == [S.COMPLETED]
    assert sorted(t.id for t in claimed) == ["b", "c"]
    assert all(t.status is S.RUNNING and t.claimed_by == NODE for t in claimed)
    # one transaction: every row it touched carries the same change sequence
    seqs = {store.get_task(t).change_seq for t in ("a", "b", "c")}
    assert len(seqs) == 1 and seqs.pop() == seq_before + 1
    # a refused completion does not stop the claim
    done, claimed = store.complete_and_claim(
        [CompletionItem("a", first.attempt, {})], NODE, 103.0, NO_HOOKS, ClaimFilter(limit=1)
    )
    assert isinstance(done[0], errors.IllegalTransition) and claimed == []
