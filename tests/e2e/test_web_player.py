"""The result player in a real Chromium against a real `fredica serve`: a completed `dub`
pipeline (faster-whisper tiny.en on generated speech, a local server speaking the OpenAI
protocol translating to German, espeak-ng speaking it, ffmpeg burning it) opens with a
<video> of the dubbed result playing from the node, the subtitles as <track>s, and the
English and German cues side by side; clicking a cue or a transcript line seeks the video."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fredica.executors import subtitle_format as sf
from tests import subtitle_support as ss
from tests.integration.test_emotion import DIALOGUE
from tests.media_support import make_media

from . import test_web_results as results_page
from .conftest import ServedNode, run_pipeline, served_node
from .test_subtitle_templates import TRANSLATE_CONFIG
from .test_web import WAIT_MS, expect, screenshot

chromium = results_page.chromium  # the module's browser fixture
_open, _close = results_page._open, results_page._close

pytestmark = pytest.mark.slow

HEADS = {
    "en-US": ("Player", "Original (en)", "Translation (de)"),
    "zh-CN": ("播放", "原文 (en)", "译文 (de)"),
}
SPEECH_CONFIG = """\
  speaker_diarize:
    enabled: true
  emotion_detect:
    enabled: true
"""
MEDIA = "document.querySelector('#player-media')"
READY = f"() => {{ const m = {MEDIA}; return m && m.readyState >= 1 }}"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedNode]:
    with ss.TranslationServer() as translator:
        root = tmp_path_factory.mktemp("player-node")
        config = TRANSLATE_CONFIG.format(url=translator.url) + SPEECH_CONFIG
        with served_node(root, config) as served:
            yield served


@pytest.fixture(scope="module")
def dubbed(node: ServedNode, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _, video = make_media(tmp_path_factory.mktemp("player-media"))
    body = {"template": "dub", "source": str(video), "language": "en"}
    data = run_pipeline(node, {**body, "params": {"target_lang": "de"}})
    assert data["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
    return data


def _task(data: dict[str, Any], task_type: str) -> dict[str, Any]:
    return next(t for t in data["tasks"] if t["type"] == task_type)


def _seek_time(page: Any) -> float:
    # the click seeks (and starts playing): read the time before it moves on much
    value: float = page.evaluate(f"{MEDIA}.currentTime")
    return value


@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_dubbed_result_plays_with_original_and_translation_side_by_side(
    chromium: Any, node: ServedNode, dubbed: dict[str, Any], locale: str
) -> None:
    merged = _task(dubbed, "MERGE_TRANSCRIPTION")["result"]
    english = sf.parse(node.path(merged["files"]["srt"]).read_text())
    german = sf.parse(node.path(_task(dubbed, "TRANSLATE_TEXT")["result"]["srt_path"]).read_text())
    assert len(english) >= 2 and len(german) == len(english)
    page = _open(chromium, f"{node.url}/pipelines/{dubbed['id']}", locale, (1366, 900))
    player = page.locator("#player")
    expect(player.locator("h3").first).to_have_text(HEADS[locale][0], timeout=WAIT_MS)
    media = page.locator("video#player-media")
    expect(media).to_have_attribute("data-role", "dubbed")
    burn = _task(dubbed, "BURN_SUBTITLE")
    assert f"/files/player/{dubbed['id']}/{burn['id']}/media/" in media.get_attribute("src")
    page.wait_for_function(READY, timeout=WAIT_MS)  # the browser read the video from the node
    assert page.evaluate(f"{MEDIA}.duration") >= english[-1].end
    tracks = media.locator("track")
    assert tracks.count() == 2
    # the subtitles are burned into this video: the tracks are there, but not shown over them
    assert media.locator("track[default]").count() == 0
    # the two columns: the English cues and their German translation, row by row
    heads = page.locator(".cue-head span")
    expect(heads.nth(1)).to_have_text(HEADS[locale][1])
    expect(heads.nth(2)).to_have_text(HEADS[locale][2])
    rows = page.locator("#cue-table .cue-row")
    expect(rows).to_have_count(len(english))
    assert rows.locator(".cue-original").all_inner_texts() == [c.text for c in english]
    assert rows.locator(".cue-translation").all_inner_texts() == [c.text for c in german]
    # clicking a cue seeks the video to it
    target = english[-1].start
    rows.nth(len(english) - 1).click()
    page.wait_for_function(f"{MEDIA}.currentTime >= {target - 0.01}", timeout=WAIT_MS)
    assert _seek_time(page) == pytest.approx(target, abs=0.75)
    # and so does a transcript line
    segments = _task(dubbed, "MERGE_TRANSCRIPTION")["result"]["segments"]
    first = page.locator(".transcript.seekable .segment").first
    page.evaluate(f"{MEDIA}.pause()")
    first.click()
    page.wait_for_function(
        f"{MEDIA}.currentTime < {segments[0]['start'] + 0.75}",
        timeout=WAIT_MS,
    )
    assert _seek_time(page) == pytest.approx(segments[0]["start"], abs=0.75)
    screenshot(page, f"player-{locale}")
    _close(page)


def test_the_source_and_the_spoken_audio_can_be_picked(
    chromium: Any, node: ServedNode, dubbed: dict[str, Any]
) -> None:
    page = _open(chromium, f"{node.url}/pipelines/{dubbed['id']}", "en-US", (390, 844))
    picker = page.locator("#player-pick")
    expect(picker).to_be_visible(timeout=WAIT_MS)
    labels = picker.locator("option").all_inner_texts()
    assert [label.split(" · ")[0] for label in labels[:3]] == [
        "Dubbed video",
        "Synthesised speech",
        "Source media",
    ]
    picker.select_option(index=2)  # the local source video, served because it is the source
    media = page.locator("video#player-media")
    expect(media).to_have_attribute("data-role", "source", timeout=WAIT_MS)
    page.wait_for_function(READY, timeout=WAIT_MS)
    assert media.locator("track[default]").get_attribute("srclang") == "de"  # captions on
    picker.select_option(index=1)
    expect(page.locator("audio#player-media")).to_have_attribute("data-role", "speech")
    page.wait_for_function(READY, timeout=WAIT_MS)
    assert page.evaluate(results_page.NO_SIDEWAYS)  # a phone: the two columns stack
    screenshot(page, "player-390-en-US")
    _close(page)


def shows_the_picked_source(page: Any) -> None:
    """The player shows the source (the third item) with the German captions on."""
    media = page.locator("video#player-media")
    assert media.get_attribute("data-role") == "source"
    assert media.locator("track[default]").get_attribute("srclang") == "de"
    assert page.locator("#player-pick").input_value() == "2"


def test_a_pick_in_the_player_survives_the_view_being_drawn_again(
    chromium: Any, node: ServedNode, dubbed: dict[str, Any]
) -> None:
    """The result view is drawn again when the live stream says which node this is (and when
    a result changes): the player keeps the media a person picked, not the first item."""
    context = chromium.new_context(locale="en-US", viewport={"width": 1366, "height": 900})
    # Given the live stream is not there yet when the page first draws its results
    context.route("**/api/v1/events*", lambda route: route.abort())
    page = context.new_page()
    page.goto(f"{node.url}/pipelines/{dubbed['id']}")
    picker = page.locator("#player-pick")
    expect(picker).to_be_visible(timeout=WAIT_MS)
    picker.select_option(index=2)
    expect(page.locator("video#player-media")).to_have_attribute("data-role", "source")
    page.evaluate(f"{MEDIA}.dataset.drawn = 'first'")
    # When it connects and the view is drawn again (a new player element)
    context.unroute("**/api/v1/events*")
    expect(page.locator("#conn")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    page.wait_for_function(f"() => {MEDIA} && !{MEDIA}.dataset.drawn", timeout=WAIT_MS)
    # Then the new player shows the source with the German captions on, as picked
    shows_the_picked_source(page)
    context.close()


def test_a_pick_made_while_the_view_is_being_drawn_again_is_kept(
    chromium: Any, node: ServedNode, dubbed: dict[str, Any]
) -> None:
    """The view builds its new player, then reads the file lists before it replaces the old
    one: a pick made on the old player in that gap shows in the new one."""
    context = chromium.new_context(locale="en-US", viewport={"width": 1366, "height": 900})
    context.route("**/api/v1/events*", lambda route: route.abort())
    held: list[Any] = []
    hold = {"on": False}

    def files(route: Any) -> None:
        if hold["on"]:
            held.append(route)
        else:
            route.continue_()

    context.route("**/api/v1/tasks/*/files", files)
    page = context.new_page()
    page.goto(f"{node.url}/pipelines/{dubbed['id']}")
    picker = page.locator("#player-pick")
    expect(picker).to_be_visible(timeout=WAIT_MS)
    page.evaluate("document.querySelector('#player').dataset.drawn = 'first'")
    # Given the view is being drawn again and waits for its file lists
    hold["on"] = True
    context.unroute("**/api/v1/events*")
    expect(page.locator("#conn")).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    for _ in range(WAIT_MS // 50):
        if held:
            break
        page.wait_for_timeout(50)  # the route handler runs while the page is waited on
    assert held, "the view was not drawn again"
    # When the person picks the source on the old player meanwhile
    picker.select_option(index=2)
    expect(page.locator("video#player-media")).to_have_attribute("data-role", "source")
    hold["on"] = False
    for route in held:
        route.continue_()
    # Then the new player shows the source with the German captions on
    drawn = "() => { const p = document.querySelector('#player'); return p && !p.dataset.drawn }"
    page.wait_for_function(drawn, timeout=WAIT_MS)
    shows_the_picked_source(page)
    context.close()


def test_a_transcription_plays_its_source_and_seeks_from_the_transcript(
    chromium: Any, node: ServedNode, tmp_path: Path
) -> None:
    _, video = make_media(tmp_path)
    body = {"template": "transcribe_long", "source": str(video), "language": "en"}
    data = run_pipeline(node, {**body, "params": {"chunk_duration_sec": 6}})
    assert data["status"] == "completed"
    page = _open(chromium, f"{node.url}/pipelines/{data['id']}", "zh-CN", (390, 844))
    media = page.locator("video#player-media")
    expect(media).to_have_attribute("data-role", "source", timeout=WAIT_MS)
    page.wait_for_function(READY, timeout=WAIT_MS)
    assert page.locator("#cue-table").count() == 0  # the transcript lists the cues
    segments = _task(data, "MERGE_TRANSCRIPTION")["result"]["segments"]
    assert len(segments) >= 2
    page.locator(".transcript.seekable .segment").nth(1).click()
    page.wait_for_function(
        f"{MEDIA}.currentTime >= {segments[1]['start'] - 0.01}",
        timeout=WAIT_MS,
    )
    assert _seek_time(page) == pytest.approx(segments[1]["start"], abs=0.75)
    assert page.evaluate(results_page.NO_SIDEWAYS)
    _close(page)


def test_transcript_lines_carry_their_emotion(
    chromium: Any, node: ServedNode, tmp_path: Path
) -> None:
    wav = tmp_path / "dialogue.wav"
    ss.timed_speech(DIALOGUE, wav, lead=0.8, pause=0.7)
    body = {"template": "transcribe_speakers", "source": str(wav), "language": "en"}
    params = {"analyze": False, "max_speakers": 3, "emotion": True}
    data = run_pipeline(node, {**body, "params": params})
    assert data["status"] == "completed", [(t["type"], t["error"]) for t in data["tasks"]]
    labels = [s["emotion"] for s in _task(data, "DETECT_EMOTION")["result"]["segments"]]
    assert labels[:2] == ["joy", "anger"]
    page = _open(chromium, f"{node.url}/pipelines/{data['id']}", "zh-CN", (1366, 900))
    tags = page.locator(".transcript .emotion-tag")
    expect(tags).to_have_count(len(labels), timeout=WAIT_MS)
    assert [tags.nth(i).get_attribute("data-emotion") for i in range(len(labels))] == labels
    assert tags.all_inner_texts()[:2] == ["喜悦", "愤怒"]
    assert "nrc-emotion-lexicon" in (tags.first.get_attribute("title") or "")
    screenshot(page, "emotion-zh-CN")
    _close(page)
