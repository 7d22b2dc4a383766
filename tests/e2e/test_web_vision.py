"""The video result views in a real Chromium against a real node that ran the video templates
on generated media: `video_overview` shows the scene timeline with a thumbnail per scene and
the sprite sheet (images served through /files/outputs), `ocr_video` the burned-in text by time,
`detect_objects` (a model the test builds) the objects by class and time; in English and
Chinese, at 1366 and 390 px without sideways scrolling."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from tests.video_support import objects_video, scene_video, subtitled_video

from .conftest import ServedNode, run_pipeline
from .test_video_templates import node  # noqa: F401 (the fixture: OCR + a built detector)
from .test_web import WAIT_MS, expect, screenshot
from .test_web_results import NO_SIDEWAYS, _close, _open, chromium  # noqa: F401 (fixture)

with contextlib.suppress(ImportError):  # a missing playwright fails in the chromium fixture
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.slow

TITLES = {
    "en-US": ("Scene timeline (3 scenes)", "On-screen text (OCR)", "Objects by class and time"),
    "zh-CN": ("场景时间线（3 个场景）", "画面文字（OCR）", "检测到的物体（按类别和时间）"),
}


@pytest.fixture(scope="module")
def pipelines(
    node: ServedNode,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    media = tmp_path_factory.mktemp("vision-media")
    objects = objects_video(media / "objects.mp4")
    bodies = {
        "video_overview": {"source": str(scene_video(media / "scenes.mp4"))},
        "ocr_video": {"source": str(subtitled_video(media / "subs.mp4"))},
        "detect_objects": {"source": str(objects), "params": {"conf_threshold": 0.5}},
    }
    out = {}
    for template, body in bodies.items():
        data = run_pipeline(node, {"template": template, **body})
        assert data["status"] == "completed", data
        out[template] = data
    return out


def _page(browser: Browser, served: ServedNode, data: dict[str, Any], view: Any) -> Page:
    size, locale = view
    page = _open(browser, f"{served.url}/pipelines/{data['id']}", locale, size)
    expect(page.locator("#results")).to_be_visible(timeout=WAIT_MS)
    return page


def _loaded(page: Page, selector: str) -> list[int]:
    page.wait_for_function(
        f"[...document.querySelectorAll('{selector}')].every(i => i.complete)", timeout=WAIT_MS
    )
    widths: list[int] = page.eval_on_selector_all(selector, "els => els.map(i => i.naturalWidth)")
    return widths


VIEWS = [((1366, 768), "en-US"), ((390, 844), "zh-CN")]


@pytest.mark.parametrize("view", VIEWS, ids=["1366-en", "390-zh"])
def test_scene_timeline_ocr_text_and_objects(
    chromium: Browser,  # noqa: F811
    node: ServedNode,  # noqa: F811
    pipelines: dict[str, Any],
    view: Any,
) -> None:
    scenes_title, ocr_title, objects_title = TITLES[view[1]]

    page = _page(chromium, node, pipelines["video_overview"], view)
    block = page.locator(".result-scenes")
    expect(block.locator("h3")).to_have_text(scenes_title)
    expect(block.locator(".scene-seg")).to_have_count(3)
    expect(block.locator(".scene .seg-time")).to_have_text(["00:00–00:02", "00:02–00:04",
                                                            "00:04–00:06"])  # fmt: skip
    thumbs = _loaded(page, ".result-scenes img.scene-thumb")
    assert len(thumbs) == 3 and all(w > 0 for w in thumbs), thumbs  # served and decoded
    sprite = _loaded(page, ".result-thumbnails img")
    assert len(sprite) == 2 and all(w > 0 for w in sprite), sprite  # cover + sprite
    assert page.evaluate(NO_SIDEWAYS)
    if view[0][0] == 1366:
        screenshot(page, "vision-results-1366-en")
    _close(page)

    page = _page(chromium, node, pipelines["ocr_video"], view)
    expect(page.locator(".result-ocr h3")).to_have_text(ocr_title)
    spans = page.locator(".result-ocr .ocr-span")
    expect(spans.locator(".seg-text")).to_have_text(["HELLO WORLD 42", "SECOND LINE 7"])
    expect(spans.locator(".seg-time")).to_have_text(["00:00", "00:03"])
    assert page.evaluate(NO_SIDEWAYS)
    _close(page)

    page = _page(chromium, node, pipelines["detect_objects"], view)
    expect(page.locator(".result-detect h3")).to_have_text(objects_title)
    person = page.locator(".det-class[data-label='person']")
    car = page.locator(".det-class[data-label='car']")
    expect(person.locator(".det-times")).to_have_text("00:00–00:04")
    expect(car.locator(".det-times")).to_have_text("00:02–00:04")
    # the car's bar starts half way along the lane: drawn at its time
    # (measured in one step: the results are drawn again once the node has said who it is,
    # and two separate reads could straddle that redraw)
    at = page.wait_for_function(
        """() => {
          const car = document.querySelector(".det-class[data-label='car']");
          const lane = car && car.querySelector(".det-lane");
          const run = lane && lane.querySelector(".det-run");
          if (!run) return null;
          const l = lane.getBoundingClientRect(), r = run.getBoundingClientRect();
          return l.width > 0 ? (r.x - l.x) / l.width : null;
        }"""
    ).json_value()
    assert abs(at - 0.5) < 0.05, at
    assert page.evaluate(NO_SIDEWAYS)
    _close(page)
