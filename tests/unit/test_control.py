from __future__ import annotations

import asyncio

import pytest

from fredica.domain import errors
from fredica.executors.control import TaskControl


async def test_checkpoint_blocks_while_paused_and_raises_on_cancel() -> None:
    control = TaskControl("t")
    changes: list[tuple[bool, str | None]] = []
    control.on_pause_change(lambda paused, reason: changes.append((paused, reason)))
    await control.checkpoint()
    control.pause()
    waiter = asyncio.ensure_future(control.checkpoint())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    control.resume()
    await asyncio.wait_for(waiter, 1)
    control.pause()
    blocked = asyncio.ensure_future(control.checkpoint())
    await asyncio.sleep(0.01)
    control.cancel("stop")
    with pytest.raises(errors.TaskCancelled, match="stop"):
        await asyncio.wait_for(blocked, 1)
    assert changes == [
        (True, "paused by user"),
        (False, None),
        (True, "paused by user"),
        (False, None),
    ]


async def test_self_pause_is_flagged() -> None:
    control = TaskControl("t")
    control.request_pause("gpu_oom")
    assert control.paused and control.self_paused and control.pause_reason == "gpu_oom"
    control.request_resume()
    assert not control.paused and not control.self_paused
