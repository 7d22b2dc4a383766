"""The web player's endpoints on a node in token mode: what a pipeline offers to play (media,
subtitle tracks with their cues), byte ranges of the media, subtitles as WebVTT, and what is
refused (another task's file, a file outside the data dir that is not the pipeline's source,
requests without a token)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica import auth
from fredica.node.service import Node
from fredica.web import app as web_app
from tests import subtitle_support as ss

from .conftest import node_client

pytestmark = pytest.mark.slow

TOKEN = "tok-player-1"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
SRT = (
    "1\n00:00:00,500 --> 00:00:02,000\nGood morning\n\n"
    "2\n00:00:02,500 --> 00:00:04,000\nWelcome to the show\n"
)


def node_config(translator: str) -> dict[str, Any]:
    return {
        "auth": {
            "mode": "token",
            "access_tokens": [
                {
                    "id": "t1",
                    "name": "Al",
                    "token_hash": auth.hash_token(TOKEN),
                    # its translations run on the (local fake) cloud translator
                    "permissions": {"allow_cloud": True},
                }
            ],
        },
        "capabilities": {
            "translate": {
                "enabled": True,
                "providers": [
                    {
                        "backend": "openai-translate-api",
                        "endpoint": f"{translator}/v1",
                        "api_key": "k",
                        "model": "m",
                    }
                ],
            }
        },
    }


async def finished(node: Node, pipeline_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = await node.get_pipeline(pipeline_id)
        if p.status.is_terminal:
            assert p.status.value == "completed", [
                (t.type, t.error) for t in await node.list_tasks(pipeline_id)
            ]
            return
        await asyncio.sleep(0.1)
    tasks = [(t.type, t.status.value, t.error) for t in await node.list_tasks(pipeline_id)]
    raise AssertionError(f"pipeline {pipeline_id} did not finish in {timeout}s: {tasks}")


async def test_player_offers_media_tracks_ranges_and_vtt(tmp_path: Path) -> None:
    data, elsewhere = tmp_path / "data", tmp_path / "mine"
    elsewhere.mkdir()
    video = ss.make_video(elsewhere / "talk.mp4")
    (data / "in").mkdir(parents=True)
    (data / "in" / "talk.srt").write_text(SRT)
    with ss.TranslationServer() as translator:
        async with node_client(data, web_app.create_app, node_config(translator.url)) as (
            client,
            node,
        ):
            body = {
                "template": "custom",
                "tasks": [
                    # a custom pipeline has no source of its own: its input video (outside
                    # the data dir) is never offered, the extracted audio is
                    {"ref": "x", "type": "EXTRACT_AUDIO", "payload": {"video_path": str(video)}},
                    {
                        "ref": "f",
                        "type": "FORMAT_SUBTITLE",
                        "payload": {"subtitle_path": "in/talk.srt"},
                    },
                    {
                        "ref": "t",
                        "type": "TRANSLATE_TEXT",
                        "payload": {"srt_path": "in/talk.srt", "target_lang": "de"},
                    },
                ],
            }
            r = await client.post("/api/v1/pipelines", json=body, headers=BEARER)
            assert r.status_code in (200, 201), r.text
            pid = r.json()["pipeline_id"]
            await finished(node, pid)
            tasks = {t.type: t for t in await node.list_tasks(pid)}
            assert (await client.get(f"/api/v1/pipelines/{pid}/player")).status_code == 401
            view = (await client.get(f"/api/v1/pipelines/{pid}/player", headers=BEARER)).json()
            await check_view(client, view, pid, tasks)


async def check_view(
    client: httpx.AsyncClient, view: dict[str, Any], pid: str, tasks: dict[str, Any]
) -> None:
    extract = tasks["EXTRACT_AUDIO"]
    assert [(m["role"], m["kind"], m["name"]) for m in view["media"]] == [
        ("source_audio", "audio", "audio.wav")
    ]
    assert view["elsewhere"] == []
    original, translation = view["tracks"]
    assert (original["role"], original["task_type"]) == ("original", "FORMAT_SUBTITLE")
    assert (translation["role"], translation["language"]) == ("translation", "de")
    times = [(c["start"], c["end"]) for c in original["cues"]]
    assert times == [(0.5, 2.0), (2.5, 4.0)]
    assert [(c["start"], c["end"]) for c in translation["cues"]] == times
    assert translation["cues"][0]["text"] == ss.to_german("Good morning")
    # the media in byte ranges (how a <video> seeks); a query token works for <video src>
    url = view["media"][0]["url"]
    assert (await client.get(url)).status_code == 401
    whole = await client.get(url, params={"token": TOKEN})
    assert whole.status_code == 200 and whole.content[:4] == b"RIFF"
    part = await client.get(url, params={"token": TOKEN}, headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == whole.content[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(whole.content)}"
    # the translation as WebVTT for a <track>
    vtt = await client.get(translation["url"], params={"token": TOKEN})
    assert vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
    assert vtt.text.startswith("WEBVTT")
    assert "00:00:02.500 --> 00:00:04.000" in vtt.text
    assert ss.to_german("Welcome to the show") in vtt.text
    # nothing else is served: another role, a task without media, an unknown task
    base = f"/files/player/{pid}"
    for path in (
        f"{base}/{extract.id}/media/source",  # the video outside the data dir
        f"{base}/{tasks['TRANSLATE_TEXT'].id}/media/speech",
        f"{base}/{extract.id}/subtitles.vtt",
        f"{base}/no-such-task/media/source_audio",
        f"/files/player/no-such-pipeline/{extract.id}/media/source_audio",
    ):
        r = await client.get(path, params={"token": TOKEN})
        assert r.status_code == 404, (path, r.status_code, r.text)
