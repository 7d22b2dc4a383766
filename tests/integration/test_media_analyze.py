"""AI_ANALYZE against local servers speaking each provider's real wire protocol (OpenAI chat
completions, Anthropic messages, Ollama /api/chat), and the local extractive backend."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from fredica.domain import errors
from fredica.executors import analyze
from tests.media_support import QuietServer, make_context

TRANSCRIPT = (
    "Today we build a home media cluster. The cluster shares transcription work between "
    "machines. A desktop with a graphics card transcribes long videos quickly. A small NAS "
    "downloads videos at night and stores them. Every machine claims the tasks it does best. "
    "When a laptop sleeps, its tasks move to another machine. The media cluster never loses "
    "work, and it never does the same work twice. Finally we summarise every video with a "
    "language model."
)
SEGMENTS = [
    {"start": 12.0 * i, "end": 12.0 * i + 10, "text": s + "."}
    for i, s in enumerate(TRANSCRIPT.rstrip(".").split(". "))
]
REPLY = {
    "summary": "A home media cluster shares transcription work.",
    "tags": ["media cluster", "transcription"],
    "chapters": [{"start_sec": 0, "title": "Intro"}, {"start_sec": 48, "title": "Failover"}],
}


class FakeProviders:
    """One server for the three protocols; records what it received."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append((self.path, dict(self.headers), body))
                if outer.status != 200:
                    self._send(outer.status, {"error": {"message": "quota exceeded"}})
                    return
                content = json.dumps(REPLY)
                if self.path == "/v1/chat/completions":
                    assert body["messages"][0]["role"] == "system"
                    self._send(200, {
                        "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": 321, "completion_tokens": 54},
                    })  # fmt: skip
                elif self.path == "/v1/messages":
                    assert self.headers["anthropic-version"] == "2023-06-01"
                    assert body["messages"][0]["role"] == "user" and "system" in body
                    self._send(200, {
                        "id": "msg_1", "type": "message", "role": "assistant",
                        "model": body["model"], "stop_reason": "end_turn",
                        "content": [{"type": "text", "text": "```json\n" + content + "\n```"}],
                        "usage": {"input_tokens": 300, "output_tokens": 50},
                    })  # fmt: skip
                elif self.path == "/api/chat":
                    assert body["stream"] is False and body["format"] == "json"
                    self._send(200, {
                        "model": body["model"], "done": True,
                        "message": {"role": "assistant", "content": content},
                        "prompt_eval_count": 310, "eval_count": 52,
                    })  # fmt: skip
                else:
                    self._send(404, {"error": "no route"})

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                if code == 429:
                    self.send_header("Retry-After", "17")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def providers() -> Iterator[FakeProviders]:
    fake = FakeProviders()
    thread = threading.Thread(target=fake.httpd.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


async def _ctx(tmp_path: Path, backend: str, config: dict[str, Any]) -> Any:
    return await make_context(
        tmp_path,
        "AI_ANALYZE",
        {"text": TRANSCRIPT, "segments": SEGMENTS, "language": "en"},
        backend=backend,
        backend_config=config,
    )


@pytest.mark.parametrize(
    ("backend", "config", "path"),
    [
        ("openai-compatible", {"endpoint": "{url}/v1", "model": "qwen2.5"}, "/v1/chat/completions"),
        ("deepseek-api", {"base_url": "{url}/v1", "api_key": "sk-test"}, "/v1/chat/completions"),
        ("anthropic-api", {"base_url": "{url}", "api_key": "sk-ant-test"}, "/v1/messages"),
        ("ollama", {"base_url": "{url}", "models": ["qwen2.5:7b"]}, "/api/chat"),
    ],
)
async def test_remote_backends_speak_their_protocol(
    tmp_path: Path, providers: FakeProviders, backend: str, config: dict[str, Any], path: str
) -> None:
    config = {
        k: v.format(url=providers.url) if isinstance(v, str) else v for k, v in config.items()
    }
    ctx = await _ctx(tmp_path, backend, config)
    result = (await analyze.AiAnalyzeExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    assert result["summary"] == REPLY["summary"] and result["tags"] == REPLY["tags"]
    assert result["chapters"][1] == {"start_sec": 48.0, "title": "Failover"}
    assert result["backend"] == backend and result["usage"]["input_tokens"] >= 300
    called, headers, body = providers.calls[-1]
    assert called == path
    user_text = body["messages"][-1]["content"]
    assert "[01:00] When a laptop sleeps" in user_text  # timed transcript for chapters
    if backend == "deepseek-api":
        assert headers["Authorization"] == "Bearer sk-test" and body["model"] == "deepseek-chat"
    if backend == "anthropic-api":
        assert headers["x-api-key"] == "sk-ant-test"


async def test_rate_limit_and_bad_key_are_classified(
    tmp_path: Path, providers: FakeProviders
) -> None:
    config = {"base_url": f"{providers.url}/v1", "api_key": "sk-test"}
    providers.status = 429
    ctx = await _ctx(tmp_path, "openai-api", config)
    with pytest.raises(errors.RateLimitedError) as limited:
        await analyze.AiAnalyzeExecutor().execute(ctx.task, ctx)
    assert limited.value.retry_after_sec == 17 and "quota exceeded" in limited.value.message
    providers.status = 401
    with pytest.raises(errors.PermanentError, match="401 unauthorized"):
        await analyze.AiAnalyzeExecutor().execute(ctx.task, ctx)
    providers.status = 500
    with pytest.raises(errors.TransientError, match="HTTP 500"):
        await analyze.AiAnalyzeExecutor().execute(ctx.task, ctx)


async def test_cloud_backend_without_key_awaits_credentials(tmp_path: Path) -> None:
    ctx = await _ctx(tmp_path, "anthropic-api", {})
    with pytest.raises(errors.AwaitingCredentialError, match="needs an API key"):
        await analyze.AiAnalyzeExecutor().execute(ctx.task, ctx)


async def test_local_extractive_needs_no_server(tmp_path: Path) -> None:
    ctx = await _ctx(tmp_path, "local-extractive", {})
    result = (await analyze.AiAnalyzeExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["backend"] == "local-extractive"
    sentences = result["summary_sentences"]
    assert 1 <= len(sentences) <= 5 and all(s in TRANSCRIPT for s in sentences)
    assert "media cluster" in result["tags"]
    assert result["chapters"] and result["chapters"][0]["start_sec"] == 0.0


async def test_the_analysis_is_written_as_summary_md_and_analysis_json(
    tmp_path: Path, providers: FakeProviders
) -> None:
    payload = {"text": TRANSCRIPT, "segments": SEGMENTS, "language": "en", "title": "Talk.mp4"}
    config = {"endpoint": f"{providers.url}/v1", "model": "qwen2.5"}
    ctx = await make_context(
        tmp_path, "AI_ANALYZE", payload, backend="openai-compatible", backend_config=config
    )
    result = (await analyze.AiAnalyzeExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    files = {key: Path(path) for key, path in result["files"].items()}
    assert set(files) == {"summary_md", "analysis_json"}
    assert {p.parent for p in files.values()} == {ctx.output_dir}, "next to its other outputs"
    summary = files["summary_md"].read_text(encoding="utf-8")
    assert summary.startswith("# Talk.mp4\n\n## Summary\n\n" + REPLY["summary"])
    assert "## Tags\n\n" + ", ".join(REPLY["tags"]) in summary
    assert "## Chapters\n\n- 00:00 " in summary and "- 00:48 Failover" in summary
    written = json.loads(files["analysis_json"].read_text(encoding="utf-8"))
    assert written == {k: v for k, v in result.items() if k != "files"}
    # an empty transcript still writes both (the result view lists them either way)
    empty = await make_context(tmp_path / "empty", "AI_ANALYZE", {"text": "  "})
    empty_result = (await analyze.AiAnalyzeExecutor().execute(empty.task, empty)).result_json
    assert empty_result is not None
    heading = Path(empty_result["files"]["summary_md"]).read_text(encoding="utf-8")
    assert heading.startswith(f"# {empty.task.material_id or 'Analysis'}\n")
    assert "## Tags" not in heading


def test_chapter_times_read_like_the_web_page() -> None:
    assert [analyze.clock(s) for s in (0, 75.4, 600, 3725)] == [
        "00:00",
        "01:15",
        "10:00",
        "1:02:05",
    ]
