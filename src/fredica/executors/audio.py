"""EXTRACT_AUDIO and SPLIT_AUDIO: ffmpeg steps that turn a video into speech-ready chunks.

EXTRACT_AUDIO writes 16 kHz mono 16-bit WAV (what Whisper models consume, so no later step has
to resample). SPLIT_AUDIO cuts it into chunks of at most `chunk_duration_sec`, choosing each
cut inside a pause near the nominal boundary (ffmpeg `silencedetect`), so words are not cut in
half at chunk edges; chunk start offsets come from the WAV headers of the written chunks, which
makes them exact however ffmpeg rounded the cuts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
import wave
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import ffmpeg, outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

EXTRACT_AUDIO = "EXTRACT_AUDIO"
SPLIT_AUDIO = "SPLIT_AUDIO"
SAMPLE_RATE = 16_000
DEFAULT_CHUNK_SEC = 600.0
MAX_CHUNK_SEC = 3600.0
SILENCE_DB = -35.0
MIN_SILENCE_SEC = 0.25
# a cut may move back from its nominal boundary by at most this share of a chunk, to a pause
SEARCH_SHARE = 0.35

_SILENCE_START = re.compile(r"silence_start:\s*(-?\d+(?:\.\d+)?)")
_SILENCE_END = re.compile(r"silence_end:\s*(-?\d+(?:\.\d+)?)")


def wav_duration(path: Path) -> tuple[float, int, int]:
    """(duration seconds, sample rate, channels) from a WAV header."""
    try:
        with wave.open(str(path), "rb") as wav:
            rate = wav.getframerate()
            return wav.getnframes() / float(rate), rate, wav.getnchannels()
    except (wave.Error, EOFError, OSError) as exc:
        raise errors.PermanentError(f"not a readable WAV file: {path}: {exc}") from exc


def _input(ctx: TaskContext, payload: dict[str, Any], *keys: str) -> Path:
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str) and value:
            return ctx.input_path(outputs.resolve(ctx.data_dir, value))
    raise errors.PayloadError(f"payload needs {' or '.join(keys)}")


def _output(ctx: TaskContext, payload: dict[str, Any], key: str, default: str) -> Path:
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
            source = _input(ctx, task.payload, "video_path", "input_path")
            target = _output(ctx, task.payload, "output_path", "audio.wav")
        except errors.TaskError:
            return None  # execute() reports the problem properly
        return outputs.reusable(target, self.task_type, self._inputs(task, source))

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        source = _input(ctx, task.payload, "video_path", "input_path")
        target = _output(ctx, task.payload, "output_path", "audio.wav")
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


def choose_cuts(
    duration: float, chunk_sec: float, silences: list[tuple[float, float]]
) -> list[float]:
    """Cut points so that every chunk is at most `chunk_sec` long.

    Each cut is placed in the middle of the pause closest to (but not after) the nominal
    boundary, looking back at most SEARCH_SHARE of a chunk; without a pause there, at the
    boundary itself. Pure function (tested directly).
    """
    cuts: list[float] = []
    start = 0.0
    while duration - start > chunk_sec:
        target = start + chunk_sec
        earliest = target - chunk_sec * SEARCH_SHARE
        best: float | None = None
        for s_start, s_end in silences:
            mid = (s_start + s_end) / 2
            if earliest <= mid <= target and (best is None or mid > best):
                best = mid
        cut = best if best is not None else target
        cuts.append(round(cut, 3))
        start = cut
    return cuts


def parse_silences(lines: list[str], duration: float) -> list[tuple[float, float]]:
    found: list[tuple[float, float]] = []
    open_start: float | None = None
    for line in lines:
        if m := _SILENCE_START.search(line):
            open_start = max(0.0, float(m.group(1)))
        elif (m := _SILENCE_END.search(line)) and open_start is not None:
            found.append((open_start, float(m.group(1))))
            open_start = None
    if open_start is not None:
        found.append((open_start, duration))
    return found


class SplitAudioExecutor(TaskExecutor):
    """Audio -> `chunk_NNN.wav` files of <= chunk_duration_sec with their start offsets."""

    task_type = SPLIT_AUDIO
    capability = "FFMPEG"
    pausable = True

    def _inputs(self, task: models.Task, source: Path) -> dict[str, Any]:
        return {
            "source": outputs.fingerprint_file(source),
            "chunk_duration_sec": task.payload.get("chunk_duration_sec", DEFAULT_CHUNK_SEC),
            "split_at_silence": task.payload.get("split_at_silence", True),
        }

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        # PREFER_ORIGINAL sends a retry back to the node that still holds the chunks; reuse them.
        policies = (models.CachePolicy.CHECK_EXISTING, models.CachePolicy.PREFER_ORIGINAL)
        if not outputs.caches(task, *policies):
            return None
        try:
            source = _input(ctx, task.payload, "audio_path")
            out_dir = _output(ctx, task.payload, "output_dir", "chunks")
        except errors.TaskError:
            return None
        return outputs.reusable(out_dir / "index.json", self.task_type, self._inputs(task, source))

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = _input(ctx, payload, "audio_path")
        out_dir = _output(ctx, payload, "output_dir", "chunks")
        chunk_sec = outputs.payload_number(
            payload, "chunk_duration_sec", DEFAULT_CHUNK_SEC, low=1, high=MAX_CHUNK_SEC
        )
        at_silence = payload.get("split_at_silence", True)
        if not isinstance(at_silence, bool):
            raise errors.PayloadError("payload.split_at_silence must be true or false")
        info = await ffmpeg.probe(ctx, source)
        duration = info.duration_sec
        if source.suffix.lower() == ".wav":
            duration = wav_duration(source)[0]
        if not duration or duration <= 0 or not info.has_audio:
            raise errors.PermanentError(f"{source}: no audio to split")
        silences: list[tuple[float, float]] = []
        if at_silence and duration > chunk_sec:
            lines: list[str] = []
            await ffmpeg.run(
                ctx,
                [
                    "-i",
                    str(source),
                    "-af",
                    f"silencedetect=noise={SILENCE_DB}dB:d={MIN_SILENCE_SEC}",
                    "-f",
                    "null",
                    "-",
                ],
                what=f"finding pauses in {source}",
                duration_sec=duration,
                span=(0, 30),
                note="finding pauses",
                on_stderr_line=lines.append,
            )
            silences = parse_silences(lines, duration)
        cuts = choose_cuts(duration, chunk_sec, silences)
        chunks = await self._split(ctx, source, out_dir, cuts, duration)
        result = {
            "chunks": chunks,
            "chunk_count": len(chunks),
            "chunk_duration_sec": chunk_sec,
            "total_duration_sec": round(duration, 3),
            "cut_points": cuts,
            "split_at": "silence" if silences else "fixed",
            "source_path": str(source),
        }
        index = out_dir / "index.json"
        outputs.write_text_atomic(index, json.dumps(result, indent=1))
        outputs.write_meta(index, self.task_type, self._inputs(task, source), result)
        ctx.progress(100, f"{len(chunks)} chunk(s)")
        return ExecuteResult(result)

    async def _split(
        self, ctx: TaskContext, source: Path, out_dir: Path, cuts: list[float], duration: float
    ) -> list[dict[str, Any]]:
        """Write the chunks into a fresh temp dir, then swap it in as `out_dir`."""
        tmp_dir = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.part")
        with outputs.disk_errors(f"creating {tmp_dir}"):
            tmp_dir.mkdir(parents=True)
        try:
            args = ["-i", str(source), "-vn", "-ac", "1", "-ar", str(SAMPLE_RATE)]
            args += ["-c:a", "pcm_s16le"]
            if cuts:
                args += ["-f", "segment", "-segment_times", ",".join(f"{c:.3f}" for c in cuts)]
                args += ["-reset_timestamps", "1", str(tmp_dir / "chunk_%03d.wav")]
            else:
                args += ["-f", "wav", str(tmp_dir / "chunk_000.wav")]
            await ffmpeg.run(
                ctx,
                args,
                what=f"splitting {source}",
                duration_sec=duration,
                span=(30, 95),
                note="splitting",
            )
            with outputs.disk_errors(f"moving chunks to {out_dir}"):
                if out_dir.exists():
                    trash = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.old")
                    os.replace(out_dir, trash)
                    shutil.rmtree(trash, ignore_errors=True)
                os.replace(tmp_dir, out_dir)
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp_dir)
        chunks: list[dict[str, Any]] = []
        offset = 0.0
        for path in sorted(out_dir.glob("chunk_*.wav")):
            length = wav_duration(path)[0]
            if length <= 0:
                continue
            chunks.append(
                {
                    "index": len(chunks),
                    "path": str(path),
                    "start_sec": round(offset, 3),
                    "duration_sec": round(length, 3),
                }
            )
            offset += length
        if not chunks:
            raise errors.PermanentError(f"{source}: splitting produced no audio")
        return chunks
