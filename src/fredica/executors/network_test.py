"""NETWORK_TEST: HTTP latency to a list of URLs (seed 001 Appendix A)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from fredica.domain import errors, models
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

TASK_TYPE = "NETWORK_TEST"
DEFAULT_URLS: tuple[str, ...] = (
    "https://www.baidu.com",
    "https://www.google.com",
    "https://github.com",
    "https://api.openai.com",
)
DEFAULT_TIMEOUT_MS = 5000
MAX_URLS = 50


def validate_payload(payload: dict[str, Any]) -> tuple[list[str], int]:
    """The URLs and timeout of a payload, or PayloadError naming what is wrong."""
    urls = payload.get("urls")
    if urls is None:
        urls = list(DEFAULT_URLS)
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise errors.PayloadError("urls must be a list of strings")
    if not urls:
        raise errors.PayloadError("urls must not be empty")
    if len(urls) > MAX_URLS:
        raise errors.PayloadError(f"at most {MAX_URLS} urls per test, got {len(urls)}")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise errors.PayloadError(f"not an http(s) URL: {url!r}")
    timeout_ms = payload.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise errors.PayloadError(f"timeout_ms must be a positive integer, got {timeout_ms!r}")
    return urls, timeout_ms


async def measure(client: httpx.AsyncClient, url: str, timeout_ms: int) -> dict[str, Any]:
    """One URL's result row: {url, latency_ms, status: ok|timeout|error[, error, http_status]}.

    `ok` means the server answered with a success or a redirect; an HTTP error (4xx, 5xx) is
    `error` with the status in `error`, and keeps the measured latency."""
    started = time.perf_counter()
    try:
        response = await client.get(url, timeout=timeout_ms / 1000)
    except httpx.TimeoutException:
        return {
            "url": url,
            "latency_ms": None,
            "status": "timeout",
            "error": f"timeout (>{timeout_ms}ms)",
        }
    except httpx.HTTPError as exc:
        return {
            "url": url,
            "latency_ms": None,
            "status": "error",
            "error": f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        }
    latency = round((time.perf_counter() - started) * 1000)
    row = {"url": url, "latency_ms": latency, "status": "ok", "http_status": response.status_code}
    if response.status_code >= 400:
        # the server answered (the latency is real) but refused the request
        row["status"] = "error"
        row["error"] = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    return row


class NetworkTestExecutor(TaskExecutor):
    """Tests the URLs one after another (pausable between URLs, progress per URL)."""

    task_type = TASK_TYPE
    capability = None
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        urls, timeout_ms = validate_payload(task.payload)
        results: list[dict[str, Any]] = []
        async with httpx.AsyncClient(follow_redirects=True, trust_env=False) as client:
            for index, url in enumerate(urls):
                await ctx.checkpoint()
                results.append(await measure(client, url, timeout_ms))
                ctx.progress(100 * (index + 1) / len(urls), f"{index + 1}/{len(urls)} {url}")
        return ExecuteResult({"results": results})
