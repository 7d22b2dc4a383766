"""The HTTP API through an ASGI client against a real node (real SQLite, real engine)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import pytest

from fredica.cli.demo import local_http_server


async def wait_pipeline(client: httpx.AsyncClient, pid: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = (await client.get(f"/api/v1/pipelines/{pid}")).json()
        if data["status"] in ("completed", "failed", "cancelled", "partial_failed"):
            return data
        await asyncio.sleep(0.05)
    raise AssertionError(f"pipeline {pid} did not finish")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_create_get_list_and_dedupe(api) -> None:
    client, _ = api
    body = {
        "template": "custom",
        "material_id": "mat-1",
        "tasks": [
            {"ref": "a", "type": "TEST_SLEEP", "payload": {"seconds": 0.05}},
            {"ref": "b", "type": "TEST_SLEEP", "depends_on": ["a"]},
        ],
    }
    r = await client.post("/api/v1/pipelines", json=body)
    assert r.status_code == 201
    created = r.json()
    assert created["deduplicated"] is False and set(created["tasks"]) == {"a", "b"}
    again = await client.post("/api/v1/pipelines", json=body)
    assert again.json() == created | {
        "deduplicated": True,
        "tasks": created["tasks"],
        "status": again.json()["status"],
    }
    data = await wait_pipeline(client, created["pipeline_id"])
    assert data["status"] == "completed" and len(data["tasks"]) == 2
    task = data["tasks"][0]
    for column in (
        "attempt",
        "change_seq",
        "is_paused",
        "is_pausable",
        "progress",
        "payload",
        "result",
        "created_at",
        "heartbeat_at",
        "excluded_nodes",
        "owner_id",
    ):
        assert column in task
    assert isinstance(task["created_at"], float) and isinstance(task["payload"], dict)
    listed = (await client.get("/api/v1/pipelines")).json()["pipelines"]
    assert [p["id"] for p in listed] == [created["pipeline_id"]]
    tasks = (
        await client.get(
            "/api/v1/tasks", params={"pipeline_id": created["pipeline_id"], "status": "completed"}
        )
    ).json()["tasks"]
    assert len(tasks) == 2
    detail = (await client.get(f"/api/v1/tasks/{created['tasks']['b']}")).json()
    assert [e["event_type"] for e in detail["events"]][:1] == ["created"]


async def _pages(client: httpx.AsyncClient, path: str, key: str, **params: Any) -> list[str]:
    """Every id of a list, followed page by page through `next_cursor`."""
    ids: list[str] = []
    cursor = None
    while True:
        query = params | ({"cursor": cursor} if cursor else {})
        body = (await client.get(path, params=query)).json()
        ids += [row["id"] for row in body[key]]
        if body["next_cursor"] is None:
            return ids
        assert len(body[key]) == params["limit"]
        cursor = body["next_cursor"]


async def test_lists_page_with_a_cursor(api) -> None:
    client, _ = api
    pipelines = []
    for i in range(4):
        task = {"type": "TEST_SLEEP", "payload": {"seconds": 0}}
        tasks = [task | {"ref": f"t{j}"} for j in range(9)]
        body = {"template": "custom", "material_id": f"paged-{i}", "tasks": tasks}
        created = (await client.post("/api/v1/pipelines", json=body)).json()
        pipelines.append(created["pipeline_id"])
    full = (await client.get("/api/v1/tasks", params={"limit": 1000})).json()
    assert full["next_cursor"] is None and len(full["tasks"]) == 36
    expected = [t["id"] for t in full["tasks"]]
    assert await _pages(client, "/api/v1/tasks", "tasks", limit=5) == expected
    assert await _pages(client, "/api/v1/tasks", "tasks", limit=36) == expected
    # newest pipeline's tasks first; within one pipeline oldest first
    newest = [t["id"] for t in full["tasks"] if t["pipeline_id"] == pipelines[-1]]
    assert expected[:9] == newest
    one = await _pages(client, "/api/v1/tasks", "tasks", limit=4, pipeline_id=pipelines[0])
    assert one == [t["id"] for t in full["tasks"] if t["pipeline_id"] == pipelines[0]][::-1]
    # offset still works, alone or after a cursor
    page = (await client.get("/api/v1/tasks", params={"limit": 5, "offset": 10})).json()
    assert [t["id"] for t in page["tasks"]] == expected[10:15] and page["next_cursor"]
    after = {"limit": 3, "offset": 2, "cursor": page["next_cursor"]}
    page = (await client.get("/api/v1/tasks", params=after)).json()
    assert [t["id"] for t in page["tasks"]] == expected[17:20]
    listed = (await client.get("/api/v1/pipelines")).json()
    assert listed["next_cursor"] is None
    assert await _pages(client, "/api/v1/pipelines", "pipelines", limit=3) == pipelines[::-1]
    assert [p["id"] for p in listed["pipelines"]] == pipelines[::-1]

    task_cursor = (await client.get("/api/v1/tasks", params={"limit": 1})).json()["next_cursor"]
    for path, cursor, fragment in (
        ("/api/v1/tasks", "not-a-cursor", "cursor: malformed cursor"),
        ("/api/v1/pipelines", "eyJ4Ijp0cnVlfQ", "cursor: malformed cursor"),
        ("/api/v1/pipelines", task_cursor, "belongs to the task list"),
    ):
        r = await client.get(path, params={"cursor": cursor})
        assert r.status_code == 422, r.text
        assert r.json()["code"] == "invalid_request" and fragment in r.json()["error"]


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "malformed JSON"),
        ({"template": "nope"}, 422, "unknown template 'nope'"),
        ({"template": "custom", "tasks": [{"ref": "a", "type": "NOPE"}]}, 422, "unknown task type"),
        (
            {
                "template": "custom",
                "tasks": [
                    {"ref": "a", "type": "TEST_SLEEP", "depends_on": ["b"]},
                    {"ref": "b", "type": "TEST_SLEEP", "depends_on": ["a"]},
                ],
            },
            422,
            "cycle",
        ),
        (
            {
                "template": "custom",
                "tasks": [{"ref": "a", "type": "TEST_SLEEP", "depends_on": ["x"]}],
            },
            422,
            "unknown ref",
        ),
        (
            {
                "template": "custom",
                "tasks": [{"ref": "a", "type": "TEST_SLEEP", "priority": "high"}],
            },
            422,
            "tasks[0].priority",
        ),
        ({"template": "custom", "tasks": "many"}, 422, "tasks"),
        (
            {"template": "custom", "tasks": [{"ref": "a", "type": "TEST_SLEEP"}], "extra": 1},
            422,
            "extra",
        ),
        ({"tasks": []}, 422, "template"),
    ],
)
async def test_bad_input_is_a_clear_4xx_and_writes_nothing(
    api, body, status: int, fragment: str
) -> None:
    client, node = api
    kwargs = (
        {"content": body, "headers": {"content-type": "application/json"}}
        if isinstance(body, bytes)
        else {"json": body}
    )
    r = await client.post("/api/v1/pipelines", **kwargs)
    assert r.status_code == status, r.text
    assert fragment in r.json()["error"]
    assert await node.list_pipelines() == []
    assert await node.list_tasks() == []


async def test_task_actions_and_their_refusals(api) -> None:
    client, _ = api
    created = (
        await client.post(
            "/api/v1/pipelines",
            json={
                "template": "custom",
                "tasks": [
                    {"ref": "s", "type": "TEST_SLEEP", "payload": {"seconds": 20}},
                    {
                        "ref": "f",
                        "type": "TEST_FAIL",
                        "max_retries": 0,
                        "payload": {"error_type": "AWAITING_CREDENTIAL"},
                    },
                ],
            },
        )
    ).json()
    s, f = created["tasks"]["s"], created["tasks"]["f"]
    for _ in range(200):
        if (await client.get(f"/api/v1/tasks/{s}")).json()["status"] == "running":
            break
        await asyncio.sleep(0.02)
    paused = await client.post(f"/api/v1/tasks/{s}/pause")
    assert paused.status_code == 200 and paused.json()["is_paused"] is True
    resumed = await client.post(f"/api/v1/tasks/{s}/resume")
    assert resumed.json()["is_paused"] is False
    assert (await client.post(f"/api/v1/tasks/{s}/retry")).status_code == 409
    assert (await client.post(f"/api/v1/tasks/{s}/explode")).status_code == 404
    assert (await client.post("/api/v1/tasks/no-such-task/cancel")).status_code == 404
    # AWAITING_CREDENTIAL: no auto-retry; the user skips it
    for _ in range(200):
        if (await client.get(f"/api/v1/tasks/{f}")).json()["status"] == "failed":
            break
        await asyncio.sleep(0.02)
    assert (await client.get(f"/api/v1/tasks/{f}")).json()["error_type"] == "AWAITING_CREDENTIAL"
    assert (await client.post(f"/api/v1/tasks/{f}/pause")).status_code == 409
    assert (await client.post(f"/api/v1/tasks/{f}/skip")).json()["status"] == "skipped"
    r = await client.post(f"/api/v1/pipelines/{created['pipeline_id']}/cancel")
    assert r.status_code == 202
    data = await wait_pipeline(client, created["pipeline_id"])
    assert data["status"] == "cancelled"
    again = await client.post(f"/api/v1/pipelines/{created['pipeline_id']}/cancel")
    assert again.status_code == 409


async def test_network_test_route_measures_real_latency(api) -> None:
    client, _ = api
    with local_http_server() as base:
        r = await client.post(
            "/api/v1/NetworkTestRoute",
            json={
                "urls": [
                    f"{base}/",
                    f"http://127.0.0.1:{closed_port()}/",
                    f"{base}/slow?ms=1500",
                    f"{base}/status/404",
                ],
                "timeout_ms": 500,
            },
        )
        assert r.status_code == 200
        ids = r.json()
        for _ in range(200):
            rows = (
                await client.get(
                    "/api/v1/WorkerTaskListRoute", params={"pipeline_id": ids["pipeline_id"]}
                )
            ).json()["tasks"]
            if rows[0]["status"] == "completed":
                break
            await asyncio.sleep(0.05)
    assert rows[0]["id"] == ids["task_id"]
    ok, refused, slow, missing = rows[0]["result"]["results"]
    assert ok["status"] == "ok" and isinstance(ok["latency_ms"], int) and ok["latency_ms"] < 500
    assert refused["status"] == "error" and refused["latency_ms"] is None and refused["error"]
    assert slow["status"] == "timeout" and slow["error"] == "timeout (>500ms)"
    # an HTTP error answer is not "ok": the server refused, though its latency is measured
    assert missing["status"] == "error" and missing["error"] == "HTTP 404 Not Found"
    assert missing["http_status"] == 404 and isinstance(missing["latency_ms"], int)


async def test_network_test_route_rejects_bad_bodies(api) -> None:
    client, node = api
    r = await client.post(
        "/api/v1/NetworkTestRoute", content=b"{", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and "malformed JSON" in r.json()["error"]
    r = await client.post("/api/v1/NetworkTestRoute", json={"timeout_ms": "soon"})
    assert r.status_code == 422 and "timeout_ms" in r.json()["error"]
    r = await client.post("/api/v1/NetworkTestRoute", json={"urls": ["file:///etc/passwd"]})
    assert r.status_code == 422 and "not an http" in r.json()["error"]
    assert await node.list_tasks() == []


async def test_health_status_and_metrics(api) -> None:
    client, node = api
    assert (await client.get("/healthz")).json()["ok"] is True
    status = (await client.get("/api/v1/status")).json()
    assert status["node_id"] == "node-t" and "NETWORK_TEST" in status["task_types"]
    assert status["previous_shutdown_type"] == "FIRST_START"
    created = (
        await client.post(
            "/api/v1/pipelines",
            json={"template": "custom", "tasks": [{"ref": "a", "type": "TEST_SLEEP"}]},
        )
    ).json()
    await wait_pipeline(client, created["pipeline_id"])
    text = (await client.get("/metrics")).text
    assert 'fredica_tasks{status="completed"} 1.0' in text
    assert 'fredica_engine_tasks_total{outcome="completed"} 1.0' in text
    nodes = (await client.get("/api/v1/nodes")).json()["nodes"]
    assert nodes[0]["id"] == "node-t"
