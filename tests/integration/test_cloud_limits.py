"""Cloud API limits on a real node (seed 001 §7.8): AI_ANALYZE tasks sent to a local HTTP server
of the OpenAI chat protocol (as DeepSeek speaks it) that holds each call until the test lets
it go, counts the calls in flight, and can answer 429 with Retry-After. The node never has
more calls in flight than max_concurrent, halves that after a 429, leaves room for the calls
its peers report, and stops using the cloud once today's reported spend reaches the budget."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from fredica.config import schema as config_schema
from fredica.domain.models import TaskStatus
from fredica.engine.cloudlimits import SPEND_FILE, CloudLimits
from fredica.executors import transcribe, usage
from fredica.node import compose
from fredica.node.service import Node
from fredica.store.base import NodeRecord
from tests.asr_server import serve_transcriptions
from tests.media_support import QuietServer, make_context, tones

from .test_engine import create, fast_settings, task, wait_for

KEY = "sk-limits-test-key"
REPLY = {"summary": "A cluster shares work.", "tags": ["cluster"], "chapters": []}
TOKENS = (400, 200)  # prompt, completion: 0.6k tokens a call


class ChatServer:
    """OpenAI-compatible /v1/chat/completions that holds every call until the test lets it go
    (`let_go(n)`: n calls; `release.set()`: all from then on)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0  # answered 200
        self.refuse_next = 0  # calls to answer 429
        self.refused = 0
        self.release = threading.Event()
        self._gate = threading.Semaphore(0)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.path == "/v1/chat/completions", self.path
                assert self.headers["Authorization"] == f"Bearer {KEY}"
                with outer.lock:
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                    refuse = outer.refuse_next > 0
                    if refuse:
                        outer.refuse_next -= 1
                try:
                    if refuse:
                        with outer.lock:
                            outer.refused += 1
                        self._send(429, {"error": {"message": "rate limit reached"}}, "1")
                        return
                    outer.wait_turn()
                    prompt, completion = TOKENS
                    self._send(200, {
                        "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "message": {
                            "role": "assistant", "content": json.dumps(REPLY)}}],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
                    })  # fmt: skip
                    with outer.lock:
                        outer.calls += 1
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

            def _send(self, code: int, payload: dict[str, Any], retry_after: str = "") -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                if retry_after:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def wait_turn(self) -> None:
        while not self.release.is_set():
            if self._gate.acquire(timeout=0.05):
                return

    def let_go(self, n: int) -> None:
        self._gate.release(n)

    def reset_max(self) -> None:
        """Count the most calls in flight from now on."""
        with self.lock:
            self.max_in_flight = self.in_flight


@pytest.fixture
def server() -> Iterator[ChatServer]:
    fake = ChatServer()
    thread = threading.Thread(target=fake.httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    fake.httpd.shutdown()
    fake.httpd.server_close()


def _config(url: str, max_concurrent: int, **extra: Any) -> dict[str, Any]:
    provider = {
        "backend": "deepseek-api",
        "endpoint": f"{url}/v1",
        "api_key": KEY,
        "max_concurrent": max_concurrent,
        "cost_per_unit_usd": 0.001,  # per 1k tokens: $0.0006 a call
    }
    return {"capabilities": {"ai_analyze": {"enabled": True, "providers": [provider]}}, **extra}


@contextlib.asynccontextmanager
async def _node(data_dir: Path, cfg: dict[str, Any]) -> AsyncIterator[Node]:
    # calls are held for a while: liveness thresholds a loaded machine cannot trip
    settings = fast_settings(data_dir, max_workers=8, stale_after=60.0, reclaim_after=120.0)
    settings = dataclasses.replace(settings, config=config_schema.parse_config(cfg, "test"))
    node = compose.build_node(settings)
    await node.start()
    try:
        yield node
    finally:
        await node.stop(grace=5)


def _analyze(n: int, preference: str) -> list[dict[str, Any]]:
    return [
        {
            "ref": f"a{i}",
            "type": "AI_ANALYZE",
            "cloud_preference": preference,
            "payload": {"text": f"Talk {i}. The cluster shares the work. Nodes sleep and wake."},
        }
        for i in range(n)
    ]


async def _statuses(node: Node, refs: dict[str, str]) -> dict[str, TaskStatus]:
    return {ref: (await task(node, tid)).status for ref, tid in refs.items()}


async def _all_completed(node: Node, refs: dict[str, str]) -> bool:
    return all(s is TaskStatus.COMPLETED for s in (await _statuses(node, refs)).values())


async def test_never_more_calls_in_flight_than_max_concurrent(
    tmp_path: Path, server: ChatServer
) -> None:
    # Given a node with 8 slots whose cloud backend allows 3 calls at once
    async with _node(tmp_path, _config(server.url, 3)) as node:
        # When 8 cloud_only analyses are ready at once
        _, refs = await create(node, _analyze(8, "cloud_only"))
        await wait_for(lambda: server.in_flight == 3, timeout=45)
        # Then 3 calls are in flight, the node reports them, and the rest wait unclaimed
        assert node.peer_info()["active_api_calls"] == {"deepseek-api": 3}
        await _claim_attempts(node)  # many claim attempts while the provider is busy
        statuses = await _statuses(node, refs)
        assert sorted(s.value for s in statuses.values()).count("pending") == 5, statuses
        assert server.in_flight == 3
        # And when the provider answers, every task completes, never more than 3 at once
        server.release.set()
        await wait_for(lambda: _all_completed(node, refs), timeout=30)
    assert server.max_in_flight == 3 and server.calls == 8


async def test_a_429_halves_the_concurrency_and_quiet_restores_it(
    tmp_path: Path, server: ChatServer
) -> None:
    # Given a node allowing 4 calls, whose provider answers the first call with 429
    server.refuse_next = 1
    cfg = _config(server.url, 4, scheduling={"rate_limit_restore_sec": 3600})
    async with _node(tmp_path, cfg) as node:
        limits = node.engine.selector.limits  # type: ignore[union-attr]
        assert limits is not None
        _, refs = await create(node, _analyze(7, "cloud_only"))
        # When the 429 came back while the 3 other calls are in flight
        await wait_for(lambda: server.refused == 1 and server.in_flight == 3)
        # Then the node allows 2 calls at once from then on: no new call starts
        await wait_for(lambda: limits.ceilings() == {"deepseek-api": (2, "halved after HTTP 429")})
        cloud = (await node.status())["cloud"]
        assert cloud["limited"] == {"deepseek-api": {"limit": 2, "why": "halved after HTTP 429"}}
        assert cloud["active_calls"] == {"deepseek-api": 3}
        await _claim_attempts(node)
        assert server.in_flight == 3
        # And when those 3 answer, the rest run 2 at a time (the refused task after its
        # Retry-After of 1 s)
        server.let_go(3)
        await wait_for(lambda: server.calls == 3)
        server.reset_max()
        await wait_for(lambda: server.in_flight == 2)
        await _claim_attempts(node)
        assert server.in_flight == 2
        server.release.set()
        await wait_for(lambda: _all_completed(node, refs), timeout=30)
        assert server.max_in_flight == 2 and server.calls == 7
        # (the refused task spent one retry; none failed)
        retries = sorted([(await task(node, tid)).retry_count for tid in refs.values()])
        assert retries == [0] * 6 + [1]
        # And a quiet interval gives one slot back at a time, up to max_concurrent
        state = limits._backoff["deepseek-api"]
        state.since -= 3600
        assert limits.ceilings() == {"deepseek-api": (3, "halved after HTTP 429")}
        state.since -= 3600
        assert limits.ceilings() == {}


async def _claim_attempts(node: Node) -> None:
    """Give the engine several claim attempts (each wake is one; two poll intervals each)."""
    for _ in range(5):
        node.engine.wake()
        await asyncio.sleep(0.1)


async def test_the_cluster_limit_leaves_room_for_the_calls_peers_report(
    tmp_path: Path, server: ChatServer
) -> None:
    # Given a node allowing 4 calls here and a cluster limit of 3 for the provider
    cfg = _config(
        server.url, 4, cluster={"api_rate_limits": {"deepseek-api": {"cluster_max_concurrent": 3}}}
    )
    async with _node(tmp_path, cfg) as node:
        # And a live peer whose heartbeat row reports 2 calls in flight
        peer = NodeRecord("node-peer", "peer", [], "busy", 4, 0.0, None, {})
        await node._store.upsert_node(
            dataclasses.replace(peer, info={"active_api_calls": {"deepseek-api": 2}})
        )
        limits = node.engine.selector.limits  # type: ignore[union-attr]
        assert limits is not None
        await wait_for(lambda: limits.peer_calls("deepseek-api") == 2)
        # When 5 cloud_only analyses are ready
        _, refs = await create(node, _analyze(5, "cloud_only"))
        await wait_for(lambda: server.in_flight == 1)
        await _claim_attempts(node)
        # Then this node makes 1 call: 3 in the cluster
        assert server.in_flight == 1
        # And when the peer's calls end (its next heartbeat), this node takes the room
        await node._store.upsert_node(dataclasses.replace(peer, info={"active_api_calls": {}}))
        await wait_for(lambda: server.in_flight == 3)
        server.release.set()
        await wait_for(lambda: _all_completed(node, refs), timeout=30)
    assert server.max_in_flight == 3


async def test_the_daily_budget_stops_cloud_use(tmp_path: Path, server: ChatServer) -> None:
    # Given a node with a $0.001 daily cloud budget, one call at a time at $0.0006 a call
    server.release.set()
    cfg = _config(server.url, 1, scheduling={"max_cloud_cost_per_day_usd": 0.001})
    async with _node(tmp_path, cfg) as node:
        # When 5 analyses that may use the cloud (AUTO: it scores best) run one after another
        results = await _one_after_another(node, 5)
        # Then the first two went to the cloud (the second started at $0.0006), each with its
        # reported cost; the rest fell back to the local backend
        backends = [t.backend for t in results]
        assert backends == ["deepseek-api"] * 2 + ["local-extractive"] * 3, backends
        assert [t.result["cost_usd"] for t in results[:2]] == [0.0006, 0.0006]
        assert server.calls == 2
        # And a cloud_only task waits (not claimed, not failed) while the budget is spent
        _, refs = await create(node, _analyze(1, "cloud_only"))
        await _claim_attempts(node)
        waiting = await task(node, refs["a0"])
        assert (waiting.status, waiting.attempt) == (TaskStatus.PENDING, 0)
        events = [e.event_type for e in await node.task_events(results[0].id)]
        assert "cloud_cost" in events
        cloud = (await node.status())["cloud"]
        assert cloud["spent_today_usd"] == pytest.approx(0.0012)
        assert cloud["limited"]["deepseek-api"]["limit"] == 0
    # And the spend survives a restart of the node
    spend = json.loads((tmp_path / SPEND_FILE).read_text())
    assert spend["total_usd"] == pytest.approx(0.0012)
    async with _node(tmp_path, cfg) as node:
        limits = node.engine.selector.limits  # type: ignore[union-attr]
        assert limits is not None and "reached" in limits.budget_reached()
    assert server.calls == 2


async def test_the_daily_budget_is_the_clusters_the_peers_reported_spend_counts(
    tmp_path: Path, server: ChatServer
) -> None:
    # Given a node with a $0.001 daily budget, at $0.0006 a call, and a peer (offline now:
    # what it spent is spent) whose last report says it spent $0.0005 today, $0.0002 of it
    # for token tok-a, and another whose report is of yesterday
    server.release.set()
    cfg = _config(server.url, 1, scheduling={"max_cloud_cost_per_day_usd": 0.001})
    async with _node(tmp_path, cfg) as node:
        limits = node.engine.selector.limits  # type: ignore[union-attr]
        assert limits is not None
        today = limits.spend_report()["day"]
        peer = NodeRecord("node-peer", "peer", [], "offline", 4, 0.0, None, {})
        report = {"day": today, "total_usd": 0.0005, "by_publisher": {"tok-a": 0.0002}}
        await node._store.upsert_node(dataclasses.replace(peer, info={"cloud_spend_today": report}))
        old = {"day": "2000-01-01", "total_usd": 5.0, "by_publisher": {}}
        await node._store.upsert_node(
            dataclasses.replace(peer, id="node-old", info={"cloud_spend_today": old})
        )
        await wait_for(lambda: limits.cluster_spent_today() == pytest.approx(0.0005))
        assert limits.cluster_spent_today("tok-a") == pytest.approx(0.0002)
        # When analyses that may use the cloud run one after another
        results = await _one_after_another(node, 3)
        # Then only the first went to the cloud: $0.0005 + $0.0006 is past the budget
        # (alone, this node would have made two calls, as the test above shows)
        assert [t.backend for t in results] == ["deepseek-api"] + ["local-extractive"] * 2
        cloud = (await node.status())["cloud"]
        assert cloud["spent_today_usd"] == pytest.approx(0.0006)
        assert cloud["cluster_spent_today_usd"] == pytest.approx(0.0011)
        assert cloud["limited"]["deepseek-api"]["limit"] == 0
        assert "on all nodes" in cloud["limited"]["deepseek-api"]["why"]
        # And this node reports its own spend to its peers (/cluster/info, heartbeats)
        own = node.peer_info()["cloud_spend_today"]
        assert own == {"day": today, "total_usd": pytest.approx(0.0006), "by_publisher": {}}
    assert server.calls == 1


async def _one_after_another(node: Node, n: int) -> list[Any]:
    """`n` AUTO analyses, each created once the one before it completed; the tasks at the end."""
    results = []
    for i in range(n):
        _, refs = await create(node, [_analyze(1, "auto")[0] | {"ref": f"t{i}"}])
        results.append(await wait_for(lambda tid=refs[f"t{i}"]: _done(node, tid), timeout=20))
    return results


async def _done(node: Node, task_id: str) -> Any:
    t = await task(node, task_id)
    return t if t.status is TaskStatus.COMPLETED else None


async def test_cloud_asr_charges_the_audio_minutes_it_sent(tmp_path: Path) -> None:
    # Given a 4 s chunk and a cloud ASR priced at $0.006 a minute, with a meter bound
    limits = CloudLimits({"openai-whisper-api": 2})
    chunk = tones(tmp_path / "chunk_000.wav", ((0.5, 1.5),), 4.0)
    with serve_transcriptions(api_key="k") as asr:
        config = {"api_key": "k", "endpoint": asr.url, "cost_per_unit_usd": 0.006}
        ctx = await make_context(
            tmp_path, "TRANSCRIBE_CHUNK", {"audio_path": str(chunk), "language": "en"},
            backend="openai-whisper-api", backend_config=config,
        )  # fmt: skip
        usage.bind(limits.meter("openai-whisper-api", None))
        try:
            result = (await transcribe.TranscribeChunkExecutor().execute(ctx.task, ctx)).result_json
        finally:
            usage.bind(None)
    # Then the result and the node's spend carry 4/60 of a minute at that price
    assert result is not None and result["cost_usd"] == pytest.approx(0.0004)
    assert limits.spent_today() == pytest.approx(0.0004)
