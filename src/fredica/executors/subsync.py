"""SYNC_SUBTITLE: move a subtitle file onto the speech of a video (seed 001 §3.13).

Backends, as the node chose:
- `builtin-vad-xcorr` (ours, needs only ffmpeg and numpy): the sound track is decoded to 16 kHz
  mono, cut into 10 ms frames and marked speech / not speech by energy (a threshold between the
  quiet floor and the loud end of the frame energies); the subtitle cues give a second on/off
  signal; the offset is the lag that best matches the two (FFT cross-correlation of the on/off
  signals, refined by matching cue starts / ends to phrase onsets / ends: see `best_offset`).
  A constant offset only: no frame-rate stretch.
Every cue is kept: a cue moved before 0 is clamped to start at 0 (see `subtitle_format.shift`).
- `ffsubsync` (installed with fredica): its command line on the sound decoded by this node's
  ffmpeg (padded with silence so late cues stay inside the reference); the offset and frame-rate
  scale it found are read from its log and applied here to every cue. Its frame-rate search
  runs only with `fix_framerate: true` in the payload.
An offset beyond `max_offset_sec` fails PERMANENT with the diagnosis (the best lag found and its
score), so a person can look at the file.
"""

from __future__ import annotations

import re
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
REFINE_SEC = 0.5  # the edge refinement looks this far either side of the coarse lag
BRIDGE_SEC = 0.3  # pauses shorter than this are inside a phrase
EDGE_SIGMA_SEC = 0.05


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


def _correlate(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """r[k] = sum_t a[t + k] * b[t] for every lag k in -(len(b) - 1) .. len(a) - 1, as an
    array indexed by k + len(b) - 1 (linear, not circular: the FFT is zero-padded)."""
    n = 1 << int(np.ceil(np.log2(len(a) + len(b))))
    circular = np.fft.irfft(np.fft.rfft(a, n) * np.conj(np.fft.rfft(b, n)), n)
    out: np.ndarray = np.concatenate([circular[n - len(b) + 1 :], circular[: len(a)]])
    return out


def _onsets(marks: np.ndarray) -> np.ndarray:
    """1.0 at each frame where a run of a 0/1 signal starts."""
    out: np.ndarray = np.maximum(np.diff(np.concatenate([[0.0], marks])), 0.0)
    return out


def _bridge(marks: np.ndarray, gap_frames: int) -> np.ndarray:
    """Speech marks with pauses shorter than `gap_frames` filled (words -> phrases)."""
    out = marks.copy()
    on = np.flatnonzero(marks)
    if len(on) < 2:
        return out
    gaps = np.flatnonzero(np.diff(on) > 1)
    for i in gaps:
        lo, hi = on[i] + 1, on[i + 1]
        if hi - lo < gap_frames:
            out[lo:hi] = 1.0
    return out


def best_offset(speech: np.ndarray, subs: np.ndarray, limit_frames: int) -> int:
    """The lag in frames (|lag| <= limit_frames) that moves the subtitle marks onto the speech.

    1. Coarse: both signals as +1 (speech / cue) and -1 (silence / no cue), each over its own
       span; the lag maximising sum(speech[t + lag] * subs[t]) counts agreements minus
       disagreements, so moving cues off the end (or start) of the sound loses.
    2. Fine, within REFINE_SEC of the coarse lag: cue starts against phrase onsets (speech
       with pauses under BRIDGE_SEC filled, onsets smoothed by EDGE_SIGMA_SEC), which peaks
       sharply where the coarse score is a plateau. Starts, not ends: subtitles commonly stay
       up after the speech, while a cue appears with its line."""
    a, b = 2.0 * speech - 1.0, 2.0 * subs - 1.0
    coarse = _correlate(a, b)
    zero = len(b) - 1
    lo, hi = max(0, zero - limit_frames), min(len(coarse), zero + limit_frames + 1)
    window = coarse[lo:hi]
    top = float(window.max())
    plateau = np.flatnonzero(window >= top - PLATEAU_SHARE * abs(top))
    near = plateau[np.abs(plateau - int(np.argmax(window))) <= int(REFINE_SEC / HOP)]
    rough = int(lo + (near.min() + near.max()) // 2) - zero
    onsets, starts = _onsets(_bridge(speech, int(BRIDGE_SEC / HOP))), _onsets(subs)
    sigma = EDGE_SIGMA_SEC / HOP
    taps = np.arange(-int(4 * sigma), int(4 * sigma) + 1)
    fine = _correlate(np.convolve(onsets, np.exp(-0.5 * (taps / sigma) ** 2), "same"), starts)
    span = int(REFINE_SEC / HOP)
    f_lo = max(lo, zero + rough - span)
    f_hi = min(hi, zero + rough + span + 1)
    if f_hi <= f_lo or float(fine[f_lo:f_hi].max()) <= 0:
        return rough
    return int(f_lo + int(np.argmax(fine[f_lo:f_hi]))) - zero


def agreement(speech: np.ndarray, subs: np.ndarray) -> float:
    """Pearson correlation of the speech marks and the (moved) cue marks."""
    n = min(len(speech), len(subs))
    if n < 2 or speech[:n].std() == 0 or subs[:n].std() == 0:
        return 0.0
    return float(np.corrcoef(speech[:n], subs[:n])[0, 1])


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
        scale = 1.0
        if backend == BUILTIN:
            offset, score = await self._builtin(ctx, media, cues, max_offset)
            synced = sf.shift(cues, offset)
        elif backend == FFSUBSYNC:
            fix_rate = payload.get("fix_framerate", False)
            if not isinstance(fix_rate, bool):
                raise errors.PayloadError("payload.fix_framerate must be true or false")
            offset, scale = await self._ffsubsync(ctx, media, source, cues, max_offset, fix_rate)
            # applied here, not taken from ffsubsync's file: a cue moved before 0 is clamped
            # rather than dropped, and the offset reported is the one applied
            synced = sf.shift([sf.Cue(c.start * scale, c.end * scale, c.text) for c in cues],
                              offset)  # fmt: skip
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
            "framerate_scale": scale,
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
        subs = cue_frames(cues, int(cues[-1].end / HOP) + 1)
        # search twice the allowed range, so an offset just beyond it is diagnosed, not clipped
        limit = int(2 * max_offset / HOP)
        offset = round(best_offset(speech, subs, limit) * HOP, 3)
        moved = cue_frames(sf.shift(cues, offset), len(speech))
        score = agreement(speech, moved)
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
        self,
        ctx: TaskContext,
        media: Path,
        source: Path,
        cues: list[sf.Cue],
        max_offset: float,
        fix_framerate: bool,
    ) -> tuple[float, float]:
        """ffsubsync's alignment (offset seconds, frame-rate scale) read from its own log.

        The reference is the media's sound decoded by this node's ffmpeg and padded with silence
        to cover the cues moved by the largest offset searched: ffsubsync's alignment breaks
        (score -inf, a wild offset) when the subtitles run past the end of the reference.
        Its frame-rate correction is only tried when the payload asks (`fix_framerate`): on
        short clips it picks 24/23.976 by chance, a drift of 3.6 s an hour."""
        work = ctx.output_dir
        exe = ffmpeg.executable(ctx.backend_config)
        search = 2 * max_offset  # so an offset just beyond the limit is diagnosed
        reference = work / f".{media.stem}.reference.wav"
        out = work / f".{source.stem}.ffsubsync{source.suffix}"
        bin_dir = work / "ffmpeg-bin"  # ffsubsync wants a directory holding `ffmpeg`
        bin_dir.mkdir(exist_ok=True)
        link = bin_dir / "ffmpeg"
        if not link.exists():
            link.symlink_to(exe)
        argv = [sys.executable, "-m", "ffsubsync.ffsubsync", str(reference), "-i", str(source),
                "-o", str(out), "--ffmpeg-path", str(bin_dir),
                "--max-offset-seconds", f"{search:g}"]  # fmt: skip
        if not fix_framerate:
            argv.append("--no-fix-framerate")
        ctx.event("tool", f"ffsubsync (ffmpeg {exe})")
        try:
            pad = f"apad=whole_dur={cues[-1].end + search:.3f}"
            await ffmpeg.run(
                ctx,
                [
                    "-i",
                    str(media),
                    "-vn",
                    "-ac",
                    "1",
                    "-ar",
                    str(RATE),
                    "-af",
                    pad,
                    str(reference),
                ],
                what=f"decoding the sound of {media.name}",
                span=(0, 30),
                note="decoding sound",
            )
            run = await ctx.run_process(argv)
        finally:
            for path in (out, reference, link):
                path.unlink(missing_ok=True)
            bin_dir.rmdir()
        return ffsubsync_alignment(run.stdout + "\n" + run.stderr)


def ffsubsync_alignment(log: str) -> tuple[float, float]:
    """(offset seconds, frame-rate scale factor) from ffsubsync's log lines."""
    offset = re.search(r"offset seconds:\s*(-?\d+(?:\.\d+)?)", log)
    scale = re.search(r"framerate scale factor:\s*(\d+(?:\.\d+)?)", log)
    if offset is None or scale is None:
        raise errors.PermanentError(f"ffsubsync did not report its alignment: {log.strip()[-300:]}")
    return float(offset.group(1)), float(scale.group(1))
