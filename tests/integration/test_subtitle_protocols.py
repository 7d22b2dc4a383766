"""Cloud backends of the subtitle and speech tasks against local servers speaking their wire
protocols: OpenAI text-to-speech, Ollama chat (translation), Anthropic messages (vision), the
AcoustID lookup. The servers answer fixed content; what is checked is the request fredica sends
and how it reads the reply."""

from __future__ import annotations

import io
import json
import threading
import wave
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import numpy as np
import pytest

from fredica.domain import errors
from fredica.executors import hardsub, speech, translate, tts
from fredica.executors import subtitle_format as sf
from tests import subtitle_support as ss
from tests.media_support import QuietServer, make_context

pytestmark = pytest.mark.slow
Reply = Callable[[str, dict[str, str], bytes], tuple[int, str, bytes]]


class Server:
    def __init__(self, reply: Reply) -> None:
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.seen.append((self.path, dict(self.headers), body))
                code, kind, raw = reply(self.path, dict(self.headers), body)
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def serve() -> Iterator[Callable[[Reply], Server]]:
    started: list[Server] = []

    def start(reply: Reply) -> Server:
        server = Server(reply)
        threading.Thread(target=server.httpd.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.httpd.shutdown()
        server.httpd.server_close()


def tone_wav(seconds: float, rate: int = 24_000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


async def test_openai_tts_protocol(tmp_path: Path, serve: Callable[[Reply], Server]) -> None:
    server = serve(lambda path, headers, body: (200, "audio/wav", tone_wav(1.5)))
    ctx = await make_context(
        tmp_path,
        "GENERATE_TTS",
        {"text": "Hello there.", "voice": "nova", "speed": 1.25},
        backend=tts.OPENAI_TTS,
        backend_config={"api_key": "sk-t", "endpoint": f"{server.url}/v1", "model": "tts-1-hd"},
    )
    result = (await tts.GenerateTtsExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["duration_sec"] == pytest.approx(1.5, abs=0.05)
    path, headers, body = server.seen[0]
    sent = json.loads(body)
    assert path == "/v1/audio/speech" and headers["Authorization"] == "Bearer sk-t"
    assert sent == {
        "model": "tts-1-hd",
        "voice": "nova",
        "input": "Hello there.",
        "response_format": "wav",
        "speed": 1.25,
    }


async def test_openai_tts_without_key_awaits_credentials(tmp_path: Path) -> None:
    ctx = await make_context(tmp_path, "GENERATE_TTS", {"text": "Hi"}, backend=tts.OPENAI_TTS)
    with pytest.raises(errors.AwaitingCredentialError):
        await tts.GenerateTtsExecutor().execute(ctx.task, ctx)


async def test_ollama_translation_protocol(tmp_path: Path, serve: Callable[[Reply], Server]):
    def reply(path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        lines = json.loads(json.loads(body)["messages"][-1]["content"])
        out = [{"id": x["id"], "text": ss.to_german(x["text"])} for x in lines]
        return (
            200,
            "application/json",
            json.dumps(
                {"message": {"role": "assistant", "content": json.dumps(out)}, "eval_count": 5}
            ).encode(),
        )

    server = serve(reply)
    src = tmp_path / "a.vtt"
    src.write_text(sf.write_vtt([sf.Cue(1.0, 2.0, "good morning"), sf.Cue(3.0, 4.5, "the dog")]))
    ctx = await make_context(
        tmp_path,
        "TRANSLATE_TEXT",
        {"srt_path": str(src), "target_lang": "de"},
        backend="ollama-translate",
        backend_config={"endpoint": server.url, "model": "qwen2.5:7b"},
    )
    result = (await translate.TranslateTextExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["format"] == "vtt"
    out = sf.parse(Path(result["srt_path"]).read_text())
    assert out == [sf.Cue(1.0, 2.0, "guten Morgen"), sf.Cue(3.0, 4.5, "der Hund")]
    path, _, body = server.seen[0]
    sent = json.loads(body)
    assert path == "/api/chat" and sent["model"] == "qwen2.5:7b" and sent["stream"] is False
    assert "format" not in sent  # the reply is a JSON array, not Ollama's JSON-object mode


async def test_anthropic_vision_protocol(tmp_path: Path, serve: Callable[[Reply], Server]):
    verdict = {"has_subtitle": False}
    server = serve(
        lambda p, h, b: (
            200,
            "application/json",
            json.dumps(
                {
                    "content": [{"type": "text", "text": json.dumps(verdict)}],
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
            ).encode(),
        )
    )
    video = ss.make_video(tmp_path / "v.mp4", seconds=2)
    ctx = await make_context(
        tmp_path,
        "DETECT_HARDCODED_SUBTITLE",
        {"video_path": str(video), "sample_frames": 3},
        backend="anthropic-api",
        backend_config={"api_key": "ak", "base_url": server.url},
    )
    result = (await hardsub.DetectHardcodedSubtitleExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and result["has_subtitle"] is False and result["region"] is None
    path, headers, body = server.seen[0]
    content = json.loads(body)["messages"][0]["content"]
    assert path == "/v1/messages" and headers["x-api-key"] == "ak"
    assert [c["type"] for c in content] == ["image", "image", "image", "text"]
    assert content[0]["source"]["media_type"] == "image/png"


async def test_acoustid_lookup_protocol(tmp_path: Path, serve: Callable[[Reply], Server]):
    ss.require("fpcalc")
    found = {
        "status": "ok",
        "results": [
            {"id": "r1", "score": 0.42, "recordings": []},
            {
                "id": "r2",
                "score": 0.97,
                "recordings": [
                    {"id": "rec-1", "title": "Song Title", "artists": [{"name": "Artist Name"}]}
                ],
            },
        ],
    }
    server = serve(lambda p, h, b: (200, "application/json", json.dumps(found).encode()))
    wav = tmp_path / "s.wav"
    ss.speak("A short piece of speech to fingerprint for the lookup test.", wav)
    ctx = await make_context(
        tmp_path,
        "FINGERPRINT_AUDIO",
        {"audio_path": str(wav), "lookup_acoustid": True},
        backend=speech.ACOUSTID,
        backend_config={"api_key": "client-key", "endpoint": server.url},
    )
    result = (await speech.FingerprintAudioExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    assert result["acoustid_result"] == {
        "score": 0.97,
        "title": "Song Title",
        "artist": "Artist Name",
        "recordings": [{"id": "rec-1"}],
    }
    path, _, body = server.seen[0]
    form = parse_qs(body.decode())
    assert path == "/v2/lookup" and form["client"] == ["client-key"]
    assert form["fingerprint"] == [result["fingerprint"]] and form["meta"] == ["recordings"]


async def test_a_model_without_vision_falls_back_to_ocr(
    tmp_path: Path, serve: Callable[[Reply], Server]
) -> None:
    ss.require("tesseract")
    refusal = {"error": {"message": "this model does not support image input"}}
    server = serve(lambda p, h, b: (400, "application/json", json.dumps(refusal).encode()))
    video = ss.make_video(tmp_path / "v.mp4", seconds=2, text="SOME BURNED WORDS")
    ctx = await make_context(
        tmp_path,
        "DETECT_HARDCODED_SUBTITLE",
        {"video_path": str(video), "sample_frames": 4},
        backend="openai-compatible",
        backend_config={"endpoint": f"{server.url}/v1", "model": "text-only"},
    )
    result = (await hardsub.DetectHardcodedSubtitleExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None and len(server.seen) == 1
    assert result["detection_method"] == "ocr_fallback" and result["has_subtitle"] is True
    assert "image input" in result["vision_error"]


def test_vision_false_is_a_provider_setting() -> None:
    from fredica.config import schema as config

    cfg = config.parse_config(
        {
            "capabilities": {
                "ai_analyze": {
                    "providers": [
                        {"backend": "openai-compatible", "endpoint": "http://x/v1", "vision": False}
                    ]
                }
            }
        },
        "t",
    )
    assert cfg.capabilities.ai_analyze.providers[0].vision is False
