"""SYNC_SUBTITLE: move a subtitle file onto the speech of a video (seed 001 §3.13).

Backends, as the node chose:
- `builtin-vad-xcorr` (ours, needs only ffmpeg and numpy): the sound track is decoded to 16 kHz
  mono, cut into 10 ms frames and marked speech / not speech by energy (a threshold between the
  quiet floor and the loud end of the frame energies); the subtitle cues give a second on/off
  signal; the offset is the lag that maximises the cross-correlation of the two (computed with
  an FFT over the whole file). A constant offset only: no frame-rate stretch.
- `ffsubsync` (installed with fredica): its command line with this node's ffmpeg; the offset is
  read back from the cue starts (its frame-rate correction is kept in the file).
An offset beyond `max_offset_sec` fails PERMANENT with the diagnosis (the best lag found and its
score), so a person can look at the file.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fredica.domain import errors, models
from fredica.executors import ffmpeg, outputs, subtitles
from fredica.executors import subtitle_format as sf
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

SYNC_SUBTITLE = "SYNC_SUBTITLE"
BUILTIN = "builtin-vad-xcorr"
FFSUBSYNC = "ffsubsync"
RATE = 16_000
HOP = 0.01  # seconds per analysis frame
FLOOR_PCT, PEAK_PCT, THRESHOLD_SHARE = 10, 95, 0.35
MIN_SPEECH_DB = -55.0
PLATEAU_SHARE = 0.02  # lags scoring within 2 % of the best belong to its plateau


def decode_mono(path: Path) -> np.ndarray:
    """16-bit little-endian mono samples of a raw file as float32 in [-1, 1]."""
    data = np.fromfile(path, dtype="<i2")
    samples: np.ndarray = np.divide(data, 32768.0, dtype=np.float32)
    return samples


def speech_frames(samples: np.ndarray, rate: int = RATE, hop: float = HOP) -> np.ndarray:
    """A 0/1 speech mark per `hop` seconds, by frame energy."""
    step = int(rate * hop)
    count = len(samples) // step
    if count == 0:
        return np.zeros(0, dtype=np.float32)
    frames = samples[: count * step].reshape(count, step)
    db = 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-10)
    floor, peak = np.percentile(db, FLOOR_PCT), np.percentile(db, PEAK_PCT)
    threshold = max(MIN_SPEECH_DB, floor + THRESHOLD_SHARE * (peak - floor))
    marks: np.ndarray = (db > threshold).astype(np.float32)
    return marks


def cue_frames(cues: list[sf.Cue], length: int, hop: float = HOP) -> np.ndarray:
    marks = np.zeros(length, dtype=np.float32)
    for cue in cues:
        lo, hi = max(0, int(cue.start / hop)), min(length, int(cue.end / hop))
        marks[lo:hi] = 1.0
    return marks


def best_offset(speech: np.ndarray, subs: np.ndarray, limit_frames: int) -> tuple[int, float]:
    """(lag in frames, normalised score) maximising sum(speech[t] * subs[t - lag]) over
    |lag| <= limit_frames; both signals are centred so silence agreeing with silence counts."""
    a = speech - speech.mean()
    b = subs - subs.mean()
    n = 1 << int(np.ceil(np.log2(len(a) + len(b))))
    corr = np.fft.irfft(np.fft.rfft(a, n) * np.conj(np.fft.rfft(b, n)), n)
    # lags -limit..limit in order
    values = np.concatenate([corr[n - limit_frames :], corr[: limit_frames + 1]])
    best = int(np.argmax(values))
    # cues are longer than the voiced frames inside them, so the peak is a plateau: take its
    # middle rather than its first frame
    floor = values[best] - PLATEAU_SHARE * abs(values[best])
    lo = hi = best
    while lo > 0 and values[lo - 1] >= floor:
        lo -= 1
    while hi < len(values) - 1 and values[hi + 1] >= floor:
        hi += 1
    norm = float(np.sqrt(np.sum(a * a) * np.sum(b * b))) or 1.0
    return (lo + hi) // 2 - limit_frames, float(values[best]) / norm


class SyncSubtitleExecutor(TaskExecutor):
    """Subtitles + the video (or audio) they belong to -> re-timed subtitles."""

    task_type = SYNC_SUBTITLE
    capability = "SUBTITLE_SYNC"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        media = await ctx.payload_input(payload, "video_path", "audio_path")
        source = await ctx.payload_input(payload, "subtitle_path", "srt_path")
        max_offset = outputs.payload_number(payload, "max_offset_sec", 60, low=0.1, high=3600)
        if payload.get("method", "audio") != "audio":
            raise errors.PayloadError("payload.method: only 'audio' alignment is supported")
        cues, fmt = subtitles.read_cues(source)
        if not cues:
            raise errors.PermanentError(f"{source} has no cues to align")
        out_fmt = sf.SubtitleFormat(str(payload.get("output_format") or fmt.value).lower())
        target = subtitles.output_file(ctx, payload, f"{source.stem}.synced.{out_fmt.value}")
        backend = ctx.backend or BUILTIN
        if backend == BUILTIN:
            offset, score = await self._builtin(ctx, media, cues, max_offset)
            synced = sf.shift(cues, offset)
        elif backend == FFSUBSYNC:
            synced = await self._ffsubsync(ctx, media, source, max_offset)
            offset = statistics.median(
                b.start - a.start for a, b in zip(cues, synced, strict=False)
            )
            score = None
            if abs(offset) > max_offset:
                raise errors.PermanentError(
                    f"{backend} moved the subtitles by {offset:+.2f}s, more than max_offset_sec "
                    f"{max_offset:g}: check that {source.name} belongs to {media.name}"
                )
        else:
            raise errors.PermanentError(f"unknown SUBTITLE_SYNC backend {backend!r}")
        outputs.write_text_atomic(target, sf.dumps(synced, out_fmt))
        ctx.progress(100, f"moved by {offset:+.2f}s")
        result: dict[str, Any] = {
            "subtitle_path": str(target),
            "format": out_fmt.value,
            "offset_sec": round(offset, 3),
            "score": None if score is None else round(score, 4),
            "cue_count": len(synced),
            "backend": backend,
            "method": "audio",
        }
        return ExecuteResult(result)

    async def _builtin(
        self, ctx: TaskContext, media: Path, cues: list[sf.Cue], max_offset: float
    ) -> tuple[float, float]:
        ctx.event("tool", f"{BUILTIN} (ffmpeg {ffmpeg.executable(ctx.backend_config)})")
        raw = ctx.output_dir / "sound.s16le"
        try:
            await ffmpeg.run(
                ctx,
                ["-i", str(media), "-vn", "-ac", "1", "-ar", str(RATE), "-f", "s16le", str(raw)],
                what=f"decoding the sound of {media.name}",
                span=(0, 60),
                note="decoding sound",
            )
            speech = speech_frames(decode_mono(raw))
        finally:
            raw.unlink(missing_ok=True)
        if not speech.any():
            raise errors.PermanentError(f"{media.name}: no speech found to align the subtitles to")
        length = max(len(speech), int(cues[-1].end / HOP) + 1)
        subs = cue_frames(cues, length)
        speech = np.pad(speech, (0, length - len(speech)))
        # search twice the allowed range, so an offset just beyond it is diagnosed, not clipped
        limit = min(length - 1, int(2 * max_offset / HOP))
        lag, score = best_offset(speech, subs, limit)
        offset = lag * HOP
        if abs(offset) > max_offset:
            raise errors.PermanentError(
                f"best alignment moves the subtitles by {offset:+.2f}s (score {score:.2f}), "
                f"beyond max_offset_sec {max_offset:g}: check that the subtitles belong to "
                f"{media.name}, or raise max_offset_sec"
            )
        if score <= 0.05:
            raise errors.PermanentError(
                f"the subtitles do not follow the speech of {media.name} (best score "
                f"{score:.2f} at {offset:+.2f}s)"
            )
        return offset, score

    async def _ffsubsync(
        self, ctx: TaskContext, media: Path, source: Path, max_offset: float
    ) -> list[sf.Cue]:
        """ffsubsync's command line (VAD + alignment), with this node's ffmpeg."""
        work = ctx.output_dir
        out = work / f".{source.stem}.ffsubsync{source.suffix}"
        exe = ffmpeg.executable(ctx.backend_config)
        bin_dir = work / "ffmpeg-bin"  # ffsubsync wants a directory holding `ffmpeg`
        bin_dir.mkdir(exist_ok=True)
        link = bin_dir / "ffmpeg"
        if not link.exists():
            link.symlink_to(exe)
        argv = [sys.executable, "-m", "ffsubsync.ffsubsync", str(media), "-i", str(source),
                "-o", str(out), "--ffmpeg-path", str(bin_dir),
                "--max-offset-seconds", f"{2 * max_offset:g}"]  # fmt: skip
        ctx.event("tool", f"ffsubsync (ffmpeg {exe})")
        try:
            await ctx.run_process(argv)
            synced, _ = subtitles.read_cues(out)
        finally:
            out.unlink(missing_ok=True)
            link.unlink(missing_ok=True)
            bin_dir.rmdir()
        return synced
