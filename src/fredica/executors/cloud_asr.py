"""Cloud transcription over the OpenAI audio API, `POST {endpoint}/audio/transcriptions`
(seed 001 §3.2), for TRANSCRIBE_CHUNK and DETECT_LANGUAGE.

| backend                 | default endpoint                 | default model      | api_key  |
|-------------------------|----------------------------------|--------------------|----------|
| `openai-whisper-api`    | https://api.openai.com/v1        | `whisper-1`        | required |
| `groq-whisper-api`      | https://api.groq.com/openai/v1   | `whisper-large-v3` | required |
| `openai-compatible-asr` | `endpoint` (required)            | `whisper-1`        | optional |

The last one is any other server of the protocol: faster-whisper-server / speaches, LocalAI, a
proxy. Endpoint, key and model come from this node's config (`ctx.backend_config`), never from
the payload. The request is multipart: the audio file, `model`, `response_format=verbose_json`,
`timestamp_granularities[]` = `segment` and `word`, `language` when known, `prompt` (the
previous chunk's tail, as `initial_prompt` locally) and `temperature=0`. Models that answer text
only (`gpt-4o-transcribe`, `gpt-4o-mini-transcribe`) get `response_format=json`; their chunk is
one segment spanning the audio, and the result says so (`timestamps`).

The answer is mapped to the result of the local faster-whisper executor: segments with
absolute start/end/text and words (each with its leading space and punctuation, as
faster-whisper gives them, so that joined they are the segment's text), the language code, the
duration measured from the uploaded audio, and the backend and model that ran. Failures, by
`httperrors`: no answer or 5xx TRANSIENT; 429 RATE_LIMITED after its Retry-After (a 429 for an
exhausted quota is PERMANENT: waiting does not refill it); 400/401/403/404/422 PERMANENT; 413
PERMANENT naming the size and the limit. Audio over a provider's upload limit (25 MB for OpenAI
and Groq) is sent as FLAC; still too large is PERMANENT before anything is uploaded.
"""

from __future__ import annotations

import asyncio
import io
import re
import time
import wave
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fredica.domain import errors
from fredica.executors import audio, ffmpeg, httperrors, usage, whisper_pass
from fredica.executors.context import TaskContext


@dataclass(frozen=True)
class Wire:
    """What one backend defaults to."""

    endpoint: str
    model: str
    provider: str
    needs_key: bool
    max_upload_mb: float | None  # the provider's documented upload limit (MiB), None: unknown


WIRES: Mapping[str, Wire] = {
    "openai-whisper-api": Wire("https://api.openai.com/v1", "whisper-1", "openai", True, 25.0),
    "groq-whisper-api": Wire(
        "https://api.groq.com/openai/v1", "whisper-large-v3", "groq", True, 25.0
    ),
    "openai-compatible-asr": Wire("", "whisper-1", "openai-compatible", False, None),
}
BACKENDS: tuple[str, ...] = tuple(WIRES)
DEVICE = "cloud_api"
MB = 1024 * 1024  # "25 MB" at OpenAI is 26,214,400 bytes
CONNECT_TIMEOUT = 10.0  # seconds
BASE_TIMEOUT = 120.0  # seconds, plus two per second of audio: servers on a CPU are slow
_TEXT_ONLY = re.compile(r"^gpt-4o(-mini)?-transcribe")

# Whisper's languages (code -> the name OpenAI's verbose_json answers with).
LANGUAGES: Mapping[str, str] = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak",
    "te": "telugu", "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian",
    "az": "azerbaijani", "sl": "slovenian", "kn": "kannada", "et": "estonian",
    "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian",
    "sw": "swahili", "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala",
    "km": "khmer", "sn": "shona", "yo": "yoruba", "so": "somali", "af": "afrikaans",
    "oc": "occitan", "ka": "georgian", "be": "belarusian", "tg": "tajik", "sd": "sindhi",
    "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek",
    "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk",
    "mt": "maltese", "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan",
    "tl": "tagalog", "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian",
    "ln": "lingala", "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese",
    "yue": "cantonese",
}  # fmt: skip
_ALIASES = {"burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht",
            "letzeburgesch": "lb", "pushto": "ps", "panjabi": "pa", "moldavian": "ro",
            "moldovan": "ro", "sinhalese": "si", "castilian": "es", "mandarin": "zh"}  # fmt: skip
_CODES = {name: code for code, name in LANGUAGES.items()} | _ALIASES


def is_cloud(backend: str | None) -> bool:
    """Whether `backend` is one of this module's (else the local faster-whisper runs)."""
    return backend in WIRES


def text_only(model: str) -> bool:
    """gpt-4o(-mini)-transcribe answer `json` or `text` only: no segments, no timestamps."""
    return bool(_TEXT_ONLY.match(model.lower()))


def language_code(reported: object) -> str | None:
    """A reported language as Whisper's code: `english`, `English` and `en` are all `en`."""
    if not isinstance(reported, str) or not reported.strip():
        return None
    name = reported.strip().lower()
    if name in LANGUAGES:
        return name
    return _CODES.get(name, name)


def request_language(language: str | None) -> str | None:
    """The `language` field to send: an ISO-639-1 code, nothing for `auto`."""
    if not language or language == "auto":
        return None
    return "yue" if language == "zh-yue" else language.split("-")[0].lower()


def _configured_model(config: Mapping[str, Any], default: str) -> str:
    listed = config.get("models") or []
    first = listed[0] if listed else None
    first_name = first.get("name") if isinstance(first, dict) else first
    return str(config.get("model") or first_name or default)


class Client:
    """One configured transcription endpoint of `backend`."""

    def __init__(self, backend: str, config: Mapping[str, Any]) -> None:
        wire = WIRES.get(backend)
        if wire is None:
            raise errors.PermanentError(
                f"{backend!r} does not speak the OpenAI transcription protocol "
                f"(these do: {', '.join(BACKENDS)})"
            )
        self.backend = backend
        self.provider = wire.provider
        self.key = str(config.get("api_key") or "")
        if wire.needs_key and not self.key:
            raise errors.AwaitingCredentialError(
                f"{backend} needs an API key: set api_key for it in this node's config, then "
                "retry the task (or skip it)"
            )
        base = str(config.get("endpoint") or config.get("base_url") or wire.endpoint)
        if not base:
            raise errors.PermanentError(
                f"{backend} needs `endpoint` in its config: the server's base URL, e.g. "
                "http://127.0.0.1:8000/v1"
            )
        self.url = base.rstrip("/") + "/audio/transcriptions"
        self.model = _configured_model(config, wire.model)
        limit = config.get("max_upload_mb", wire.max_upload_mb)
        self.limit_mb = float(limit) if limit else None
        self.limit_bytes = int(self.limit_mb * MB) if self.limit_mb else None
        timeout = config.get("timeout_sec")
        self.timeout = float(timeout) if timeout else None
        self.what = f"{backend} {self.model}"

    @property
    def verbose(self) -> bool:
        return not text_only(self.model)

    def limit_text(self) -> str:
        if self.limit_mb is None:
            return "the server's limit"
        return f"the {self.limit_mb:g} MB limit of {self.provider}"

    async def transcribe(
        self,
        ctx: TaskContext,
        filename: str,
        data: bytes,
        *,
        language: str | None,
        prompt: str | None,
        duration: float | None,
    ) -> dict[str, Any]:
        """The server's answer to one upload, as a JSON object; failures classified."""
        fields: dict[str, Any] = {
            "model": self.model,
            "response_format": "verbose_json" if self.verbose else "json",
            "temperature": "0",
        }
        if self.verbose:
            fields["timestamp_granularities[]"] = ["segment", "word"]
        code = request_language(language)
        if code:
            fields["language"] = code
        if prompt:
            fields["prompt"] = prompt
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        read = self.timeout or BASE_TIMEOUT + 2.0 * (duration or 0.0)
        timeout = httpx.Timeout(read, connect=CONNECT_TIMEOUT)
        files = {"file": (filename, data, _mime(filename))}
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            try:
                response = await httperrors.cancellable(
                    ctx, client.post(self.url, data=fields, files=files, headers=headers)
                )
            except httpx.HTTPError as exc:
                raise httperrors.for_transport(exc, self.url, self.what) from exc
        if response.status_code >= 400:
            raise self.failure(response, len(data))
        try:
            body = response.json()
        except ValueError as exc:
            raise errors.TransientError(f"{self.what}: the reply was not JSON") from exc
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            raise errors.PermanentError(f"{self.what}: unexpected reply shape: {str(body)[:200]}")
        return body

    def failure(self, response: httpx.Response, size: int) -> errors.TaskError:
        """The task error for an error status (the provider's own message included)."""
        status = response.status_code
        if status == 413:
            detail = httperrors.error_text(response)
            return errors.PermanentError(
                f"{self.what}: HTTP 413, the server refused {_size(size)} of audio as too "
                f"large ({self.limit_text()}): use shorter chunks "
                f"(params.chunk_duration_sec)" + (f": {detail}" if detail else "")
            )
        if status == 429 and _error_code(response) == "insufficient_quota":
            return errors.PermanentError(
                f"{self.what}: HTTP 429, the account's quota is exhausted (waiting does not "
                f"refill it): {httperrors.error_text(response)}"
            )
        return httperrors.for_status(response, self.what, provider=self.backend)


def _size(n: int) -> str:
    return f"{n / MB:.1f} MB" if n >= MB // 10 else f"{n / 1024:.0f} kB"


def _mime(filename: str) -> str:
    suffix = Path(filename).suffix.lower()
    return {".wav": "audio/wav", ".flac": "audio/flac", ".mp3": "audio/mpeg"}.get(
        suffix, "application/octet-stream"
    )


def _error_code(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    err = body.get("error") if isinstance(body, dict) else None
    return str(err.get("code") or "") if isinstance(err, dict) else ""


# --- the answer, as the local backend's result (pure) -----------------------------------------
_PUNCT_AFTER = re.compile(r"[^\w\s]*")


def spaced_words(text: str, words: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`words` as faster-whisper gives them: each with the text before it (its leading space)
    and the punctuation after it, so that joined they are `text` again. A word the text does
    not contain keeps its own spelling after a space. Pure."""
    out: list[dict[str, Any]] = []
    at = 0
    for word in words:
        token = str(word.get("word", "")).strip()
        if not token:
            continue
        # a whole-word match first ("a" is not the "a" inside "say"), then any (CJK has no
        # word boundaries between characters)
        m = re.compile(rf"(?<!\w){re.escape(token)}(?!\w)").search(text, at)
        found = m.start() if m else text.find(token, at)
        if found < 0:
            piece = f" {token}"
        else:
            end = found + len(token)
            tail = _PUNCT_AFTER.match(text, end)
            end = tail.end() if tail else end
            piece, at = text[at:end], end
        out.append({**word, "word": piece})
    if out and text[at:].strip():
        out[-1]["word"] += text[at:].rstrip()
    return out


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _timed(items: object) -> list[dict[str, Any]]:
    """Entries with numeric start and end (anything else in a reply is ignored)."""
    if not isinstance(items, list):
        return []
    return [
        i
        for i in items
        if isinstance(i, dict) and _number(i.get("start")) is not None
        and _number(i.get("end")) is not None
    ]  # fmt: skip


def assign_words(
    segments: list[dict[str, Any]], words: list[dict[str, Any]]
) -> list[list[dict[str, Any]]]:
    """Top-level words (OpenAI puts them beside the segments) per segment: the one holding the
    word's middle, else the nearest. Pure."""
    buckets: list[list[dict[str, Any]]] = [[] for _ in segments]
    if not segments:
        return buckets
    for word in sorted(words, key=lambda w: float(w["start"])):
        mid = (float(word["start"]) + float(word["end"])) / 2

        def distance(seg: dict[str, Any], mid: float = mid) -> float:
            return max(float(seg["start"]) - mid, mid - float(seg["end"]), 0.0)

        best = min(range(len(segments)), key=lambda i: distance(segments[i]))
        buckets[best].append(word)
    return buckets


def _word(w: dict[str, Any], duration: float | None) -> dict[str, Any]:
    start, end = float(w["start"]), float(w["end"])
    if duration is not None:
        start, end = min(start, duration), min(end, duration)
    out: dict[str, Any] = {"start": start, "end": max(start, end), "word": str(w.get("word", ""))}
    probability = _number(w.get("probability"))
    if probability is not None:
        out["probability"] = round(probability, 3)
    return out


def segments_of(body: dict[str, Any], duration: float | None) -> tuple[list[dict[str, Any]], str]:
    """(segments relative to the upload, how they were timed) from a transcription answer."""
    text = str(body.get("text") or "").strip()
    raw = _timed(body.get("segments"))
    if not raw:
        if not text:
            return [], "none (no speech)"
        end = duration if duration is not None else _number(body.get("duration")) or 0.0
        return [{"start": 0.0, "end": end, "text": text}], "none: the answer has no segments"
    loose = _timed(body.get("words"))
    buckets = assign_words(raw, loose) if loose else [_timed(s.get("words")) for s in raw]
    rows: list[dict[str, Any]] = []
    for seg, words in zip(raw, buckets, strict=True):
        start = float(seg["start"])
        end = float(seg["end"]) if duration is None else min(float(seg["end"]), duration)
        row: dict[str, Any] = {
            "start": start,
            "end": max(start, end),
            "text": str(seg.get("text") or "").strip(),
        }
        for key in ("avg_logprob", "no_speech_prob"):
            value = _number(seg.get(key))
            if value is not None:
                row[key] = round(value, 4)
        if words:
            row["words"] = spaced_words(f" {row['text']}", [_word(w, duration) for w in words])
        rows.append(row)
    return rows, "segments and words" if any(r.get("words") for r in rows) else "segments"


# --- the upload ------------------------------------------------------------------------------
def wav_seconds(path: Path) -> float | None:
    """Duration of a WAV file from its header; None for any other format."""
    try:
        return audio.wav_duration(path)[0]
    except errors.PermanentError:
        return None


def wav_window(path: Path, start: float, seconds: float) -> bytes:
    """`seconds` of a WAV file from `start`, as a WAV file of its own."""
    with wave.open(str(path), "rb") as src:
        rate = src.getframerate()
        src.setpos(min(src.getnframes(), int(start * rate)))
        frames = src.readframes(int(seconds * rate))
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as dst:
            dst.setnchannels(src.getnchannels())
            dst.setsampwidth(src.getsampwidth())
            dst.setframerate(rate)
            dst.writeframes(frames)
    return buffer.getvalue()


async def upload_of(ctx: TaskContext, client: Client, path: Path) -> tuple[str, bytes]:
    """(file name, bytes) to send: the file itself, or as FLAC when over the upload limit;
    PermanentError, before anything is sent, when even the FLAC is too large."""
    size = path.stat().st_size
    limit = client.limit_bytes
    if limit is None or size <= limit:
        return path.name, await asyncio.to_thread(path.read_bytes)
    flac = ctx.output_dir / f"{path.stem}.upload.flac"
    await ffmpeg.run(
        ctx,
        ["-i", str(path), "-vn", "-ac", "1", "-c:a", "flac", str(flac)],
        what=f"compressing {path.name} for the upload",
    )
    try:
        packed = flac.stat().st_size
        if packed > limit:
            raise errors.PermanentError(
                f"{client.what}: {path.name} is {_size(size)} ({_size(packed)} as FLAC), "
                f"over {client.limit_text()}: use shorter chunks "
                "(params.chunk_duration_sec)"
            )
        return flac.name, await asyncio.to_thread(flac.read_bytes)
    finally:
        flac.unlink(missing_ok=True)


# --- the two task types ------------------------------------------------------------------------
def ran(client: Client) -> dict[str, Any]:
    """What ran, as the result reports it (the recorded choice names the same)."""
    return {
        "backend": client.backend,
        "model": client.model,
        "device": DEVICE,
        "endpoint": httperrors.host_of(client.url),
    }


@dataclass(frozen=True)
class ChunkJob:
    """One TRANSCRIBE_CHUNK: its audio, where that starts in the media, language and prompt."""

    path: Path
    offset: float
    language: str | None
    prompt: str | None


async def transcribe_chunk(ctx: TaskContext, job: ChunkJob) -> dict[str, Any]:
    """One chunk -> the local executor's result shape (times shifted by the chunk's start)."""
    assert ctx.backend is not None
    client = Client(ctx.backend, ctx.backend_config)
    path, language = job.path, job.language
    started = time.monotonic()
    duration = wav_seconds(path)
    filename, data = await upload_of(ctx, client, path)
    ctx.event("tool", f"{client.what} at {httperrors.host_of(client.url)} ({len(data)} bytes)")
    await ctx.checkpoint()
    ctx.progress(10, f"uploading to {client.backend}")
    body = await client.transcribe(
        ctx, filename, data, language=language, prompt=job.prompt, duration=duration
    )
    if duration is None:
        duration = _number(body.get("duration"))
    cost = (
        usage.charge(ctx, duration / 60, "audio_minute") if duration else None
    )  # billed per minute
    rows, timing = segments_of(body, duration)
    out = whisper_pass.shifted(rows, job.offset)
    elapsed = time.monotonic() - started
    return {
        "segments": out,
        "text": " ".join(s["text"] for s in out if s["text"]).strip(),
        "language": language_code(body.get("language")) or request_language(language),
        "language_probability": None,  # the protocol does not say
        "duration_sec": round(duration or 0.0, 3),
        "elapsed_sec": round(elapsed, 3),
        "realtime_factor": round(elapsed / duration, 3) if duration else None,
        "timestamps": timing,
        **ran(client),
        **({"cost_usd": round(cost, 6)} if cost is not None else {}),
    }


async def detect_windows(
    ctx: TaskContext, path: Path, starts: list[float], sample_sec: float
) -> tuple[list[list[tuple[str, float]]], list[dict[str, Any]], Client]:
    """The language the server hears in each window (one vote each, windows without speech
    left out): (per-window rankings, per-window details, the client)."""
    assert ctx.backend is not None
    client = Client(ctx.backend, ctx.backend_config)
    if not client.verbose:
        return [], [], client  # a text-only model reports no language
    whole = wav_seconds(path) is None  # not a WAV: one upload of the whole file
    windows = [0.0] if whole else starts
    votes: list[list[tuple[str, float]]] = []
    details: list[dict[str, Any]] = []
    for i, start in enumerate(windows):
        await ctx.checkpoint()
        ctx.progress(10 + 85 * i / len(windows), f"window {i + 1}/{len(windows)}")
        if whole:
            name, data = await upload_of(ctx, client, path)
        else:
            name = f"window_{i}.wav"
            data = await asyncio.to_thread(wav_window, path, start, sample_sec)
        body = await client.transcribe(
            ctx, name, data, language=None, prompt=None, duration=sample_sec
        )
        seconds = _number(body.get("duration")) or (None if whole else sample_sec)
        if seconds:
            usage.charge(ctx, seconds / 60, "audio_minute")
        code = language_code(body.get("language"))
        if code is None or not str(body.get("text") or "").strip():
            continue  # no speech in this window: it says nothing about the language
        votes.append([(code, 1.0)])
        details.append({"start_sec": start, "language": code})
    return votes, details, client
