"""A publisher token's cloud permission is kept wherever a backend is chosen (seed 001 §12.2):
a token with `allow_cloud: false` (or `allow_cloud_ai_analyze: false`) never causes a request
to the cloud server, whatever the task-level cloud_preference; a cloud_only task of such a
token is refused at creation (403 naming the limit), and one that reaches an executor anyway
(a spawned task) fails PERMANENT with the same reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fredica import auth
from fredica.config import schema as config_schema
from fredica.domain import errors
from fredica.domain.models import CloudPreference, ErrorType, NewPipeline, NewTask, TaskStatus
from fredica.pipelines.request import PipelineRequest

from . import test_cloud_limits as limits
from .test_cloud_limits import ChatServer, _analyze, _config, _node
from .test_engine import task, wait_for

server = limits.server  # the fake cloud server's fixture

TOKEN_ID = "tok-local"
PERMISSIONS = (
    {"allow_cloud": False},
    {"allow_cloud": True, "allow_cloud_ai_analyze": False},
)


def _token_config(url: str, permissions: dict[str, Any]) -> dict[str, Any]:
    token = {
        "id": TOKEN_ID,
        "name": "local only",
        "token_hash": auth.hash_token("fredica_tok_secret"),
        "permissions": permissions,
    }
    return _config(url, 4) | {"auth": {"mode": "token", "access_tokens": [token]}}


def _publisher(permissions: dict[str, Any]) -> auth.Publisher:
    return auth.Publisher(TOKEN_ID, "local only", config_schema.TokenPermissions(**permissions))


async def _finished(node: Any, task_id: str) -> Any:
    t = await task(node, task_id)
    return t if t.status.is_terminal else None


@pytest.mark.parametrize("permissions", PERMISSIONS, ids=["allow_cloud", "allow_cloud_ai"])
async def test_a_token_without_cloud_permission_never_reaches_the_cloud(
    tmp_path: Path, server: ChatServer, permissions: dict[str, Any]
) -> None:
    # Given a node whose best AI_ANALYZE backend is a cloud API (the fake server)
    server.release.set()
    publisher = _publisher(permissions)
    async with _node(tmp_path, _token_config(server.url, permissions)) as node:
        # When the token submits analyses with every task-level preference but cloud_only
        for preference in ("auto", "prefer_cloud"):
            request = PipelineRequest(template="custom", tasks=_analyze(1, preference))
            pipeline, _ = await node.create_pipeline(request, publisher)
            tid = pipeline.params["refs"]["a0"]
            done = await wait_for(lambda tid=tid: _finished(node, tid), timeout=20)
            # Then each ran on the local backend
            assert (done.status, done.backend) == (TaskStatus.COMPLETED, "local-extractive")
        # And a cloud_only task is refused at creation, naming the token's limit
        request = PipelineRequest(template="custom", tasks=_analyze(1, "cloud_only"))
        with pytest.raises(errors.Forbidden, match=f"token {TOKEN_ID} may not use cloud"):
            await node.create_pipeline(request, publisher)
        # And a task of the token that reached the store without the creation check (as a
        # spawned task does) still never uses the cloud: auto runs locally, cloud_only fails
        # PERMANENT with the token's limit
        spawned, _ = await node._store.create_pipeline(
            NewPipeline(
                "custom",
                "m-spawned",
                (
                    NewTask("AI_ANALYZE", id="s-auto", payload={"text": "A talk. It ends."},
                            publisher_id=TOKEN_ID),
                    NewTask("AI_ANALYZE", id="s-cloud", payload={"text": "A talk. It ends."},
                            publisher_id=TOKEN_ID,
                            cloud_preference=CloudPreference.CLOUD_ONLY),
                ),
                publisher_id=TOKEN_ID,
            )
        )  # fmt: skip
        node.engine.wake()
        auto = await wait_for(lambda: _finished(node, "s-auto"), timeout=20)
        cloud = await wait_for(lambda: _finished(node, "s-cloud"), timeout=20)
        assert (auto.status, auto.backend) == (TaskStatus.COMPLETED, "local-extractive")
        assert (cloud.status, cloud.error_type) == (TaskStatus.FAILED, ErrorType.PERMANENT)
        assert f"token {TOKEN_ID} may not use cloud backends" in (cloud.error or "")
    assert (server.max_in_flight, server.calls, server.refused) == (0, 0, 0)


async def test_a_token_with_cloud_permission_still_uses_the_cloud(
    tmp_path: Path, server: ChatServer
) -> None:
    # the same node and server: the permission is what keeps the calls away
    server.release.set()
    permissions = {"allow_cloud": True}
    async with _node(tmp_path, _token_config(server.url, permissions)) as node:
        request = PipelineRequest(template="custom", tasks=_analyze(1, "auto"))
        pipeline, _ = await node.create_pipeline(request, _publisher(permissions))
        tid = pipeline.params["refs"]["a0"]
        done = await wait_for(lambda: _finished(node, tid), timeout=20)
        assert (done.status, done.backend) == (TaskStatus.COMPLETED, "deepseek-api")
    assert server.calls == 1


async def test_a_type_the_token_keeps_local_with_no_local_backend_is_refused_not_left_pending(
    tmp_path: Path, server: ChatServer
) -> None:
    # Given a node whose only translation backend is a cloud API (the fake server)
    server.release.set()
    translate = {
        "backend": "openai-translate-api",
        "endpoint": f"{server.url}/v1",
        "api_key": "k",
        "model": "m",
    }
    cfg = _token_config(server.url, {"allow_cloud": False})
    cfg["capabilities"]["translate"] = {"enabled": True, "providers": [translate]}
    (tmp_path / "in").mkdir(parents=True)
    (tmp_path / "in" / "a.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nHello\n")
    async with _node(tmp_path, cfg) as node:
        before = len(await node.list_pipelines())
        # When a token without cloud permission asks for a translation (which it may only
        # run locally, and no node can)
        request = PipelineRequest(
            template="custom",
            tasks=[
                {
                    "ref": "t",
                    "type": "TRANSLATE_TEXT",
                    "payload": {"srt_path": "in/a.srt", "target_lang": "de"},
                }
            ],
        )
        # Then it is refused at once with the token's limit and what is missing, and nothing
        # is created (it would otherwise wait forever for a local translator)
        with pytest.raises(errors.Forbidden) as refused:
            await node.create_pipeline(request, _publisher({"allow_cloud": False}))
        message = str(refused.value)
        assert f"token {TOKEN_ID} may not use cloud backends (allow_cloud: false)" in message
        assert "TRANSLATE_TEXT is local_only, and no known node has a local backend" in message
        assert len(await node.list_pipelines()) == before
        # And the same request with cloud permission runs on the cloud translator
        allowed = _publisher({"allow_cloud": True})
        assert (await node.create_pipeline(request, allowed))[0].id
    assert server.refused == 0
