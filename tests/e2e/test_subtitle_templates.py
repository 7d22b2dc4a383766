"""The speaking templates end to end on a real `fredica serve` process: `dub` (transcribe with
faster-whisper tiny.en, translate through a local server speaking the OpenAI protocol, speak
with espeak-ng, burn the translated subtitles with the dubbed sound, routed by hard-subtitle
detection) and `burn_subtitles` over the HTTP API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fredica.executors import subtitle_format as sf
from tests import subtitle_support as ss
from tests.e2e.conftest import ServedNode, run_pipeline, served_node
from tests.media_support import make_media

pytestmark = pytest.mark.slow

TRANSLATE_CONFIG = """\
capabilities:
  translate:
    enabled: true
    providers:
      - backend: openai-translate-api
        endpoint: {url}/v1
        api_key: test-key
        model: translator
"""


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    ss.require("espeak-ng", "tesseract")
    return make_media(tmp_path_factory.mktemp("dub"))


@pytest.fixture
def translator() -> Iterator[ss.TranslationServer]:
    with ss.TranslationServer() as server:
        yield server


@pytest.fixture
def node(tmp_path: Path, translator: ss.TranslationServer) -> Iterator[ServedNode]:
    with served_node(tmp_path, TRANSLATE_CONFIG.format(url=translator.url)) as served:
        yield served


run = run_pipeline


def one(data: dict[str, Any], task_type: str) -> dict[str, Any]:
    found = [t for t in data["tasks"] if t["type"] == task_type]
    assert len(found) == 1, (task_type, [t["type"] for t in data["tasks"]])
    return found[0]


def test_dub_transcribes_translates_speaks_and_burns(
    node: ServedNode, media: tuple[Path, Path], translator: ss.TranslationServer, tmp_path: Path
) -> None:
    _, video = media
    data = run(
        node,
        {
            "template": "dub",
            "source": str(video),
            "language": "en",
            "params": {"target_lang": "de"},
        },
    )
    assert data["status"] == "completed", [
        (t["type"], t["status"], t["error"]) for t in data["tasks"]
    ]
    merged = one(data, "MERGE_TRANSCRIPTION")["result"]
    translated = one(data, "TRANSLATE_TEXT")
    assert translated["backend"] == "openai-translate-api"
    english = sf.parse(node.path(merged["files"]["srt"]).read_text())
    german = sf.parse(node.path(translated["result"]["srt_path"]).read_text())
    assert [(c.start, c.end) for c in german] == [(c.start, c.end) for c in english]
    assert "Fuchs" in " ".join(c.text for c in german)  # "fox", translated
    speech = one(data, "GENERATE_TTS")
    assert speech["backend"] == "espeak-ng" and speech["result"]["voice"] == "de"
    assert speech["result"]["duration_sec"] == pytest.approx(german[-1].end, rel=0.05)
    # the generated video has no burned-in text: case A, burned onto the original picture
    detect, burn = one(data, "DETECT_HARDCODED_SUBTITLE"), one(data, "BURN_SUBTITLE")
    assert detect["result"]["has_subtitle"] is False
    assert not [t for t in data["tasks"] if t["type"] == "BLUR_SUBTITLE_REGION"]
    assert burn["payload"]["audio_path"] == speech["result"]["audio_path"]
    assert burn["payload"]["subtitle_path"] == translated["result"]["srt_path"]
    out = node.path(burn["result"]["video_path"])
    with node.client() as client:  # the results are reachable through the files API
        listed = client.get(f"/api/v1/tasks/{burn['id']}/files").json()["files"]
        assert [f["name"] for f in listed] == [out.name]
        video = client.get(listed[0]["url"])
        assert video.status_code == 200 and len(video.content) == out.stat().st_size
    first = german[0]
    text = ss.ocr_text(out, (first.start + first.end) / 2, tmp_path)
    words = set(re.findall(r"\w+", text.lower()))
    assert words & {w.lower() for w in re.findall(r"\w+", first.text)}, (text, first.text)
    print(f"\ndub: {len(german)} cues, first {first.text!r}, OCR of the burned frame: {text!r}")


def test_burn_subtitles_template_over_the_api_rejects_bad_params(
    node: ServedNode, media: tuple[Path, Path], tmp_path: Path
) -> None:
    _, video = media
    with node.client() as client:
        body: dict[str, Any] = {"template": "burn_subtitles", "source": str(video)}
        missing = client.post("/api/v1/pipelines", json=body)
        assert missing.status_code == 422 and "subtitle_path" in missing.text
        srt = tmp_path / "s.srt"
        srt.write_text("1\n00:00:00,500 --> 00:00:02,000\nHi\n")
        bad = client.post(
            "/api/v1/pipelines",
            json={
                "template": "burn_subtitles",
                "source": str(video),
                "params": {"subtitle_path": str(srt), "audio_mode": "loud"},
            },
        )
        assert bad.status_code == 422 and "audio_mode" in bad.text
        dub = client.post("/api/v1/pipelines", json={"template": "dub", "source": str(video)})
        assert dub.status_code == 422 and "target_lang" in dub.text


def test_summary_audio_reads_the_analysis_aloud(node: ServedNode, media: tuple[Path, Path]) -> None:
    _, video = media
    data = run(node, {"template": "summary_audio", "source": str(video), "language": "en"})
    assert data["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
    summary = one(data, "AI_ANALYZE")["result"]["summary"]
    speech = one(data, "GENERATE_TTS")
    assert summary and speech["payload"]["text"] == summary
    assert speech["result"]["voice"] == "en-us"
    assert 1.0 < speech["result"]["duration_sec"] < 60
    assert node.path(speech["result"]["audio_path"]).stat().st_size > 20_000
