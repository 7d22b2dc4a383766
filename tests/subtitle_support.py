"""Shared helpers of the subtitle and speech tests: generated videos with and without burned-in
text, timed espeak-ng speech with its true cue times, an in-process node, OCR of a frame."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import wave
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fredica.config import schema as config
from fredica.engine.worker import EngineSettings
from fredica.executors import ffmpeg
from fredica.executors import subtitle_format as sf
from fredica.node.service import Node, NodeSettings

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
SETUP = "run `make system-deps` (espeak-ng, tesseract-ocr, libchromaprint-tools, fonts-dejavu)"


def require(*tools: str) -> str:
    """ffmpeg's path; fails (never skips) naming the setup step when a tool is missing."""
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: {SETUP}")
    if not Path(FONT).is_file():
        pytest.fail(f"the DejaVu font is missing: {SETUP}")
    return ffmpeg.executable()


def run_ffmpeg(*args: str) -> None:
    exe = require()
    subprocess.run([exe, "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def make_video(out: Path, seconds: float = 6.0, text: str | None = None) -> Path:
    """A 640x360 test picture with a tone; `text` is burned in near the bottom when given."""
    vf = "format=yuv420p"
    if text:
        vf = (
            f"drawtext=fontfile={FONT}:text='{text}':fontsize=26:fontcolor=white:"
            "borderw=3:bordercolor=black:x=(w-text_w)/2:y=h*0.86," + vf
        )
    run_ffmpeg(
        "-f",
        "lavfi",
        "-i",
        f"testsrc2=size=640x360:rate=10:duration={seconds}",
        "-f",
        "lavfi",
        "-i",
        f"sine=frequency=300:duration={seconds}",
        "-vf",
        vf,
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-c:a",
        "aac",
        "-shortest",
        str(out),
    )
    return out


def speak(text: str, out: Path, voice: str = "en-us", speed: int = 150) -> float:
    """espeak-ng `text` into `out`; its duration in seconds."""
    require("espeak-ng")
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(out), text],
        check=True,
        capture_output=True,
    )
    with wave.open(str(out), "rb") as w:
        return w.getnframes() / w.getframerate()


def timed_speech(
    lines: list[tuple[str, str]], out: Path, lead: float = 1.0, pause: float = 0.8
) -> list[tuple[float, float, str, str]]:
    """Concatenate spoken lines ((voice, text)) with pauses into one 16 kHz WAV; the true
    (start, end, voice, text) of every line."""
    parts: list[Path] = []
    truth = []
    t = lead
    for i, (voice, text) in enumerate(lines):
        raw = out.with_name(f"{out.stem}_{i}_raw.wav")
        part = out.with_name(f"{out.stem}_{i}.wav")
        speak(text, raw, voice)
        # espeak-ng pads its output with silence: trim it so the cue times are the voice's
        trim = "silenceremove=start_periods=1:start_threshold=-50dB"
        run_ffmpeg("-i", str(raw), "-af", f"{trim},areverse,{trim},areverse", str(part))
        with wave.open(str(part), "rb") as w:
            length = w.getnframes() / w.getframerate()
        truth.append((round(t, 3), round(t + length, 3), voice, text))
        parts.append(part)
        t += length + pause
    inputs: list[str] = []
    for p in parts:
        inputs += ["-i", str(p)]
    chain = "".join(
        f"[{i}:a]aresample=16000,apad=pad_dur={pause}[a{i}];" for i in range(len(parts))
    )
    concat = "".join(f"[a{i}]" for i in range(len(parts)))
    run_ffmpeg(
        *inputs,
        "-filter_complex",
        f"{chain}{concat}concat=n={len(parts)}:v=0:a=1,adelay={int(lead * 1000)},"
        "aformat=sample_rates=16000:channel_layouts=mono[out]",
        "-map",
        "[out]",
        str(out),
    )
    return truth


def srt_of(truth: list[tuple[float, float, str, str]], offset: float = 0.0) -> str:
    return sf.write_srt(sf.Cue(s + offset, e + offset, text) for s, e, _, text in truth)


def ocr_text(video: Path, at: float, tmp: Path) -> str:
    """Text tesseract reads in the lower half of the frame at `at` seconds."""
    require("tesseract")
    frame = tmp / f"ocr_{at:.2f}.png"
    run_ffmpeg(
        "-ss",
        f"{at:.3f}",
        "-i",
        str(video),
        "-frames:v",
        "1",
        "-vf",
        "crop=iw:ih/2:0:ih/2,scale=iw*2:ih*2,format=gray",
        str(frame),
    )
    out = subprocess.run(
        ["tesseract", str(frame), "-", "--psm", "11"], check=True, capture_output=True, text=True
    )
    return " ".join(out.stdout.split())


def node_settings(tmp_path: Path, cfg: dict[str, Any] | None = None) -> NodeSettings:
    engine = EngineSettings(
        node_id="node-s",
        data_dir=tmp_path,
        max_workers=2,
        poll_interval=0.05,
        idle_poll_interval=0.2,
        heartbeat_interval=0.2,
        stale_after=30.0,
        reclaim_after=60.0,
        progress_flush_interval=0.05,
        shutdown_grace=5.0,
    )
    settings = NodeSettings(node_id="node-s", data_dir=tmp_path, engine=engine)
    if cfg is not None:
        settings = replace(settings, config=config.parse_config(cfg, "test"))
    return settings


async def wait_done(node: Node, pipeline_id: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = await node.get_pipeline(pipeline_id)
        if p.status.is_terminal:
            return p
        await asyncio.sleep(0.1)
    raise AssertionError(f"pipeline {pipeline_id} did not finish in {timeout}s")


async def tasks_of(node: Node, pipeline_id: str) -> list[Any]:
    return list(await node.list_tasks(pipeline_id))


def by_type(tasks: list[Any], predicate: Callable[[Any], bool] | None = None) -> dict[str, Any]:
    return {t.type: t for t in tasks if predicate is None or predicate(t)}


async def run_on_node(
    tmp_path: Path, cfg: dict[str, Any], request: Any, timeout: float = 120.0
) -> tuple[Any, list[Any]]:
    """Run one pipeline on an in-process node with `cfg`: (the finished pipeline, its tasks)."""
    from fredica.node import compose

    node = compose.build_node(node_settings(tmp_path, cfg))
    await node.start()
    try:
        pipeline, _ = await node.create_pipeline(request)
        done = await wait_done(node, pipeline.id, timeout=timeout)
        return done, await tasks_of(node, pipeline.id)
    finally:
        await node.stop(grace=2)


# --- a local server speaking the DeepL v2 and OpenAI chat-completions protocols -------------
GERMAN = {
    "good": "guten",
    "morning": "Morgen",
    "and": "und",
    "welcome": "willkommen",
    "to": "zu",
    "the": "der",
    "show": "Sendung",
    "today": "heute",
    "we": "wir",
    "talk": "sprechen",
    "about": "über",
    "home": "Heim",
    "media": "Medien",
    "clusters": "Cluster",
    "every": "jede",
    "machine": "Maschine",
    "helps": "hilft",
    "with": "mit",
    "work": "Arbeit",
    "thank": "danke",
    "you": "dir",
    "for": "fürs",
    "listening": "Zuhören",
    "quick": "schnelle",
    "brown": "braune",
    "fox": "Fuchs",
    "jumps": "springt",
    "over": "über",
    "lazy": "faulen",
    "dog": "Hund",
    "are": "sind",
    "testing": "testen",
    "a": "einen",
    "cluster": "Cluster",
    "is": "wird",
    "chunk": "Stück",
    "transcribed": "transkribiert",
    "on": "auf",
    "processor": "Prozessor",
}


def to_german(text: str) -> str:
    """A word-by-word dictionary 'translation' (the servers below are protocol fakes)."""
    import re

    return re.sub(r"[A-Za-z']+", lambda m: GERMAN.get(m.group(0).lower(), m.group(0)), text)


class TranslationServer:
    """DeepL `POST /v2/translate` and OpenAI `POST /v1/chat/completions` on loopback."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler

        from tests.media_support import QuietServer

        self.requests: list[tuple[str, dict[str, str], Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, dict(self.headers), body))
                if self.path == "/v2/translate":
                    reply: Any = {
                        "translations": [
                            {"detected_source_language": "EN", "text": to_german(t)}
                            for t in body["text"]
                        ]
                    }
                else:
                    lines = json.loads(body["messages"][-1]["content"])
                    out = [{"id": x["id"], "text": to_german(x["text"])} for x in lines]
                    reply = {
                        "choices": [{"message": {"role": "assistant", "content": json.dumps(out)}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                    }
                raw = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> TranslationServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
