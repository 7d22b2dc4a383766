"""Claim-ahead and group commit (DESIGN §4.13) with a real SQLite file: short work is claimed
in batches beyond the free slots, long work never is, a task that could not start in time goes
back for any node, and a stopping node hands back what it claimed ahead."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

from fredica.domain.models import NewPipeline, NewTask, TaskStatus
from fredica.node import compose
from fredica.node.service import DB_FILENAME, Node

from .test_engine import create, fast_settings, pipeline_done, wait_for

S = TaskStatus


def node_with(tmp_path: Path, **engine: Any) -> Node:
    settings = fast_settings(tmp_path)
    return compose.build_node(replace(settings, engine=replace(settings.engine, **engine)))


def effect(log: Path, seconds: float) -> dict[str, Any]:
    return {"type": "TEST_EFFECT", "payload": {"effect_log": str(log), "seconds": seconds}}


async def claim_events(node: Node, task_ids: list[str]) -> list[str]:
    """The message of each task's `claimed` event ("started at once" or a plain claim)."""
    out = []
    for task_id in task_ids:
        events = await node.task_events(task_id)
        out += [e.message or "" for e in events if e.event_type == "claimed"]
    return out


async def test_short_tasks_are_claimed_ahead_and_recorded_as_they_ran(tmp_path: Path) -> None:
    n = node_with(tmp_path, claim_ahead=64, claim_ahead_window=2.0)
    await n.start()
    try:
        # Given a few hundred tasks that each take no time
        pid, refs = await create(
            n, [effect(tmp_path / "log", 0) | {"ref": f"t{i}"} for i in range(300)]
        )
        done = await wait_for(lambda: pipeline_done(n, pid), timeout=60)
        assert done.status.value == "completed"
        # Then once their run time was known, the node claimed them ahead of its two slots
        # (claimed, not started) instead of two per transaction
        messages = await claim_events(n, list(refs.values()))
        ahead = [m for m in messages if "started at once" not in m]
        assert len(ahead) > 100, f"only {len(ahead)} of 300 were claimed ahead"
        for task_id in list(refs.values())[::10]:
            task = await n.get_task(task_id)
            # what was recorded is when each really ran, in order
            assert task.claimed_at is not None and task.started_at is not None
            assert task.completed_at is not None
            assert task.claimed_at <= task.started_at <= task.completed_at
            assert task.retry_count == 0 and task.attempt == 1
    finally:
        await n.stop(grace=2)


async def test_long_tasks_are_never_claimed_ahead(tmp_path: Path) -> None:
    n = node_with(tmp_path, claim_ahead=64, claim_ahead_window=1.0)
    await n.start()
    try:
        # Given a node that knows TEST_SLEEP as long work (0.3 s > window / 8)
        pid, _ = await create(
            n, [{"ref": "warm", "type": "TEST_SLEEP", "payload": {"seconds": 0.3}}]
        )
        await wait_for(lambda: pipeline_done(n, pid))
        # When ten more are ready
        pid, refs = await create(
            n,
            [
                {"ref": f"s{i}", "type": "TEST_SLEEP", "payload": {"seconds": 0.3}}
                for i in range(10)
            ],
        )
        # Then, until they are all done, it never holds more than its two slots: the rest stay
        # pending for any node
        deadline = asyncio.get_running_loop().time() + 30
        while await pipeline_done(n, pid) is None:
            # one read of all of them (task by task, a task finishing and the next one
            # claimed between two reads would count twice)
            tasks = await n.list_tasks(pid)
            held = [t for t in tasks if t.status in (S.CLAIMED, S.RUNNING)]
            assert len(held) <= 2, [t.status for t in tasks]
            assert asyncio.get_running_loop().time() < deadline, "the tasks did not finish"
            await asyncio.sleep(0.02)
    finally:
        await n.stop(grace=2)


async def test_a_task_claimed_ahead_that_cannot_start_in_time_goes_back(tmp_path: Path) -> None:
    n = node_with(tmp_path, max_workers=1, claim_ahead=8, claim_ahead_window=0.4)
    await n.start()
    try:
        log = tmp_path / "log"
        # Given TEST_EFFECT known as short work
        pid, _ = await create(n, [effect(log, 0) | {"ref": f"w{i}"} for i in range(20)])
        await wait_for(lambda: pipeline_done(n, pid))
        # When the same type suddenly takes longer than the window, with a queue behind it
        pid, refs = await create(n, [effect(log, 0.5) | {"ref": f"s{i}"} for i in range(6)])
        done = await wait_for(lambda: pipeline_done(n, pid), timeout=60)
        # Then what waited too long went back to pending (an event says why) and ran later,
        # without spending an attempt's retry
        assert done.status.value == "completed"
        released = []
        for task_id in refs.values():
            events = await n.task_events(task_id)
            released += [e for e in events if e.event_type == "released"]
            assert (await n.get_task(task_id)).retry_count == 0
        assert released, "no task claimed ahead was handed back"
        assert all("not started within 0.4s" in (e.message or "") for e in released)
    finally:
        await n.stop(grace=2)


async def test_a_stopping_node_hands_back_what_it_claimed_ahead(tmp_path: Path) -> None:
    n = node_with(tmp_path, claim_ahead=256, claim_ahead_window=5.0)
    await n.start()
    log = tmp_path / "log"
    pid, _ = await create(n, [effect(log, 0) | {"ref": f"w{i}"} for i in range(50)])
    await wait_for(lambda: pipeline_done(n, pid))
    pid, refs = await create(n, [effect(log, 0.02) | {"ref": f"t{i}"} for i in range(600)])
    await wait_for(lambda: len(n.engine._queued) > 20)
    await n.stop(grace=0.5)
    # nothing is left claimed by the stopped node: every task is done or back to pending
    with sqlite3.connect(tmp_path / DB_FILENAME) as conn:
        marks = ",".join("?" for _ in refs)
        rows = conn.execute(
            f"SELECT status, COUNT(*) FROM task WHERE id IN ({marks}) GROUP BY status",
            list(refs.values()),
        ).fetchall()
    statuses = dict(rows)
    assert set(statuses) <= {"pending", "completed"}, statuses
    assert statuses.get("pending", 0) > 0


async def test_a_cancel_that_comes_before_the_claim_result_is_not_lost(tmp_path: Path) -> None:
    n = node_with(tmp_path)
    await n.start()
    try:
        log = tmp_path / "log"
        # Given a cancel for a task that is not on this engine yet (its claim is in flight)
        assert n.engine.signal_cancel("late", "cancelled by user") is False
        # When the claim brings it
        await n._store.create_pipeline(
            NewPipeline(
                template="custom",
                material_id="m-late",
                tasks=(NewTask(type="TEST_EFFECT", id="late", payload={"effect_log": str(log)}),),
            )
        )
        # Then it ends cancelled without having started
        task = await wait_for(
            lambda: _terminal(n, "late"),
            timeout=10,
        )
        assert task.status is S.CANCELLED
        assert not log.exists() or "late" not in log.read_text()
    finally:
        await n.stop(grace=2)


async def _terminal(n: Node, task_id: str) -> Any:
    task = await n.get_task(task_id)
    return task if task.status.is_terminal else None


async def test_inline_tasks_finish_without_a_task_of_their_own_and_log_to_their_attempt(
    tmp_path: Path,
) -> None:
    n = node_with(tmp_path, claim_ahead=64, claim_ahead_window=2.0)
    await n.start()
    try:
        # Given quick work whose executor starts inline (it never waits)
        pid, refs = await create(
            n, [{"ref": f"q{i}", "type": "TEST_INLINE", "payload": {}} for i in range(150)]
        )
        done = await wait_for(lambda: pipeline_done(n, pid), timeout=60)
        assert done.status.value == "completed"
        ids = list(refs.values())
        for task_id in ids[::15]:
            task = await n.get_task(task_id)
            # Then each ran once, with its own result, and what it logged went to its own
            # attempt's log only (each started in a context of its own)
            assert task.result == {"task": task_id, "waited": 0.0}
            assert task.attempt == 1 and task.retry_count == 0
            log = await n.task_log(task_id)
            assert f"inline work of {task_id}" in log.text
            others = [i for i in ids if i != task_id and i in log.text]
            assert others == [], f"log of {task_id} names other tasks: {others[:3]}"
    finally:
        await n.stop(grace=2)


async def test_an_inline_task_that_waits_can_be_paused_resumed_and_cancelled(
    tmp_path: Path,
) -> None:
    n = node_with(tmp_path)
    await n.start()
    try:
        pid, refs = await create(
            n, [{"ref": "w", "type": "TEST_INLINE", "payload": {"seconds": 30}}]
        )
        task_id = refs["w"]
        await wait_for(lambda: n.engine.is_running_here(task_id))
        # When it is paused while it waits, the pause is recorded; resume lifts it
        await n.task_action(task_id, "pause")
        paused = await wait_for(lambda: _paused(n, task_id, True))
        assert paused.status is S.RUNNING
        await n.task_action(task_id, "resume")
        await wait_for(lambda: _paused(n, task_id, False))
        # And a cancel ends it at once (the 30 s wait is interrupted, not run out)
        await n.task_action(task_id, "cancel")
        ended = await wait_for(lambda: _status(n, task_id, S.CANCELLED), timeout=10)
        assert ended.result is None
        assert (await pipeline_done(n, pid)) is not None
    finally:
        await n.stop(grace=2)


async def _paused(n: Node, task_id: str, paused: bool) -> Any:
    task = await n.get_task(task_id)
    return task if task.is_paused is paused else None


async def _status(n: Node, task_id: str, status: TaskStatus) -> Any:
    task = await n.get_task(task_id)
    return task if task.status is status else None
