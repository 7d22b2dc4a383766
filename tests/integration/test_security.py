"""Hardening of the HTTP API found by attack runs: where a query token is accepted, body size,
bounded paging, tokens kept out of logs, the warning for an open node on the network."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from fredica import auth
from fredica.api.app import RedactTokens, create_app
from fredica.config import schema as config
from fredica.node import compose
from fredica.node.service import Node

from .test_engine import fast_settings

TOKEN = "tok-secret-123"
PIPELINE = {"template": "custom", "tasks": [{"ref": "a", "type": "TEST_SLEEP"}]}


def token_config() -> config.WorkerConfig:
    return config.parse_config(
        {
            "auth": {
                "mode": "token",
                "access_tokens": [
                    {"id": "t1", "name": "Alice", "token_hash": auth.hash_token(TOKEN)}
                ],
            }
        },
        "test",
    )


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    settings = dataclasses.replace(
        fast_settings(tmp_path), config=token_config(), max_body_bytes=4096
    )
    node = compose.build_node(settings)
    await node.start()
    transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            yield client, node
    finally:
        await node.stop(grace=1)


BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def test_a_query_token_is_refused_outside_the_event_stream_and_downloads(api) -> None:
    client, node = api
    r = await client.post("/api/v1/pipelines", json=PIPELINE, params={"token": TOKEN})
    assert r.status_code == 401
    assert (await client.get("/api/v1/tasks", params={"token": TOKEN})).status_code == 401
    assert await node.list_pipelines() == []
    # a download link may carry it (404: no such file, but past the token check)
    r = await client.get("/files/results/nope/x.txt", params={"token": TOKEN})
    assert r.status_code == 404
    assert (await client.get("/api/v1/tasks", headers=BEARER)).status_code == 200


async def test_a_body_over_the_limit_is_413_and_stores_nothing(api) -> None:
    client, node = api
    big = {**PIPELINE, "params": {"pad": "x" * 10_000}}
    r = await client.post("/api/v1/pipelines", json=big, headers=BEARER)
    assert r.status_code == 413 and "4096" in r.json()["error"]

    async def chunks():  # no Content-Length: the limit holds while the body streams in
        for _ in range(10):
            yield b"x" * 1000

    r = await client.post(
        "/api/v1/pipelines",
        content=chunks(),
        headers={**BEARER, "content-type": "application/json"},
    )
    assert r.status_code == 413
    assert await node.list_pipelines() == []
    r = await client.post("/api/v1/pipelines", json=PIPELINE, headers=BEARER)
    assert r.status_code == 201


@pytest.mark.parametrize("path", ["/api/v1/tasks", "/api/v1/pipelines"])
async def test_a_huge_offset_is_a_422_not_a_500(api, path: str) -> None:
    client, _ = api
    r = await client.get(path, params={"offset": 2**70}, headers=BEARER)
    assert r.status_code == 422 and "offset" in r.json()["error"]
    # a huge or hand-made cursor: refused the same way, never a 500 from the database
    # (base64 of ["t",1e308,1e308] and of ["t",1,2**63], beyond a database integer)
    bad = ("A" * 5000, "WyJ0IiwxZTMwOCwxZTMwOF0", "WyJ0IiwxLDkyMjMzNzIwMzY4NTQ3NzU4MDhd")
    for cursor in bad:
        r = await client.get(path, params={"cursor": cursor}, headers=BEARER)
        assert r.status_code == 422 and "cursor" in r.json()["error"], r.text


def test_query_tokens_are_redacted_from_log_lines() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/api/v1/events?token=tok-secret-123&x=1", "1.1", 200),
        None,
    )  # fmt: skip
    RedactTokens().filter(record)
    line = record.getMessage()
    assert TOKEN not in line and "token=[redacted]&x=1" in line


async def test_an_open_node_on_the_network_warns_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = dataclasses.replace(fast_settings(tmp_path), host="0.0.0.0")
    node = compose.build_node(settings)
    with caplog.at_level(logging.WARNING, logger="fredica.node.service"):
        await node.start()
        await node.stop(grace=1)
    assert any("WITHOUT AUTHENTICATION" in r.getMessage() for r in caplog.records)
