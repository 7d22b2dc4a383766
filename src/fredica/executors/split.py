"""SPLIT_AUDIO: cut speech into chunks of at most `chunk_duration_sec`, never inside a word,
each with enough audio around it for Whisper to hear it as well as in the whole file.

Cut points are chosen from where people actually pause, found by voice activity detection: the
Silero VAD model bundled with faster-whisper (run in the node's resident inference worker, in
windows, so pause and cancel stay real), or, on a node without faster-whisper, ffmpeg
`silencedetect`. Each cut goes
into the latest pause of at least MIN_PAUSE_SEC before the nominal boundary (looking back at
most SEARCH_SHARE of a chunk); where nobody pauses there, the cut stays at the boundary
(method "overlap"). Every cut is reported with the method that chose it ("vad pause",
"silence" or "overlap"), and `split_at` summarises them honestly ("mixed" when they differ).

A chunk is responsible for the audio between its two cuts (`own_start_sec`..`own_end_sec`,
at most chunk_duration_sec), but its file carries CONTEXT_SEC more on each side (none after
a cut in a pause: the sentence before it is complete), and more for short chunks, up to
MIN_FILE_SEC in all: Whisper decodes 30 s windows, and a short clip padded
with silence is transcribed measurably worse than the same speech inside a full window. The
neighbours therefore overlap; MERGE_TRANSCRIPTION keeps each word once, from the chunk that owns
the time of its middle, cutting in the widest gap between words near the cut point, so a word
spoken across a cut is never cut in half.

Chunks are cut from a 16 kHz mono PCM WAV by sample index (the input is converted first when
it is anything else), so chunk offsets are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import itertools
import json
import os
import re
import shutil
import uuid
import wave
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import audio, ffmpeg, inference_worker, outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext
from fredica.executors.process import SubprocessReporter

SPLIT_AUDIO = "SPLIT_AUDIO"
SAMPLE_RATE = audio.SAMPLE_RATE
DEFAULT_CHUNK_SEC = 600.0
MAX_CHUNK_SEC = 3600.0
SEARCH_SHARE = 0.35  # a cut may move back from its nominal boundary by this share of a chunk
MIN_PAUSE_SEC = 0.3  # shorter gaps can be inside a word (stop consonants) or a breath
CONTEXT_SEC = 3.0  # audio a chunk's file carries beyond each of its cuts
MIN_FILE_SEC = 30.0  # a shorter chunk carries more context, up to one Whisper window
SNAP_SEC = 5.0  # a file edge moves by at most this much to start or end in a pause
VAD_WINDOW_SEC = 60.0  # VAD window: progress, pause and cancel between; memory ~0.5 MB per s
SILENCE_DB = -35.0
_SILENCE_START = re.compile(r"silence_start:\s*(-?\d+(?:\.\d+)?)")
_SILENCE_END = re.compile(r"silence_end:\s*(-?\d+(?:\.\d+)?)")


@dataclass(frozen=True, slots=True)
class Cut:
    """A point where one chunk's responsibility ends and the next one's begins."""

    at: float
    method: str  # "vad pause" | "silence" | "overlap" (no pause near the boundary)
    pause_sec: float = 0.0


@dataclass(frozen=True, slots=True)
class Span:
    """A chunk: the audio in its file (start..end) and the part it owns (own_start..own_end)."""

    start: float
    end: float
    own_start: float
    own_end: float


def pauses_between(speech: list[tuple[float, float]], duration: float) -> list[tuple[float, float]]:
    """The gaps around and between speech regions (sorted, non-overlapping). Pure."""
    gaps: list[tuple[float, float]] = []
    at = 0.0
    for start, end in sorted(speech):
        if start > at:
            gaps.append((at, start))
        at = max(at, end)
    if duration > at:
        gaps.append((at, duration))
    return gaps


def plan_cuts(
    duration: float,
    chunk_sec: float,
    pauses: list[tuple[float, float]],
    method: str = "vad pause",
) -> list[Cut]:
    """Cuts so that every chunk owns at most `chunk_sec` (see the module doc). Pure."""
    usable = [(s, e) for s, e in pauses if e - s >= MIN_PAUSE_SEC]
    cuts: list[Cut] = []
    start = 0.0
    while duration - start > chunk_sec:
        target = start + chunk_sec
        earliest = max(start + chunk_sec * (1 - SEARCH_SHARE), start + 1e-3)
        best = max(
            ((s, e) for s, e in usable if earliest <= (s + e) / 2 <= target),
            key=lambda p: (p[0] + p[1]) / 2,
            default=None,
        )
        if best is not None:
            cut = Cut(round((best[0] + best[1]) / 2, 3), method, round(best[1] - best[0], 3))
        else:
            cut = Cut(round(target, 3), "overlap")
        cuts.append(cut)
        start = cut.at
    return cuts


def chunk_spans(
    duration: float,
    cuts: list[Cut],
    pauses: Sequence[tuple[float, float]] = (),
    context: float = CONTEXT_SEC,
    min_file: float = MIN_FILE_SEC,
) -> list[Span]:
    """Each chunk's file span: its own part plus context on each side, at least `min_file`
    in all when the audio allows; a file edge moves to a pause within SNAP_SEC, so the model
    starts listening at the start of a phrase, as it does in the whole file. A chunk that
    ends in a pause and needs no filling up to `min_file` stops there: its last sentence is
    complete, and what follows belongs to the next chunk (audio after the cut would only be
    transcribed to be thrown away: 22% of the decoding time of 30 s chunks). Pure."""
    mids = sorted((s + e) / 2 for s, e in pauses if e - s >= MIN_PAUSE_SEC)
    bounds = [0.0] + [c.at for c in cuts] + [duration]
    ends_in_pause = [c.method != "overlap" for c in cuts] + [True]
    spans: list[Span] = []
    for (own_start, own_end), in_pause in zip(
        itertools.pairwise(bounds), ends_in_pause, strict=True
    ):
        extra = max(context * 2, min_file - (own_end - own_start))
        before = min(own_start, extra / 2)
        after = min(duration - own_end, extra - before)
        before = min(own_start, extra - after)  # what the end could not take goes before
        start = _snap(own_start - before, mids, own_start - before - SNAP_SEC, own_start - 1.0)
        end = _snap(own_end + after, mids, own_end + 1.0, own_end + after + SNAP_SEC)
        if in_pause and extra <= context * 2:
            end = own_end
        start = 0.0 if own_start <= 0 else max(0.0, start)
        end = duration if own_end >= duration else min(duration, end)
        spans.append(Span(round(start, 3), round(end, 3), round(own_start, 3), round(own_end, 3)))
    return spans


def _snap(at: float, mids: list[float], low: float, high: float) -> float:
    """The pause middle in [low, high] nearest to `at`, else `at`."""
    near = [m for m in mids if low <= m <= high]
    return min(near, key=lambda m: abs(m - at)) if near else at


def summarize(cuts: list[Cut]) -> str:
    """`split_at` of the result: the one method all cuts used, "mixed", or "none"."""
    methods = {c.method for c in cuts}
    if not methods:
        return "none"
    return methods.pop() if len(methods) == 1 else "mixed"


def parse_silences(lines: list[str], duration: float) -> list[tuple[float, float]]:
    """(start, end) of each silence in ffmpeg `silencedetect` output."""
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


# --- voice activity detection (child process) -------------------------------------------------
def read_pcm_windows(path: str, window_sec: float = VAD_WINDOW_SEC) -> Iterator[tuple[int, Any]]:
    """(first sample, float32 samples) of a 16 kHz mono 16-bit WAV, one window at a time: a
    long recording is never held in memory whole (60 min as float32 would be 230 MB)."""
    np = importlib.import_module("numpy")
    window = max(1, int(window_sec * SAMPLE_RATE))
    with wave.open(path, "rb") as wav:
        offset = 0
        while raw := wav.readframes(window):
            yield offset, np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0
            offset += len(raw) // 2


def speech_in_child(reporter: SubprocessReporter, spec: dict[str, Any]) -> list[list[float]]:
    """Inference worker: speech regions (seconds) found by faster-whisper's Silero VAD, window
    by window (memory bounded by one window, whatever the length of the recording)."""
    try:
        vad = importlib.import_module("faster_whisper.vad")
    except ImportError as exc:
        raise errors.PermanentError("faster-whisper (its bundled VAD) is not installed") from exc
    path = str(spec["audio_path"])
    with wave.open(path, "rb") as wav:
        total = wav.getnframes()
    options = vad.VadOptions(
        min_silence_duration_ms=int(MIN_PAUSE_SEC * 1000 * 0.8), speech_pad_ms=30
    )
    found: list[list[float]] = []
    for offset, part in read_pcm_windows(path):
        reporter.wait_if_paused()
        for stamp in vad.get_speech_timestamps(part, options):
            found.append(
                [(offset + stamp["start"]) / SAMPLE_RATE, (offset + stamp["end"]) / SAMPLE_RATE]
            )
        done = offset + len(part)
        del part  # the next window is read before this loop rebinds `part`
        reporter.progress(5 + 45 * min(1.0, done / max(1, total)), "VAD")
    return found


def _has_vad() -> bool:
    try:
        return importlib.util.find_spec("faster_whisper") is not None
    except (ImportError, ValueError):
        return False


def write_chunks(source: Path, out_dir: Path, spans: list[Span]) -> None:
    """Copy each span of a 16 kHz mono WAV into `chunk_NNN.wav` (sample exact)."""
    with wave.open(str(source), "rb") as src:
        params = src.getparams()
        for i, span in enumerate(spans):
            first = round(span.start * SAMPLE_RATE)
            last = min(round(span.end * SAMPLE_RATE), src.getnframes())
            src.setpos(first)
            frames = src.readframes(max(0, last - first))
            with wave.open(str(out_dir / f"chunk_{i:03d}.wav"), "wb") as dst:
                dst.setparams(params)
                dst.writeframes(frames)


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
            "planner": 4,  # chunks cut by an older planner are not reused
        }

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        # PREFER_ORIGINAL sends a retry back to the node that still holds the chunks; reuse them.
        policies = (models.CachePolicy.CHECK_EXISTING, models.CachePolicy.PREFER_ORIGINAL)
        if not outputs.caches(task, *policies):
            return None
        try:
            source = await ctx.payload_input(task.payload, "audio_path")
            out_dir = audio.payload_output(ctx, task.payload, "output_dir", "chunks")
        except errors.TaskError:
            return None
        return outputs.reusable(out_dir / "index.json", self.task_type, self._inputs(task, source))

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "audio_path")
        out_dir = audio.payload_output(ctx, payload, "output_dir", "chunks")
        chunk_sec = outputs.payload_number(
            payload, "chunk_duration_sec", DEFAULT_CHUNK_SEC, low=1, high=MAX_CHUNK_SEC
        )
        at_pauses = payload.get("split_at_silence", True)
        if not isinstance(at_pauses, bool):
            raise errors.PayloadError("payload.split_at_silence must be true or false")
        work = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.part")
        with outputs.disk_errors(f"creating {work}"):
            work.mkdir(parents=True)
        try:
            pcm = await self._pcm(ctx, source, work)
            duration = audio.wav_duration(pcm)[0]
            if duration <= 0:
                raise errors.PermanentError(f"{source}: no audio to split")
            cuts: list[Cut] = []
            pauses: list[tuple[float, float]] = []
            if duration > chunk_sec:
                pauses, method = await self._pauses(ctx, pcm, duration, at_pauses)
                cuts = plan_cuts(duration, chunk_sec, pauses, method)
            spans = chunk_spans(duration, cuts, pauses)
            await ctx.checkpoint()
            await asyncio.to_thread(write_chunks, pcm, work, spans)
            if pcm.parent == work:
                pcm.unlink()  # the converted copy: only the chunks move into place
            with outputs.disk_errors(f"moving chunks to {out_dir}"):
                if out_dir.exists():
                    trash = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.old")
                    os.replace(out_dir, trash)
                    shutil.rmtree(trash, ignore_errors=True)
                os.replace(work, out_dir)
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(work)
        result = self._result(source, out_dir, chunk_sec, duration, cuts, spans)
        index = out_dir / "index.json"
        outputs.write_text_atomic(index, json.dumps(result, indent=1))
        outputs.write_meta(index, self.task_type, self._inputs(task, source), result)
        ctx.progress(100, f"{len(result['chunks'])} chunk(s), cuts: {result['split_at']}")
        return ExecuteResult(result)

    @staticmethod
    def _result(
        source: Path,
        out_dir: Path,
        chunk_sec: float,
        duration: float,
        cuts: list[Cut],
        spans: list[Span],
    ) -> dict[str, Any]:
        chunks = []
        for i, span in enumerate(spans):
            chunks.append(
                {
                    "index": i,
                    "path": str(out_dir / f"chunk_{i:03d}.wav"),
                    "start_sec": span.start,
                    "duration_sec": round(span.end - span.start, 3),
                    "end_sec": span.end,
                    "own_start_sec": span.own_start,
                    "own_end_sec": span.own_end,
                }
            )
        return {
            "chunks": chunks,
            "chunk_count": len(chunks),
            "chunk_duration_sec": chunk_sec,
            "total_duration_sec": round(duration, 3),
            "cut_points": [c.at for c in cuts],
            "cuts": [asdict(c) for c in cuts],
            "cut_methods": dict(Counter(c.method for c in cuts)),
            "split_at": summarize(cuts),
            "source_path": str(source),
        }

    @staticmethod
    async def _pcm(ctx: TaskContext, source: Path, work: Path) -> Path:
        """`source` itself when it is 16 kHz mono PCM WAV, else a converted copy in `work`."""
        if audio.is_pcm16k(source):
            return source
        info = await ffmpeg.probe(ctx, source)
        if not info.has_audio:
            raise errors.PermanentError(f"{source}: no audio to split")
        target = work / "source.wav"
        args = ["-i", str(source), "-vn", "-ac", "1", "-ar", str(SAMPLE_RATE)]
        await ffmpeg.run(
            ctx,
            [*args, "-c:a", "pcm_s16le", "-f", "wav", str(target)],
            what=f"converting {source} to 16 kHz WAV",
            duration_sec=info.duration_sec,
            span=(0, 5),
            note="converting",
        )
        return target

    @staticmethod
    async def _pauses(
        ctx: TaskContext, pcm: Path, duration: float, at_pauses: bool
    ) -> tuple[list[tuple[float, float]], str]:
        """(pauses, method): VAD when faster-whisper is here, else ffmpeg silencedetect."""
        if not at_pauses:
            return [], "overlap"
        if _has_vad():
            # in the node's resident inference workers: the chunks' Whisper jobs then take over
            # this worker, its imports done (key None: the VAD needs no model)
            speech = await inference_worker.pool().run(
                None, speech_in_child, {"audio_path": str(pcm)}, ctx.control, ctx.progress
            )
            return pauses_between([(s, e) for s, e in speech], duration), "vad pause"
        lines: list[str] = []
        detect = f"silencedetect=noise={SILENCE_DB}dB:d={MIN_PAUSE_SEC}"
        await ffmpeg.run(
            ctx,
            ["-i", str(pcm), "-af", detect, "-f", "null", "-"],
            what=f"finding pauses in {pcm}",
            duration_sec=duration,
            span=(5, 50),
            note="finding pauses",
            on_stderr_line=lines.append,
        )
        return parse_silences(lines, duration), "silence"
