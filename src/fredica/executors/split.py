"""SPLIT_AUDIO: cut speech into chunks of at most `chunk_duration_sec`, never inside a word.

Cuts are chosen from where people actually pause, found by voice activity detection: the
Silero VAD model bundled with faster-whisper (run in a child process, in windows, so pause and
cancel stay real), or, on a node without faster-whisper, ffmpeg `silencedetect`. Each cut goes
into the latest pause of at least MIN_PAUSE_SEC before the nominal boundary (looking back at
most SEARCH_SHARE of a chunk). Where nobody pauses there, the chunks overlap by OVERLAP_SEC
instead: the earlier chunk ends at the boundary, the next one starts OVERLAP_SEC before it, and
MERGE_TRANSCRIPTION keeps each word of the overlap once, by its timestamps. Every cut is
reported with the method that chose it ("vad pause", "silence" or "overlap"), and `split_at`
summarises them honestly ("mixed" when they differ).

Chunks are cut from a 16 kHz mono PCM WAV by sample index (the input is converted first when
it is anything else), so chunk offsets are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import uuid
import wave
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import audio, ffmpeg, outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext
from fredica.executors.process import SubprocessReporter

SPLIT_AUDIO = "SPLIT_AUDIO"
SAMPLE_RATE = audio.SAMPLE_RATE
DEFAULT_CHUNK_SEC = 600.0
MAX_CHUNK_SEC = 3600.0
SEARCH_SHARE = 0.35  # a cut may move back from its nominal boundary by this share of a chunk
MIN_PAUSE_SEC = 0.3  # shorter gaps can be inside a word (stop consonants) or a breath
OVERLAP_SEC = 3.0  # chunks overlap by this much where no pause was found (<= a quarter chunk)
VAD_WINDOW_SEC = 600.0  # VAD runs window by window: progress, pause and cancel in between
SILENCE_DB = -35.0
_SILENCE_START = re.compile(r"silence_start:\s*(-?\d+(?:\.\d+)?)")
_SILENCE_END = re.compile(r"silence_end:\s*(-?\d+(?:\.\d+)?)")


@dataclass(frozen=True, slots=True)
class Cut:
    """Where one chunk ends and the next begins (equal unless the chunks overlap)."""

    end_prev: float
    start_next: float
    method: str  # "vad pause" | "silence" | "overlap"
    pause_sec: float = 0.0


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
    overlap_sec: float = OVERLAP_SEC,
) -> list[Cut]:
    """Cuts so that every chunk is at most `chunk_sec` long (see the module doc). Pure."""
    overlap = min(overlap_sec, chunk_sec / 4)
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
            at = round((best[0] + best[1]) / 2, 3)
            cuts.append(Cut(at, at, method, round(best[1] - best[0], 3)))
            start = at
        else:
            cut = Cut(round(target, 3), round(target - overlap, 3), "overlap")
            cuts.append(cut)
            start = cut.start_next
    return cuts


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
def read_pcm(path: str) -> Any:
    """float32 samples of a 16 kHz mono 16-bit WAV."""
    np = importlib.import_module("numpy")
    with wave.open(path, "rb") as wav:
        raw = wav.readframes(wav.getnframes())
    return np.frombuffer(raw, dtype=np.int16).astype(np.float32) / 32768.0


def speech_in_child(reporter: SubprocessReporter, spec: dict[str, Any]) -> list[list[float]]:
    """Child process: speech regions (seconds) found by faster-whisper's Silero VAD."""
    try:
        vad = importlib.import_module("faster_whisper.vad")
    except ImportError as exc:
        raise errors.PermanentError("faster-whisper (its bundled VAD) is not installed") from exc
    samples = read_pcm(str(spec["audio_path"]))
    options = vad.VadOptions(
        min_silence_duration_ms=int(MIN_PAUSE_SEC * 1000 * 0.8), speech_pad_ms=30
    )
    window = int(VAD_WINDOW_SEC * SAMPLE_RATE)
    found: list[list[float]] = []
    for offset in range(0, len(samples), window):
        reporter.wait_if_paused()
        part = samples[offset : offset + window]
        for stamp in vad.get_speech_timestamps(part, options):
            found.append(
                [(offset + stamp["start"]) / SAMPLE_RATE, (offset + stamp["end"]) / SAMPLE_RATE]
            )
        reporter.progress(5 + 45 * min(1.0, (offset + window) / max(1, len(samples))), "VAD")
    return found


def _has_vad() -> bool:
    try:
        return importlib.util.find_spec("faster_whisper") is not None
    except (ImportError, ValueError):
        return False


def _is_pcm16k(path: Path) -> bool:
    try:
        with wave.open(str(path), "rb") as wav:
            ok = (wav.getframerate(), wav.getnchannels(), wav.getsampwidth())
            return ok == (SAMPLE_RATE, 1, 2) and wav.getcomptype() == "NONE"
    except (wave.Error, EOFError, OSError):
        return False


def write_chunks(source: Path, out_dir: Path, spans: list[tuple[float, float]]) -> None:
    """Copy each (start, end) span of a 16 kHz mono WAV into `chunk_NNN.wav` (sample exact)."""
    with wave.open(str(source), "rb") as src:
        params = src.getparams()
        for i, (start, end) in enumerate(spans):
            first = round(start * SAMPLE_RATE)
            last = min(round(end * SAMPLE_RATE), src.getnframes())
            src.setpos(first)
            frames = src.readframes(max(0, last - first))
            with wave.open(str(out_dir / f"chunk_{i:03d}.wav"), "wb") as dst:
                dst.setparams(params)
                dst.writeframes(frames)


def chunk_spans(duration: float, cuts: list[Cut]) -> list[tuple[float, float]]:
    """(start, end) of every chunk for a list of cuts. Pure."""
    starts = [0.0] + [c.start_next for c in cuts]
    ends = [c.end_prev for c in cuts] + [duration]
    return list(zip(starts, ends, strict=True))


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
            "planner": 2,  # chunks cut by an older planner are not reused
        }

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        # PREFER_ORIGINAL sends a retry back to the node that still holds the chunks; reuse them.
        policies = (models.CachePolicy.CHECK_EXISTING, models.CachePolicy.PREFER_ORIGINAL)
        if not outputs.caches(task, *policies):
            return None
        try:
            source = audio.payload_input(ctx, task.payload, "audio_path")
            out_dir = audio.payload_output(ctx, task.payload, "output_dir", "chunks")
        except errors.TaskError:
            return None
        return outputs.reusable(out_dir / "index.json", self.task_type, self._inputs(task, source))

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = audio.payload_input(ctx, payload, "audio_path")
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
            if duration > chunk_sec:
                pauses, method = await self._pauses(ctx, pcm, duration, at_pauses)
                cuts = plan_cuts(duration, chunk_sec, pauses, method)
            spans = chunk_spans(duration, cuts)
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
        spans: list[tuple[float, float]],
    ) -> dict[str, Any]:
        chunks = []
        for i, (start, end) in enumerate(spans):
            chunks.append(
                {
                    "index": i,
                    "path": str(out_dir / f"chunk_{i:03d}.wav"),
                    "start_sec": round(start, 3),
                    "duration_sec": round(end - start, 3),
                    "end_sec": round(end, 3),
                    "overlap_before_sec": round(cuts[i - 1].end_prev - start, 3) if i else 0.0,
                }
            )
        return {
            "chunks": chunks,
            "chunk_count": len(chunks),
            "chunk_duration_sec": chunk_sec,
            "total_duration_sec": round(duration, 3),
            "cut_points": [c.end_prev for c in cuts],
            "cuts": [asdict(c) for c in cuts],
            "cut_methods": dict(Counter(c.method for c in cuts)),
            "split_at": summarize(cuts),
            "source_path": str(source),
        }

    @staticmethod
    async def _pcm(ctx: TaskContext, source: Path, work: Path) -> Path:
        """`source` itself when it is 16 kHz mono PCM WAV, else a converted copy in `work`."""
        if _is_pcm16k(source):
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
            speech = await ctx.run_in_subprocess(speech_in_child, {"audio_path": str(pcm)})
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
