"""The settings page, upload and pick, and the charts in a real Chromium against a real node:
the settings page changes `max_workers` and worker.yaml keeps its comments; a file uploaded
from the browser runs through `transcribe_long` (real ffmpeg + faster-whisper) to a transcript;
a file picked from a media folder becomes the source; an upload cut off mid-way leaves no
partial file; the charts draw the tasks that ran."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fredica.cli.demo import free_port
from tests.media_support import make_media

from .conftest import FAST_CONFIG, ServedNode, wait_until
from .test_web import WAIT_MS, expect, live, screenshot
from .test_web_results import _api, _close, _open, chromium

try:
    from playwright.sync_api import Browser
except ImportError:  # pragma: no cover - reported by the chromium fixture
    Browser = Any  # type: ignore[misc,assignment]

__all__ = ["chromium"]  # the browser fixture, shared with the result view's tests

pytestmark = pytest.mark.slow

NO_SIDEWAYS = "document.documentElement.scrollWidth <= window.innerWidth"
COMMENT = "# test node: short timings so the real state machine runs in seconds"
TERMINAL = ("completed", "failed", "cancelled", "partial_failed")


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("media")
    make_media(folder)
    (folder / "lectures").mkdir()
    return folder


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, media: Path) -> Iterator[ServedNode]:
    root = tmp_path_factory.mktemp("settings-node")
    config = root / "worker.yaml"
    config.write_text(
        FAST_CONFIG.format(grace=2)
        + f"media_folders: ['{media}']  # my videos\nstorage:\n  max_upload_mb: 64\n"
    )
    served = ServedNode(root / "data", config, free_port(), root / "node.log")
    served.start()
    yield served
    served.terminate()


def _wait_pipeline(node: ServedNode, pipeline_id: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data: dict[str, Any] = _api(node, "GET", f"/api/v1/pipelines/{pipeline_id}")
        if data["status"] in TERMINAL:
            return data
        time.sleep(0.5)  # polling the node's state, with a deadline
    raise AssertionError(f"pipeline {pipeline_id} did not end: {node.log.read_text()[-3000:]}")


@pytest.mark.parametrize(("locale", "width"), [("en-US", 1366), ("zh-CN", 390)])
def test_settings_page_changes_max_workers_and_keeps_comments(
    chromium: Browser, node: ServedNode, locale: str, width: int
) -> None:
    before = node.config.read_text()
    current = int(_api(node, "GET", "/api/v1/settings")["settings"][0]["value"])
    page = _open(chromium, f"{node.url}/settings", locale, (width, 844))
    field = page.locator('input[name="node.max_workers"]')
    expect(field).to_have_value(str(current), timeout=WAIT_MS)
    title = "设置" if locale == "zh-CN" else "Settings"
    expect(page.locator("h1")).to_have_text(title)
    # an invalid value: the node's message names the key and the file stays as it was
    field.fill("0")
    page.locator("#settings-save").click()
    expect(page.locator(".page-settings .dialog-error")).to_contain_text(
        "node.max_workers: must be >= 1, got 0", timeout=WAIT_MS
    )
    assert node.config.read_text() == before
    # a valid one is written, comments and all, and waits for a restart
    field.fill(str(current + 1))
    page.locator("#settings-save").click()
    notice = page.locator(".settings-restart")
    expect(notice).to_be_visible(timeout=WAIT_MS)
    expect(notice).to_have_attribute("data-keys", "node.max_workers")
    expect(page.locator('[data-key="node.max_workers"]')).to_have_attribute("data-pending", "1")
    text = node.config.read_text()
    assert f"  max_workers: {current + 1}\n" in text
    assert COMMENT in text and "# my videos" in text
    assert text.replace(f"max_workers: {current + 1}", f"max_workers: {current}") == before
    assert page.evaluate(NO_SIDEWAYS), page.evaluate(
        "[document.documentElement.scrollWidth, innerWidth]"
    )
    screenshot(page, f"settings-{width}-{locale[:2]}")
    _close(page)


def test_upload_runs_through_to_a_transcript(
    chromium: Browser, node: ServedNode, media: Path
) -> None:
    video = media / "talk.mp4"
    page = _open(chromium, f"{node.url}/processing", "en-US", (1366, 844))
    page.locator("#new-pipeline").click()
    dialog = page.locator("#new-pipeline-dialog")
    expect(dialog).to_be_visible()
    dialog.locator("select[name=template]").select_option("transcribe_long")
    dialog.locator("select[name=language]").select_option("en")
    dialog.locator("details.advanced summary").click()
    dialog.locator("textarea[name=params]").fill('{"chunk_duration_sec": 6}')
    dialog.locator("input[name=upload_file]").set_input_files(str(video))
    status = dialog.locator(".upload-status")
    expect(status).to_have_attribute("data-state", "done", timeout=WAIT_MS)
    source = dialog.locator("input[name=source]").input_value()
    uploaded = node.data_dir / "uploads" / "talk.mp4"
    assert Path(source) == uploaded.resolve()
    assert uploaded.read_bytes() == video.read_bytes()
    dialog.locator("button[type=submit]").click()
    expect(dialog).to_be_hidden(timeout=WAIT_MS)
    pipelines = _api(node, "GET", "/api/v1/pipelines")["pipelines"]
    created = next(p for p in pipelines if p["params"].get("source") == source)
    done = _wait_pipeline(node, created["id"])
    assert done["status"] == "completed", done
    merge = next(t for t in done["tasks"] if t["type"] == "MERGE_TRANSCRIPTION")
    words = " ".join(s["text"] for s in merge["result"]["segments"])
    assert "fox" in words.lower()
    page.goto(f"{node.url}/pipelines/{created['id']}")
    live(page)
    transcript = page.locator("#results .transcript")
    expect(transcript).to_contain_text(
        merge["result"]["segments"][0]["text"].strip(), timeout=WAIT_MS
    )
    # the material list names it by its file, with its duration and a badge
    page.goto(f"{node.url}/materials")
    live(page)
    card = page.locator(".material-card", has_text="talk.mp4").first
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.locator(".badge")).to_have_attribute("data-status", "completed")
    expect(card.locator(".material-duration")).to_have_text(re.compile(r"^\d+:\d\d$"))
    expect(card).to_have_attribute("href", f"/pipelines/{created['id']}")
    # the charts count what ran: tasks completed and a duration line per task type
    page.goto(f"{node.url}/charts")
    live(page)
    expect(page.locator("#chart-durations path.chart-line").first).to_be_attached(timeout=WAIT_MS)
    completed = sum(1 for t in done["tasks"] if t["status"] == "completed")
    series = _api(node, "GET", "/api/v1/stats/timeseries", params={"window": "1h"})
    assert sum(series["completed"]) >= completed
    assert "TRANSCRIBE_CHUNK" in series["durations_sec"]
    expect(page.locator(".charts-totals")).to_contain_text(f"completed {sum(series['completed'])}")
    screenshot(page, "charts-1366-en")
    _close(page)


def test_pick_from_a_media_folder_fills_the_source(
    chromium: Browser, node: ServedNode, media: Path
) -> None:
    page = _open(chromium, f"{node.url}/processing", "zh-CN", (390, 844))
    page.locator("#new-pipeline").click()
    dialog = page.locator("#new-pipeline-dialog")
    expect(dialog.locator("#source-pick")).to_have_text("从媒体文件夹选择…")
    dialog.locator("#source-pick").click()
    picker = page.locator("#pick-dialog")
    expect(picker).to_be_visible()
    picker.locator(".pick-dir", has_text=str(media)).click()
    expect(picker.locator(".pick-dir", has_text="lectures")).to_be_visible(timeout=WAIT_MS)
    picker.locator(".pick-file", has_text="talk.mp4").click()
    expect(picker).to_be_hidden()
    expect(dialog.locator("input[name=source]")).to_have_value(str((media / "talk.mp4").resolve()))
    box = dialog.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390
    page.keyboard.press("Escape")
    for path in ("/materials", "/charts", "/settings"):
        page.goto(f"{node.url}{path}")
        live(page)
        assert page.evaluate(NO_SIDEWAYS), (path, page.evaluate("document.body.scrollWidth"))
    screenshot(page, "nav-390-zh")
    _close(page)


def test_an_upload_cut_off_midway_leaves_no_partial_file(node: ServedNode) -> None:
    uploads = node.data_dir / "uploads"

    def names() -> list[str]:
        return sorted(p.name for p in uploads.iterdir()) if uploads.exists() else []

    before = names()
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/v1/uploads?name=cut.mp4 HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: 50000000\r\n\r\n"
        )
        sock.sendall(b"\0" * 3_000_000)
        wait_until(
            lambda: any(name.endswith(".part") for name in names()),
            10,
            "the partial file",
        )
    # the browser went away: the partial file is removed, nothing else changed
    wait_until(lambda: names() == before, 10, "the partial file to go")
    # a declared size over the limit is refused before any byte of it is read
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/v1/uploads?name=big.bin HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {65 << 20}\r\n\r\n".encode()
        )
        answer = b""
        while b"}" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b"storage.max_upload_mb" in answer
    assert names() == before
