"""Node states and drain through the HTTP API against a real node (real SQLite, real engine):
a drained node finishes what runs and claims nothing new, stays drained across a restart until
undrained, and reports its state; peers' states are judged from what they report."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.node import compose
from fredica.node.service import Node
from fredica.web.app import create_app

from .test_engine import create, fast_settings, wait_for

#: how long a drained node is watched for a claim it must not make: many poll intervals (0.05 s)
WATCH_SEC = 0.6


def node_with(tmp_path: Path, **engine: Any) -> Node:
    settings = fast_settings(tmp_path)
    return compose.build_node(replace(settings, engine=replace(settings.engine, **engine)))


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    node = node_with(tmp_path, stale_after=0.6)
    await node.start()
    transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        yield client, node
    await node.stop(grace=1)


async def statuses(node: Node, task_ids: list[str]) -> list[str]:
    return [(await node.get_task(t)).status.value for t in task_ids]


async def nodes(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in (await client.get("/api/v1/nodes")).json()["nodes"]}


async def watch_nothing_claimed(node: Node, task_ids: list[str]) -> None:
    """Wake the engine repeatedly for WATCH_SEC: every task must stay pending."""
    deadline = asyncio.get_running_loop().time() + WATCH_SEC
    while asyncio.get_running_loop().time() < deadline:
        node.engine.wake()
        await asyncio.sleep(0.05)
        assert set(await statuses(node, task_ids)) == {"pending"}


async def test_drain_finishes_running_work_claims_nothing_and_undrain_resumes(api) -> None:
    client, node = api
    # Given a task running on the node
    _, long = await create(node, [{"ref": "long", "type": "TEST_SLEEP", "payload": {"seconds": 1}}])
    await wait_for(lambda: node.engine.running_count == 1)
    # When it is drained
    r = await client.post("/api/v1/node/drain")
    assert r.status_code == 200
    assert r.json() == {
        "node_id": "node-t",
        "status": "draining",
        "draining": True,
        "running": 1,
        "max_workers": 2,
    }
    # Then the running task finishes, and new work is not claimed (a free slot or not)
    _, refs = await create(node, [{"ref": f"t{i}", "type": "TEST_SLEEP"} for i in range(3)])
    new = list(refs.values())
    await wait_for(lambda: _completed(node, long["long"]), 5)
    await watch_nothing_claimed(node, new)
    # and it says so everywhere: status, the node list, what it tells peers, the web panel
    status = (await client.get("/api/v1/status")).json()
    assert status["state"] == "draining" and status["draining"] is True
    assert (await nodes(client))["node-t"]["status"] == "draining"
    assert node.peer_info()["status"] == "draining" and node.peer_info()["task_types"] == []
    view = (await client.get("/api/v1/web/cluster")).json()
    assert [n["status"] for n in view["nodes"] if n["is_self"]] == ["draining"]
    # draining twice changes nothing
    assert (await client.post("/api/v1/node/drain")).json()["status"] == "draining"
    # When it is undrained, the waiting work runs
    r = await client.post("/api/v1/node/undrain")
    assert r.json()["draining"] is False and r.json()["status"] in ("online", "busy")
    await wait_for(lambda: _all_completed(node, new), 10)
    assert (await client.get("/api/v1/status")).json()["state"] == "online"


async def _completed(node: Node, task_id: str) -> bool:
    return (await node.get_task(task_id)).status.value == "completed"


async def _all_completed(node: Node, task_ids: list[str]) -> bool:
    return set(await statuses(node, task_ids)) == {"completed"}


async def test_a_drained_node_stays_drained_across_a_restart(tmp_path: Path) -> None:
    # Given a node drained, then stopped
    node = node_with(tmp_path)
    await node.start()
    await node.drain()
    await node.stop(grace=1)
    # When it starts again, work created on it waits
    node = node_with(tmp_path)
    await node.start()
    try:
        assert node.state().value == "draining"
        _, refs = await create(node, [{"ref": "a", "type": "TEST_SLEEP"}])
        await watch_nothing_claimed(node, list(refs.values()))
        # until it is undrained, which also survives the next restart
        await node.undrain()
        await wait_for(lambda: _all_completed(node, list(refs.values())), 10)
    finally:
        await node.stop(grace=1)
    node = node_with(tmp_path)
    await node.start()
    try:
        assert node.state().value == "online" and node.engine.claimable_types()
    finally:
        await node.stop(grace=1)


async def test_a_node_with_no_free_slot_is_busy(tmp_path: Path) -> None:
    node = node_with(tmp_path, max_workers=1)
    await node.start()
    try:
        await create(node, [{"ref": "a", "type": "TEST_SLEEP", "payload": {"seconds": 0.6}}])
        await wait_for(lambda: node.engine.running_count == 1)
        assert node.state().value == "busy"
        assert node.peer_info()["status"] == "busy"
        assert (await node.status())["state"] == "busy"
        await wait_for(lambda: node.engine.running_count == 0, 5)
        assert node.state().value == "online"
    finally:
        await node.stop(grace=1)


async def test_peer_states_are_judged_from_what_they_report(api) -> None:
    client, node = api
    # Given peers whose heartbeats reported their load and flags
    await node.peers.heartbeat(
        "peer-full", [], {"status": "online", "running": 2, "max_workers": 2}
    )
    await node.peers.heartbeat(
        "peer-free", [], {"status": "online", "running": 1, "max_workers": 2}
    )
    await node.peers.heartbeat("peer-drain", [], {"status": "draining", "max_workers": 2})
    listed = await nodes(client)
    # Then one with no free slot is busy, whatever it said; the others keep theirs
    assert listed["peer-full"]["status"] == "busy"
    assert listed["peer-free"]["status"] == "online"
    assert listed["peer-drain"]["status"] == "draining"
    body = (await client.get("/api/v1/nodes")).json()
    assert body["self"] == "node-t" and body["now"] >= listed["peer-full"]["last_seen_at"]
    # and a peer not heard from for longer than stale_after is offline
    await wait_for(lambda: _offline(client, "peer-drain"), 5)
    assert (await nodes(client))["node-t"]["status"] == "online"  # never itself


async def _offline(client: httpx.AsyncClient, node_id: str) -> bool:
    return (await nodes(client))[node_id]["status"] == "offline"
