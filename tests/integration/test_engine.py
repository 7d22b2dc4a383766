"""The worker engine with real executors, a real SQLite file and real child processes."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from fredica.domain.models import PipelineStatus, TaskStatus
from fredica.engine.worker import EngineSettings
from fredica.node import compose
from fredica.node.service import DB_FILENAME, Node, NodeSettings
from fredica.pipelines.request import PipelineRequest
from fredica.store.base import NodeRecord
from fredica.store.sqlite import SQLiteTaskStore

S = TaskStatus


def fast_settings(tmp_path: Path, **overrides: Any) -> NodeSettings:
    engine = EngineSettings(
        node_id="node-t",
        data_dir=tmp_path,
        max_workers=overrides.pop("max_workers", 2),
        poll_interval=0.05,
        idle_poll_interval=0.2,
        heartbeat_interval=overrides.pop("heartbeat_interval", 0.1),
        stale_after=overrides.pop("stale_after", 5.0),
        reclaim_after=overrides.pop("reclaim_after", 20.0),
        progress_flush_interval=0.02,
        shutdown_grace=overrides.pop("shutdown_grace", 5.0),
    )
    return NodeSettings(
        node_id="node-t", data_dir=tmp_path, engine=engine, plugins=("fredica_testplugin",)
    )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = compose.build_node(fast_settings(tmp_path))
    await n.start()
    yield n
    await n.stop(grace=2)


async def wait_for(predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await predicate() if asyncio.iscoroutinefunction(predicate) else predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def create(node: Node, tasks: list[dict[str, Any]], **kw: Any) -> tuple[str, dict[str, str]]:
    pipeline, _ = await node.create_pipeline(PipelineRequest(template="custom", tasks=tasks, **kw))
    return pipeline.id, pipeline.params["refs"]


async def task(node: Node, task_id: str):
    return await node.get_task(task_id)


async def pipeline_done(node: Node, pid: str):
    p = await node.get_pipeline(pid)
    return p if p.status.is_terminal else None


def counter_value(path: Path) -> int:
    text = path.read_text() if path.exists() else "0"
    return -1 if text == "done" else int(text or 0)


async def test_dag_runs_in_order_with_results(node: Node) -> None:
    pid, refs = await create(
        node,
        [
            {"ref": "a", "type": "TEST_SLEEP", "payload": {"seconds": 0.05, "value": 1}},
            {
                "ref": "b",
                "type": "TEST_SLEEP",
                "payload": {"seconds": 0.05, "value": 2},
                "depends_on": ["a"],
            },
            {
                "ref": "c",
                "type": "TEST_SLEEP",
                "payload": {"seconds": 0.05, "value": 3},
                "depends_on": ["a"],
            },
            {
                "ref": "d",
                "type": "TEST_SLEEP",
                "payload": {"seconds": 0.01},
                "depends_on": ["b", "c"],
            },
        ],
    )
    p = await wait_for(lambda: pipeline_done(node, pid))
    assert p.status is PipelineStatus.COMPLETED and p.done_tasks == 4
    tasks = {r: await task(node, tid) for r, tid in refs.items()}
    assert tasks["a"].completed_at <= tasks["b"].started_at
    assert tasks["a"].completed_at <= tasks["c"].started_at
    assert max(tasks["b"].completed_at, tasks["c"].completed_at) <= tasks["d"].started_at
    assert tasks["b"].result == {"slept": 0.05, "attempt": 1, "value": 2}


async def test_transient_failures_retry_until_success(node: Node) -> None:
    pid, refs = await create(
        node,
        [
            {
                "ref": "f",
                "type": "TEST_FAIL",
                "max_retries": 3,
                "payload": {"error_type": "TRANSIENT", "succeed_on_attempt": 3},
            }
        ],
    )
    p = await wait_for(lambda: pipeline_done(node, pid))
    t = await task(node, refs["f"])
    assert p.status is PipelineStatus.COMPLETED
    assert (t.attempt, t.retry_count, t.result) == (3, 2, {"attempt": 3})
    kinds = [e.event_type for e in await node.task_events(t.id)]
    assert kinds.count("retry") == 2


@pytest.mark.parametrize("error_type", ["PERMANENT", "PAYLOAD_ERROR", "AWAITING_CREDENTIAL"])
async def test_non_retryable_classes_fail_at_once_and_call_on_task_failed(
    node: Node, error_type: str
) -> None:
    from fredica_testplugin import FailExecutor

    pid, refs = await create(
        node,
        [
            {
                "ref": "f",
                "type": "TEST_FAIL",
                "max_retries": 5,
                "payload": {"error_type": error_type},
            }
        ],
    )
    p = await wait_for(lambda: pipeline_done(node, pid))
    t = await task(node, refs["f"])
    assert p.status is PipelineStatus.FAILED
    assert (t.status, t.attempt, t.retry_count) == (S.FAILED, 1, 0)
    assert t.error_type == ("PERMANENT" if error_type == "PAYLOAD_ERROR" else error_type)
    assert (t.id, "failed") in FailExecutor.failed_calls


async def test_resource_error_excludes_this_node(node: Node) -> None:
    pid, refs = await create(
        node,
        [
            {
                "ref": "f",
                "type": "TEST_FAIL",
                "max_retries": 3,
                "payload": {"error_type": "RESOURCE"},
            }
        ],
    )
    t = await wait_for(lambda: task(node, refs["f"]))
    t = await wait_for(lambda: _with(task(node, refs["f"]), lambda x: x.retry_count == 1 and x))
    assert t.status is S.PENDING and t.excluded_nodes == ["node-t"]
    await asyncio.sleep(0.4)  # this node never claims it again
    assert (await task(node, refs["f"])).attempt == 1


async def test_rate_limited_waits_for_retry_after(node: Node) -> None:
    pid, refs = await create(
        node,
        [
            {
                "ref": "f",
                "type": "TEST_FAIL",
                "max_retries": 3,
                "payload": {"error_type": "RATE_LIMITED", "retry_after": 0.5},
            }
        ],
    )
    first = await wait_for(lambda: _with(task(node, refs["f"]), lambda x: x.retry_count == 1 and x))
    assert first.retry_after is not None and first.error_type == "RATE_LIMITED"
    second = await wait_for(
        lambda: _with(task(node, refs["f"]), lambda x: x.retry_count == 2 and x)
    )
    events = await node.task_events(second.id)
    claims = [e.occurred_at for e in events if e.event_type == "claimed"]
    assert claims[1] - claims[0] >= 0.5


async def test_unexpected_exception_is_transient(node: Node) -> None:
    pid, refs = await create(
        node,
        [{"ref": "f", "type": "TEST_FAIL", "max_retries": 1, "payload": {"error_type": "CRASH"}}],
    )
    await wait_for(lambda: pipeline_done(node, pid))
    t = await task(node, refs["f"])
    assert (t.status, t.attempt, t.error_type) == (S.FAILED, 2, "TRANSIENT")
    assert "RuntimeError: unexpected bug" in (t.error or "")


async def _with(coro: Any, fn: Callable[[Any], Any]) -> Any:
    return fn(await coro)


async def test_pause_really_stops_the_child_process_and_resume_continues(
    node: Node, tmp_path: Path
) -> None:
    counter = tmp_path / "burn.txt"
    pid, refs = await create(
        node,
        [{"ref": "burn", "type": "TEST_BURN", "payload": {"counter": str(counter), "seconds": 3}}],
    )
    await wait_for(lambda: counter_value(counter) > 0)
    paused = await node.task_action(refs["burn"], "pause")
    assert paused.is_paused and paused.status is S.RUNNING
    await asyncio.sleep(0.2)  # let the last write land
    frozen = counter_value(counter)
    await asyncio.sleep(1.0)
    assert counter_value(counter) == frozen, "a paused process kept running"
    resumed = await node.task_action(refs["burn"], "resume")
    assert not resumed.is_paused
    await wait_for(lambda: counter_value(counter) != frozen)
    p = await wait_for(lambda: pipeline_done(node, pid))
    assert p.status is PipelineStatus.COMPLETED
    kinds = [e.event_type for e in await node.task_events(refs["burn"])]
    assert "paused" in kinds and "resumed" in kinds


async def test_cancel_of_running_work_kills_the_child(node: Node, tmp_path: Path) -> None:
    from fredica_testplugin import FailExecutor  # noqa: F401  (plugin loaded)

    counter = tmp_path / "burn.txt"
    pid, refs = await create(
        node,
        [
            {
                "ref": "burn",
                "type": "TEST_BURN",
                "payload": {"counter": str(counter), "seconds": 30},
            },
            {"ref": "after", "type": "TEST_SLEEP", "depends_on": ["burn"]},
        ],
    )
    await wait_for(lambda: counter_value(counter) > 0)
    started = time.monotonic()
    await node.task_action(refs["burn"], "cancel")
    t = await wait_for(
        lambda: _with(task(node, refs["burn"]), lambda x: x.status.is_terminal and x)
    )
    assert t.status is S.CANCELLED and time.monotonic() - started < 5
    value = counter_value(counter)
    await asyncio.sleep(0.5)
    assert counter_value(counter) == value, "the child survived the cancel"
    assert (await task(node, refs["after"])).error_type == "UPSTREAM_FAILED"
    p = await wait_for(lambda: pipeline_done(node, pid))
    assert p.status is PipelineStatus.COMPLETED  # a cancelled task is not a failure (§4.7)


async def test_pipeline_cancel_stops_running_and_pending(node: Node, tmp_path: Path) -> None:
    pid, refs = await create(
        node,
        [
            {"ref": "a", "type": "TEST_SLEEP", "payload": {"seconds": 30}},
            {"ref": "b", "type": "TEST_SLEEP", "payload": {"seconds": 30}, "depends_on": ["a"]},
        ],
    )
    await wait_for(lambda: _with(task(node, refs["a"]), lambda x: x.status is S.RUNNING))
    p = await node.cancel_pipeline(pid)
    assert p.status in (PipelineStatus.CANCELLING, PipelineStatus.CANCELLED)
    p = await wait_for(lambda: pipeline_done(node, pid))
    assert p.status is PipelineStatus.CANCELLED
    assert [(await task(node, refs[r])).status for r in "ab"] == [S.CANCELLED, S.CANCELLED]


async def test_self_requested_pause_in_subprocess(node: Node, tmp_path: Path) -> None:
    marker = tmp_path / "marker.txt"
    pid, refs = await create(
        node,
        [
            {
                "ref": "s",
                "type": "TEST_SUBPROC",
                "payload": {"mode": "self_pause", "marker": str(marker)},
            }
        ],
    )
    t = await wait_for(
        lambda: _with(task(node, refs["s"]), lambda x: x.is_paused and x.progress == 30 and x)
    )
    assert marker.read_text() == "waiting" and t.status is S.RUNNING
    await asyncio.sleep(0.5)
    assert marker.read_text() == "waiting"  # it really waits for the resume
    events = await node.task_events(refs["s"])
    assert any(e.event_type == "paused" and e.message == "gpu_oom" for e in events)
    await node.task_action(refs["s"], "resume")
    p = await wait_for(lambda: pipeline_done(node, pid))
    t = await task(node, refs["s"])
    assert p.status is PipelineStatus.COMPLETED and t.result["resumed"] is True
    assert marker.read_text() == "resumed" and not t.is_paused


async def test_work_that_pauses_and_resumes_itself(node: Node, tmp_path: Path) -> None:
    marker = tmp_path / "resource"
    pid, refs = await create(
        node,
        [
            {
                "ref": "s",
                "type": "TEST_SUBPROC",
                "payload": {"mode": "self_resume", "marker": str(marker)},
            }
        ],
    )
    await wait_for(lambda: _with(task(node, refs["s"]), lambda x: x.is_paused))
    marker.touch()  # the resource appears; no user action
    p = await wait_for(lambda: pipeline_done(node, pid))
    assert p.status is PipelineStatus.COMPLETED
    kinds = [e.event_type for e in await node.task_events(refs["s"])]
    assert kinds.index("paused") < kinds.index("resumed") < kinds.index("completed")


async def test_subprocess_task_errors_keep_their_class(node: Node) -> None:
    pid, refs = await create(
        node, [{"ref": "s", "type": "TEST_SUBPROC", "max_retries": 3, "payload": {"mode": "fail"}}]
    )
    await wait_for(lambda: pipeline_done(node, pid))
    t = await task(node, refs["s"])
    assert (t.status, t.error_type, t.attempt) == (S.FAILED, "PERMANENT", 1)
    assert "corrupt" in (t.error or "")


async def test_check_existing_skips_the_run(node: Node, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    pid, refs = await create(
        node, [{"ref": "w", "type": "TEST_WRITE", "payload": {"output": str(out)}}]
    )
    await wait_for(lambda: pipeline_done(node, pid))
    # the output is under the node's data dir: the result names it relative to it
    assert (await task(node, refs["w"])).result == {
        "output": str(out.relative_to(node.settings.data_dir)),
        "reused": False,
    }
    pid2, refs2 = await create(
        node, [{"ref": "w", "type": "TEST_WRITE", "payload": {"output": str(out)}}]
    )
    await wait_for(lambda: pipeline_done(node, pid2))
    assert (await task(node, refs2["w"])).result == {
        "output": str(out.relative_to(node.settings.data_dir)),
        "reused": True,
    }


async def test_spawning_at_completion(node: Node) -> None:
    pipeline, _ = await node.create_pipeline(
        PipelineRequest(template="test_fanout", params={"chunks": 4})
    )
    p = await wait_for(lambda: pipeline_done(node, pipeline.id))
    assert p.status is PipelineStatus.COMPLETED and p.total_tasks == 6
    tasks = await node.list_tasks(pipeline.id)
    merge = next(t for t in tasks if t.payload.get("role") == "merge")
    chunks = [t for t in tasks if t.payload.get("role") == "chunk"]
    assert len(chunks) == 4 and merge.payload["chunk_count"] == 4
    assert max(c.completed_at for c in chunks) <= merge.started_at


async def test_max_workers_bounds_concurrency(tmp_path: Path) -> None:
    n = compose.build_node(fast_settings(tmp_path, max_workers=3))
    await n.start()
    try:
        pid, refs = await create(
            n,
            [
                {"ref": f"t{i}", "type": "TEST_SLEEP", "payload": {"seconds": 0.15}}
                for i in range(9)
            ],
        )
        peak = 0
        while not await pipeline_done(n, pid):
            peak = max(peak, n.engine.running_count)
            await asyncio.sleep(0.01)
        assert peak == 3
    finally:
        await n.stop()


async def test_graceful_stop_releases_unfinished_work(tmp_path: Path) -> None:
    n = compose.build_node(fast_settings(tmp_path, shutdown_grace=0.3))
    await n.start()
    pid, refs = await create(
        n,
        [
            {"ref": "quick", "type": "TEST_SLEEP", "payload": {"seconds": 0.1}},
            {"ref": "slow", "type": "TEST_SLEEP", "payload": {"seconds": 30}},
        ],
    )
    await wait_for(lambda: _with(task(n, refs["quick"]), lambda x: x.status is S.RUNNING))
    await n.stop()
    n2 = compose.build_node(fast_settings(tmp_path))
    quick = await n2.get_task(refs["quick"])
    slow = await n2.get_task(refs["slow"])
    assert quick.status is S.COMPLETED  # finished within the grace period
    assert (slow.status, slow.retry_count, slow.claimed_by) == (S.PENDING, 0, None)
    assert await n2.get_setting("last_shutdown_type") == "CLEAN"
    await n2.close()


async def test_a_zombie_attempt_cannot_report(node: Node) -> None:
    pid, refs = await create(
        node, [{"ref": "z", "type": "TEST_SLEEP", "payload": {"seconds": 1.0}}]
    )
    t = await wait_for(lambda: _with(task(node, refs["z"]), lambda x: x.status is S.RUNNING and x))
    # another node reclaims and claims it behind this node's back (written to the file
    # directly: no store operation would take a running task from its claimer)
    with sqlite3.connect(node.settings.data_dir / DB_FILENAME, isolation_level=None) as raw:
        raw.execute(
            "UPDATE task SET status='running', claimed_by='node-other', "
            "attempt=attempt+1 WHERE id=?",
            (t.id,),
        )
    await asyncio.sleep(1.5)
    after = await task(node, t.id)
    assert (after.status, after.claimed_by, after.result) == (S.RUNNING, "node-other", None)
    assert not node.engine.is_running_here(t.id)  # the heartbeat told it to stop
    assert os.getpid()  # the node itself is fine


async def test_a_late_heartbeat_answer_about_an_older_attempt_leaves_the_newer_one_alone(
    node: Node,
) -> None:
    """A heartbeat for attempt 1 is answered only after this node claimed the task again as
    attempt 2 (a network cut long enough for a reclaim); that answer ("not yours any more")
    is about attempt 1, and attempt 2 runs on and is the one recorded."""
    engine = node.engine
    real = engine.store.heartbeat
    held: list[list[tuple[str, int]]] = []
    release = asyncio.Event()

    async def late_heartbeat(pairs: Any, node_id: Any = None) -> Any:
        if not release.is_set():
            held.append(list(pairs))
            await release.wait()  # answered later, by the store as it is then
        return await real(pairs, node_id)

    _, refs = await create(node, [{"ref": "t", "type": "TEST_SLEEP", "payload": {"seconds": 1.5}}])
    t = await wait_for(lambda: _with(task(node, refs["t"]), lambda x: x.status is S.RUNNING and x))
    assert t.attempt == 1
    engine.store.heartbeat = late_heartbeat  # type: ignore[method-assign]
    await wait_for(lambda: held)
    assert held[0] == [(t.id, 1)]
    # Given the owner reclaimed it meanwhile and this node claimed it again (attempt 2)
    with sqlite3.connect(node.settings.data_dir / DB_FILENAME, isolation_level=None) as raw:
        raw.execute(
            "UPDATE task SET status='pending', claimed_by=NULL, claimed_at=NULL WHERE id=?",
            (t.id,),
        )
    engine.wake()
    await wait_for(lambda: _with(task(node, t.id), lambda x: x.attempt == 2 and x))
    # When the answer about attempt 1 arrives
    release.set()
    # Then attempt 2 completes and is the one recorded
    done = await wait_for(lambda: _with(task(node, t.id), lambda x: x.status.is_terminal and x))
    assert (done.status, done.attempt, done.result["attempt"]) == (S.COMPLETED, 2, 2)


async def test_a_finished_attempt_leaves_no_reference_cycle(node: Node) -> None:
    """What the engine kept for an attempt is freed when it ends, not left for the garbage
    collector (a cycle of about ten objects a task made its collections walk thousands of
    finished tasks on a busy node)."""
    from fredica.executors.control import TaskControl

    gc.collect()
    gc.disable()  # what survives now survives only by a cycle (or a real reference)
    try:
        tasks = [{"ref": f"t{i}", "type": "TEST_INLINE"} for i in range(20)]
        tasks += [
            {"ref": f"s{i}", "type": "TEST_SLEEP", "payload": {"seconds": 0.01}} for i in range(5)
        ]
        pid, _ = await create(node, tasks)
        done = await wait_for(lambda: pipeline_done(node, pid))
        assert done.status is PipelineStatus.COMPLETED
        await wait_for(lambda: not node.engine.running_count)
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable is kept to count
        gc.collect()
        cycles = [o for o in gc.garbage if isinstance(o, TaskControl)]
        assert cycles == [], f"{len(cycles)} finished attempts left in reference cycles"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def settings_with_config(tmp_path: Path, data: dict[str, Any]) -> NodeSettings:
    from dataclasses import replace

    from fredica.config import schema as config

    return replace(fast_settings(tmp_path), config=config.parse_config(data, "test"))


ANALYZE_PROVIDER = {
    "capabilities": {
        "ai_analyze": {
            "enabled": True,
            "providers": [
                {
                    "backend": "deepseek-api",
                    "api_key": "sk-test",
                    "model": "deepseek-v3",
                    "score": 75,
                    "max_concurrent": 1,
                }
            ],
        }
    }
}


async def test_backend_is_chosen_recorded_and_max_concurrent_respected(tmp_path: Path) -> None:
    n = compose.build_node(settings_with_config(tmp_path, ANALYZE_PROVIDER))
    await n.start()
    try:
        assert "TEST_ANALYZE" in n.engine.claimable_types()
        pid, refs = await create(
            n,
            [
                {"ref": f"a{i}", "type": "TEST_ANALYZE", "payload": {"seconds": 0.3}}
                for i in range(2)
            ],
        )
        p = await wait_for(lambda: pipeline_done(n, pid))
        assert p.status is PipelineStatus.COMPLETED
        runs = [await task(n, refs[r]) for r in ("a0", "a1")]
        for t in runs:
            assert t.result["backend"] == t.backend
            assert "sk-test" not in json.dumps(t.payload)  # the key never enters the task
        # max_concurrent 1 for the provider: while one call runs there, the other task takes
        # the next best free backend (the built-in extractive one) instead of a second call
        by_backend = {t.backend: t for t in runs}
        assert set(by_backend) == {"deepseek-api", "local-extractive"}
        assert by_backend["deepseek-api"].result["has_key"] is True
        assert by_backend["local-extractive"].result["has_key"] is False
        events = await n.task_events(by_backend["deepseek-api"].id)
        # the completion event names the backend that ran, with its score: 75, less the load
        # modifier for the other task this node held (seed 001 §2.7.2: half load, balanced -5)
        done = [e.message or "" for e in events if e.event_type == "completed"]
        assert done and done[0].startswith("backend deepseek-api score=70"), done
        assert "load -5" in done[0]
    finally:
        await n.stop()


async def test_a_saturated_backend_is_not_called_twice(tmp_path: Path) -> None:
    cfg = {"capabilities": {"ai_analyze": {"enabled": True, "providers": [
        {"backend": "deepseek-api", "api_key": "sk-test", "model": "deepseek-v3",
         "score": 75, "max_concurrent": 1}]}}}  # fmt: skip
    n = compose.build_node(settings_with_config(tmp_path, cfg))
    await n.start()
    try:
        # without the built-in fallback (disabled by hiding it), the second task must wait
        n.engine.selector = only_backends(n.engine.selector, {"deepseek-api"})
        pid, refs = await create(n, [{"ref": f"a{i}", "type": "TEST_ANALYZE",
                                      "payload": {"seconds": 0.3}} for i in range(2)])  # fmt: skip
        await wait_for(lambda: pipeline_done(n, pid))
        a0, a1 = [await task(n, refs[r]) for r in ("a0", "a1")]
        assert a0.backend == a1.backend == "deepseek-api"
        first, second = sorted((a0.result, a1.result), key=lambda r: r["started"])
        assert second["started"] >= first["ended"]  # the two calls did not overlap
    finally:
        await n.stop()


def only_backends(selector, names):
    from dataclasses import replace as dc_replace

    return dc_replace(selector, capabilities=tuple(
        c for c in selector.capabilities if c.function.value != "AI_ANALYZE" or c.backend in names
    ))  # fmt: skip


async def test_a_node_claims_only_what_it_can_serve(tmp_path: Path) -> None:
    n = compose.build_node(
        settings_with_config(tmp_path, {"capabilities": {"ai_analyze": {"enabled": False}}})
    )
    await n.start()
    try:
        assert "TEST_ANALYZE" not in n.engine.claimable_types()
        assert "TEST_SLEEP" in n.engine.claimable_types()
        # a known peer declares AI_ANALYZE (else the pipeline is refused: test_api_unservable)
        peer = SQLiteTaskStore(tmp_path / "fredica.db", "peer")
        record = NodeRecord("peer", "h", [{"function": "AI_ANALYZE"}], "offline", 1, 0, None, {})
        await peer.upsert_node(record)
        await peer.close()
        pid, refs = await create(
            n,
            [
                {"ref": "a", "type": "TEST_ANALYZE"},
                {"ref": "s", "type": "TEST_SLEEP", "payload": {"seconds": 0.05}},
            ],
        )
        await wait_for(lambda: _with(task(n, refs["s"]), lambda x: x.status is S.COMPLETED))
        await asyncio.sleep(0.3)
        a = await task(n, refs["a"])
        assert (a.status, a.attempt) == (S.PENDING, 0)  # left for a node that has AI_ANALYZE
        status = await n.status()
        assert "TEST_ANALYZE" not in status["task_types"]
    finally:
        await n.stop()


async def test_a_task_that_finds_its_backend_busy_is_released_not_failed(tmp_path: Path) -> None:
    n = compose.build_node(settings_with_config(tmp_path, ANALYZE_PROVIDER))
    await n.start()
    try:
        # occupy the only deepseek-api slot behind the claim filter's back (a lost race)
        n.engine._active_by_backend["deepseek-api"] = 1
        n.engine.selector = replace_busy_filter(only_backends(n.engine.selector, {"deepseek-api"}))
        pid, refs = await create(n, [{"ref": "a", "type": "TEST_ANALYZE"}])
        await wait_for(
            lambda: _with(
                n.task_events(refs["a"]),
                lambda events: any(e.event_type == "released" for e in events),
            )
        )
        t = await task(n, refs["a"])
        assert (t.retry_count, t.excluded_nodes, t.error) == (0, [], None)
        n.engine._active_by_backend["deepseek-api"] = 0
        await wait_for(lambda: pipeline_done(n, pid))
        assert (await task(n, refs["a"])).status is S.COMPLETED
    finally:
        await n.stop()


def replace_busy_filter(selector):
    """A selector whose claim filter ignores saturation (to force the race)."""
    from dataclasses import dataclass

    @dataclass
    class Racy(type(selector)):
        def saturated_functions(self, active_by_backend):
            return frozenset()

    return Racy(
        selector.capabilities, selector.profile, selector.plugin_functions, selector.backend_configs
    )


async def test_a_cloud_only_task_waits_for_a_node_that_may_use_the_cloud(tmp_path: Path) -> None:
    # Given a node whose only AI_ANALYZE backend is local (no cloud provider configured),
    # and a known peer (offline now) that has a cloud backend for it, so that the pipeline
    # is accepted rather than refused as one no node can run
    n = compose.build_node(fast_settings(tmp_path))
    await n.start()
    try:
        peer = SQLiteTaskStore(tmp_path / "fredica.db", "peer")
        cloud = [
            {"function": "AI_ANALYZE", "backend": "openai-compatible", "accelerator": "CloudAPI"}
        ]
        await peer.upsert_node(NodeRecord("peer", "vm", cloud, "offline", 1, 0, None, {}))
        await peer.close()
        pid, refs = await create(
            n,
            [
                {"ref": "cloud", "type": "TEST_ANALYZE", "cloud_preference": "cloud_only"},
                {"ref": "local", "type": "TEST_ANALYZE", "cloud_preference": "local_only",
                 "payload": {"seconds": 0.05}},
            ],
        )  # fmt: skip
        # When the engine has polled many times
        await wait_for(lambda: _with(task(n, refs["local"]), lambda t: t.status is S.COMPLETED))
        polls = n.engine.stats["claimed"]
        for _ in range(5):
            n.engine.wake()
            await asyncio.sleep(0.1)  # two poll intervals: each wake is a claim attempt
        assert n.engine.stats["claimed"] == polls
        # Then the cloud_only task was never claimed here: no attempt, no retry spent
        waiting = await task(n, refs["cloud"])
        assert (waiting.status, waiting.attempt, waiting.retry_count) == (S.PENDING, 0, 0)
        assert "claimed" not in [e.event_type for e in await n.task_events(refs["cloud"])]
    finally:
        await n.stop()


async def test_claims_from_the_poll_and_commit_loops_never_exceed_max_workers(
    tmp_path: Path,
) -> None:
    # Given two slots and three tasks that become ready when a short parent completes
    n = compose.build_node(fast_settings(tmp_path, max_workers=2))
    await n.start()
    try:
        tasks = [{"ref": "probe", "type": "TEST_SLEEP", "payload": {"seconds": 0.2}}] + [
            {"ref": f"b{i}", "type": "TEST_SLEEP", "depends_on": ["probe"],
             "payload": {"seconds": 0.6}}
            for i in range(3)
        ]  # fmt: skip
        pid, _ = await create(n, tasks)
        # When the parent's completion claims its children while the poll loop claims too
        most = 0
        while (await n.get_pipeline(pid)).status is not PipelineStatus.COMPLETED:
            most = max(most, n.engine.running_count, (await n.count_by_status())["running"])
            await asyncio.sleep(0.01)  # sampling the running count, not waiting for it
        # Then no more than two ever ran at once
        assert most == 2
    finally:
        await n.stop()
