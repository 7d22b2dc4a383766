"""No silent forever-pending: a task that every online node able to run it has excluded after
RESOURCE failures fails with the reason on the owner's next poll, and a manual retry (what
`fredica task retry` calls) runs it again, the exclusions cleared."""

from __future__ import annotations

from typing import Any

from fredica.domain.models import ErrorType, TaskStatus
from fredica.node.service import Node

from . import test_engine
from .test_engine import create, task, wait_for

node = test_engine.node  # a started node with the test plugin


async def _failing(n: Node, **payload: Any) -> str:
    """A TEST_FAIL task of 3 retries failing as `payload` says; its id."""
    spec = {"ref": "t", "type": "TEST_FAIL", "max_retries": 3, "payload": payload}
    _, refs = await create(n, [spec])
    return refs["t"]


async def _terminal(n: Node, task_id: str):
    t = await task(n, task_id)
    return t if t.status.is_terminal else None


async def test_a_task_every_node_excluded_fails_with_the_reason_and_retry_runs_it(
    node: Node,
) -> None:
    # Given the only node fails a task with RESOURCE (a backend it declared cannot load),
    # which leaves retries in the budget but no node that may claim it
    tid = await _failing(node, error_type="RESOURCE", succeed_on_attempt=2)
    # Then the task does not sit pending: it fails, saying why and how to run it again
    failed = await wait_for(lambda: _terminal(node, tid), timeout=10)
    assert (failed.status, failed.error_type) == (TaskStatus.FAILED, ErrorType.RESOURCE)
    assert failed.retry_count == 1 and failed.excluded_nodes == ["node-t"]
    assert "no online node may run it any more" in (failed.error or "")
    assert "node-t" in failed.error and "simulated RESOURCE failure" in failed.error
    kinds = [e.event_type for e in await node.task_events(tid)]
    assert kinds[-2:] == ["retry", "stranded"], kinds
    # When the user retries it (as `fredica task retry` does), it runs again and succeeds
    retried = await node.task_action(tid, "retry")
    assert retried.excluded_nodes == []  # claimable again at once (it may be running already)
    done = await wait_for(lambda: _terminal(node, tid), timeout=10)
    assert (done.status, done.attempt) == (TaskStatus.COMPLETED, 2)


async def test_a_task_with_a_node_left_that_may_run_it_keeps_waiting(node: Node) -> None:
    # a RATE_LIMITED retry excludes nobody: it waits for its time, pending
    tid = await _failing(node, error_type="RATE_LIMITED", retry_after=60)

    async def retried() -> object:
        t = await task(node, tid)
        return t if t.retry_count == 1 else None

    await wait_for(retried, timeout=10)
    assert await node.fail_stranded() == []
    assert (await task(node, tid)).status is TaskStatus.PENDING
