"""Watch folders with real `fredica serve` processes: a file copied in slowly becomes exactly one
pipeline, started after the copy ended; a restart does not make a second; a second node watching
the same share does not duplicate it; a removed file is shown as gone."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from fredica.cli.demo import free_port
from tests.cluster.support import get, make_cluster
from tests.e2e.conftest import FAST_CONFIG, ServedNode, wait_until
from tests.e2e.test_web import WAIT_MS, expect, screenshot
from tests.e2e.test_web_results import _close, _open, chromium

try:
    from playwright.sync_api import Browser
except ImportError:  # pragma: no cover - reported by the chromium fixture
    Browser = Any  # type: ignore[misc,assignment]

__all__ = ["chromium"]  # the browser fixture
NO_SIDEWAYS = "document.documentElement.scrollWidth <= window.innerWidth"

SETTLE = 1.5  # seconds a file must stay unchanged
CHUNKS = 20  # the slow copy: 20 writes, 0.25 s apart (5 s)


def library_yaml(folder: Path, settle: float = SETTLE) -> str:
    return f"""
libraries:
  - name: share
    folder: {folder}
    template: test_read_source
    include: ["*.bin"]
    scan_interval_sec: 0.3
    settle_sec: {settle}
    inotify: true
"""


def own_pipelines(node: ServedNode) -> list[dict[str, Any]]:
    return list(get(node, "/api/v1/pipelines")["pipelines"])


def library_files(node: ServedNode) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in get(node, "/api/v1/libraries/share/files")["files"]}


def library(node: ServedNode) -> dict[str, Any]:
    return dict(get(node, "/api/v1/libraries")["libraries"][0])


def finished(node: ServedNode, pid: str) -> dict[str, Any] | None:
    data = dict(get(node, f"/api/v1/pipelines/{pid}"))
    return data if data["status"] in ("completed", "failed", "partial_failed") else None


def slow_copy(target: Path, while_writing: Any = None) -> bytes:
    """Write `target` over 5 s; `while_writing()` is called after every write."""
    content = b""
    with target.open("wb") as fh:
        for i in range(CHUNKS):
            chunk = bytes([i]) * 50_000
            fh.write(chunk)
            fh.flush()
            content += chunk
            if while_writing is not None:
                while_writing()
            time.sleep(0.25)  # the copy itself is slow: this is what is tested
    return content


def test_a_slow_copy_becomes_one_pipeline_after_it_ends_even_across_a_restart(
    tmp_path: Path,
) -> None:
    share = tmp_path / "share"
    share.mkdir()
    config = tmp_path / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2) + library_yaml(share))
    node = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log").start()
    try:
        assert library(node)["inotify"] is True

        # Given a file copied into the watched folder over 5 s
        def nothing_yet() -> None:
            assert own_pipelines(node) == [], "a pipeline started while the file was copied"

        content = slow_copy(share / "talk.bin", nothing_yet)
        copied_at = time.time()
        sha = hashlib.sha256(content).hexdigest()

        # Then exactly one pipeline, created after the copy ended, read the whole file
        rows = wait_until(lambda: own_pipelines(node), 20, "the file's pipeline")
        assert len(rows) == 1
        pipeline = rows[0]
        assert pipeline["created_at"] >= copied_at
        assert pipeline["material_id"] == f"lib-{sha[:32]}"
        done = wait_until(lambda: finished(node, pipeline["id"]), 30, "the pipeline to end")
        assert done["status"] == "completed"
        assert done["tasks"][0]["result"]["sha256"] == sha
        assert done["tasks"][0]["result"]["size"] == len(content)
        assert library_files(node)["talk.bin"]["pipeline_id"] == pipeline["id"]

        # When the node restarts, then it does not make a second pipeline of the file
        assert node.terminate() == 0
        restarted_at = time.time()
        node.start()
        wait_until(
            lambda: (library(node)["last_scan_at"] or 0) > restarted_at, 20, "a scan after restart"
        )
        scan = node.cli("library", "rescan", "share")
        assert "1 file(s) found, 0 taken" in scan.stdout, scan.stdout
        assert [p["id"] for p in own_pipelines(node)] == [pipeline["id"]]
        listed = node.cli("library", "list")
        assert "share" in listed.stdout and "1 queued" in listed.stdout, listed.stdout

        # When the file is removed, then it is shown as gone
        (share / "talk.bin").unlink()
        wait_until(
            lambda: library_files(node)["talk.bin"]["status"] == "gone", 20, "the file to be gone"
        )
        shown = node.cli("library", "files", "share")
        assert "talk.bin" in shown.stdout and "gone" in shown.stdout, shown.stdout
        history = node.cli("library", "files", "share", "--history").stdout
        events = [line.split("│")[3].strip() for line in history.splitlines() if "talk.bin" in line]
        assert events == ["new", "gone"], history
        file_id = library_files(node)["talk.bin"]["id"]
        refused = node.cli("library", "reprocess", "share", file_id, check=False)
        assert refused.returncode == 1
        assert "gone" in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
        assert [p["id"] for p in own_pipelines(node)] == [pipeline["id"]]
    finally:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()


def test_a_second_node_watching_the_same_share_does_not_duplicate(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    # b's node id is the lower one: once it has joined, it is the library's watcher
    ids = {"a": "node-z", "b": "node-b"}

    def configure(name: str, text: str) -> str:
        return text.replace("node:\n", f"node:\n  id: {ids[name]}\n", 1) + library_yaml(share)

    with make_cluster(tmp_path, "ab", configure=configure) as cluster:
        a, b = cluster.nodes["a"], cluster.nodes["b"]
        # Given a alone, watching the share: it processes a file
        cluster.start("a")
        (share / "one.bin").write_bytes(b"first file")
        first = wait_until(lambda: own_pipelines(a), 20, "a's pipeline of one.bin")
        assert len(first) == 1
        # When b joins, watching the same share
        cluster.start_some("b")
        wait_until(
            lambda: library(a)["watcher"] == library(b)["watcher"] == ids["b"],
            20,
            "both to agree that b watches the share",
        )
        # Then b finds a's pipeline of one.bin (its replica) instead of making its own
        row = wait_until(
            lambda: (f := library_files(b).get("one.bin")) and f["pipeline_id"] and f,
            20,
            "b to record one.bin",
        )
        assert row["pipeline_id"] == first[0]["id"]
        # And a file that arrives now is processed once, by the watcher, not by a
        (share / "two.bin").write_bytes(b"second file")
        second = wait_until(lambda: own_pipelines(b), 20, "b's pipeline of two.bin")
        assert len(second) == 1
        wait_until(
            lambda: (library_files(a).get("two.bin") or {}).get("pipeline_id") == second[0]["id"],
            20,
            "a to see b's pipeline of two.bin",
        )
        assert library_files(a)["two.bin"]["status"] == "watched_elsewhere"
        rescanned = get(b, "/api/v1/libraries")  # one more look on both: still one each
        assert rescanned["libraries"][0]["counts"]["queued"] == 2
        assert [p["id"] for p in own_pipelines(a)] == [first[0]["id"]]
        assert [p["id"] for p in own_pipelines(b)] == [second[0]["id"]]


@pytest.mark.slow
@pytest.mark.parametrize(("locale", "width"), [("en-US", 1366), ("zh-CN", 390)])
def test_the_libraries_page_shows_files_and_processes_one_again(
    chromium: Browser, tmp_path: Path, locale: str, width: int
) -> None:
    share = tmp_path / "share"
    share.mkdir()
    (share / "clip.bin").write_bytes(b"clip")
    config = tmp_path / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2) + library_yaml(share, settle=0.3))
    node = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log").start()
    try:
        first = wait_until(lambda: own_pipelines(node), 20, "the file's pipeline")
        wait_until(lambda: finished(node, first[0]["id"]), 30, "the pipeline to end")
        (share / "gone.bin").write_bytes(b"soon gone")
        wait_until(lambda: len(own_pipelines(node)) == 2, 20, "the second file's pipeline")
        (share / "gone.bin").unlink()
        wait_until(lambda: library_files(node)["gone.bin"]["status"] == "gone", 20, "gone")
        page = _open(chromium, f"{node.url}/libraries", locale, (width, 844))
        zh = locale == "zh-CN"
        expect(page.locator("h1")).to_have_text(
            "媒体库（监视文件夹）" if zh else "Libraries (watch folders)"
        )
        card = page.locator('.library-card[data-library="share"]')
        clip = card.locator('tr[data-path="clip.bin"]')
        expect(clip).to_have_attribute("data-status", "queued", timeout=WAIT_MS)
        expect(clip.locator(".badge")).to_have_text("已处理" if zh else "processed")
        expect(clip.locator("a")).to_have_attribute("href", f"/pipelines/{first[0]['id']}")
        gone = card.locator('tr[data-path="gone.bin"]')
        expect(gone.locator(".badge")).to_have_text("已消失" if zh else "gone")
        expect(gone.locator('[data-action="reprocess"]')).to_have_count(0)
        # "Process again": a new pipeline of the same file, linked from its row
        clip.locator('[data-action="reprocess"]').click()
        wait_until(lambda: len(own_pipelines(node)) == 3, 20, "the new pipeline")
        newest = library_files(node)["clip.bin"]["pipeline_id"]
        assert newest != first[0]["id"]
        expect(clip.locator("a")).to_have_attribute("href", f"/pipelines/{newest}", timeout=WAIT_MS)
        # "Scan now" answers with what the scan did
        card.locator('[data-action="rescan"]').click()
        expect(page.locator(".toast").last).to_contain_text(
            "已扫描 share" if zh else "Scanned share", timeout=WAIT_MS
        )
        assert page.evaluate(NO_SIDEWAYS), page.evaluate(
            "[document.documentElement.scrollWidth, innerWidth]"
        )
        screenshot(page, f"libraries-{width}-{locale[:2]}")
        _close(page)
    finally:
        node.terminate()
