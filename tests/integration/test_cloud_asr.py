"""TRANSCRIBE_CHUNK and DETECT_LANGUAGE through the cloud ASR backend, against a local server
of the OpenAI transcription protocol (tests/asr_server.py): what is sent (multipart fields,
key, audio), the answer mapped to the local result shape from the uploaded audio, and every
failure classified (429 after Retry-After, 401, 404, 413, 5xx, timeouts, no server, cancel)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fredica.domain import errors
from fredica.executors import transcribe
from fredica.executors.context import TaskContext
from tests.asr_server import TranscriptionServer, serve_transcriptions
from tests.media_support import make_context, tones

KEY = "test-key"
# (start, end) of each tone burst in the generated chunk, seconds; the chunk lasts 4.0 s
BURSTS = ((0.5, 1.5), (2.2, 3.7))


@pytest.fixture
def server() -> Iterator[TranscriptionServer]:
    with serve_transcriptions() as running:
        yield running


@pytest.fixture
def chunk(tmp_path: Path) -> Path:
    return tones(tmp_path / "chunk_003.wav", BURSTS, 4.0)


async def _ctx(
    tmp_path: Path,
    audio: Path,
    config: dict[str, Any],
    backend: str = "openai-whisper-api",
    task_type: str = "TRANSCRIBE_CHUNK",
    **payload: Any,
) -> TaskContext:
    body = {"audio_path": str(audio), "model_name": "base", **payload}
    return await make_context(tmp_path, task_type, body, backend=backend, backend_config=config)


async def _run(ctx: TaskContext) -> dict[str, Any]:
    executor = (
        transcribe.DetectLanguageExecutor()
        if ctx.task.type == "DETECT_LANGUAGE"
        else transcribe.TranscribeChunkExecutor()
    )
    result = (await executor.execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


async def test_a_chunk_is_transcribed_by_the_server_from_its_audio(
    tmp_path: Path, server: TranscriptionServer, chunk: Path
) -> None:
    config = {"api_key": KEY, "endpoint": server.url, "model": "whisper-1"}
    ctx = await _ctx(tmp_path, chunk, config, chunk_start_sec=60.0, chunk_index=3,
                     language="en", initial_prompt="Before this chunk.")  # fmt: skip
    result = await _run(ctx)
    # what the server received: the real multipart request, the key from the node's config
    (seen,) = server.requests
    assert seen == {
        "authorization": f"Bearer {KEY}", "model": "whisper-1",
        "response_format": "verbose_json", "granularities": ["segment", "word"],
        "language": "en", "prompt": "Before this chunk.", "temperature": "0",
        "filename": "chunk_003.wav", "bytes": chunk.stat().st_size, "duration": 4.0,
    }  # fmt: skip
    # what it answered, from the audio: the bursts, shifted by the chunk's start
    spans = [(s["start"], s["end"]) for s in result["segments"]]
    expected = [(60 + s, 60 + e) for s, e in BURSTS]
    assert np.allclose(spans, expected, atol=0.03), spans
    assert [s["text"] for s in result["segments"]] == [
        s["text"].strip() for s in server.answers[0]["segments"]
    ]
    assert result["text"] == "sound from 0.50 to 1.50. sound from 2.20 to 3.70."
    for seg in result["segments"]:
        words = seg["words"]
        assert "".join(w["word"] for w in words).strip() == seg["text"]
        assert all(w["word"].startswith(" ") for w in words)  # as faster-whisper gives them
        assert seg["start"] <= words[0]["start"] and words[-1]["end"] <= seg["end"] + 0.001
    # the local result shape, and what ran
    assert (result["duration_sec"], result["start_sec"], result["end_sec"]) == (4.0, 60.0, 64.0)
    assert (result["chunk_index"], result["language"], result["initial_prompt_used"]) == (
        3, "en", True,
    )  # fmt: skip
    assert (result["backend"], result["model"], result["device"]) == (
        "openai-whisper-api", "whisper-1", "cloud_api",
    )  # fmt: skip
    assert result["endpoint"] == server.url.split("//")[1].split("/")[0]
    assert KEY not in json.dumps(result)


async def test_a_server_of_the_operators_needs_no_key_and_hears_any_language(
    tmp_path: Path, chunk: Path
) -> None:
    with serve_transcriptions(api_key=None, languages=["de"]) as server:
        config = {"endpoint": server.url, "model": "whisper-large-v3"}
        ctx = await _ctx(tmp_path, chunk, config, "openai-compatible-asr", language="auto")
        result = await _run(ctx)
    (seen,) = server.requests
    assert seen["authorization"] is None and seen["language"] is None and seen["prompt"] is None
    assert result["language"] == "de"  # answered "german": reported as Whisper's code
    assert (result["backend"], result["model"]) == ("openai-compatible-asr", "whisper-large-v3")
    assert len(result["segments"]) == 2


async def test_a_text_only_model_gets_json_and_one_segment(
    tmp_path: Path, server: TranscriptionServer, chunk: Path
) -> None:
    config = {"api_key": KEY, "endpoint": server.url, "model": "gpt-4o-transcribe"}
    result = await _run(await _ctx(tmp_path, chunk, config, chunk_start_sec=8.0, language="en"))
    (seen,) = server.requests
    assert seen["response_format"] == "json" and seen["granularities"] == []
    assert result["segments"] == [{"start": 8.0, "end": 12.0, "text": result["text"]}]
    assert result["text"] == server.answers[0]["text"] and result["timestamps"].startswith("none")


@pytest.mark.parametrize(
    ("script", "kind", "words"),
    [
        ((429, {"Retry-After": "7"}, {"error": {"message": "Rate limit reached for whisper-1",
          "code": "rate_limit_exceeded"}}), errors.RateLimitedError, "Rate limit reached"),
        ((429, {}, {"error": {"message": "You exceeded your current quota",
          "code": "insufficient_quota"}}), errors.PermanentError, "quota is exhausted"),
        ((500, {}, {"error": {"message": "The server had an error"}}), errors.TransientError,
         "HTTP 500"),
        ((503, {}, {"error": {"message": "overloaded"}}), errors.TransientError, "overloaded"),
        ((400, {}, {"error": {"message": "Audio file is too short"}}), errors.PermanentError,
         "too short"),
    ],
)  # fmt: skip
async def test_error_answers_are_classified(
    tmp_path: Path,
    server: TranscriptionServer,
    chunk: Path,
    script: tuple[int, dict[str, str], dict[str, Any]],
    kind: type[errors.TaskError],
    words: str,
) -> None:
    server.script.append(script)
    config = {"api_key": KEY, "endpoint": server.url}
    with pytest.raises(errors.TaskError) as info:
        await _run(await _ctx(tmp_path, chunk, config, language="en"))
    assert type(info.value) is kind and words in info.value.message
    assert "openai-whisper-api whisper-1" in info.value.message
    if kind is errors.RateLimitedError:
        assert info.value.retry_after_sec == 7.0
        assert info.value.provider == "openai-whisper-api"  # type: ignore[attr-defined]
    # the next request is answered normally: nothing stuck on either side
    assert (await _run(await _ctx(tmp_path, chunk, config, language="en")))["segments"]


async def test_a_wrong_key_and_an_unknown_model_are_permanent(
    tmp_path: Path, server: TranscriptionServer, chunk: Path
) -> None:
    wrong = {"api_key": "sk-wrong", "endpoint": server.url}
    with pytest.raises(errors.PermanentError, match=r"HTTP 401.*API key.*Incorrect API key"):
        await _run(await _ctx(tmp_path, chunk, wrong))
    assert server.requests[-1]["authorization"] == "Bearer sk-wrong"
    unknown = {"api_key": KEY, "endpoint": server.url, "model": "whisper-9"}
    with pytest.raises(errors.PermanentError, match=r"HTTP 404.*whisper-9"):
        await _run(await _ctx(tmp_path, chunk, unknown))


async def test_too_large_audio_is_compressed_or_refused_naming_the_limit(
    tmp_path: Path, chunk: Path
) -> None:
    size = chunk.stat().st_size  # 128 kB of 16-bit PCM
    with serve_transcriptions(limit_bytes=size // 2) as server:
        base = {"api_key": KEY, "endpoint": server.url}
        # over the limit the node knows: sent as FLAC (tones compress well), same answer
        fits = {**base, "max_upload_mb": size * 0.9 / (1024 * 1024)}
        result = await _run(await _ctx(tmp_path, chunk, fits, language="en"))
        assert server.requests[-1]["filename"] == "chunk_003.upload.flac"
        assert server.requests[-1]["bytes"] < size * 0.9
        assert np.allclose([(s["start"], s["end"]) for s in result["segments"]], BURSTS, atol=0.03)
        assert not list((tmp_path / "data").rglob("*.flac"))  # the upload copy is gone
        # still too large as FLAC: refused before anything is sent
        sent = len(server.requests)
        tiny = {**base, "max_upload_mb": 0.001}
        with pytest.raises(errors.PermanentError, match=r"over the 0\.001 MB limit of openai"):
            await _run(await _ctx(tmp_path, chunk, tiny, language="en"))
        assert len(server.requests) == sent
        # a limit the node does not know: the server's 413, naming the size
        own = {"endpoint": server.url, "api_key": KEY}
        refused = rf"HTTP 413.*refused 0\.1 MB.*server's limit.*\({size // 2}\)"
        with pytest.raises(errors.PermanentError, match=refused):
            await _run(await _ctx(tmp_path, chunk, own, "openai-compatible-asr", language="en"))


async def test_no_server_and_a_slow_server_are_transient(tmp_path: Path, chunk: Path) -> None:
    with serve_transcriptions(delay_sec=3.0) as server:
        slow = {"api_key": KEY, "endpoint": server.url, "timeout_sec": 0.5}
        with pytest.raises(errors.TransientError, match="timed out"):
            await _run(await _ctx(tmp_path, chunk, slow))
        url = server.url
    gone = {"api_key": KEY, "endpoint": url}  # the server has stopped
    with pytest.raises(errors.TransientError, match="cannot connect"):
        await _run(await _ctx(tmp_path, chunk, gone))


async def test_missing_credentials_wait_for_the_operator(tmp_path: Path, chunk: Path) -> None:
    with pytest.raises(errors.AwaitingCredentialError, match="set api_key"):
        await _run(await _ctx(tmp_path, chunk, {"endpoint": "http://127.0.0.1:9/v1"}))


async def test_cancel_abandons_the_request_at_once(tmp_path: Path, chunk: Path) -> None:
    with serve_transcriptions(delay_sec=30.0) as server:
        ctx = await _ctx(tmp_path, chunk, {"api_key": KEY, "endpoint": server.url})
        job = asyncio.create_task(_run(ctx))
        while not server.requests or "bytes" not in server.requests[-1]:
            assert not job.done()
            await asyncio.sleep(0.01)
        ctx.control.cancel("test cancel")
        cancelled_at = time.monotonic()
        with pytest.raises(errors.TaskCancelled):
            await job
        assert time.monotonic() - cancelled_at < 1.0


@pytest.mark.parametrize(
    ("answers", "language", "confidence"),
    [(["de", "de", "en"], "de", 0.6667), (["de", "en", "fr"], "auto", 0.3333)],
)
async def test_language_detection_asks_the_server_about_several_windows(
    tmp_path: Path, answers: list[str], language: str, confidence: float
) -> None:
    # sound all through 12 s, and 2 s of silence at the end: three windows of 3 s with speech
    wav = tones(tmp_path / "audio.wav", ((0.0, 12.0),), 14.0)
    with serve_transcriptions(languages=answers) as server:
        config = {"api_key": KEY, "endpoint": server.url}
        ctx = await _ctx(tmp_path, wav, config, task_type="DETECT_LANGUAGE", sample_sec=3,
                         windows=3)  # fmt: skip
        result = await _run(ctx)
    assert [r["language"] for r in server.requests] == [None, None, None]
    assert [r["bytes"] for r in server.requests] == [44 + 3 * 32_000] * 3  # 3 s WAVs
    assert [round(r["duration"], 3) for r in server.requests] == [3.0] * 3
    assert [w["start_sec"] for w in result["windows"]] == [0.0, 5.5, 11.0]
    assert (result["language"], result["confidence"]) == (language, confidence)
    assert result["detected_language"] == answers[0]
    assert (result["backend"], result["model"], result["device"]) == (
        "openai-whisper-api", "whisper-1", "cloud_api",
    )  # fmt: skip
    assert "voting" in result["method"]


async def test_detection_skips_silent_windows_and_text_only_models(tmp_path: Path) -> None:
    # sound in the first window only: the others say nothing about the language
    wav = tones(tmp_path / "audio.wav", ((0.5, 2.5),), 12.0)
    with serve_transcriptions(languages=["ja"]) as server:
        config = {"api_key": KEY, "endpoint": server.url}
        ctx = await _ctx(tmp_path, wav, config, task_type="DETECT_LANGUAGE", sample_sec=3,
                         windows=3)  # fmt: skip
        result = await _run(ctx)
        assert len(server.requests) == 3 and len(result["windows"]) == 1
        assert (result["language"], result["confidence"]) == ("ja", 1.0)
        text_only = {**config, "model": "gpt-4o-transcribe"}
        ctx = await _ctx(tmp_path, wav, text_only, task_type="DETECT_LANGUAGE")
        result = await _run(ctx)
        assert len(server.requests) == 3  # nothing asked: the model reports no language
    assert (result["language"], result["confidence"]) == ("auto", 0.0)
    assert "reports no language" in result["method"]
