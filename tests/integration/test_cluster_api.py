"""The cluster endpoints as one node answers them: only the cluster secret opens them (and
never `/api/v1`), bad bodies get a 422 naming the problem, a claim repeated with its request id
gets the same answer instead of a second claim, and a repeated completion is accepted once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from fredica import auth
from fredica.node.service import Node

from .conftest import node_client

SECRET = "cluster-api-test-secret"
TOKEN = "fredica_tok_publisher"
PEER = {"X-Cluster-Secret": SECRET}
CONFIG = {
    "cluster": {"cluster_secret": SECRET, "mode": "manual"},
    "auth": {
        "mode": "token",
        "access_tokens": [{"id": "t1", "name": "Pub", "token_hash": auth.hash_token(TOKEN)}],
    },
}
CLAIM = {"limit": 2, "types": ["TEST_SLEEP"], "start": True}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    async with node_client(tmp_path, config=CONFIG) as pair:
        yield pair


async def work_for_a_peer(client: httpx.AsyncClient, n: int) -> None:
    """`n` tasks pinned to node-b (this node's own engine leaves them alone)."""
    tasks = [
        {"ref": f"t{i}", "type": "TEST_SLEEP", "affinity": {"kind": "HARD", "node_id": "node-b"}}
        for i in range(n)
    ]
    r = await client.post(
        "/api/v1/pipelines",
        json={"template": "custom", "tasks": tasks},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 201, r.text


async def test_only_the_cluster_secret_opens_the_cluster_endpoints(api) -> None:
    client, _ = api
    for headers in ({}, {"X-Cluster-Secret": "wrong"}, {"Authorization": f"Bearer {TOKEN}"}):
        r = await client.get("/cluster/info", headers=headers)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", headers
    assert (await client.get("/cluster/info", headers=PEER)).json()["node_id"]
    # and the secret opens nothing of the user API
    r = await client.get("/api/v1/status", headers={"Authorization": f"Bearer {SECRET}", **PEER})
    assert r.status_code == 401


async def test_a_malformed_peer_request_is_refused_with_the_reason(api) -> None:
    client, _ = api
    cases = [
        ("/cluster/tasks/claim", {"filter": CLAIM}, "node_id"),
        ("/cluster/tasks/claim", {"node_id": "node-b", "filter": {"limit": "x"}}, "filter.limit"),
        ("/cluster/tasks/claim", {"node_id": "node-b", "filter": {"limit": 5000}}, "filter.limit"),
        ("/cluster/tasks/report", {"op": "explode", "node_id": "node-b"}, "'explode' found"),
        ("/cluster/tasks/report", {"op": "start", "node_id": "node-b"}, "task_id"),
        ("/cluster/heartbeat", {"node_id": "node-b", "tasks": [["t"]]}, "tasks"),
        ("/cluster/heartbeat", {"node_id": "b", "node": {"max_workers": "x"}}, "node.max_workers"),
        ("/cluster/tasks/signal", {"task_id": "t", "action": "explode"}, "action"),
        ("/cluster/peers", {"node_id": "node-b", "address": "ftp://x"}, "address"),
        (
            "/cluster/tasks/report",
            {"op": "start", "node_id": "b", "task_id": "t", "attempt": 2**70},
            "attempt",
        ),
        (
            "/cluster/tasks/report",
            {"op": "fail", "node_id": "b", "failure": {"task_id": "t", "attempt": 1}},
            "failure.error",
        ),
    ]
    for path, body, reason in cases:
        r = await client.post(path, json=body, headers=PEER)
        assert r.status_code == 422, (path, r.text)
        assert reason in r.json()["error"], (path, r.text)


async def test_a_claim_repeated_with_its_request_id_gets_the_same_answer(api) -> None:
    client, _ = api
    await work_for_a_peer(client, 4)
    body = {"node_id": "node-b", "filter": CLAIM, "request_id": "req-1"}
    first = (await client.post("/cluster/tasks/claim", json=body, headers=PEER)).json()
    again = (await client.post("/cluster/tasks/claim", json=body, headers=PEER)).json()
    assert len(first["tasks"]) == 2 and again == first
    # a new request claims the next ones
    body["request_id"] = "req-2"
    second = (await client.post("/cluster/tasks/claim", json=body, headers=PEER)).json()
    assert {t["id"] for t in second["tasks"]}.isdisjoint({t["id"] for t in first["tasks"]})
    listed = (
        await client.get(
            "/api/v1/tasks",
            params={"status": "running"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    ).json()["tasks"]
    assert len(listed) == 4 and {t["claimed_by"] for t in listed} == {"node-b"}


async def test_a_completion_sent_twice_is_accepted_once(api) -> None:
    client, _ = api
    await work_for_a_peer(client, 1)
    claim = {"node_id": "node-b", "filter": CLAIM}
    task = (await client.post("/cluster/tasks/claim", json=claim, headers=PEER)).json()["tasks"][0]
    report = {
        "op": "complete",
        "node_id": "node-b",
        "items": [{"task_id": task["id"], "attempt": task["attempt"], "result": {"n": 1}}],
    }
    # without a request id: the second is recognised as the same attempt's completion
    for _ in range(2):
        r = await client.post("/cluster/tasks/report", json=report, headers=PEER)
        assert r.status_code == 200 and r.json()["outcomes"][0]["ok"] is True, r.text
    shown = (
        await client.get(
            f"/api/v1/tasks/{task['id']}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
    ).json()
    assert shown["status"] == "completed" and shown["result"] == {"n": 1}
    assert [e["event_type"] for e in shown["events"]].count("completed") == 1
    # a zombie's completion of an older attempt is refused (fenced)
    stale = {**report, "items": [{**report["items"][0], "attempt": task["attempt"] - 1}]}
    outcome = (await client.post("/cluster/tasks/report", json=stale, headers=PEER)).json()
    assert outcome["outcomes"][0]["ok"] is False
