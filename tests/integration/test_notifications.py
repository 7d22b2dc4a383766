"""Webhook notifications against a real local HTTP server: a node posts one signed JSON notice
per ended pipeline it owns (only the ends the config asks for), retries a failing webhook with
backoff, gives up on a refusal, and never logs the webhook's URL whole."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.config import schema as config_schema
from fredica.domain import errors
from fredica.node import notify
from tests.media_support import QuietServer, serving

from .conftest import node_client

SECRET = "s3cret-signing-key"
HOOK_PATH = "/hooks/T0KEN-in-the-path"  # chat services put their key in the URL like this


class Webhook:
    """Records every POST; answers with the scripted statuses first, then 200."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.script: list[int] = []
        self.changed = threading.Condition()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with hook.changed:
                    status = hook.script.pop(0) if hook.script else 200
                    hook.received.append((dict(self.headers), body))
                    hook.changed.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{HOOK_PATH}"

    def bodies(self) -> list[dict[str, Any]]:
        with self.changed:
            return [json.loads(body) for _, body in self.received]

    async def wait_for(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        """The bodies once at least `count` requests arrived (waits on the server's condition)."""

        def wait() -> bool:
            with self.changed:
                return self.changed.wait_for(lambda: len(self.received) >= count, timeout)

        assert await asyncio.to_thread(wait), f"only {len(self.received)} request(s) arrived"
        return self.bodies()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until `condition()` holds (checked every 10 ms)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    with serving(hook.httpd):
        yield hook


def pipeline(source: str, *tasks: dict[str, Any]) -> dict[str, Any]:
    return {
        "template": "custom",
        "material_id": source,
        "params": {"source": source},
        "tasks": list(tasks),
    }


SLEEP = {"ref": "s", "type": "TEST_SLEEP", "payload": {"seconds": 0.05}}
FAIL = {
    "ref": "f",
    "type": "TEST_FAIL",
    "max_retries": 0,
    "payload": {"error_type": "PERMANENT"},
}
BLOCKED = {"ref": "b", "type": "TEST_SLEEP", "payload": {"seconds": 30}}


async def test_ended_pipelines_are_posted_signed_with_retries(
    tmp_path: Path, webhook: Webhook, caplog: pytest.LogCaptureFixture
) -> None:
    config = {
        "notifications": {
            "webhook_url": webhook.url,
            "webhook_secret": SECRET,
            "retries": 2,
            "backoff_sec": 0.05,
        }
    }
    webhook.script = [503]  # the first attempt fails: the notice is sent again
    caplog.set_level(logging.DEBUG)
    async with node_client(tmp_path, config=config) as (client, node):
        # Given a pipeline that is cancelled (not asked for), one that completes, one that fails
        r = await client.post("/api/v1/pipelines", json=pipeline("/media/skip.mp4", BLOCKED))
        skipped = r.json()["pipeline_id"]
        await client.post(f"/api/v1/pipelines/{skipped}/cancel")
        r = await client.post("/api/v1/pipelines", json=pipeline("/media/Talk.mp4", SLEEP))
        done = r.json()["pipeline_id"]
        # When the completed one is notified (its first attempt answered 503)
        first = await webhook.wait_for(2)
        r = await client.post("/api/v1/pipelines", json=pipeline("/media/broken.wav", FAIL))
        failed = r.json()["pipeline_id"]
        bodies = await webhook.wait_for(3)
        await until(lambda: len(node.notifier.deliveries) == 2)
        deliveries = list(node.notifier.deliveries)

    # Then: the same completed notice twice (503, then 200), the failed one once, nothing else
    assert [b["pipeline_id"] for b in bodies] == [done, done, failed]
    assert first[0] == first[1]
    body = bodies[0]
    assert body["event"] == "pipeline.completed" and body["status"] == "completed"
    assert body["title"] == "Talk.mp4" and body["template"] == "custom"
    assert body["node_id"] == node.node_id and body["material_id"] == "/media/Talk.mp4"
    assert body["tasks"] == {"total": 1, "done": 1, "failed": 0, "cancelled": 0}
    durations = body["durations"]
    assert durations["total_sec"] >= durations["run_sec"] >= 0.05
    assert set(durations["by_task_type"]) == {"TEST_SLEEP"}
    assert body["ended_at"] >= body["created_at"]
    assert body["link"] == f"{node.address}/pipelines/{done}"
    assert bodies[2]["status"] == "failed" and bodies[2]["title"] == "broken.wav"
    assert bodies[2]["tasks"]["failed"] == 1
    assert skipped not in {b["pipeline_id"] for b in bodies}, "cancelled: not in `on`"
    # signed with the secret, which itself is never sent
    for headers, raw in webhook.received:
        expected = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        assert headers["X-Fredica-Signature"] == f"sha256={expected}"
        assert SECRET not in raw.decode() and SECRET not in json.dumps(headers)
        assert headers["Content-Type"] == "application/json"
    assert [(d.delivered, d.attempts) for d in deliveries] == [(True, 2), (True, 1)]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "webhook http://127.0.0.1:" in logged and "notified" in logged
    assert "T0KEN" not in logged, "the webhook URL's key must not reach the logs"


async def test_a_stopping_node_still_sends_what_its_last_work_ended(
    tmp_path: Path, webhook: Webhook
) -> None:
    config = {"notifications": {"webhook_url": webhook.url, "retries": 1, "backoff_sec": 0.5}}
    webhook.script = [503]  # the retry falls into the node's stop
    async with node_client(tmp_path, config=config) as (client, node):
        r = await client.post("/api/v1/pipelines", json=pipeline("/media/last.mp4", SLEEP))
        pid = r.json()["pipeline_id"]
        await webhook.wait_for(1)  # the first attempt was answered 503: stop now
    # Then the stop waited for the retry (a cancel would have dropped it)
    bodies = await webhook.wait_for(2, timeout=0.1)
    assert [b["pipeline_id"] for b in bodies] == [pid, pid]
    assert list(node.notifier.deliveries)[-1].delivered


async def test_a_refusal_is_final_and_a_dead_webhook_is_given_up(
    webhook: Webhook, caplog: pytest.LogCaptureFixture
) -> None:
    settings = config_schema.NotificationsConfig(
        webhook_url=webhook.url, retries=3, backoff_sec=0.5
    )
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    notifier = notify.Notifier(settings, "node-a", "http://node:7631", sleep=no_sleep)
    body = {"pipeline_id": "p1", "status": "completed"}
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        webhook.script = [400]
        refused = await notifier.send(client, body)
        assert (refused.delivered, refused.attempts, refused.detail) == (False, 1, "HTTP 400")
        webhook.script = [429, 500, 502]
        late = await notifier.send(client, body)
        assert (late.delivered, late.attempts) == (True, 4)
        assert waits == [0.5, 1.0, 2.0], "doubling waits between attempts"
        waits.clear()
        webhook.httpd.shutdown()
        webhook.httpd.server_close()
        dead = await notifier.send(client, body)
    assert not dead.delivered and dead.attempts == 4 and dead.detail.startswith("no answer")
    assert len(waits) == 3
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "not notified after 4 attempt(s)" in logged and "T0KEN" not in logged


def test_the_config_is_checked_and_its_keys_masked() -> None:
    with pytest.raises(errors.ConfigError, match=r"notifications\.webhook_url: must be an http"):
        config_schema.parse_config({"notifications": {"webhook_url": "ftp://x"}}, "worker.yaml")
    with pytest.raises(errors.ConfigError, match=r"notifications\.on"):
        config_schema.parse_config({"notifications": {"on": ["finished"]}}, "worker.yaml")
    cfg = config_schema.parse_config(
        {"notifications": {"webhook_url": "https://h/k3y", "webhook_secret": "x", "on": None}},
        "worker.yaml",
    )
    assert cfg.notifications.on == []
    masked = config_schema.mask_secrets(cfg)["notifications"]
    assert masked["webhook_url"] == masked["webhook_secret"] == config_schema.MASK


def test_which_ends_are_wanted() -> None:
    from fredica.domain.models import PipelineStatus as P

    assert notify.wanted(P.PARTIAL_FAILED, ["failed"]) and notify.wanted(P.FAILED, ["failed"])
    assert not notify.wanted(P.CANCELLED, ["completed", "failed"])
    assert notify.wanted(P.CANCELLED, ["cancelled"]) and not notify.wanted(P.COMPLETED, [])
