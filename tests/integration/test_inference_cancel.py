"""Cancel in the resident inference worker (issue 13): the task ends within a second even
while the job is inside a call that cannot be interrupted (as a Whisper window decode), the
worker drains that call and the NEXT job runs in the same worker (same pid, no second
process); a worker that never drains is killed after DRAIN_LIMIT_SEC and replaced."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from fredica.domain import errors
from fredica.executors import inference_worker
from fredica.executors.control import TaskControl


def stuck_then_check(reporter: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """A job in one long native-like call (no cancel check inside), then a check."""
    reporter.progress(10, "in the call")
    time.sleep(float(spec["call_sec"]))
    reporter.wait_if_paused()  # raises TaskCancelled once cancelled
    return {"pid": os.getpid()}


def whoami(reporter: Any, spec: dict[str, Any]) -> dict[str, Any]:
    return {"pid": os.getpid()}


@pytest.fixture
def pool() -> Any:
    fresh = inference_worker.InferencePool()
    yield fresh
    fresh.shutdown()


async def _started(progress: list[float]) -> None:
    deadline = time.monotonic() + 30
    while not progress:
        assert time.monotonic() < deadline, "the job never started"
        await asyncio.sleep(0.01)


async def _cancel_inside_the_call(pool: Any, call_sec: float, **kw: Any) -> float:
    """Start a job stuck in a `call_sec` call, cancel it once it runs; seconds until the
    task ended (it must raise TaskCancelled)."""
    control, progress = TaskControl("t"), []
    job = asyncio.create_task(
        pool.run("k", stuck_then_check, {"call_sec": call_sec}, control,
                 on_progress=lambda pct, note: progress.append(pct), **kw)
    )  # fmt: skip
    await _started(progress)
    control.cancel("test cancel")
    cancelled_at = time.monotonic()
    with pytest.raises(errors.TaskCancelled):
        await job
    return time.monotonic() - cancelled_at


async def test_a_cancelled_job_ends_within_a_second_and_the_next_runs_in_the_same_worker(
    pool: Any,
) -> None:
    warm = await pool.run("k", whoami, {}, TaskControl("t"))
    took = await _cancel_inside_the_call(pool, 3.0)
    assert took < inference_worker.CANCEL_GRACE_SEC + 0.5, took
    assert pool.workers[0].draining is not None  # the job did not stop by itself in time
    # the worker is still inside its 3 s call: the next job waits for it, not for a new one
    after = await pool.run("k", whoami, {}, TaskControl("t"))
    assert after["pid"] == warm["pid"]
    assert pool.started == 1 and len(pool.workers) == 1


async def test_a_worker_that_never_drains_is_killed_and_replaced(
    pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inference_worker, "DRAIN_LIMIT_SEC", 1.5)
    first = await pool.run("k", whoami, {}, TaskControl("t"))
    await _cancel_inside_the_call(pool, 60.0, warm=whoami)
    after = await asyncio.wait_for(pool.run("k", whoami, {}, TaskControl("t")), 30)
    assert after["pid"] != first["pid"] and pool.started == 2
    assert not _running(first["pid"])  # the stuck worker is gone


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_drain_left_behind_by_an_ended_event_loop_does_not_block_the_next_one(pool: Any) -> None:
    """The pool outlives event loops (the bench runs one node per loop): a worker whose drain
    belonged to a loop that ended is stopped, and the next job gets a fresh worker."""

    async def cancel_inside_the_call() -> int:
        await _cancel_inside_the_call(pool, 60.0)
        assert pool.workers[0].draining is not None
        return int(pool.workers[0].pid)

    stuck = asyncio.run(cancel_inside_the_call())
    after = asyncio.run(asyncio.wait_for(pool.run("k", whoami, {}, TaskControl("t")), 30))
    assert after["pid"] != stuck and not _running(stuck)
