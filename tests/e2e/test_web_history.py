"""The history page in a real Chromium against a real node: a search finds a pipeline by its
file name (both languages, 1366 and 390 px, nothing cut off sideways), rows open the
pipeline, pages go forward and back by cursor, the filters live in the address; and a
pipeline that ends shows a browser notification."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from . import test_web_results as web_results
from .conftest import ServedNode
from .test_web import WAIT_MS, expect, live, screenshot

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.slow

FILLER = 26  # with the two named ones: 28 pipelines, more than one page of 25
NO_SIDEWAYS = "document.documentElement.scrollWidth <= window.innerWidth"
# Stands in for the browser's Notification (permission granted): records what the page shows.
FAKE_NOTIFICATION = """
window.__notes = [];
window.Notification = class {
  static permission = "granted";
  static requestPermission() { return Promise.resolve("granted"); }
  constructor(title, options) { window.__notes.push({title, body: options && options.body}); }
  close() {}
};
"""


# the result view's browser and node fixtures (module-scoped: one of each for this module)
chromium = web_results.chromium
node = web_results.node


def create(node: ServedNode, source: str, material: str, seconds: float = 0) -> str:
    body = {
        "template": "custom",
        "material_id": material,
        "params": {"source": source},
        "tasks": [{"ref": "s", "type": "TEST_SLEEP", "payload": {"seconds": seconds}}],
    }
    with httpx.Client(base_url=node.url, timeout=30, trust_env=False) as client:
        r = client.post("/api/v1/pipelines", json=body)
        r.raise_for_status()
        return str(r.json()["pipeline_id"])


@pytest.fixture(scope="module")
def pipelines(node: ServedNode) -> dict[str, str]:
    made = {"lecture": create(node, "/media/Lecture_Physics.mp4", "m-lecture")}
    for i in range(FILLER):
        made[f"filler-{i}"] = create(node, f"/media/clip_{i:02d}.wav", f"m-{i}")
    made["podcast"] = create(node, "https://example.org/podcast/episode-7", "m-pod")
    return made


def _open(browser: Browser, url: str, locale: str, width: int, script: str = "") -> Page:
    page = web_results._open(browser, url, locale, (width, 844))
    if script:  # runs before the page's own scripts from the next load on
        page.context.add_init_script(script)
        page.reload()
        live(page)
    return page


_close = web_results._close


def _rows(page: Page) -> Any:
    return page.locator(".history-table tbody tr[data-pipeline-id]")


@pytest.mark.parametrize(
    ("locale", "width"), [("en-US", 1366), ("zh-CN", 390)], ids=["en-1366", "zh-390"]
)
def test_search_finds_a_pipeline_by_its_file_name(
    chromium: Browser, node: ServedNode, pipelines: dict[str, str], locale: str, width: int
) -> None:
    page = _open(chromium, f"{node.url}/history", locale, width)
    expect(_rows(page)).to_have_count(25, timeout=WAIT_MS)
    page.locator("#history-search").fill("lecture_PHYS")
    expect(_rows(page)).to_have_count(1, timeout=WAIT_MS)
    row = _rows(page).first
    assert row.get_attribute("data-pipeline-id") == pipelines["lecture"]
    expect(row.locator("a.history-link")).to_have_text("Lecture_Physics.mp4")
    assert "q=lecture_PHYS" in page.url, "the search is in the address"
    assert page.evaluate(NO_SIDEWAYS), page.evaluate(
        "[document.documentElement.scrollWidth, innerWidth]"
    )
    box = row.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    screenshot(page, f"history-{width}-{locale[:2]}")
    # a URL is found by part of it too; nothing matches an unknown name
    page.locator("#history-search").fill("example.org/podcast")
    podcast = page.locator(f".history-table tr[data-pipeline-id='{pipelines['podcast']}']")
    expect(podcast).to_be_visible(timeout=WAIT_MS)
    expect(_rows(page)).to_have_count(1)
    page.locator("#history-search").fill("no-such-file")
    expect(page.locator(".history-table tbody tr.empty")).to_be_visible(timeout=WAIT_MS)
    # the row opens its pipeline
    page.locator("#history-search").fill("Lecture_Physics")
    expect(_rows(page)).to_have_count(1, timeout=WAIT_MS)
    _rows(page).first.locator("a.history-link").click()
    expect(page).to_have_url(f"{node.url}/pipelines/{pipelines['lecture']}", timeout=WAIT_MS)
    expect(page.locator("h1")).to_have_text("Lecture_Physics.mp4", timeout=WAIT_MS)
    _close(page)


def test_pages_go_forward_and_back_and_filters_combine(
    chromium: Browser, node: ServedNode, pipelines: dict[str, str]
) -> None:
    page = _open(chromium, f"{node.url}/history?q=/media/clip_", "en-US", 1366)
    expect(_rows(page)).to_have_count(25, timeout=WAIT_MS)
    first = _rows(page).evaluate_all("rows => rows.map(r => r.dataset.pipelineId)")
    # newest first: the last filler made is on top
    assert first[0] == pipelines[f"filler-{FILLER - 1}"]
    expect(page.locator("#history-prev")).to_be_disabled()
    page.locator("#history-next").click()
    expect(_rows(page)).to_have_count(FILLER - 25, timeout=WAIT_MS)
    second = _rows(page).evaluate_all("rows => rows.map(r => r.dataset.pipelineId)")
    assert second == [pipelines["filler-0"]] and not set(first) & set(second)
    expect(page.locator("#history-next")).to_be_disabled()
    expect(page.locator("#history-page")).to_have_text("Page 2")
    page.locator("#history-prev").click()
    expect(page.locator("#history-page")).to_have_text("Page 1", timeout=WAIT_MS)
    assert _rows(page).evaluate_all("rows => rows.map(r => r.dataset.pipelineId)") == first
    # a status filter on top of the search (every pipeline here completed)
    page.locator("select[name=status]").select_option("failed")
    expect(page.locator(".history-table tbody tr.empty")).to_be_visible(timeout=WAIT_MS)
    page.locator("select[name=status]").select_option("completed")
    expect(_rows(page)).to_have_count(25, timeout=WAIT_MS)
    assert "status=completed" in page.url
    # the task list, searched through its pipeline's file
    page.locator(".seg-toggle button[data-kind=tasks]").click()
    page.locator("#history-search").fill("Lecture_Physics")
    tasks = page.locator(".history-table tbody tr[data-task-id]")
    expect(tasks).to_have_count(1, timeout=WAIT_MS)
    expect(tasks.first.locator("a.history-link")).to_have_attribute(
        "href", f"/pipelines/{pipelines['lecture']}"
    )
    _close(page)


def test_a_pipeline_that_ends_shows_a_browser_notification(
    chromium: Browser, node: ServedNode, pipelines: dict[str, str]
) -> None:
    page = _open(chromium, f"{node.url}/history", "zh-CN", 1366, FAKE_NOTIFICATION)
    expect(page.locator("#notify-toggle")).to_have_attribute("data-permission", "granted")
    pipeline_id = create(node, "/media/Notify_Me.mp4", "m-notify", seconds=0.3)
    page.wait_for_function("window.__notes.length > 0", timeout=WAIT_MS)
    notes = page.evaluate("window.__notes")
    assert notes == [{"title": "流水线已完成：Notify_Me.mp4", "body": "Notify_Me.mp4 · custom"}], (
        json.dumps(notes, ensure_ascii=False),
        pipeline_id,
    )
    _close(page)
