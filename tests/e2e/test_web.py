"""The web UI in a real Chromium (Debian's, driven by Playwright) against a real `fredica serve`.

Chromium comes from `scripts/install-browser-deps.sh` (Playwright cannot download its own
browser here); a missing browser is a failure that names the script, never a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.cli.demo import free_port, local_http_server
from tests.cluster.support import make_cluster

from .conftest import ServedNode

try:
    from playwright.sync_api import Browser, Page, Playwright, sync_playwright
    from playwright.sync_api import expect as pw_expect
except ImportError:  # pragma: no cover - reported by the fixture below
    sync_playwright = None  # type: ignore[assignment]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"
VIEWPORT = {"width": 1400, "height": 900}
WAIT_MS = 15_000  # upper bound for a condition to appear; polls return as soon as it holds


# --- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if sync_playwright is None:
        pytest.fail("the Python package playwright is missing: pip install -e '.[dev]'")
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: run scripts/install-browser-deps.sh")
    # launch() gives every run a fresh temporary profile (user data dir).
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Callable[..., Page]]:
    contexts = []

    def opener(url: str, locale: str = "zh-CN", init_script: str | None = None) -> Page:
        context = browser.new_context(locale=locale, viewport=VIEWPORT)
        contexts.append(context)
        if init_script:
            context.add_init_script(init_script)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.js_errors = errors  # type: ignore[attr-defined]
        page.goto(url)
        live(page)
        return page

    yield opener
    for context in contexts:
        for page in context.pages:
            # Uncaught script errors fail the test that caused them.
            assert not page.js_errors, page.js_errors  # type: ignore[attr-defined]
        context.close()


# --- helpers -------------------------------------------------------------------------------------
def expect(target: Any) -> Any:
    return pw_expect(target)


def live(page: Page) -> None:
    """Wait until the page's event stream delivered its snapshot."""
    expect(page.locator("#conn")).to_have_attribute("data-state", "live", timeout=WAIT_MS)


def screenshot(page: Page, name: str) -> None:
    """Save to test-artifacts/; `make screenshots` also refreshes the README's copies."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.evaluate("document.getElementById('toasts')?.remove()")  # transient notices
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("FREDICA_UPDATE_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_SCREENSHOTS / f"{name}.png")


def wait_for(fn: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def api(node: ServedNode, method: str, path: str, **kwargs: Any) -> Any:
    with node.client() as client:
        response = client.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()


def fill_new_pipeline(page: Page, tasks: dict[str, Any], **fields: str) -> None:
    page.locator("#new-pipeline").click()
    dialog = page.locator("#new-pipeline-dialog")
    expect(dialog).to_be_visible()
    dialog.locator("select[name=template]").select_option("custom")
    dialog.locator("textarea[name=tasks]").fill(json.dumps(tasks))
    for name, value in fields.items():
        field = dialog.locator(f"[name={name}]")
        if field.evaluate("el => el.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)


def fan_out(seconds: float) -> dict[str, Any]:
    """probe -> b1, b2, b3 (long, pausable) -> final."""
    return {
        "tasks": [
            {"ref": "probe", "type": "TEST_SLEEP", "payload": {"seconds": 0.2}},
            *[
                {
                    "ref": f"b{i}",
                    "type": "TEST_SLEEP",
                    "depends_on": ["probe"],
                    "payload": {"seconds": seconds},
                }
                for i in (1, 2, 3)
            ],
            {
                "ref": "final",
                "type": "TEST_SLEEP",
                "depends_on": ["b1", "b2", "b3"],
                "payload": {"seconds": 0.1},
            },
        ]
    }


def progress(page: Page, task_id: str) -> int:
    bar = page.locator(f"tr[data-task-id='{task_id}'] .bar")
    return int(bar.get_attribute("data-progress") or 0)


# --- tests ---------------------------------------------------------------------------------------
def test_pipeline_from_dialog_live_progress_pause_resume_dag_and_cancel(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    served.start()
    page = open_page(f"{served.url}/processing")
    page.evaluate("window.__sameDocument = true")

    # Given a pipeline created from the dialog
    fill_new_pipeline(page, fan_out(seconds=30), material_id="BV1GJ411x7h7", language="zh")
    page.locator("#new-pipeline-dialog button[type=submit]").click()
    expect(page.locator("#new-pipeline-dialog")).to_be_hidden()
    pipeline = api(served, "GET", "/api/v1/pipelines")["pipelines"][0]
    assert pipeline["material_id"] == "BV1GJ411x7h7"
    refs = pipeline["params"]["refs"]
    b1 = refs["b1"]
    row = page.locator(f"tr[data-task-id='{b1}']")

    # Then its progress moves on the page without a reload
    expect(row).to_have_attribute("data-status", "running", timeout=WAIT_MS)
    first = progress(page, b1)
    wait_for(lambda: progress(page, b1) > first, "the progress bar to move")
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator("[data-counter=running] .counter-value")).to_have_text("2")
    expect(page.locator("[data-counter=completed] .counter-value")).to_have_text("1")

    # When the task is paused, it shows as paused and stops advancing
    row.locator("button[data-action=pause]").click()
    expect(row).to_have_attribute("data-status", "paused", timeout=WAIT_MS)
    expect(row.locator(".badge")).to_have_text("已暂停")
    assert api(served, "GET", f"/api/v1/tasks/{b1}")["is_paused"] is True
    expect(row.locator("button[data-action=resume]")).to_be_visible()
    time.sleep(0.4)  # a progress flush already on its way may still land
    held = api(served, "GET", f"/api/v1/tasks/{b1}")["progress"]
    time.sleep(0.5)
    assert api(served, "GET", f"/api/v1/tasks/{b1}")["progress"] == held

    # And resume brings it back to running
    row.locator("button[data-action=resume]").click()
    expect(row).to_have_attribute("data-status", "running", timeout=WAIT_MS)
    wait_for(lambda: api(served, "GET", f"/api/v1/tasks/{b1}")["progress"] > held, "progress")
    # A waiting task cannot be paused: its row offers skip and cancel instead.
    waiting = page.locator(f"tr[data-task-id='{refs['final']}']")
    expect(waiting).to_have_attribute("data-status", "waiting")
    expect(waiting.locator("button[data-action=pause]")).to_be_hidden()
    expect(waiting.locator("button[data-action=skip]")).to_be_visible()
    screenshot(page, "processing")

    # Filters: running only, then by type and by pipeline (the list is re-read from the API)
    rows = page.locator("table.tasks-table tbody tr[data-task-id]")
    page.locator("button[data-filter=running]").click()
    expect(rows).to_have_count(2)
    page.locator("button[data-filter=failed]").click()
    expect(rows).to_have_count(0)
    page.locator("button[data-filter=all]").click()
    page.locator("select.filter-type").select_option("TEST_FAIL")
    expect(rows).to_have_count(0)
    page.locator("select.filter-type").select_option("TEST_SLEEP")
    page.locator("select.filter-pipeline").select_option(pipeline["id"])
    expect(rows).to_have_count(5)

    # The DAG view: one node per task, coloured by status, edges from depends_on
    row.locator("td.col-pipeline a").click()
    page.wait_for_url(f"**/pipelines/{pipeline['id']}")
    nodes = page.locator("svg.dag g.dag-node")
    expect(nodes).to_have_count(5)
    expect(page.locator("svg.dag path.edge")).to_have_count(6)
    dag_node = page.locator(f"svg.dag g.dag-node[data-task-id='{refs['probe']}']")
    expect(dag_node).to_have_attribute("data-status", "completed")
    page.locator(f"svg.dag g.dag-node[data-task-id='{b1}']").click()
    expect(page.locator(f".detail-head[data-task-id='{b1}']")).to_be_visible()
    expect(page.locator(".timeline li[data-event=paused]")).to_have_count(1)
    expect(page.locator(".timeline li[data-event=resumed]")).to_have_count(1)
    # The probe's result is shown as JSON
    dag_node.click()
    expect(page.locator("pre.result-view")).to_contain_text('"slept": 0.2')
    page.locator(f"svg.dag g.dag-node[data-task-id='{b1}']").click()
    expect(page.locator(f"svg.dag g.dag-node[data-task-id='{b1}']")).to_have_class(
        "dag-node st-running selected"
    )
    screenshot(page, "dag")

    # Cancel the pipeline from its page
    page.once("dialog", lambda d: d.accept())
    page.locator("#cancel-pipeline").click()
    expect(page.locator(".pipeline-status")).to_have_attribute(
        "data-status", "cancelled", timeout=WAIT_MS
    )
    for ref in ("b1", "b2", "b3", "final"):
        node = page.locator(f"svg.dag g.dag-node[data-task-id='{refs[ref]}']")
        expect(node).to_have_attribute("data-status", "cancelled", timeout=WAIT_MS)
    assert api(served, "GET", f"/api/v1/pipelines/{pipeline['id']}")["status"] == "cancelled"

    # Output files of a task are listed with download links (GET /files/results/...)
    out_dir = served.data_dir / "results" / refs["probe"]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text('{"words": 42}')
    page.locator(f"svg.dag g.dag-node[data-task-id='{b1}']").click()
    dag_node.click()
    link = page.locator(".files a")
    expect(link).to_have_text("⬇ summary.json")
    with page.expect_download() as download:
        link.click()
    saved = download.value.path()
    assert Path(saved).read_text() == '{"words": 42}'


def test_task_log_follows_live_then_retry_and_delete_from_the_pipeline_page(
    served: ServedNode, open_page: Callable[..., Page], tmp_path: Path
) -> None:
    served.start()
    release = tmp_path / "release"
    payload = {"succeed_on": 2, "hold": 60, "release": str(release)}
    body = {"template": "custom", "tasks": [{"ref": "p", "type": "TEST_PRINT", "payload": payload}]}
    created = api(served, "POST", "/api/v1/pipelines", json=body)
    pipeline_id, task_id = created["pipeline_id"], created["tasks"]["p"]
    page = open_page(f"{served.url}/pipelines/{pipeline_id}")
    # The running task's log is shown and grows without a reload
    log = page.locator(f".task-log[data-task-id='{task_id}'] pre.log-view")
    expect(log).to_contain_text("program err 0", timeout=WAIT_MS)
    expect(log).to_contain_text("tick 1", timeout=WAIT_MS)
    expect(log).to_contain_text("tick 4", timeout=WAIT_MS)
    assert api(served, "GET", f"/api/v1/tasks/{task_id}")["status"] == "running"
    retry, delete = page.locator("#retry-pipeline"), page.locator("#delete-pipeline")
    expect(retry).to_be_hidden()
    expect(delete).to_be_hidden()

    # When the attempt fails, the whole pipeline can be retried from its page
    release.touch()
    expect(page.locator(".pipeline-status")).to_have_attribute(
        "data-status", "failed", timeout=WAIT_MS
    )
    expect(log).to_contain_text("attempt 1 printed")
    expect(retry).to_have_text("重试失败的任务")
    expect(delete).to_have_text("删除流水线")
    expect(page.locator("#cancel-pipeline")).to_be_hidden()
    retry.click()
    expect(page.locator(".pipeline-status")).to_have_attribute(
        "data-status", "completed", timeout=WAIT_MS
    )
    # the log follows the new attempt; the earlier one stays readable
    expect(log).to_contain_text("attempt 2 printed", timeout=WAIT_MS)
    attempts = page.locator(f".task-log[data-task-id='{task_id}'] select.log-attempt")
    expect(attempts.locator("option")).to_have_text(["第 1 次尝试", "第 2 次尝试"])
    attempts.select_option("1")
    expect(log).to_contain_text("attempt 1 printed")
    expect(log).not_to_contain_text("attempt 2 printed")
    screenshot(page, "task-log")

    # Delete asks first; declined, nothing happens; accepted, the page goes back to the list
    page.once("dialog", lambda d: d.dismiss())
    delete.click()
    assert api(served, "GET", f"/api/v1/pipelines/{pipeline_id}")["status"] == "completed"
    page.once("dialog", lambda d: d.accept())
    delete.click()
    page.wait_for_url("**/processing")
    with served.client() as client:
        assert client.get(f"/api/v1/pipelines/{pipeline_id}").status_code == 404
    assert not (served.data_dir / "logs" / "tasks" / task_id).exists()


def test_lists_load_more_pages_with_the_cursor(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    served.start()
    # 23 pipelines of 10 quick tasks: more than one page of each list (200 tasks, 20 pipelines)
    task = {"type": "TEST_SLEEP", "payload": {"seconds": 0}}
    for i in range(23):
        tasks = [task | {"ref": f"t{j}"} for j in range(10)]
        body = {"template": "custom", "material_id": f"many-{i}", "tasks": tasks}
        api(served, "POST", "/api/v1/pipelines", json=body)
    wait_for(
        lambda: api(served, "GET", "/api/v1/status")["task_counts"]["completed"] == 230,
        "every task to complete",
        timeout=60,
    )
    every_task = {t["id"] for t in api(served, "GET", "/api/v1/tasks")["tasks"]}
    assert len(every_task) == 230

    page = open_page(f"{served.url}/processing")
    rows = page.locator("table.tasks-table tbody tr[data-task-id]")
    more_tasks = page.locator(".list-more[data-list=tasks]")
    expect(rows).to_have_count(200)
    expect(more_tasks).to_be_visible()
    expect(more_tasks.locator(".small")).to_have_text("已显示 200 个任务")
    expect(more_tasks.locator("button")).to_have_text("加载更多")
    more_tasks.locator("button").click()
    expect(rows).to_have_count(230)
    expect(more_tasks).to_be_hidden()
    shown = rows.evaluate_all("rows => rows.map(r => r.dataset.taskId)")
    assert len(shown) == len(set(shown)) and set(shown) == every_task

    pipelines = page.locator("table.pipelines-table tbody tr[data-pipeline-id]")
    more_pipelines = page.locator(".list-more[data-list=pipelines]")
    expect(pipelines).to_have_count(20)
    more_pipelines.locator("button").click()
    expect(pipelines).to_have_count(23)
    expect(more_pipelines).to_be_hidden()
    expect(page.locator("select.filter-pipeline option")).to_have_count(24)

    # A filter starts over from its own first page.
    page.locator("button[data-filter=failed]").click()
    expect(rows).to_have_count(0)
    expect(more_tasks).to_be_hidden()
    page.locator("button[data-filter=all]").click()
    expect(rows).to_have_count(200)
    expect(more_tasks).to_be_visible()


def test_dialog_shows_api_errors_and_asks_before_lowering_quality(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    served.start()
    page = open_page(f"{served.url}/processing")
    dialog = page.locator("#new-pipeline-dialog")
    error = dialog.locator(".dialog-error")

    # A 4xx from the API is shown in the dialog, which stays open
    fill_new_pipeline(page, {"tasks": [{"ref": "a", "type": "NO_SUCH_TYPE"}]})
    dialog.locator("button[type=submit]").click()
    expect(error).to_contain_text("unknown task type 'NO_SUCH_TYPE'")
    expect(dialog).to_be_visible()

    # Malformed JSON never reaches the server
    dialog.locator("textarea[name=tasks]").fill("{not json")
    dialog.locator("button[type=submit]").click()
    expect(error).to_contain_text("不是有效的 JSON")

    # speed + a task type whose default is quality: the §2.7.2 confirmation first
    posted: list[dict[str, Any]] = []
    page.on(
        "request",
        lambda r: (
            posted.append(r.post_data_json)
            if r.url.endswith("/api/v1/pipelines") and r.method == "POST"
            else None
        ),
    )
    tasks = {"tasks": [{"ref": "t", "type": "TRANSCRIBE_CHUNK"}]}
    dialog.locator("textarea[name=tasks]").fill(json.dumps(tasks))
    dialog.locator("select[name=quality_mode]").select_option("speed")
    dialog.locator("button[type=submit]").click()
    quality = page.locator("#quality-dialog")
    expect(quality).to_be_visible()
    expect(quality.locator("li[data-task-type=TRANSCRIBE_CHUNK]")).to_contain_text("转录")
    expect(quality.locator("button[value=confirm]")).to_be_disabled()

    # "Go back" returns to the form without creating anything
    quality.locator("button[value=back]").click()
    expect(quality).to_be_hidden()
    expect(dialog).to_be_visible()
    assert posted == []

    # Accepting sends quality_tradeoff_acknowledged
    dialog.locator("button[type=submit]").click()
    quality.locator("input[name=accept]").check()
    with page.expect_request(lambda r: r.url.endswith("/api/v1/pipelines")) as request:
        quality.locator("button[value=confirm]").click()
    body = request.value.post_data_json
    assert body["quality_mode"] == "speed"
    assert body["quality_tradeoff_acknowledged"] is True
    assert body["tasks"] == tasks["tasks"]


def test_tools_network_test_against_a_local_server(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    served.start()
    closed = free_port()
    with local_http_server() as base:
        page = open_page(f"{served.url}/tools")
        urls = page.locator("#network-test textarea[name=urls]")
        # The default targets come from the node (network_test.DEFAULT_URLS)
        expect(urls).to_have_value(
            "https://www.baidu.com\nhttps://www.google.com"
            "\nhttps://github.com\nhttps://api.openai.com"
        )
        # The slow target first keeps the task running long enough to see it live
        urls.fill(f"{base}/slow?ms=3000\n{base}/\nhttp://127.0.0.1:{closed}/")
        page.locator("#network-test input[name=timeout_ms]").fill("1000")
        page.locator("#nettest-start").click()
        status = page.locator(".nettest-status")
        expect(status).to_have_attribute("data-status", "running", timeout=WAIT_MS)
        expect(status).to_have_attribute("data-status", "completed", timeout=WAIT_MS)
        rows = page.locator(".nettest-results tbody tr")
        expect(rows).to_have_count(3)
        expect(rows.nth(0)).to_have_attribute("data-status", "timeout")
        expect(rows.nth(1)).to_have_attribute("data-status", "ok")
        expect(rows.nth(1).locator("td").nth(1)).to_contain_text(" ms")
        expect(rows.nth(2)).to_have_attribute("data-status", "error")
        expect(rows.nth(0).locator("td").nth(0)).to_have_text(f"{base}/slow?ms=3000")
        screenshot(page, "tools")


def test_language_follows_the_browser_and_the_choice_is_remembered(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    served.start()
    page = open_page(f"{served.url}/processing", locale="en-US")
    heading = page.locator("h1")
    expect(heading).to_have_text("Processing center")
    expect(page.locator("[data-counter=waiting] .counter-label")).to_have_text("Waiting")
    page.locator("#lang-switch").click()
    expect(heading).to_have_text("处理中心")
    expect(page.locator("[data-counter=waiting] .counter-label")).to_have_text("待处理")
    expect(page.locator("nav a[data-nav=tools]")).to_contain_text("小工具")
    page.reload()
    live(page)
    expect(heading).to_have_text("处理中心")
    page.locator("#lang-switch").click()
    expect(heading).to_have_text("Processing center")

    chinese = open_page(f"{served.url}/tools", locale="zh-CN")
    expect(chinese.locator("h1")).to_have_text("小工具")


def test_recovery_dialog_after_kill9(served: ServedNode, open_page: Callable[..., Page]) -> None:
    served.start()
    created = api(
        served,
        "POST",
        "/api/v1/pipelines",
        json={
            "template": "custom",
            "tasks": [
                {"ref": "a", "type": "TEST_SLEEP", "payload": {"seconds": 60}},
                {"ref": "b", "type": "TEST_SLEEP", "depends_on": ["a"]},
                {"ref": "c", "type": "TEST_SLEEP", "depends_on": ["a"]},
            ],
        },
    )
    ids = created["tasks"]
    wait_for(
        lambda: api(served, "GET", f"/api/v1/tasks/{ids['a']}")["status"] == "running", "a runs"
    )
    page = open_page(f"{served.url}/processing")
    expect(page.locator("#recovery-dialog")).to_be_hidden()

    # The node dies without a clean shutdown and comes back on the same port and data dir
    served.kill9()
    expect(page.locator("#conn")).to_have_attribute("data-state", "offline", timeout=WAIT_MS)
    served.start()

    # The open page reconnects by itself and asks what to do with the unfinished work
    dialog = page.locator("#recovery-dialog")
    expect(dialog).to_be_visible(timeout=WAIT_MS)
    expect(dialog.locator("li[data-count=pending]")).to_contain_text("等待开始：")
    expect(dialog.locator("li[data-count=running_elsewhere]")).to_contain_text("0 个")
    dialog.locator("button[data-recovery=cancel_pending]").click()
    expect(dialog).to_be_hidden()

    for ref in ("b", "c"):
        task = api(served, "GET", f"/api/v1/tasks/{ids[ref]}")
        assert task["status"] == "cancelled", task
    state = api(served, "GET", "/api/v1/recovery")
    assert state["needed"] is False
    assert state["acknowledged"]["action"] == "cancel_pending"
    # Answered once per run: a reload does not ask again
    page.reload()
    live(page)
    time.sleep(0.3)
    expect(dialog).to_be_hidden()


def test_token_is_sent_to_the_api_and_the_event_stream(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    served.start()
    seen: list[tuple[str, str | None]] = []
    script = "localStorage.setItem('fredica.token', 'tok-123')"
    page = open_page(f"{served.url}/processing", init_script=script)
    page.on("request", lambda r: seen.append((r.url, r.headers.get("authorization"))))
    page.reload()
    live(page)
    wait_for(lambda: any("/api/v1/tasks?" in url for url, _ in seen), "the task list request")
    api_calls = [(url, auth) for url, auth in seen if "/api/v1/" in url]
    events = [url for url, _ in api_calls if "/api/v1/events" in url]
    assert events and all("token=tok-123" in url for url in events)
    assert all(auth == "Bearer tok-123" for url, auth in api_calls if "/events" not in url)


def test_event_stream_does_not_hold_up_sigterm(served: ServedNode) -> None:
    served.start()
    got_snapshot = threading.Event()
    ended = threading.Event()

    def listen() -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(30, read=60), trust_env=False) as client,
            client.stream("GET", f"{served.url}/api/v1/events") as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line == "event: snapshot":
                    got_snapshot.set()
        ended.set()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert got_snapshot.wait(10)
    started = time.monotonic()
    code = served.terminate()
    elapsed = time.monotonic() - started
    assert code == 0
    assert elapsed < 4, f"shutdown took {elapsed:.1f}s with an open event stream"
    assert ended.wait(5), "the event stream did not end"
    log = served.log.read_text()
    assert "timeout graceful shutdown exceeded" not in log


def test_drain_button_on_this_nodes_card(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    served.start()
    labels = {
        "zh-CN": ("排空", "排空中", "恢复领取", "在线"),
        "en-US": ("Drain", "draining", "Undrain", "online"),
    }
    for locale, (drain, draining, undrain, online) in labels.items():
        page = open_page(f"{served.url}/processing", locale=locale)
        card = page.locator(".node-card[data-status]").filter(has=page.locator(".tag"))
        expect(card.locator(".badge")).to_have_text(online)
        # drain: the node claims nothing new, the card says so at once
        expect(card.locator("button.node-drain")).to_have_text(drain)
        card.locator("button.node-drain").click()
        expect(card.locator(".badge")).to_have_text(draining, timeout=WAIT_MS)
        status = api(served, "GET", "/api/v1/status")
        assert status["draining"] is True and status["state"] == "draining"
        # undrain from the same button
        expect(card.locator("button.node-drain")).to_have_text(undrain)
        card.locator("button.node-drain").click()
        expect(card.locator(".badge")).to_have_text(online, timeout=WAIT_MS)
        assert api(served, "GET", "/api/v1/status")["draining"] is False


def test_this_nodes_card_says_when_the_disk_holds_work_back(
    served: ServedNode, open_page: Callable[..., Page]
) -> None:
    # a node that must keep 100,000 GiB free leaves download and ffmpeg work to others
    with served.config.open("a") as config:
        config.write("capabilities:\n  download:\n    disk_min_free_gb: 100000\n")
    served.start()
    for locale, text in (("zh-CN", "磁盘空间不足"), ("en-US", "Low disk (keeps 98 TB free)")):
        page = open_page(f"{served.url}/processing", locale=locale)
        card = page.locator(".node-card[data-status]").filter(has=page.locator(".tag"))
        stats = card.locator(".node-stats")
        expect(stats).to_contain_text(text)
        expect(stats).to_contain_text("DOWNLOAD_VIDEO")


def test_a_pipeline_whose_owner_sleeps_is_marked_waiting_for_it(
    tmp_path: Path, open_page: Callable[..., Page]
) -> None:
    """Two real nodes; a's pipeline is running when a is suspended (SIGSTOP, as a laptop's
    sleep): b's page marks the pipeline "waiting for owner", with how long a has been silent
    and when a peer takes it over (the default originator_wait_sec, 30 min); when a wakes the
    mark goes away."""
    with make_cluster(tmp_path, "ab") as cluster:
        cluster.start_some("ab")
        a, b = cluster.nodes["a"], cluster.nodes["b"]
        hold = {
            "ref": "hold",
            "type": "TEST_SLEEP",
            "payload": {"seconds": 120},
            "affinity": {"kind": "HARD", "node_id": cluster.ids["a"]},
        }
        pid = api(a, "POST", "/api/v1/pipelines", json={"template": "custom", "tasks": [hold]})[
            "pipeline_id"
        ]

        def replicated() -> bool:
            with b.client() as client:
                answer = client.get(f"/api/v1/pipelines/{pid}")
            return answer.status_code == 200 and answer.json()["status"] == "running"

        wait_for(replicated, "b's replica of a's running pipeline", 30)
        page = open_page(f"{b.url}/processing", locale="en-US")
        row = page.locator(f"table.pipelines-table tr[data-pipeline-id='{pid}']")
        expect(row.locator(".replica-badge")).to_be_visible(timeout=WAIT_MS)
        expect(row.locator(".waiting-badge")).to_be_hidden()
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            waiting = row.locator(".waiting-badge")
            # the mark comes with the next cluster panel (an idle stream: every 15 s)
            expect(waiting).to_have_text(
                re.compile(r"^waiting for owner · offline \d+ s of 30 min$"), timeout=2 * WAIT_MS
            )
            with b.client() as client:
                mark = client.get(f"/api/v1/pipelines/{pid}").json()["replica"]["waiting"]
            assert mark["wait_sec"] == 1800 and mark["silent_sec"] >= 0
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        expect(row.locator(".waiting-badge")).to_be_hidden(timeout=2 * WAIT_MS)


def test_a_peers_pipeline_shows_with_its_owner_as_a_read_only_replica(
    tmp_path: Path, open_page: Callable[..., Page]
) -> None:
    """Two real nodes: a pipeline of a's, one task running on a, one that ran on b (HARD
    affinity) and left a file there. b's UI lists it with owner a, a replica badge and its
    actions disabled; output files are listed by the node that ran the task and linked from
    the other; a change made on a reaches b's open page."""
    with make_cluster(tmp_path, "ab") as cluster:
        for name in "ab":  # distinct hostnames: both nodes run on this machine
            config = cluster.nodes[name].config
            config.write_text(
                config.read_text().replace("node:\n", f"node:\n  hostname: node-{name}\n", 1)
            )
        cluster.start_some("ab")
        a, b = cluster.nodes["a"], cluster.nodes["b"]
        ids = cluster.ids
        tasks = [
            {
                "ref": "hold",
                "type": "TEST_SLEEP",
                "payload": {"seconds": 60},
                "affinity": {"kind": "HARD", "node_id": ids["a"]},
            },
            {
                "ref": "print",
                "type": "TEST_PRINT",
                "payload": {"lines": 1},
                "affinity": {"kind": "HARD", "node_id": ids["b"]},
            },
        ]
        body = {"template": "custom", "material_id": "cluster-ui", "tasks": tasks}
        pid = api(a, "POST", "/api/v1/pipelines", json=body)["pipeline_id"]

        def replicated() -> dict[str, Any] | None:
            with b.client() as client:
                answer = client.get(f"/api/v1/pipelines/{pid}")
            if answer.status_code == 404:
                return None  # b has not pulled a's rows yet
            answer.raise_for_status()
            data = answer.json()
            by_ref = {"print" if t["type"] == "TEST_PRINT" else "hold": t for t in data["tasks"]}
            done = (
                by_ref["print"]["status"] == "completed" and by_ref["hold"]["status"] == "running"
            )
            return by_ref if done and data["replica"] else None

        by_ref = wait_for(replicated, "b's replica: print completed on b, hold running on a", 30)
        hold, printed = by_ref["hold"]["id"], by_ref["print"]["id"]
        assert by_ref["print"]["claimed_by"] == ids["b"]

        # --- b's processing page: the whole cluster, a's rows marked as replicas ------------
        page = open_page(f"{b.url}/processing", locale="zh-CN")
        row = page.locator(f"table.pipelines-table tr[data-pipeline-id='{pid}']")
        expect(row.locator(".col-owner .owner-name")).to_have_text("node-a", timeout=WAIT_MS)
        expect(row.locator(".replica-badge")).to_have_text(re.compile(r"^副本 · \d+ 秒前$"))
        cancel = row.locator("button.btn-cancel")
        expect(cancel).to_be_visible()
        expect(cancel).to_be_disabled()
        expect(cancel).to_have_attribute("title", re.compile(f"node-a.*{re.escape(a.url)}"))
        hold_row = page.locator(f"table.tasks-table tr[data-task-id='{hold}']")
        expect(hold_row.locator(".col-owner .owner-name")).to_have_text("node-a")
        expect(hold_row.locator(".col-owner .replica-badge")).to_be_visible()
        expect(hold_row.locator(".col-node")).to_have_text("node-a")
        expect(hold_row.locator("button[data-action=cancel]")).to_be_disabled()
        print_row = page.locator(f"table.tasks-table tr[data-task-id='{printed}']")
        expect(print_row.locator(".col-node")).to_have_text("本机")
        expect(page.locator("th.col-owner").first).to_be_visible()
        # the nodes panel: both nodes, scores on the capabilities, this node's outbox
        expect(page.locator(".node-card")).to_have_count(2)
        me = page.locator(f".node-card[data-node-id='{ids['b']}']")
        expect(me.locator(".node-stats")).to_contain_text("待送达所有者的结果 0 个")
        peer = page.locator(f".node-card[data-node-id='{ids['a']}']")
        expect(peer.locator(".node-stats")).to_contain_text("最后心跳")
        expect(peer.locator(".node-stats")).to_contain_text("磁盘剩余")  # reported by a itself
        expect(peer.locator(".chip .chip-score").first).to_have_text(re.compile(r"^\d+$"))
        screenshot(page, "cluster-processing")

        # --- b's page of the pipeline: read-only, owner and executor per task ----------------
        row.locator("a[data-link]").click()
        expect(page.locator(".pipeline-owner .owner-name")).to_have_text("node-a")
        expect(page.locator(".pipeline-owner .owner-link")).to_have_attribute(
            "href", f"{a.url}/pipelines/{pid}"
        )
        expect(page.locator("#cancel-pipeline")).to_be_visible()
        expect(page.locator("#cancel-pipeline")).to_be_disabled()
        expect(page.locator("#cancel-pipeline")).to_have_attribute("title", re.compile("node-a"))
        dag = page.locator(".dag-node")
        expect(dag.filter(has=page.locator(f"[data-node='{ids['a']}']"))).to_have_count(1)
        expect(page.locator(f"g.dag-node[data-task-id='{printed}'] .dag-executor")).to_have_text(
            "执行: 本机"
        )
        expect(page.locator(f"g.dag-node[data-task-id='{hold}'] .dag-executor")).to_have_text(
            "执行: node-a"
        )
        page.locator(f"g.dag-node[data-task-id='{hold}']").click()
        detail = page.locator(".task-detail")
        expect(detail.locator(".detail-head")).to_have_attribute("data-task-id", hold)
        expect(detail.locator("button[data-action=cancel]")).to_be_disabled()
        expect(detail.locator(".files-remote")).to_contain_text("node-a")
        expect(detail.locator(".files-remote a")).to_have_attribute(
            "href", f"{a.url}/pipelines/{pid}?task={hold}"
        )
        # the task that ran here: its file is listed here
        page.locator(f"g.dag-node[data-task-id='{printed}']").click()
        expect(detail.locator(".detail-head")).to_have_attribute("data-task-id", printed)
        expect(detail.locator("ul.files a")).to_have_text("⬇ printed.txt")
        # its events, as the owner a keeps them, and its log (kept here) show on b's page
        expect(detail.locator(".timeline li[data-event=claimed]")).to_have_count(1)
        expect(detail.locator(".log-view")).to_contain_text("program out 0", timeout=WAIT_MS)

        # --- a's page: the file is on b, linked to b's page of the task ------------------------
        a_page = open_page(f"{a.url}/pipelines/{pid}?task={printed}", locale="en-US")
        a_detail = a_page.locator(".task-detail")
        expect(a_detail.locator(".detail-head")).to_have_attribute("data-task-id", printed)
        expect(a_detail.locator(".files-remote")).to_contain_text("node-b")
        link = a_detail.locator(".files-remote a")
        expect(link).to_have_attribute("href", f"{b.url}/pipelines/{pid}?task={printed}")
        # and its log, kept by b, shows on a's page (a reads it from b)
        expect(a_detail.locator(".log-view")).to_contain_text("program out 0", timeout=WAIT_MS)
        expect(a_page.locator("#cancel-pipeline")).to_be_enabled()
        expect(a_page.locator(".pipeline-owner .owner-name")).to_have_text("this node")
        expect(a_page.locator(".pipeline-owner .replica-badge")).to_have_count(0)

        # --- a change on a reaches b's open page (b pulls a's rows, the page reads them) ------
        api(a, "POST", f"/api/v1/pipelines/{pid}/cancel")
        expect(page.locator(".pipeline-status")).to_have_attribute(
            "data-status", "cancelled", timeout=WAIT_MS
        )
        screenshot(page, "cluster-replica-pipeline")

        # --- b's open lists follow a's new pipelines, and page by offset (scope=cluster) ------
        page.locator("a.back").click()
        rows = page.locator("table.pipelines-table tbody tr[data-pipeline-id]")
        expect(rows).to_have_count(1)
        quick = [{"ref": "q", "type": "TEST_SLEEP", "payload": {"seconds": 0}}]
        for _ in range(20):
            api(a, "POST", "/api/v1/pipelines", json={"template": "custom", "tasks": quick})
        more = page.locator(".list-more[data-list=pipelines]")
        expect(rows).to_have_count(20, timeout=WAIT_MS)  # one page; no reload of the page
        expect(more).to_be_visible()
        more.locator("button").click()
        expect(rows).to_have_count(21)
        expect(more).to_be_hidden()
        expect(page.locator(f"tr[data-pipeline-id='{pid}'] .replica-badge")).to_be_visible()
