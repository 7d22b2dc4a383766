"""Conditional routing of hard-coded subtitles (seed 001 §2.6), cases A, B and C, on generated
videos with and without burned-in text, through a real node: real ffmpeg, real OCR fallback
(tesseract) and the owner's routing in the completion transaction."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fredica.domain.models import PipelineStatus, TaskStatus
from fredica.node import compose
from fredica.node.service import Node
from fredica.pipelines.request import PipelineRequest
from tests import subtitle_support as ss
from tests.e2e.conftest import on_node

pytestmark = pytest.mark.slow
S = TaskStatus
NEW_TEXT = "Dubbed words appear here"


def seen(text: str) -> int:
    """How many words of the new subtitle OCR read back."""
    found = set(re.findall(r"[a-z]+", text.lower()))
    return sum(w in found for w in NEW_TEXT.lower().split())


def old_text(text: str) -> bool:
    """Whether OCR read (parts of) the burned-in ORIGINAL CAPTION TEXT."""
    return any(part in text.upper() for part in ("ORIGIN", "APTION", "TEXT"))


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    ss.require("tesseract", "espeak-ng")
    d = tmp_path_factory.mktemp("routing")
    (d / "new.srt").write_text(f"1\n00:00:00,500 --> 00:00:05,500\n{NEW_TEXT}\n")
    ss.speak("This is the dubbed sound track of the video.", d / "dub.wav")
    return {
        "plain": ss.make_video(d / "plain.mp4"),
        "hardsub": ss.make_video(d / "hardsub.mp4", text="ORIGINAL CAPTION TEXT"),
        "srt": d / "new.srt",
        "dub": d / "dub.wav",
    }


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = compose.build_node(ss.node_settings(tmp_path))
    await n.start()
    yield n
    await n.stop(grace=2)


async def burn(node: Node, video: Path, srt: Path, **params: object) -> tuple[object, dict]:
    request = PipelineRequest(
        template="burn_subtitles", source=str(video), params={"subtitle_path": str(srt), **params}
    )
    pipeline, _ = await node.create_pipeline(request)
    done = await ss.wait_done(node, pipeline.id)
    tasks = await ss.tasks_of(node, pipeline.id)
    return done, {t.type: t for t in tasks}


async def test_case_a_no_hard_subtitles_burns_directly(
    node: Node, media: dict[str, Path], tmp_path: Path
) -> None:
    done, tasks = await burn(node, media["plain"], media["srt"], audio_mode="dubbed")
    assert done.status is PipelineStatus.COMPLETED
    detect, burned = tasks["DETECT_HARDCODED_SUBTITLE"], tasks["BURN_SUBTITLE"]
    assert "BLUR_SUBTITLE_REGION" not in tasks
    assert detect.result["has_subtitle"] is False
    assert detect.result["detection_method"] == "ocr_fallback"  # no vision LLM on this node
    assert len(detect.result["sample_times"]) == 8
    assert detect.result["sample_times"][0] == pytest.approx(6.0 * 0.05 + 5.4 / 16, abs=0.01)
    assert burned.status is S.COMPLETED and burned.payload["route"] == "A"
    assert burned.payload["video_path"] == str(media["plain"])
    text = ss.ocr_text(on_node(node.settings.data_dir, burned.result["video_path"]), 3.0, tmp_path)
    assert seen(text) >= 2, text


async def test_case_b_hard_subtitles_with_original_audio_skips_the_burn(
    node: Node, media: dict[str, Path]
) -> None:
    done, tasks = await burn(node, media["hardsub"], media["srt"], audio_mode="original")
    assert done.status is PipelineStatus.COMPLETED  # skipped counts as done
    detect, burned = tasks["DETECT_HARDCODED_SUBTITLE"], tasks["BURN_SUBTITLE"]
    assert detect.result["has_subtitle"] is True
    region = detect.result["region"]
    print(f"\ncase B: region {region}, confidence {detect.result['confidence']}")
    assert 0.75 < region["y_top_pct"] < 0.86 < 0.92 < region["y_bottom_pct"] <= 1.0
    assert burned.status is S.SKIPPED and burned.attempt == 0  # never claimed: the owner wrote it
    events = await node.task_events(burned.id)
    assert any(e.event_type == "skipped" and "case B" in (e.message or "") for e in events), [
        (e.event_type, e.message) for e in events
    ]
    assert "BLUR_SUBTITLE_REGION" not in tasks
    assert done.done_tasks == done.total_tasks == 2


async def test_case_c_hard_subtitles_with_dubbed_audio_blurs_then_burns(
    node: Node, media: dict[str, Path], tmp_path: Path
) -> None:
    done, tasks = await burn(
        node, media["hardsub"], media["srt"], audio_mode="dubbed", audio_path=str(media["dub"])
    )
    assert done.status is PipelineStatus.COMPLETED
    detect = tasks["DETECT_HARDCODED_SUBTITLE"]
    blur, burned = tasks["BLUR_SUBTITLE_REGION"], tasks["BURN_SUBTITLE"]
    assert blur.status is S.COMPLETED and burned.status is S.COMPLETED
    assert list(blur.depends_on) == [detect.id] and blur.id in burned.depends_on
    assert blur.payload["y_top_pct"] == detect.result["region"]["y_top_pct"]
    # burned onto the cleaned picture
    assert burned.payload["video_path"] == blur.result["video_path"]
    assert burned.started_at >= blur.completed_at
    out = on_node(node.settings.data_dir, burned.result["video_path"])
    text = ss.ocr_text(out, 3.0, tmp_path)
    assert seen(text) >= 2 and not old_text(text), text
    # the dubbed sound replaced the tone
    assert burned.result["audio_path"] == str(media["dub"])
    before = ss.ocr_text(media["hardsub"], 3.0, tmp_path)
    assert old_text(before), before  # the test video really has text there
