"""A real media pipeline across three nodes: the download and the audio extraction run on b
(the only node that downloads and has ffmpeg), the chunks are transcribed on c (the only one
that transcribes) from audio fetched from b, and the transcript is the one a single node makes
of the same video."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support import Cluster, get, make_cluster, pipeline_done, post
from tests.e2e.conftest import served_node, wait_until
from tests.media_support import make_media, serve_files

pytestmark = pytest.mark.slow

NO_DOWNLOAD = """\
  download:
    http: {enabled: false}
    hls: {enabled: false}
    youtube: {enabled: false}
    bilibili: {enabled: false}
"""
ROLES = {
    # a: owner only
    "a": NO_DOWNLOAD + "  ffmpeg: {enabled: false}\n  transcribe: {enabled: false}\n",
    # b: downloads and extracts
    "b": "  transcribe: {enabled: false}\n",
    # c: transcribes
    "c": NO_DOWNLOAD + "  ffmpeg: {enabled: false}\n",
}


def with_role(config: Path, role: str) -> None:
    text = config.read_text()
    config.write_text(text.replace("capabilities:\n", "capabilities:\n" + role, 1))


@pytest.fixture
def media_cluster(tmp_path: Path) -> Iterator[Cluster]:
    with make_cluster(tmp_path) as cluster:
        for name, role in ROLES.items():
            with_role(cluster.nodes[name].config, role)
        cluster.start_all()
        yield cluster


def by_type(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for task in data["tasks"]:
        out.setdefault(task["type"], []).append(task)
    return out


def test_download_on_b_chunks_on_c_make_the_transcript_of_one_node(
    media_cluster: Cluster, tmp_path: Path
) -> None:
    _, video = make_media(tmp_path / "media")
    www = tmp_path / "www"
    www.mkdir()
    shutil.copy(video, www / "talk.mp4")
    body = {"params": {"chunk_duration_sec": 5, "analyze": False}, "language": "en"}
    ids = media_cluster.ids
    with serve_files(www) as server:
        request = {"template": "transcribe_long", "source": f"{server.url}/talk.mp4", **body}
        a = media_cluster.nodes["a"]
        pid = post(a, "/api/v1/pipelines", request)["pipeline_id"]
        done = wait_until(lambda: pipeline_done(a, pid), 240, "the pipeline on the cluster")
        data = get(a, f"/api/v1/pipelines/{pid}")
        assert done["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
        # one node alone, same video, same request
        (tmp_path / "alone").mkdir()
        with served_node(tmp_path / "alone") as alone:
            single = post(alone, "/api/v1/pipelines", request)["pipeline_id"]
            wait_until(lambda: pipeline_done(alone, single), 240, "the single-node pipeline")
            reference = get(alone, f"/api/v1/pipelines/{single}")

    tasks = by_type(data)
    # each task ran where its capability is, and read its input from where it was written
    assert tasks["DOWNLOAD_VIDEO"][0]["claimed_by"] == ids["b"]
    extract = tasks["EXTRACT_AUDIO"][0]
    assert extract["claimed_by"] == ids["b"]
    assert extract["affinity"] == {"kind": "HARD", "node_id": ids["b"]}
    chunks = tasks["TRANSCRIBE_CHUNK"]
    assert len(chunks) >= 2
    for chunk in chunks:
        assert chunk["claimed_by"] == ids["c"]
        assert chunk["file_node_id"] == ids["b"]
        assert not Path(chunk["payload"]["audio_path"]).is_absolute()  # (node, relative path)
    events = get(a, f"/api/v1/tasks/{chunks[0]['id']}")["events"]
    assert any(
        e["event_type"] == "input" and f"from node {ids['b']}" in (e["message"] or "")
        for e in events
    ), events
    # and the transcript is the one a single node makes
    merged = tasks["MERGE_TRANSCRIPTION"][0]["result"]["text"]
    alone_text = by_type(reference)["MERGE_TRANSCRIPTION"][0]["result"]["text"]
    assert merged == alone_text
