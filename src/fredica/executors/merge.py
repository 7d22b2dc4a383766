"""MERGE_TRANSCRIPTION: chunk transcripts -> one transcript as JSON, SRT, VTT and TXT.

The chunks arrive in the payload (the pipeline hook copies each completed chunk's segments
there), so the merge needs no file from the nodes that transcribed them. Chunk boundaries are
where transcripts go wrong: a model conditioned on the previous chunk's tail (initial_prompt)
sometimes repeats it, and a segment can run past its chunk's end. The merge orders segments by
time, drops a segment at a boundary that repeats what was just said, and clamps overlaps so
timestamps never go backwards.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

from fredica.domain import errors, models
from fredica.executors import outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

MERGE_TRANSCRIPTION = "MERGE_TRANSCRIPTION"
SRT_LINE_CHARS = 42
DUPLICATE_JACCARD = 0.6
_WORD = re.compile(r"\w+", re.UNICODE)


def _tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def is_boundary_duplicate(previous_tail: str, text: str) -> bool:
    """Whether `text` (first segments of a chunk) repeats the end of the previous chunk."""
    new = _tokens(text)
    if not new:
        return True
    tail = _tokens(previous_tail)
    if not tail:
        return False
    joined_tail, joined_new = " ".join(tail), " ".join(new)
    if joined_new in joined_tail:
        return True
    a, b = set(new), set(tail[-max(len(new) * 2, 8) :])
    return len(a & b) / len(a | b) >= DUPLICATE_JACCARD and len(new) >= 3


def merge_segments(chunks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """(ordered segments, number dropped as boundary duplicates). Pure function."""
    merged: list[dict[str, Any]] = []
    dropped = 0
    for chunk in sorted(chunks, key=lambda c: int(c.get("index", 0))):
        index = int(chunk.get("index", 0))
        first_of_chunk = True
        for raw in sorted(chunk.get("segments") or [], key=lambda s: float(s["start"])):
            text = str(raw.get("text", "")).strip()
            if not text:
                continue
            seg: dict[str, Any] = {
                "start": float(raw["start"]),
                "end": max(float(raw["end"]), float(raw["start"])),
                "text": text,
                "chunk": index,
            }
            if raw.get("speaker"):
                seg["speaker"] = str(raw["speaker"])
            if merged:
                prev = merged[-1]
                at_boundary = prev["chunk"] != index and first_of_chunk
                tail = " ".join(s["text"] for s in merged[-2:])
                if at_boundary and is_boundary_duplicate(tail, text):
                    dropped += 1
                    continue
                if seg["start"] < prev["end"]:
                    if seg["end"] <= prev["end"] and prev["chunk"] != index:
                        dropped += 1  # wholly inside what the previous chunk already covered
                        continue
                    seg["start"] = prev["end"]
                    seg["end"] = max(seg["end"], seg["start"])
            first_of_chunk = False
            merged.append(seg)
    for seg in merged:
        seg["start"], seg["end"] = round(seg["start"], 3), round(seg["end"], 3)
    return merged, dropped


def _clock(seconds: float, sep: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, SRT_LINE_CHARS)) or text


def to_srt(segments: list[dict[str, Any]]) -> str:
    blocks = []
    for i, seg in enumerate(segments, 1):
        text = seg["text"] if not seg.get("speaker") else f"[{seg['speaker']}] {seg['text']}"
        stamp = f"{_clock(seg['start'], ',')} --> {_clock(seg['end'], ',')}"
        blocks.append(f"{i}\n{stamp}\n{_wrap(text)}\n")
    return "\n".join(blocks)


def to_vtt(segments: list[dict[str, Any]]) -> str:
    blocks = ["WEBVTT\n"]
    for seg in segments:
        text = _wrap(seg["text"])
        if seg.get("speaker"):
            text = f"<v {seg['speaker']}>{text}"
        blocks.append(f"{_clock(seg['start'], '.')} --> {_clock(seg['end'], '.')}\n{text}\n")
    return "\n".join(blocks)


def to_txt(segments: list[dict[str, Any]]) -> str:
    """Plain text; with speaker labels, one paragraph per change of speaker."""
    if not any(seg.get("speaker") for seg in segments):
        return "\n".join(textwrap.wrap(" ".join(s["text"] for s in segments), 100)) + "\n"
    paragraphs: list[tuple[str, list[str]]] = []
    for seg in segments:
        speaker = str(seg.get("speaker") or "UNKNOWN")
        if not paragraphs or paragraphs[-1][0] != speaker:
            paragraphs.append((speaker, []))
        paragraphs[-1][1].append(seg["text"])
    return "\n\n".join(f"{who}: {' '.join(parts)}" for who, parts in paragraphs) + "\n"


def _chunks(payload: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = payload.get("chunks")
    if not isinstance(chunks, list) or not all(isinstance(c, dict) for c in chunks):
        raise errors.PayloadError("payload.chunks must be a list of chunk transcripts")
    for i, chunk in enumerate(chunks):
        segments = chunk.get("segments")
        if not isinstance(segments, list):
            raise errors.PayloadError(f"payload.chunks[{i}].segments must be a list")
        for seg in segments:
            if not isinstance(seg, dict) or not {"start", "end", "text"} <= seg.keys():
                raise errors.PayloadError(
                    f"payload.chunks[{i}]: every segment needs start, end and text"
                )
    return chunks


class MergeTranscriptionExecutor(TaskExecutor):
    """Ordered, de-duplicated transcript written as transcript.{json,srt,vtt,txt}."""

    task_type = MERGE_TRANSCRIPTION
    capability = None

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        if not outputs.caches(task):
            return None
        try:
            chunks = _chunks(task.payload)
        except errors.TaskError:
            return None
        return outputs.reusable(ctx.output_dir / "transcript.json", self.task_type, chunks)

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        chunks = _chunks(task.payload)
        expected = task.payload.get("chunk_count")
        seen = {int(c.get("index", 0)) for c in chunks}
        missing = sorted(set(range(int(expected))) - seen) if isinstance(expected, int) else []
        if not chunks:
            raise errors.PermanentError("no chunk transcript to merge (all chunks were skipped?)")
        await ctx.checkpoint()
        segments, dropped = merge_segments(chunks)
        languages = [str(c["language"]) for c in chunks if c.get("language")]
        language = max(set(languages), key=languages.count) if languages else None
        speakers = sorted({s["speaker"] for s in segments if s.get("speaker")})
        out = ctx.output_dir
        files = {
            "json": out / "transcript.json",
            "srt": out / "transcript.srt",
            "vtt": out / "transcript.vtt",
            "txt": out / "transcript.txt",
        }
        text = " ".join(s["text"] for s in segments).strip()
        duration = max((s["end"] for s in segments), default=0.0)
        document = {
            "language": language,
            "duration_sec": duration,
            "speakers": speakers,
            "segments": segments,
            "text": text,
        }
        outputs.write_text_atomic(files["json"], json.dumps(document, ensure_ascii=False, indent=1))
        outputs.write_text_atomic(files["srt"], to_srt(segments))
        outputs.write_text_atomic(files["vtt"], to_vtt(segments))
        outputs.write_text_atomic(files["txt"], to_txt(segments))
        result = {
            "text": text,
            "language": language,
            "duration_sec": duration,
            "segment_count": len(segments),
            "segments": [
                {k: s[k] for k in ("start", "end", "text", "speaker") if k in s} for s in segments
            ],
            "speakers": speakers,
            "chunks_merged": len(chunks),
            "missing_chunks": missing,
            "boundary_duplicates_dropped": dropped,
            "files": {k: str(v) for k, v in files.items()},
        }
        outputs.write_meta(files["json"], self.task_type, chunks, result)
        ctx.progress(100, f"{len(segments)} segments")
        return ExecuteResult(result)
