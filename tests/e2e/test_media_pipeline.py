"""The media pipelines end to end: a real `fredica serve` process, generated speech video,
ffmpeg, faster-whisper tiny.en, a local HTTP server for downloads and a local server speaking
the OpenAI chat-completions protocol as the node's configured AI_ANALYZE backend."""

from __future__ import annotations

import io
import itertools
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.talks import word_error_rate
from rich.console import Console

from fredica.cli import demo_media
from fredica.cli.demo import free_port
from fredica.pipelines import media as media_pipelines
from tests.e2e.conftest import ServedNode, run_pipeline, served_node
from tests.media_support import (
    REFERENCE,
    FakeOpenAI,
    make_media,
    parse_srt,
    serve_files,
)

pytestmark = pytest.mark.slow

AI_CONFIG = """\
capabilities:
  ai_analyze:
    providers:
      - backend: openai-compatible
        endpoint: {url}/v1
        api_key: test-key
        model: fake-llm
"""


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_media(tmp_path_factory.mktemp("media"))


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    thread = threading.Thread(target=fake.httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


@pytest.fixture
def node(tmp_path: Path, llm: FakeOpenAI) -> Iterator[ServedNode]:
    with served_node(tmp_path, AI_CONFIG.format(url=llm.url)) as served:
        yield served


run = run_pipeline


def of_type(data: dict[str, Any], task_type: str) -> list[dict[str, Any]]:
    return [t for t in data["tasks"] if t["type"] == task_type]


def test_long_pipeline_spawns_a_chunk_per_piece_and_merges_them(
    node: ServedNode, media: tuple[Path, Path], llm: FakeOpenAI
) -> None:
    _, video = media
    body = {"template": "transcribe_long", "source": str(video),
            "params": {"chunk_duration_sec": 5}}  # fmt: skip
    data = run(node, body)
    assert data["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
    # language auto: DETECT_LANGUAGE runs (multilingual base model) in parallel with SPLIT_AUDIO
    detect = of_type(data, "DETECT_LANGUAGE")[0]
    assert data["params"]["language"] == "auto" and detect["result"]["detected_language"] == "en"
    assert data["detected_language"] == detect["result"]["language"]
    split = of_type(data, "SPLIT_AUDIO")[0]
    assert detect["depends_on"] == split["depends_on"]  # both wait only for EXTRACT_AUDIO
    chunks = sorted(of_type(data, "TRANSCRIBE_CHUNK"), key=lambda t: t["payload"]["chunk_index"])
    assert len(chunks) == 3 == split["result"]["chunk_count"]
    assert all(t["depends_on"] == [split["id"], detect["id"]] for t in chunks)
    # English detected: the chunks use the fast English model
    assert all(t["payload"]["model_name"] == "tiny.en" for t in chunks)
    merge = of_type(data, "MERGE_TRANSCRIPTION")[0]
    assert set(merge["depends_on"]) == {split["id"]} | {t["id"] for t in chunks}
    text = merge["result"]["text"]
    wer = word_error_rate(REFERENCE, text)
    print(f"\ntranscribe_long, 3 chunks: WER {wer:.3f}: {text}")
    assert wer < 0.25
    # SRT: monotonic, and every segment inside the window of the chunk that produced it
    srt = parse_srt(node.path(merge["result"]["files"]["srt"]).read_text())
    assert [s for s, _, _ in srt] == sorted(s for s, _, _ in srt)
    assert all(end >= start for start, end, _ in srt)
    windows = [(c["payload"]["chunk_start_sec"],
                c["payload"]["chunk_start_sec"] + c["payload"]["chunk_duration_sec"])
               for c in chunks]  # fmt: skip
    owned = [(c["payload"]["own_start_sec"], c["payload"]["own_end_sec"]) for c in chunks]
    assert owned[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(owned))
    for chunk, (low, high) in zip(chunks, windows, strict=True):
        for seg in chunk["result"]["segments"]:
            assert low - 0.01 <= seg["start"] <= seg["end"] <= high + 0.01
    # the analysis came from the node's configured backend, fed with the merged transcript
    analysis = of_type(data, "AI_ANALYZE")[0]
    assert analysis["backend"] == "openai-compatible"
    assert analysis["result"]["summary"] == "A fox and a cluster."
    assert "quick brown fox" in llm.prompts[-1].lower()


def test_quality_mode_chains_chunks_and_passes_the_tail_as_prompt(
    node: ServedNode, media: tuple[Path, Path]
) -> None:
    _, video = media
    body = {"template": "transcribe_long", "source": str(video), "quality_mode": "quality",
            "params": {"chunk_duration_sec": 5, "analyze": False}}  # fmt: skip
    data = run(node, body)
    assert data["status"] == "completed"
    chunks = sorted(of_type(data, "TRANSCRIBE_CHUNK"), key=lambda t: t["payload"]["chunk_index"])
    split_id = of_type(data, "SPLIT_AUDIO")[0]["id"]
    for prev, cur in itertools.pairwise(chunks):
        detect_id = of_type(data, "DETECT_LANGUAGE")[0]["id"]
        assert cur["depends_on"] == [split_id, detect_id, prev["id"]]
        assert cur["started_at"] >= prev["completed_at"]
        # the text of the previous chunk before this chunk's audio begins (its context); a
        # previous chunk without such text leaves an earlier chunk's text in place
        tail = media_pipelines.prompt_tail(prev["result"], cur["payload"]["chunk_start_sec"])
        index = prev["payload"]["chunk_index"]
        if tail:
            assert cur["payload"]["initial_prompt"] == tail
            assert cur["result"]["prompt_from_chunk"] == index
        else:
            assert cur["payload"].get("prompt_from_chunk", -1) < index
        assert cur["result"]["initial_prompt_used"] == bool(cur["payload"]["initial_prompt"])
    merged = of_type(data, "MERGE_TRANSCRIPTION")[0]["result"]["text"]
    assert word_error_rate(REFERENCE, merged) < 0.25


def test_url_sources_download_first_and_classify_failures(
    node: ServedNode, media: tuple[Path, Path], tmp_path: Path
) -> None:
    _, video = media
    www = tmp_path / "www"
    www.mkdir()
    shutil.copy(video, www / "talk.mp4")
    no_retry = {"DOWNLOAD_VIDEO": {"max_retries": 0}}
    with serve_files(www) as server:
        data = run(node, {"template": "transcribe_short", "source": f"{server.url}/talk.mp4",
                          "params": {"analyze": False}})  # fmt: skip
        assert data["status"] == "completed"
        dl = of_type(data, "DOWNLOAD_VIDEO")[0]
        assert node.path(dl["result"]["video_path"]).read_bytes() == video.read_bytes()
        extract = of_type(data, "EXTRACT_AUDIO")[0]
        assert extract["payload"]["video_path"] == dl["result"]["video_path"]

        missing = run(node, {"template": "transcribe_short", "source": f"{server.url}/gone.mp4",
                             "overrides": no_retry})  # fmt: skip
    assert missing["status"] == "failed"
    dl = of_type(missing, "DOWNLOAD_VIDEO")[0]
    assert dl["error_type"] == "PERMANENT" and "404" in dl["error"], dl["error"]
    assert all(t["status"] == "cancelled" for t in missing["tasks"] if t["id"] != dl["id"])

    dead = f"http://127.0.0.1:{free_port()}/talk.mp4"
    unreachable = run(node, {"template": "transcribe_short", "source": dead,
                             "overrides": no_retry})  # fmt: skip
    dl = of_type(unreachable, "DOWNLOAD_VIDEO")[0]
    assert dl["error_type"] == "TRANSIENT" and "127.0.0.1" in dl["error"], dl["error"]


def test_corrupt_media_fails_permanently_with_ffmpegs_reason(
    node: ServedNode, tmp_path: Path
) -> None:
    bad = tmp_path / "corrupt.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x13\x37" * 4000)
    data = run(node, {"template": "transcribe_short", "source": str(bad)})
    assert data["status"] == "failed"
    extract = of_type(data, "EXTRACT_AUDIO")[0]
    assert extract["error_type"] == "PERMANENT" and "corrupt.mp4" in extract["error"]
    assert extract["retry_count"] == 0


def test_bad_requests_get_a_clear_422(node: ServedNode, tmp_path: Path) -> None:
    with node.client() as client:
        for body, text in [
            ({"template": "transcribe_long"}, "needs a URL or an absolute file path"),
            ({"template": "transcribe_long", "source": "/nope.mp4"}, "file not found"),
            ({"template": "full_process", "source": "http://x/v.mp4", "params": {"colour": 1}},
             "unknown key(s) colour"),
            ({"template": "full_process", "source": "http://x/v.mp4",
              "overrides": {"TRANSCODE": {}}}, "unknown task type"),
        ]:  # fmt: skip
            response = client.post("/api/v1/pipelines", json=body)
            assert response.status_code == 422 and text in response.text, response.text


def test_demo_and_process_command(node: ServedNode, tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=160)
    assert demo_media.run_media_demo(console, None, node.url) == 0, out.getvalue()
    text = out.getvalue()
    assert "3 TRANSCRIBE_CHUNK task(s)" in text and "transcript.srt" in text
    assert "summary" in text and "completed" in text
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video at all")
    out = io.StringIO()
    code = demo_media.run_process_command(Console(file=out, width=160), str(bad), None, node.url)
    assert code == 1 and "PERMANENT" in out.getvalue() and "broken.mp4" in out.getvalue()


def test_detected_language_picks_the_multilingual_model(node: ServedNode, tmp_path: Path) -> None:
    from fredica.cli.demo_media import speak

    german = speak(
        ("Guten Tag, wie geht es Ihnen heute?", "Das Wetter ist heute sehr schön und warm."),
        tmp_path / "deutsch.wav",
        voice="de",
    )
    body = {"template": "transcribe_long", "source": str(german),
            "params": {"chunk_duration_sec": 4, "analyze": False}}  # fmt: skip
    data = run(node, body)
    assert data["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
    detect = of_type(data, "DETECT_LANGUAGE")[0]
    assert detect["result"]["detected_language"] == "de"
    assert detect["payload"]["model_name"] == "base"
    chunks = of_type(data, "TRANSCRIBE_CHUNK")
    assert chunks and all(t["payload"]["model_name"] == "base" for t in chunks)
    assert all(t["payload"]["language"] == detect["result"]["language"] for t in chunks)
    text = " ".join(t["result"]["text"] for t in chunks).lower()
    assert "tag" in text or "wetter" in text, text  # German words, not an English guess


def test_fredica_demo_command_keeps_its_outputs(tmp_path: Path) -> None:
    """`make demo` runs this: a node of its own, the media pipeline, outputs left on disk."""
    import subprocess
    import sys

    data = tmp_path / "demo-data"
    result = subprocess.run(
        [sys.executable, "-m", "fredica", "demo", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "COLUMNS": "160"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    srt = re.search(r"SRT\s+(\S+\.srt)", result.stdout)
    assert srt and Path(srt.group(1)).is_file() and Path(srt.group(1)).is_relative_to(data)
    assert "detected language: en" in result.stdout
