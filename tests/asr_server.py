"""A local server of the OpenAI transcription protocol (`POST /v1/audio/transcriptions`) for
the cloud ASR tests: FastAPI on loopback, run by uvicorn in a thread.

It does what the real services do with a request: checks `Authorization: Bearer <key>`,
parses the multipart form (file, model, response_format, timestamp_granularities[], language,
prompt), refuses bodies over its size limit with 413, decodes the uploaded audio (WAV itself,
anything else through ffmpeg) and answers `verbose_json` / `json` / `text` computed from that
audio: the real duration and, by default, one segment per stretch of sound found by its
energy, timed from the samples, with words spread over it. A test may plug in a real
recogniser instead (`WhisperRecognizer`: faster-whisper, as faster-whisper-server runs it), queue
error answers (429 with Retry-After, 500, ...) and read back every request and answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import subprocess
import threading
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import UploadFile

from fredica.capabilities import packaged_models
from fredica.executors import cloud_asr, ffmpeg, transcribe

RATE = 16_000
FRAME = RATE // 50  # 20 ms
OPENAI_LIMIT = 25 * 1024 * 1024


@dataclass
class Heard:
    """What a recogniser made of one upload: segments and words (seconds, relative to the
    upload) and the language, as a code."""

    segments: list[dict[str, Any]]
    words: list[dict[str, Any]]
    language: str


Recognizer = Callable[[np.ndarray, str | None, str | None], Heard]


def sound_spans(samples: np.ndarray, gap: float = 0.25) -> list[tuple[float, float]]:
    """Stretches with sound (frame energy above a tenth of the loudest frame), gaps shorter
    than `gap` bridged, blips under 0.1 s ignored."""
    frames = len(samples) // FRAME
    if frames == 0:
        return []
    rms = np.sqrt(np.mean(samples[: frames * FRAME].reshape(frames, FRAME) ** 2, axis=1))
    loud = rms > max(0.1 * float(rms.max()), 1e-3)
    spans: list[tuple[float, float]] = []
    for i in np.flatnonzero(loud):
        start, end = i * FRAME / RATE, (i + 1) * FRAME / RATE
        if spans and start - spans[-1][1] <= gap:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return [(round(s, 2), round(e, 2)) for s, e in spans if e - s >= 0.1]


def energy_recognizer(
    samples: np.ndarray, language: str | None, prompt: str | None, answer: str = "en"
) -> Heard:
    """One segment per stretch of sound: "sound from <start> to <end>"."""
    segments, words = [], []
    for start, end in sound_spans(samples):
        text = f"sound from {start:.2f} to {end:.2f}."
        segments.append({"start": start, "end": end, "text": text})
        tokens = text.rstrip(".").split()
        step = (end - start) / len(tokens)
        for i, token in enumerate(tokens):
            at = start + i * step
            words.append({"word": token, "start": round(at, 3), "end": round(at + step, 3)})
    return Heard(segments, words, language or answer)


class WhisperRecognizer:
    """faster-whisper with a packaged model, as a self-hosted faster-whisper-server runs it."""

    def __init__(self, model: str = packaged_models.BASE) -> None:
        from faster_whisper import WhisperModel

        path = packaged_models.materialize(model)
        assert path is not None, f"the packaged {model} model is not installed"
        compute = transcribe.default_compute_type(model, "cpu")
        self.model = WhisperModel(str(path), device="cpu", compute_type=compute, cpu_threads=2)

    def __call__(self, samples: np.ndarray, language: str | None, prompt: str | None) -> Heard:
        found, info = self.model.transcribe(
            samples, language=language, initial_prompt=prompt, word_timestamps=True
        )
        segments, words = [], []
        for seg in found:
            segments.append({"start": seg.start, "end": seg.end, "text": seg.text})
            words += [{"word": w.word.strip(), "start": w.start, "end": w.end} for w in seg.words]
        return Heard(segments, words, info.language)


def decode(data: bytes) -> np.ndarray:
    """Mono float32 samples at 16 kHz: a 16-bit mono 16 kHz WAV directly, anything else through
    ffmpeg. ValueError when it is not audio."""
    with contextlib.suppress(wave.Error, EOFError), wave.open(io.BytesIO(data), "rb") as w:
        if (w.getsampwidth(), w.getnchannels(), w.getframerate()) == (2, 1, RATE):
            raw = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
            return raw.astype(np.float32) / 32768.0
    out = subprocess.run(
        [ffmpeg.executable(), "-hide_banner", "-loglevel", "error", "-i", "pipe:0",
         "-f", "s16le", "-ac", "1", "-ar", str(RATE), "pipe:1"],
        input=data, capture_output=True, check=False,
    )  # fmt: skip
    if out.returncode != 0 or not out.stdout:
        raise ValueError(out.stderr.decode(errors="replace").strip()[-200:] or "no audio")
    return np.frombuffer(out.stdout, dtype="<i2").astype(np.float32) / 32768.0


def _error(status: int, message: str, code: str | None = None, **headers: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


@dataclass
class TranscriptionServer:
    """The server's configuration and what it saw (requests and answers, in order)."""

    api_key: str | None = "test-key"
    models: frozenset[str] = frozenset({"whisper-1", "whisper-large-v3", "gpt-4o-transcribe"})
    limit_bytes: int = OPENAI_LIMIT
    recognizer: Recognizer = energy_recognizer
    #: languages (codes) answered in turn when the request names none, instead of what the
    #: recogniser heard
    languages: list[str] | None = None
    #: queued error answers, used one per request before any real answer
    script: list[tuple[int, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    delay_sec: float = 0.0
    stopping: bool = False
    unnamed: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: list[Any] = field(default_factory=list)
    url: str = ""

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/audio/transcriptions")
        async def transcriptions(request: Request) -> Response:
            return await self._answer(request)

        return app

    async def _answer(self, request: Request) -> Response:
        seen: dict[str, Any] = {"authorization": request.headers.get("authorization")}
        self.requests.append(seen)
        if self.api_key is not None and seen["authorization"] != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        size = int(request.headers.get("content-length") or 0)
        if size > self.limit_bytes:
            return _error(413, f"Maximum content size limit ({self.limit_bytes}) exceeded.")
        async with request.form() as form:  # closes the spooled upload afterwards
            upload = form.get("file")
            seen.update(
                model=form.get("model"),
                response_format=form.get("response_format", "json"),
                granularities=form.getlist("timestamp_granularities[]"),
                language=form.get("language"),
                prompt=form.get("prompt"),
                temperature=form.get("temperature"),
            )
            if not isinstance(upload, UploadFile):
                return _error(400, "file: a multipart file field is required")
            data = await upload.read()
            seen.update(filename=upload.filename, bytes=len(data))
        if seen["model"] not in self.models:
            return _error(404, f"The model `{seen['model']}` does not exist.", "model_not_found")
        if self.script:
            status, headers, body = self.script.pop(0)
            return JSONResponse(body, status_code=status, headers=headers)
        until = time.monotonic() + self.delay_sec
        while time.monotonic() < until and not self.stopping:  # a slow server, until shut down
            await asyncio.sleep(0.02)
        try:
            samples = decode(data)
        except ValueError as exc:
            return _error(400, f"Invalid file format: {exc}")
        heard = await asyncio.to_thread(
            self.recognizer, samples, seen["language"] or None, seen["prompt"] or None
        )
        seen["duration"] = len(samples) / RATE
        return self._format(heard, seen)

    def _format(self, heard: Heard, seen: dict[str, Any]) -> Response:
        fmt = seen["response_format"]
        text = "".join(f" {s['text'].strip()}" for s in heard.segments).strip()
        if fmt == "text":
            self.answers.append(text)
            return PlainTextResponse(text)
        if fmt == "json":
            self.answers.append({"text": text})
            return JSONResponse(self.answers[-1])
        if fmt != "verbose_json" or seen["model"] == "gpt-4o-transcribe":
            return _error(400, f"response_format '{fmt}' is not compatible with this model.")
        language = heard.language
        if self.languages and not seen["language"]:
            language = self.languages[self.unnamed % len(self.languages)]
            self.unnamed += 1
        body: dict[str, Any] = {
            "task": "transcribe",
            "language": cloud_asr.LANGUAGES.get(language, language),
            "duration": round(seen["duration"], 2),
            "text": text,
        }
        granularities = seen["granularities"] or ["segment"]
        if "segment" in granularities:
            body["segments"] = [
                {"id": i, "seek": 0, "start": round(s["start"], 2), "end": round(s["end"], 2),
                 "text": f" {s['text'].strip()}", "tokens": [], "temperature": 0.0,
                 "avg_logprob": -0.25, "compression_ratio": 1.1, "no_speech_prob": 0.01}
                for i, s in enumerate(heard.segments)
            ]  # fmt: skip
        if "word" in granularities:
            body["words"] = heard.words
        self.answers.append(body)
        return JSONResponse(body)


@contextlib.contextmanager
def serve_transcriptions(**options: Any) -> Iterator[TranscriptionServer]:
    """A running server on 127.0.0.1 (its base URL, with /v1, in `.url`)."""
    state = TranscriptionServer(**options)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        state.app(), log_level="warning", lifespan="off", ws="none", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    state.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        yield state
    finally:
        state.stopping = True
        server.should_exit = True
        thread.join(10)
        sock.close()
