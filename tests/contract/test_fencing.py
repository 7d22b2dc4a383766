"""Reports are fenced by (claimer, attempt): a zombie of an earlier attempt changes nothing."""

from __future__ import annotations

import pytest

from fredica.domain import errors
from fredica.domain.models import ErrorType, NewTask, TaskStatus
from fredica.store.base import Failure

from .conftest import NODE, claim_one, complete, make_pipeline


async def test_reports_from_an_old_attempt_are_fenced_off(store, clock) -> None:
    await make_pipeline(store, NewTask("T", id="a", max_retries=2))
    clock.set(101.0)
    first = await claim_one(store)
    clock.set(102.0)
    await store.fail(Failure("a", first.attempt, "net", ErrorType.TRANSIENT))
    clock.set(103.0)
    second = await claim_one(store, node_id="node-b")
    assert second.attempt == first.attempt + 1 and second.claimed_by == "node-b"
    # the zombie of attempt 1 (same node id as before) cannot complete or fail the task
    clock.set(104.0)
    with pytest.raises(errors.StaleAttempt):
        await complete(store, first)
    with pytest.raises(errors.StaleAttempt):
        await store.fail(Failure("a", first.attempt, "late", ErrorType.PERMANENT), NODE)
    with pytest.raises(errors.StaleAttempt):
        await store.start("a", first.attempt, NODE)
    # progress from the zombie is ignored, the owner's progress is written
    await store.progress([("a", first.attempt, 99, "zombie")], NODE)
    await store.progress([("a", second.attempt, 40, "real")], "node-b")
    assert (await store.get_task("a")).progress == 40
    assert (await complete(store, second)).status is TaskStatus.COMPLETED
