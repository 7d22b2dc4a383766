"""engine.eager: a coroutine runs at once, and becomes an asyncio task only if it waits."""

from __future__ import annotations

import asyncio
import contextvars
import logging

import pytest

from fredica.engine import eager

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("eager_test", default="outer")


async def test_a_coroutine_that_never_waits_finishes_at_once_without_a_task() -> None:
    seen: list[str] = []

    async def quick() -> None:
        seen.append("ran")

    job = eager.start(quick(), "quick")
    assert job is None
    assert seen == ["ran"]  # before the caller's next await


async def test_a_coroutine_that_waits_carries_on_in_a_task_with_its_result_order() -> None:
    steps: list[str] = []
    gate = asyncio.Event()

    async def waits() -> None:
        steps.append("before")
        await gate.wait()
        steps.append("after")
        await asyncio.sleep(0)  # a bare yield is passed on too
        steps.append("end")

    job = eager.start(waits(), "waits")
    assert job is not None and steps == ["before"]
    assert job.get_name() == "waits"
    gate.set()
    await asyncio.wait_for(job, 5)
    assert steps == ["before", "after", "end"]


async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits() -> None:
    cleaned: list[str] = []

    async def long() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cleaned.append("cancelled")
            raise

    job = eager.start(long(), "long")
    assert job is not None
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert cleaned == ["cancelled"]


async def test_an_exception_after_a_wait_is_the_tasks_exception() -> None:
    async def fails() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    job = eager.start(fails(), "fails")
    assert job is not None
    with pytest.raises(ValueError, match="boom"):
        await job


async def test_an_exception_before_any_wait_is_logged_and_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails_at_once() -> None:
        raise ValueError("early")

    with caplog.at_level(logging.ERROR, logger="fredica.engine.eager"):
        assert eager.start(fails_at_once(), "early-one") is None
    assert "early-one failed" in caplog.text and "early" in caplog.text


async def test_context_changes_stay_in_the_started_coroutine() -> None:
    seen: list[str] = []

    async def sets() -> None:
        VAR.set("inner")
        seen.append(VAR.get())
        await asyncio.sleep(0.01)
        seen.append(VAR.get())  # the task carries the same context on

    job = eager.start(sets(), "ctx")
    assert VAR.get() == "outer"  # the caller's context is untouched
    assert job is not None
    await job
    assert seen == ["inner", "inner"]
    assert VAR.get() == "outer"
