"""Recorded = ran: a representative run of every executor family that runs on this machine
(subtitle sync, diarization, hard-subtitle detection, audio fingerprint, enhancement), each
result's `backend` (and `model`, when recorded) checked against the task's own log, where the
executor writes the tool it started (`tool: <backend> ...`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from fredica.executors import hardsub, speech, subsync, tasklog, voice_encoder
from fredica.executors import subtitle_format as sf
from tests import subtitle_support as ss
from tests.media_support import make_context

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def talk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("recorded")
    wav = d / "talk.wav"
    lines = [("en-us", "Good morning, and welcome to the show."),
             ("en-us+f3", "Thank you, it is a pleasure to be here."),
             ("en-us", "Every machine helps with the work.")]  # fmt: skip
    truth = ss.timed_speech(lines, wav, lead=1.0, pause=0.8)
    late = d / "late.srt"
    late.write_text(sf.write_srt(sf.Cue(s + 2.0, e + 2.0, t) for s, e, _, t in truth))
    return wav, late


def tool_lines(data_dir: Path, task_id: str) -> list[str]:
    text = tasklog.read(data_dir, task_id, None).text
    return [line.split("tool: ", 1)[1] for line in text.splitlines() if "tool: " in line]


async def check(
    tmp_path: Path, executor: Any, task_type: str, payload: dict, backend: str | None, **kw: Any
) -> dict[str, Any]:
    ctx = await make_context(tmp_path, task_type, payload, backend=backend, **kw)
    result = (await executor.execute(ctx.task, ctx)).result_json
    assert result is not None
    tools = tool_lines(ctx.data_dir, ctx.task.id)
    print(f"\n{task_type}: recorded {result['backend']!r} / {result.get('model')!r}; log {tools}")
    assert tools, "the executor wrote no tool line"
    ran = tools[-1]  # the last tool started is the one whose output is the result
    assert ran.split(" ", 1)[0] == result["backend"]
    if result.get("model"):
        assert result["model"] in ran
    return result


Run = Callable[[Path, tuple[Path, Path]], Awaitable[dict[str, Any]]]


async def sync_builtin(tmp: Path, talk: tuple[Path, Path]) -> dict[str, Any]:
    payload = {"audio_path": str(talk[0]), "subtitle_path": str(talk[1])}
    return await check(tmp, subsync.SyncSubtitleExecutor(), "SYNC_SUBTITLE", payload,
                       subsync.BUILTIN)  # fmt: skip


async def sync_ffsubsync(tmp: Path, talk: tuple[Path, Path]) -> dict[str, Any]:
    payload = {"audio_path": str(talk[0]), "subtitle_path": str(talk[1])}
    return await check(tmp, subsync.SyncSubtitleExecutor(), "SYNC_SUBTITLE", payload,
                       subsync.FFSUBSYNC)  # fmt: skip


async def diarize_encoder(tmp: Path, talk: tuple[Path, Path]) -> dict[str, Any]:
    result = await check(tmp, speech.DiarizeAudioExecutor(), "DIARIZE_AUDIO",
                         {"audio_path": str(talk[0])}, speech.DIARIZE_RESEMBLYZER)  # fmt: skip
    assert result["model"] == voice_encoder.MODEL
    return result


async def diarize_mfcc(tmp: Path, talk: tuple[Path, Path]) -> dict[str, Any]:
    return await check(tmp, speech.DiarizeAudioExecutor(), "DIARIZE_AUDIO",
                       {"audio_path": str(talk[0])}, speech.DIARIZE_BUILTIN)  # fmt: skip


async def hardsub_ocr(tmp: Path, talk: tuple[Path, Path]) -> dict[str, Any]:
    video = ss.make_video(tmp / "burned.mp4", seconds=4.0, text="Hello from the cluster")
    result = await check(tmp, hardsub.DetectHardcodedSubtitleExecutor(),
                         "DETECT_HARDCODED_SUBTITLE", {"video_path": str(video)},
                         "local-extractive")  # fmt: skip
    assert result["detection_method"] == "ocr_fallback" and result["backend"] == "tesseract"
    assert result["model"] is None and result["vision_backend"] is None
    return result


async def fingerprint(tmp: Path, talk: tuple[Path, Path]) -> dict[str, Any]:
    ss.require("fpcalc")
    return await check(tmp, speech.FingerprintAudioExecutor(), "FINGERPRINT_AUDIO",
                       {"audio_path": str(talk[0])}, speech.CHROMAPRINT)  # fmt: skip


async def enhance(tmp: Path, talk: tuple[Path, Path]) -> dict[str, Any]:
    return await check(tmp, speech.EnhanceAudioExecutor(), "ENHANCE_AUDIO",
                       {"audio_path": str(talk[0])}, speech.NOISEREDUCE)  # fmt: skip


RUNS: list[Run] = [sync_builtin, sync_ffsubsync, diarize_encoder, diarize_mfcc, hardsub_ocr,
                   fingerprint, enhance]  # fmt: skip


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.__name__)
async def test_the_recorded_backend_is_the_tool_that_ran(
    tmp_path: Path, talk: tuple[Path, Path], run: Run
) -> None:
    await run(tmp_path, talk)
