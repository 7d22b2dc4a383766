"""The web UI's endpoints against a real node: pages, server-sent events (over a real uvicorn
server on loopback, since an ASGI test client buffers whole responses), result files, crash
recovery and the quality trade-off check."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from fredica.cli.demo import free_port
from fredica.domain.models import NewPipeline, NewTask
from fredica.executors import network_test
from fredica.node import compose
from fredica.node.service import KEY_LAST_SHUTDOWN, Node
from fredica.store.base import ClaimFilter
from fredica.store.sqlite import SQLiteTaskStore
from fredica.web import events as web_events
from fredica.web.app import create_app

from .conftest import node_client
from .test_engine import fast_settings


@pytest.fixture
async def web(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    async with node_client(tmp_path / "data", create_app) as pair:
        yield pair


@contextlib.asynccontextmanager
async def served_app(node: Node) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """The node's app on a real uvicorn server in this event loop."""
    port = free_port()
    config = uvicorn.Config(
        create_app(node, manage_lifecycle=False),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws="none",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@dataclass
class Event:
    event: str | None = None
    id: str | None = None
    data: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    retry: str | None = None

    def json(self) -> Any:
        return json.loads("\n".join(self.data))


async def read_events(response: httpx.Response) -> AsyncIterator[Event]:
    """Parse the text/event-stream framing: fields until a blank line end one event."""
    current = Event()
    async for line in response.aiter_lines():
        if line == "":
            yield current
            current = Event()
        elif line.startswith(":"):
            current.comments.append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                current.data.append(value)
            elif name in ("event", "id", "retry"):
                setattr(current, name, value)


async def next_event(events: AsyncIterator[Event], pred: Any, timeout: float = 10) -> Event:
    async def find() -> Event:
        async for event in events:
            if pred(event):
                return event
        raise AssertionError("the stream ended")

    return await asyncio.wait_for(find(), timeout)


def sleep_pipeline(seconds: float = 0.05) -> dict[str, Any]:
    return {
        "template": "custom",
        "tasks": [{"ref": "a", "type": "TEST_SLEEP", "payload": {"seconds": seconds}}],
    }


# --- pages and read endpoints --------------------------------------------------------------------
async def test_pages_and_static_assets(web) -> None:
    client, _ = web
    for path in ("/", "/processing", "/tools", "/pipelines/some-id"):
        r = await client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="/static/js/main.js">' in r.text
    js = await client.get("/static/js/main.js")
    assert js.status_code == 200
    assert "javascript" in js.headers["content-type"]
    assert js.headers["cache-control"] == "no-cache"
    assert (await client.get("/static/js/nope.js")).status_code == 404


async def test_web_config_and_cluster(web) -> None:
    client, node = web
    config = (await client.get("/api/v1/web/config")).json()
    assert config["network_test"]["default_urls"] == list(network_test.DEFAULT_URLS)
    assert config["quality_defaults"]["TRANSCRIBE_CHUNK"] == "quality"
    assert "custom" in config["templates"]
    assert "TEST_SLEEP" in config["task_types"]

    cluster = (await client.get("/api/v1/web/cluster")).json()
    assert cluster["online"] == 1
    (me,) = cluster["nodes"]
    assert me["id"] == node.node_id and me["is_self"] is True
    assert me["max_workers"] == 2 and me["running"] == 0
    assert "TEST_SLEEP" in me["task_types"]
    assert me["info"]["disk_free"] > 0 and me["info"]["cpu_count"] >= 1
    # capabilities carry their base scores (best first); the outbox and the replicas are empty
    # on a node alone
    assert me["functions"], me
    for function in me["functions"]:
        scores = [o["score"] for o in function["options"]]
        assert scores == sorted(scores, reverse=True) and function["score"] == scores[0]
        assert {o["backend"] for o in function["options"]} == set(function["backends"])
    assert cluster["outbox"] == 0 and cluster["replicas"] == {}


async def test_quality_check_lists_lowered_quality_defaults(web) -> None:
    client, _ = web
    tasks = [{"ref": "t", "type": "TRANSCRIBE_CHUNK"}, {"ref": "s", "type": "TEST_SLEEP"}]

    async def check(**body: Any) -> list[str]:
        r = await client.post("/api/v1/web/quality-check", json={"template": "custom", **body})
        assert r.status_code == 200, r.text
        return [item["task_type"] for item in r.json()["needs_confirmation"]]

    assert await check(tasks=tasks, quality_mode="speed") == ["TRANSCRIBE_CHUNK"]
    assert await check(tasks=tasks, quality_mode="balanced") == ["TRANSCRIBE_CHUNK"]
    assert await check(tasks=tasks, quality_mode="quality") == []
    assert await check(tasks=tasks) == []
    # A per-type override that keeps quality wins over the pipeline's speed
    keep = {"TRANSCRIBE_CHUNK": {"quality_mode": "quality"}}
    assert await check(tasks=tasks, quality_mode="speed", overrides=keep) == []
    # A task spawned at run time (SPLIT_AUDIO -> TRANSCRIBE_CHUNK) counts too
    split = [{"ref": "s", "type": "SPLIT_AUDIO"}]
    assert await check(tasks=split, quality_mode="speed") == ["TRANSCRIBE_CHUNK"]
    bad = await client.post(
        "/api/v1/web/quality-check",
        json={"template": "custom", "overrides": {"X": {"quality_mode": "fast"}}},
    )
    assert bad.status_code == 422
    assert "overrides.X.quality_mode" in bad.json()["error"]


# --- result files --------------------------------------------------------------------------------
async def test_result_files_are_served_only_from_the_task_dir(web, tmp_path: Path) -> None:
    client, node = web
    created = (await client.post("/api/v1/pipelines", json=sleep_pipeline())).json()
    task_id = created["tasks"]["a"]
    data_dir = node.settings.data_dir
    base = data_dir / "results" / task_id
    (base / "chunks").mkdir(parents=True)
    (base / "transcript.txt").write_text("hello")
    (base / "chunks" / "c1.json").write_text('{"n": 1}')
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, base / "escape.txt")
    os.symlink(base / "transcript.txt", base / "alias.txt")  # inside: allowed
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "x.txt").write_text("not a result")
    os.symlink(other, data_dir / "results" / "linked-task")

    r = await client.get(f"/files/results/{task_id}/transcript.txt")
    assert r.status_code == 200 and r.text == "hello"
    assert "inline" in r.headers["content-disposition"]
    r = await client.get(f"/files/results/{task_id}/chunks/c1.json")
    assert r.status_code == 200 and r.json() == {"n": 1}
    assert (await client.get(f"/files/results/{task_id}/alias.txt")).text == "hello"

    listed = (await client.get(f"/api/v1/tasks/{task_id}/files")).json()["files"]
    assert [f["name"] for f in listed] == ["alias.txt", "chunks/c1.json", "transcript.txt"]
    assert listed[2]["size"] == 5
    assert listed[2]["url"] == f"/files/results/{task_id}/transcript.txt"
    assert (await client.get("/api/v1/tasks/no-such-task/files")).status_code == 404
    # a task of another owner that ran here: not in this node's store, its outputs are here
    (data_dir / "results" / "ran-for-a-peer").mkdir()
    (data_dir / "results" / "ran-for-a-peer" / "out.txt").write_text("peer")
    listed = (await client.get("/api/v1/tasks/ran-for-a-peer/files")).json()["files"]
    assert [(f["name"], f["size"]) for f in listed] == [("out.txt", 4)]
    assert (await client.get("/api/v1/tasks/linked-task/files")).status_code == 404  # leads out

    refused = {
        f"/files/results/{task_id}/%2e%2e/%2e%2e/fredica.db": 400,
        f"/files/results/{task_id}/..%2F..%2Ffredica.db": 400,
        f"/files/results/{task_id}/chunks/%2e%2e/transcript.txt": 400,
        f"/files/results/{task_id}/%2Fetc%2Fpasswd": 400,
        "/files/results/%2e%2e/fredica.db": 400,
        f"/files/results/{task_id}/escape.txt": 404,  # symlink leading outside
        "/files/results/linked-task/x.txt": 404,  # the task dir itself leads outside
        f"/files/results/{task_id}/missing.txt": 404,
        f"/files/results/{task_id}/chunks": 404,  # a directory
        "/files/results/unknown-task/transcript.txt": 404,
    }
    for url, status in refused.items():
        r = await client.get(url)
        assert r.status_code == status, (url, r.status_code, r.text)
        assert "top secret" not in r.text
        assert r.json()["error"]


# --- crash recovery ------------------------------------------------------------------------------
async def prepare_crash(data_dir: Path, node_id: str) -> dict[str, str]:
    """A database as a crash leaves it: the shutdown flag never reached CLEAN, one task of this
    node's pipeline running on another node (b), two waiting behind it."""
    store = SQLiteTaskStore(data_dir / "fredica.db", node_id)
    try:
        spec = NewPipeline(
            "custom",
            "mat-crash",
            (
                NewTask("TEST_SLEEP", id="t-remote", payload={"seconds": 60}),
                NewTask("TEST_SLEEP", id="t-wait-1", depends_on=("t-remote",)),
                NewTask("TEST_SLEEP", id="t-wait-2", depends_on=("t-remote",)),
            ),
        )
        pipeline, _ = await store.create_pipeline(spec)
        (claimed,) = await store.claim(ClaimFilter(limit=1, start=True), "node-b")
        assert claimed.id == "t-remote"
        await store.set_config(KEY_LAST_SHUTDOWN, "PENDING_CHECK")
    finally:
        await store.close()
    return {"pipeline": pipeline.id}


@contextlib.asynccontextmanager
async def restarted(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    node = compose.build_node(fast_settings(tmp_path / "data"))
    await node.start()
    transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            yield client, node
    finally:
        await node.stop(grace=1)


async def test_recovery_question_after_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    ids = await prepare_crash(data, "node-t")
    async with restarted(tmp_path) as (client, node):
        state = (await client.get("/api/v1/recovery")).json()
        assert state["previous_shutdown_type"] == "CRASH"
        assert state["needed"] is True and state["acknowledged"] is None
        assert state["running_elsewhere"] == 1 and state["pending"] == 2
        assert state["by_type"]["running_elsewhere"] == {"TEST_SLEEP": 1}

        bad = await client.post("/api/v1/recovery", json={"action": "nothing"})
        assert bad.status_code == 422 and "action" in bad.json()["error"]
        malformed = await client.post(
            "/api/v1/recovery", content=b"{", headers={"content-type": "application/json"}
        )
        assert malformed.status_code == 400

        # cancel_pending: the waiting tasks end, the one running elsewhere is left alone
        r = await client.post("/api/v1/recovery", json={"action": "cancel_pending"})
        assert r.status_code == 200, r.text
        assert r.json()["cancelled_tasks"] == 2
        for task_id, status in (
            ("t-wait-1", "cancelled"),
            ("t-wait-2", "cancelled"),
            ("t-remote", "running"),
        ):
            assert (await client.get(f"/api/v1/tasks/{task_id}")).json()["status"] == status
        state = (await client.get("/api/v1/recovery")).json()
        assert state["needed"] is False
        assert state["acknowledged"]["action"] == "cancel_pending"
        again = await client.post("/api/v1/recovery", json={"action": "continue"})
        assert again.status_code == 409 and "already answered" in again.json()["error"]
        assert ids["pipeline"]

    # A clean restart has nothing to ask
    async with restarted(tmp_path) as (client, _):
        state = (await client.get("/api/v1/recovery")).json()
        assert state["previous_shutdown_type"] == "CLEAN" and state["needed"] is False
        r = await client.post("/api/v1/recovery", json={"action": "continue"})
        assert r.status_code == 409 and "nothing to recover" in r.json()["error"]


async def test_recovery_cancel_all_and_a_later_crash_asks_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    ids = await prepare_crash(data, "node-t")
    async with restarted(tmp_path) as (client, _):
        r = await client.post("/api/v1/recovery", json={"action": "cancel_all"})
        assert r.status_code == 200 and r.json()["cancelled_pipelines"] == 1
        pipeline = (await client.get(f"/api/v1/pipelines/{ids['pipeline']}")).json()
        assert pipeline["cancel_requested"] is True
        statuses = {t["id"]: t for t in pipeline["tasks"]}
        assert statuses["t-wait-1"]["status"] == "cancelled"
        # running on node-b: flagged, ends when its claimer confirms (DESIGN §4.9)
        assert statuses["t-remote"]["cancel_requested"] is True
    # A second crash: the flag left at PENDING_CHECK (the clean stop above wrote CLEAN).
    store = SQLiteTaskStore(data / "fredica.db", "node-t")
    await store.set_config(KEY_LAST_SHUTDOWN, "PENDING_CHECK")
    await store.close()
    async with restarted(tmp_path) as (client, _):
        state = (await client.get("/api/v1/recovery")).json()
        assert state["previous_shutdown_type"] == "CRASH"
        assert state["needed"] is True  # the answer of the previous run does not carry over
        r = await client.post("/api/v1/recovery", json={"action": "continue"})
        assert r.status_code == 200 and r.json()["cancelled_tasks"] == 0


# --- server-sent events ---------------------------------------------------------------------------
async def test_event_stream_snapshot_changes_and_keepalive(
    web, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, node = web
    monkeypatch.setattr(web_events, "KEEPALIVE_SEC", 0.3)
    async with (
        served_app(node) as (url, server),
        httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client,
    ):
        async with client.stream("GET", "/api/v1/events", params={"token": "t"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-cache"
            events = read_events(response)
            first = await next_event(events, lambda e: True)
            assert first.retry == "2000" and first.event is None
            snap = await next_event(events, lambda e: e.event == "snapshot")
            data = snap.json()
            assert data["node_id"] == node.node_id
            assert snap.id == str(data["seq"])
            assert data["counts"]["completed"] == 0
            assert data["cluster"]["nodes"][0]["id"] == node.node_id

            created = (await client.post("/api/v1/pipelines", json=sleep_pipeline())).json()
            task_id = created["tasks"]["a"]

            def done(e: Event) -> bool:
                rows = e.json()["tasks"] if e.event == "change" else []
                return any(t["id"] == task_id and t["status"] == "completed" for t in rows)

            change = await next_event(events, done)
            body = change.json()
            assert body["counts"]["completed"] == 1
            assert int(change.id or 0) == body["seq"] > data["seq"]
            row = next(t for t in body["tasks"] if t["id"] == task_id)
            assert "payload" not in row and row["has_result"] is True
            assert any(p["id"] == created["pipeline_id"] for p in body["pipelines"])

            idle = await next_event(events, lambda e: "keep-alive" in e.comments, timeout=5)
            assert idle.event is None
            cluster = await next_event(events, lambda e: e.event == "cluster", timeout=5)
            assert cluster.json()["online"] == 1
        # The client went away: the server ends the stream's request task.
        deadline = time.monotonic() + 5
        while server.server_state.tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not server.server_state.tasks


async def test_event_stream_ends_when_the_server_shuts_down(web) -> None:
    _, node = web
    async with (
        served_app(node) as (url, server),
        httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client,
        client.stream("GET", "/api/v1/events") as response,
    ):
        events = read_events(response)
        await next_event(events, lambda e: e.event == "snapshot")
        # What SIGTERM does through `fredica serve`'s handle_exit (tests/e2e sends the signal).
        node.request_shutdown()
        server.should_exit = True
        started = time.monotonic()
        async for _ in events:
            pass
        assert time.monotonic() - started < 2
