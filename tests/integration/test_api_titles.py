"""Every pipeline has a `title` in the API list and detail: the title it was given, the
uploaded or local file's name, the downloader's (yt-dlp's) title of a URL once downloaded;
the history search (`q=`) matches it and notifications carry it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.domain import wire
from fredica.node import notify
from tests.media_support import make_media, serve_files

from .conftest import node_client
from .test_engine import wait_for

TASKS = [{"ref": "t", "type": "TEST_SLEEP", "payload": {"seconds": 0.01}}]


async def _create(client: httpx.AsyncClient, params: dict[str, Any], material: str) -> str:
    body = {"template": "custom", "material_id": material, "tasks": TASKS, "params": params}
    created = await client.post("/api/v1/pipelines", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["pipeline_id"])


async def _titles(client: httpx.AsyncClient, **query: str) -> dict[str, str]:
    listed = (await client.get("/api/v1/pipelines", params=query)).json()["pipelines"]
    return {p["id"]: p["title"] for p in listed}


async def test_list_and_detail_carry_the_title(tmp_path: Path) -> None:
    async with node_client(tmp_path) as (client, _):
        up = await client.post(
            "/api/v1/uploads", params={"name": "Ask Not Speech.flac"}, content=b"x" * 1000
        )
        assert up.status_code == 201, up.text
        uploaded = await _create(client, {"source": up.json()["path"]}, "m-up")
        local = await _create(client, {"source": "file:///media/Talks/Keynote 2026.MP4"}, "m-l")
        given = await _create(client, {"source": "/srv/x.wav", "title": "Weekly standup"}, "m-g")
        url = await _create(client, {"source": "https://example.org/v/ep12"}, "m-u")
        bare = await _create(client, {}, "src-21374a76bec38d40")

        assert await _titles(client) == {
            uploaded: "Ask Not Speech.flac",
            local: "Keynote 2026.MP4",
            given: "Weekly standup",
            url: "https://example.org/v/ep12",
            bare: "src-21374a76bec38d40",
        }
        detail = (await client.get(f"/api/v1/pipelines/{uploaded}")).json()
        assert detail["title"] == "Ask Not Speech.flac" and detail["tasks"]
        cluster = await _titles(client, scope="cluster")
        assert cluster[given] == "Weekly standup"
        assert set(await _titles(client, q="speech")) == {uploaded}
        assert set(await _titles(client, q="STANDUP")) == {given}


@pytest.mark.slow
async def test_a_url_material_is_named_by_the_downloader(tmp_path: Path) -> None:
    _, video = make_media(tmp_path / "media")
    root = tmp_path / "www"
    root.mkdir()
    (root / "Garden_tour.mp4").write_bytes(video.read_bytes())
    config = {"capabilities": {"download": {"disk_min_free_gb": 0, "youtube": {"enabled": True}}}}
    with serve_files(root) as server:
        async with node_client(tmp_path / "data", config=config) as (client, node):
            source = f"{server.url}/Garden_tour.mp4"
            body = {
                "template": "custom",
                "material_id": "m-url",
                "params": {"source": source},
                "tasks": [{"ref": "d", "type": "DOWNLOAD_VIDEO",
                           "payload": {"source_url": source, "source_platform": "ytdlp"}}],
            }  # fmt: skip
            created = await client.post("/api/v1/pipelines", json=body)
            assert created.status_code == 201, created.text
            pid = created.json()["pipeline_id"]
            assert (await _titles(client))[pid] == source  # the URL until it is downloaded

            async def done() -> Any:
                p = (await client.get(f"/api/v1/pipelines/{pid}")).json()
                return p if p["status"] in ("completed", "failed", "partial_failed") else None

            result = await wait_for(done, 120)
            assert result["status"] == "completed", [t["error"] for t in result["tasks"]]
            task = result["tasks"][0]
            assert task["backend"] == "youtube-ytdlp" and task["result"]["material_title"]
            # yt-dlp's generic extractor names a direct file after it (its info `title`)
            assert result["title"] == "Garden_tour" == result["params"]["title"]
            assert (await _titles(client))[pid] == "Garden_tour"
            assert set(await _titles(client, q="garden_TOUR")) == {pid}
            ended = wire.pipeline_from_json(result)
            assert notify.notice(ended, [], node.node_id, "http://n")["title"] == "Garden_tour"
