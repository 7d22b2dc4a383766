"""`fredica upload`'s resume loop against a node whose connection drops: the resume is said
once, at the byte the node reports, even when the first question of how far it got is itself
dropped; a node that never answers again ends the command after `RETRIES` tries."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest
import typer

from fredica.cli import client, upload_cmd


class FlakyNode:
    """A resumable-upload endpoint in memory; `drops` lists the requests (by number) whose
    connection is dropped before an answer (after the body was kept, for a PUT)."""

    def __init__(self, size: int, drops: set[int]) -> None:
        self.size, self.drops, self.requests = size, drops, 0
        self.data = bytearray()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        dropped = self.requests in self.drops
        if request.method == "POST":
            return httpx.Response(201, json={"upload_id": "u1"})
        if request.method == "GET":
            if dropped:
                raise httpx.ConnectError("refused", request=request)
            return httpx.Response(200, json={"offset": len(self.data)})
        start, end = map(int, re.findall(r"\d+", request.headers["Content-Range"])[:2])
        assert start == len(self.data), (start, len(self.data))
        self.data += request.content
        if dropped:
            raise httpx.ReadError("cut", request=request)
        if len(self.data) < self.size:
            return httpx.Response(200, json={"offset": len(self.data), "complete": False})
        digest = hashlib.sha256(self.data).hexdigest()
        return httpx.Response(201, json={"complete": True, "sha256": digest, "size": self.size})


def _node(handler: FlakyNode) -> client.Client:
    node = client.Client("http://127.0.0.1:1")
    node.http = httpx.Client(base_url=node.base, transport=httpx.MockTransport(handler))
    return node


def test_a_drop_whose_first_offset_question_also_fails_is_resumed_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload_cmd, "BACKOFF_SEC", 0.0)
    source = tmp_path / "talk.mp4"
    source.write_bytes(bytes(range(256)) * 64)  # 16 KiB, parts of 4 KiB
    # 1 POST, 2 PUT 0-4K, 3 PUT 4-8K dropped, 4 GET dropped, 5 GET -> 8K, 6 PUT 8-12K, ...
    node = FlakyNode(source.stat().st_size, drops={3, 4})
    said: list[int] = []
    answer = upload_cmd.upload(_node(node), source, "talk.mp4", 4096, lambda at, _: said.append(at))
    assert said == [8192]
    assert bytes(node.data) == source.read_bytes()
    assert answer["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()


def test_a_node_that_never_answers_again_ends_the_upload_with_the_byte_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(upload_cmd, "BACKOFF_SEC", 0.0)
    source = tmp_path / "talk.mp4"
    source.write_bytes(b"x" * 8192)
    node = FlakyNode(8192, drops=set(range(3, 100)))
    with pytest.raises(typer.Exit) as stopped:
        upload_cmd.upload(_node(node), source, "talk.mp4", 4096)
    assert stopped.value.exit_code == 2
    assert "the upload stopped at byte 4096 of 8192" in capsys.readouterr().err
    assert node.requests == 3 + upload_cmd.RETRIES  # one offset question per try, then stop
