"""The result view and the narrow layout in a real Chromium against a real node: a completed
`transcribe_long` pipeline (real ffmpeg + faster-whisper on generated speech) opened at 1366 and
390 px in English and Chinese shows its transcript, summary and download buttons without any
sideways scrolling; the queue shows file names and never clips its actions."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.cli.demo import free_port
from tests.media_support import make_media

from .conftest import FAST_CONFIG, ServedNode
from .test_web import CHROMIUM, CHROMIUM_ARGS, WAIT_MS, expect, live, screenshot

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - reported by the fixture below
    sync_playwright = None  # type: ignore[assignment]

pytestmark = pytest.mark.slow

SIZES = [(1366, 768), (390, 844)]
LOCALES = ["en-US", "zh-CN"]
HEADINGS = {
    "en-US": ("Results", "Transcript", "Summary", "Copy text"),
    "zh-CN": ("结果", "转写文本", "摘要", "复制文本"),
}
View = tuple[tuple[int, int], str]
EVERY_VIEW = pytest.mark.parametrize(
    "view",
    [(size, locale) for size in SIZES for locale in LOCALES],
    ids=[f"{size[0]}-{locale}" for size in SIZES for locale in LOCALES],
)
README_SHOTS = {(1366, "en-US"), (390, "zh-CN")}  # the views the README and docs/guide.md show
NO_SIDEWAYS = "document.documentElement.scrollWidth <= window.innerWidth"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    if sync_playwright is None:
        pytest.fail("the Python package playwright is missing: pip install -e '.[dev]'")
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: run scripts/install-browser-deps.sh")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedNode]:
    root = tmp_path_factory.mktemp("results-node")
    config = root / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2))
    served = ServedNode(root / "data", config, free_port(), root / "node.log")
    served.start()
    yield served
    served.terminate()


def _api(node: ServedNode, method: str, path: str, **kwargs: Any) -> Any:
    with httpx.Client(base_url=node.url, timeout=30, trust_env=False) as client:
        response = client.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="module")
def completed(node: ServedNode, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A transcribe_long pipeline on generated speech, run to completion."""
    _, video = make_media(tmp_path_factory.mktemp("media"))
    body = {
        "template": "transcribe_long",
        "source": str(video),
        "language": "en",
        "params": {"chunk_duration_sec": 6},
    }
    pipeline_id = _api(node, "POST", "/api/v1/pipelines", json=body)["pipeline_id"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        data = _api(node, "GET", f"/api/v1/pipelines/{pipeline_id}")
        if data["status"] in ("completed", "failed", "cancelled", "partial_failed"):
            break
        time.sleep(0.5)
    assert data["status"] == "completed", json.dumps(data, indent=1)[:4000]
    return data


def _open(browser: Browser, url: str, locale: str, size: tuple[int, int]) -> Page:
    context = browser.new_context(
        locale=locale, viewport={"width": size[0], "height": size[1]}, accept_downloads=True
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors  # type: ignore[attr-defined]
    page.goto(url)
    live(page)
    return page


def _close(page: Page) -> None:
    assert not page.js_errors, page.js_errors  # type: ignore[attr-defined]
    page.context.close()


def _transcript(data: dict[str, Any]) -> list[dict[str, Any]]:
    merge = next(t for t in data["tasks"] if t["type"] == "MERGE_TRANSCRIPTION")
    return list(merge["result"]["segments"])


@EVERY_VIEW
def test_completed_pipeline_opens_on_its_results(
    chromium: Browser, node: ServedNode, completed: dict[str, Any], view: View
) -> None:
    size, locale = view
    page = _open(chromium, f"{node.url}/pipelines/{completed['id']}", locale, size)
    results = page.locator("#results")
    expect(results).to_be_visible(timeout=WAIT_MS)
    title, transcript_head, summary_head, copy_label = HEADINGS[locale]
    expect(results.locator(".card-head h2")).to_have_text(title)
    expect(page.locator("h1")).to_have_text("talk.mp4")  # the file, not an id

    segments = _transcript(completed)
    assert segments and "fox" in " ".join(s["text"] for s in segments).lower()
    shown = results.locator(".transcript .segment")
    expect(shown).to_have_count(len(segments))
    expect(shown.first.locator(".seg-text")).to_have_text(segments[0]["text"].strip())
    expect(shown.first.locator(".seg-time")).to_have_text("00:00")
    expect(results.locator(".result-transcript h3")).to_have_text(transcript_head)
    expect(results.locator("#copy-transcript")).to_have_text(copy_label)

    analysis = next(t for t in completed["tasks"] if t["type"] == "AI_ANALYZE")["result"]
    expect(results.locator(".result-analysis h3").first).to_have_text(summary_head)
    expect(results.locator(".summary")).to_have_text(analysis["summary"].strip())
    for tag in analysis["tags"]:
        expect(results.locator(".tags")).to_contain_text(tag)

    buttons = results.locator("#downloads a.btn-download")
    names = buttons.evaluate_all("els => els.map(e => e.dataset.file)")
    assert {
        "transcript.srt",
        "transcript.vtt",
        "transcript.txt",
        "transcript.json",
        "summary.md",
        "analysis.json",
    } <= set(names), names
    # results come before the task graph, and nothing needs a sideways scroll
    order = page.evaluate(
        "document.querySelector('#results').compareDocumentPosition("
        "document.querySelector('.dag-wrap')) & Node.DOCUMENT_POSITION_FOLLOWING"
    )
    assert order
    assert page.evaluate(NO_SIDEWAYS), page.evaluate(
        "[document.documentElement.scrollWidth, innerWidth]"
    )
    for i in range(buttons.count()):
        box = buttons.nth(i).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= size[0]
    if (size[0], locale) in README_SHOTS:
        screenshot(page, f"results-{size[0]}-{locale[:2]}")
    _close(page)


def test_downloads_and_copy_give_the_transcript(
    chromium: Browser, node: ServedNode, completed: dict[str, Any]
) -> None:
    page = _open(chromium, f"{node.url}/pipelines/{completed['id']}", "en-US", SIZES[0])
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=node.url)
    expect(page.locator("#results")).to_be_visible(timeout=WAIT_MS)
    first = _transcript(completed)[0]["text"].strip()
    with page.expect_download() as info:
        page.locator("#downloads a[data-file='transcript.txt']").click()
    text = Path(info.value.path()).read_text()
    assert first in text
    summary_link = page.locator("#downloads a[data-file='summary.md']")
    expect(summary_link).to_have_count(1)
    analysis = next(t for t in completed["tasks"] if t["type"] == "AI_ANALYZE")
    # the node's file, written when the analysis completed (not one made in the browser)
    assert summary_link.get_attribute("href", timeout=WAIT_MS).startswith(
        f"/files/results/{analysis['id']}/summary.md"
    )
    with page.expect_download() as info:
        summary_link.click()
    markdown = Path(info.value.path()).read_text()
    assert markdown.startswith("# talk.mp4") and "## Summary" in markdown
    page.locator("#copy-transcript").click()
    expect(page.locator(".toast")).to_contain_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("[00:00] ") and first in copied
    _close(page)


def _sleepers(node: ServedNode) -> str:
    tasks = [{"ref": f"s{i}", "type": "TEST_SLEEP", "payload": {"seconds": 30}} for i in range(2)]
    body = {"template": "custom", "tasks": tasks}
    return str(_api(node, "POST", "/api/v1/pipelines", json=body)["pipeline_id"])


@EVERY_VIEW
def test_processing_page_fits_and_names_files(
    chromium: Browser, node: ServedNode, completed: dict[str, Any], view: View
) -> None:
    size, locale = view
    running = _sleepers(node)
    try:
        page = _open(chromium, f"{node.url}/processing", locale, size)
        queue = page.locator(".tasks-table")
        expect(queue.locator("tr[data-status=running]").first).to_be_visible(timeout=WAIT_MS)
        expect(page.locator(".pipelines-table")).to_contain_text("talk.mp4")
        merge = next(t for t in completed["tasks"] if t["type"] == "MERGE_TRANSCRIPTION")
        expect(queue.locator(f"tr[data-task-id='{merge['id']}'] .col-material")).to_have_text(
            "talk.mp4"
        )
        assert page.evaluate(NO_SIDEWAYS), page.evaluate(
            "[document.documentElement.scrollWidth, innerWidth]"
        )
        # the actions of a running task are whole: no button sticks out of the table's box
        wrap = page.locator(".queue .table-wrap")
        assert wrap.evaluate("el => el.scrollWidth <= el.clientWidth")
        edge = wrap.evaluate("el => el.getBoundingClientRect().right")
        buttons = queue.locator("tr[data-status=running] .col-actions button:visible")
        assert buttons.count() >= 2
        for i in range(buttons.count()):
            box = buttons.nth(i).bounding_box()
            assert box is not None and box["x"] + box["width"] <= edge + 0.5
        if (size[0], locale) == (390, "zh-CN"):
            screenshot(page, f"processing-{size[0]}-{locale[:2]}")
        _close(page)
    finally:
        _api(node, "POST", f"/api/v1/pipelines/{running}/cancel")


@pytest.mark.parametrize("locale", LOCALES)
def test_phone_width_dialog_and_tools_fit(chromium: Browser, node: ServedNode, locale: str) -> None:
    page = _open(chromium, f"{node.url}/processing", locale, SIZES[1])
    page.locator("#new-pipeline").click()
    dialog = page.locator("#new-pipeline-dialog")
    expect(dialog).to_be_visible()
    dialog.locator("select[name=template]").select_option("transcribe_long")
    described = "提取音频，检测语言" if locale == "zh-CN" else "Extract audio, detect the language"
    expect(dialog.locator(".template-desc")).to_contain_text(described)
    box = dialog.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= SIZES[1][0]
    assert dialog.evaluate("el => el.scrollWidth <= el.clientWidth")
    page.keyboard.press("Escape")
    page.goto(f"{node.url}/tools")
    live(page)
    expect(page.locator("#nettest-start")).to_be_visible()
    assert page.evaluate(NO_SIDEWAYS), page.evaluate(
        "[document.documentElement.scrollWidth, innerWidth]"
    )
    _close(page)


def test_failure_names_the_upstream_task_by_its_ref(chromium: Browser, node: ServedNode) -> None:
    tasks = [
        {"ref": "boom", "type": "TEST_FAIL", "payload": {"error_type": "PERMANENT"}},
        {"ref": "after", "type": "TEST_SLEEP", "depends_on": ["boom"]},
    ]
    created = _api(node, "POST", "/api/v1/pipelines", json={"template": "custom", "tasks": tasks})
    page = _open(chromium, f"{node.url}/pipelines/{created['pipeline_id']}", "en-US", SIZES[0])
    expect(page.locator(".pipeline-status")).to_have_attribute(
        "data-status", "failed", timeout=WAIT_MS
    )
    page.locator(f"svg.dag g.dag-node[data-task-id='{created['tasks']['after']}']").click()
    expect(page.locator("pre.error-view")).to_have_text(
        "upstream task boom failed", timeout=WAIT_MS
    )
    _close(page)
