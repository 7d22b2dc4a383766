"""`GET /files/outputs/{task_id}?path=`: the files a task's result names (the video executors'
thumbnails and sprites live under the data dir, not the task's result dir), from a real node
that ran a real GENERATE_THUMBNAIL: served when named and on this node, 404 otherwise, and
guarded by the publisher token like every download (`?token=` accepted, as in an <img>)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from fredica import auth
from fredica.web.app import create_app
from tests.video_support import pattern_video

from .conftest import node_client

pytestmark = pytest.mark.slow

TOKEN = "tok-outputs-1"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
CONFIG = {
    "auth": {
        "mode": "token",
        "access_tokens": [{"id": "t1", "name": "A", "token_hash": auth.hash_token(TOKEN)}],
    }
}


async def test_named_outputs_are_served_and_nothing_else(tmp_path: Path) -> None:
    clip = pattern_video(tmp_path / "clip.mp4", "testsrc2", duration=2, size="160x120")
    payload = {"video_path": str(clip), "count": 2, "output_dir": "thumbnails/m"}
    task = {"ref": "t", "type": "GENERATE_THUMBNAIL", "payload": payload}
    async with node_client(tmp_path / "data", create_app, CONFIG) as (client, node):
        body = {"template": "custom", "tasks": [task]}
        created = await client.post("/api/v1/pipelines", json=body, headers=BEARER)
        assert created.status_code in (200, 201), created.text
        pid = created.json()["pipeline_id"]
        done = await _finished(client, pid)
        thumb = next(t for t in done["tasks"] if t["type"] == "GENERATE_THUMBNAIL")
        result: dict[str, Any] = thumb["result"]
        url = f"/files/outputs/{thumb['id']}"

        cover = await client.get(url, params={"path": result["cover_path"], "token": TOKEN})
        assert cover.status_code == 200 and cover.headers["content-type"] == "image/jpeg"
        # results name their files relative to the data dir of the node that made them
        assert not Path(result["cover_path"]).is_absolute()
        assert cover.content == (node.settings.data_dir / result["cover_path"]).read_bytes()
        sprite = await client.get(url, params={"path": result["sprite_path"]}, headers=BEARER)
        assert sprite.status_code == 200 and sprite.content[:2] == b"\xff\xd8"

        # no token: refused before anything is looked up
        assert (await client.get(url, params={"path": result["cover_path"]})).status_code == 401
        # a file the result does not name, even one next to a named one
        other = str(Path(result["cover_path"]).with_name("index.json"))
        missing = await client.get(url, params={"path": other}, headers=BEARER)
        assert missing.status_code == 404 and "names no file" in missing.text
        db = await client.get(url, params={"path": str(node.settings.data_dir / "fredica.db")},
                              headers=BEARER)  # fmt: skip
        assert db.status_code == 404
        # named, but not under this node's data dir (the source video)
        source = await client.get(url, params={"path": result["source_path"]}, headers=BEARER)
        assert source.status_code == 404 and "not on this node" in source.text
        unknown = await client.get("/files/outputs/nope", params={"path": "x"}, headers=BEARER)
        assert unknown.status_code == 404


async def _finished(client: Any, pid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        data: dict[str, Any] = (await client.get(f"/api/v1/pipelines/{pid}", headers=BEARER)).json()
        if data["status"] in ("completed", "failed", "partial_failed", "cancelled"):
            assert data["status"] == "completed", data
            return data
        await asyncio.sleep(0.1)
    raise AssertionError("the pipeline did not finish in 60 s")
