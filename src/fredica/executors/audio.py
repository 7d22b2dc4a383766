"""EXTRACT_AUDIO: the ffmpeg step that turns a video into speech-ready audio.

EXTRACT_AUDIO writes 16 kHz mono 16-bit WAV (what Whisper models consume, so no later step has
to resample). SPLIT_AUDIO (executors/split.py) then cuts it into chunks.
"""

from __future__ import annotations

import importlib
import os
import wave
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import ffmpeg, outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

EXTRACT_AUDIO = "EXTRACT_AUDIO"
SAMPLE_RATE = 16_000


def wav_duration(path: Path) -> tuple[float, int, int]:
    """(duration seconds, sample rate, channels) from a WAV header."""
    try:
        with wave.open(str(path), "rb") as wav:
            rate = wav.getframerate()
            return wav.getnframes() / float(rate), rate, wav.getnchannels()
    except (wave.Error, EOFError, OSError) as exc:
        raise errors.PermanentError(f"not a readable WAV file: {path}: {exc}") from exc


def is_pcm16k(path: Path) -> bool:
    """Whether `path` is a 16 kHz mono 16-bit PCM WAV (read by sample index, no decoding)."""
    try:
        with wave.open(str(path), "rb") as wav:
            ok = (wav.getframerate(), wav.getnchannels(), wav.getsampwidth())
            return ok == (SAMPLE_RATE, 1, 2) and wav.getcomptype() == "NONE"
    except (wave.Error, EOFError, OSError):
        return False


def read_span(path: Path, start_sec: float, seconds: float) -> Any:
    """float32 samples of `seconds` from `start_sec` of a 16 kHz mono 16-bit WAV: only that
    span is read, so a window of a long recording costs the window's memory, not the file's."""
    np = importlib.import_module("numpy")
    with wave.open(str(path), "rb") as wav:
        first = min(max(0, round(start_sec * SAMPLE_RATE)), wav.getnframes())
        wav.setpos(first)
        raw = wav.readframes(max(0, round(seconds * SAMPLE_RATE)))
    return np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0


def payload_output(ctx: TaskContext, payload: dict[str, Any], key: str, default: str) -> Path:
    value = payload.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise errors.PayloadError(f"payload.{key} must be a path string")
    return outputs.resolve(ctx.data_dir, value or str(ctx.output_dir / default))


class ExtractAudioExecutor(TaskExecutor):
    """Video (or any media) -> 16 kHz mono PCM WAV at `output_path`."""

    task_type = EXTRACT_AUDIO
    capability = "FFMPEG"
    pausable = True

    def _inputs(self, task: models.Task, source: Path) -> dict[str, Any]:
        return {
            "source": outputs.fingerprint_file(source),
            "sample_rate": int(task.payload.get("sample_rate", SAMPLE_RATE)),
        }

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        if not outputs.caches(task):
            return None
        try:
            source = await ctx.payload_input(task.payload, "video_path", "input_path")
            target = payload_output(ctx, task.payload, "output_path", "audio.wav")
        except errors.TaskError:
            return None  # execute() reports the problem properly
        return outputs.reusable(target, self.task_type, self._inputs(task, source))

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        source = await ctx.payload_input(task.payload, "video_path", "input_path")
        target = payload_output(ctx, task.payload, "output_path", "audio.wav")
        rate = int(
            outputs.payload_number(task.payload, "sample_rate", SAMPLE_RATE, low=8000, high=48000)
        )
        info = await ffmpeg.probe(ctx, source)
        if not info.has_audio:
            raise errors.PermanentError(f"{source} has no audio stream")
        ctx.event("tool", f"ffmpeg {ffmpeg.executable(ctx.backend_config)}")
        with outputs.disk_errors(f"creating {target.parent}"):
            target.parent.mkdir(parents=True, exist_ok=True)
        tmp = outputs.temp_sibling(target)
        try:
            await ffmpeg.run(
                ctx,
                [
                    "-i",
                    str(source),
                    "-vn",
                    "-map",
                    "0:a:0",
                    "-ac",
                    "1",
                    "-ar",
                    str(rate),
                    "-c:a",
                    "pcm_s16le",
                    "-f",
                    "wav",
                    str(tmp),
                ],
                what=f"extracting audio from {source}",
                duration_sec=info.duration_sec,
                note="extracting audio",
            )
            with outputs.disk_errors(f"writing {target}"):
                os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        duration, out_rate, channels = wav_duration(target)
        if duration <= 0:
            raise errors.PermanentError(f"{source}: the audio stream is empty")
        result = {
            "audio_path": str(target),
            "duration_sec": round(duration, 3),
            "sample_rate": out_rate,
            "channels": channels,
            "size_bytes": target.stat().st_size,
            "source_path": str(source),
            "source_duration_sec": info.duration_sec,
        }
        outputs.write_meta(target, self.task_type, self._inputs(task, source), result)
        ctx.progress(100, "audio extracted")
        return ExecuteResult(result)
