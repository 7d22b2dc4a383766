"""MERGE_TRANSCRIPTION: chunk transcripts -> one transcript as JSON, SRT, VTT and TXT.

The chunks arrive in the payload (the pipeline hook copies each completed chunk's segments,
with their word timestamps, there), so the merge needs no file from the nodes that transcribed
them. Joins are reconciled by time, never by comparing strings alone:
- Where two chunks overlap in audio (SPLIT_AUDIO gives every chunk context beyond its cuts),
  one join time is chosen inside the overlap, near SPLIT_AUDIO's cut point (`own_end_sec`), in
  the widest gap between the words of either chunk; each word is kept from exactly one chunk,
  the one whose side of the join its middle falls on. A word cut in half at a chunk's audio
  edge is thereby replaced by the neighbour's whole copy of it.
- Elsewhere a segment is dropped only when it overlaps the previous chunk's kept segments in
  time (at least half of its duration) AND its words are already there (as whole words: "So."
  is not a repeat of "also"). Every drop and every overlap cut is recorded in the result.
Segments are then ordered and clamped so that timestamps never go backwards.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fredica.domain import errors, models
from fredica.executors import cues, outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

MERGE_TRANSCRIPTION = "MERGE_TRANSCRIPTION"
TIME_OVERLAP_SHARE = 0.5  # a repeat must lie at least this share inside the earlier segments
WORD_OVERLAP_SHARE = 0.8  # ...and this share of its words must already be there
EDGE_MARGIN_SEC = 0.3  # words this close to a chunk's audio edge may be cut: no cut there
CUT_SEARCH_SEC = 2.0  # the join is placed within this distance of SPLIT_AUDIO's cut point
_WORD = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> list[str]:
    """Whole lower-cased words (Unicode letters and digits)."""
    return [w.lower() for w in _WORD.findall(text)]


def is_boundary_duplicate(seg: dict[str, Any], earlier: list[dict[str, Any]]) -> bool:
    """Whether `seg` (from a later chunk) repeats `earlier` segments: it must overlap them in
    time by at least TIME_OVERLAP_SHARE of its duration and WORD_OVERLAP_SHARE of its words
    must be among theirs, counted as whole words. Pure."""
    start, end = float(seg["start"]), float(seg["end"])
    duration = max(end - start, 1e-3)
    overlapping = [e for e in earlier if float(e["start"]) < end and float(e["end"]) > start]
    covered = sum(min(end, float(e["end"])) - max(start, float(e["start"])) for e in overlapping)
    if not overlapping or covered / duration < TIME_OVERLAP_SHARE:
        return False
    new = Counter(tokens(str(seg["text"])))
    if not new:
        return True  # nothing but punctuation, inside speech already transcribed
    seen = Counter(t for e in overlapping for t in tokens(str(e["text"])))
    shared = sum((new & seen).values())
    return shared / sum(new.values()) >= WORD_OVERLAP_SHARE


@dataclass
class Merged:
    """The merged segments and what was reconciled at the joins (kept in the result)."""

    segments: list[dict[str, Any]] = field(default_factory=list)
    reconciled: list[dict[str, Any]] = field(default_factory=list)

    @property
    def dropped(self) -> int:
        return sum(1 for r in self.reconciled if r.get("dropped_text"))


def _mid(item: dict[str, Any]) -> float:
    return (float(item["start"]) + float(item["end"])) / 2


def _words(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for s in chunk.get("segments") or [] for w in s.get("words") or []]


def _end_of(chunk: dict[str, Any]) -> float | None:
    if chunk.get("end_sec") is not None:
        return float(chunk["end_sec"])
    return None


def overlap_cut(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """A cut time inside the overlap [lo, hi]: the middle of the widest stretch without a word
    (from either chunk), away from the audio edges where words may be cut. Pure."""
    inner_lo, inner_hi = lo + EDGE_MARGIN_SEC, hi - EDGE_MARGIN_SEC
    if inner_hi <= inner_lo:
        return round((lo + hi) / 2, 3)
    busy = sorted((max(s, inner_lo), min(e, inner_hi)) for s, e in spans if e > inner_lo)
    busy = [(s, e) for s, e in busy if s < inner_hi]
    best, best_width, at = (inner_lo + inner_hi) / 2, -1.0, inner_lo
    for s, e in [*busy, (inner_hi, inner_hi)]:
        if s - at > best_width:
            best, best_width = (at + s) / 2, s - at
        at = max(at, e)
    if best_width <= 0:  # words everywhere: cut between the two words whose ends are closest
        best = (inner_lo + inner_hi) / 2
    return round(best, 3)


def _clip(seg: dict[str, Any], lo: float, hi: float) -> tuple[dict[str, Any] | None, list[str]]:
    """`seg` restricted to what lies in [lo, hi) (by word middles, else the segment's)."""
    words = seg.get("words") or []
    if not words:
        if lo <= _mid(seg) < hi:
            return seg, []
        return None, [str(seg["text"])]
    kept = [w for w in words if lo <= _mid(w) < hi]
    if len(kept) == len(words):
        return seg, []
    removed = [str(w["word"]).strip() for w in words if not lo <= _mid(w) < hi]
    if not kept:
        return None, removed
    clipped = dict(seg)
    clipped["words"] = kept
    clipped["text"] = cues.join_words([str(w["word"]) for w in kept])
    if kept[0] is not words[0]:  # cut at the front: the segment starts with its first word
        clipped["start"] = float(kept[0]["start"])
    if kept[-1] is not words[-1]:
        clipped["end"] = max(float(kept[-1]["end"]), float(clipped["start"]))
    return clipped, removed


def _windows(chunks: list[dict[str, Any]], merged: Merged) -> list[tuple[float, float]]:
    """Per chunk, the time window whose words it contributes (overlaps cut in two)."""
    inf = float("inf")
    windows = [(-inf, inf) for _ in chunks]
    for i in range(len(chunks) - 1):
        a, b = chunks[i], chunks[i + 1]
        a_end, b_start = _end_of(a), float(b.get("start_sec") or 0.0)
        if a_end is None or a_end <= b_start + 0.05:
            continue
        lo, hi = b_start, a_end
        owner_cut = a.get("own_end_sec")
        if owner_cut is not None:  # search near the cut SPLIT_AUDIO chose (a pause, if any)
            lo = max(lo, float(owner_cut) - CUT_SEARCH_SEC)
            hi = min(hi, float(owner_cut) + CUT_SEARCH_SEC)
        spans = [(float(w["start"]), float(w["end"])) for w in _words(a) + _words(b)]
        cut = overlap_cut(spans, lo, hi)
        windows[i] = (windows[i][0], cut)
        windows[i + 1] = (cut, windows[i + 1][1])
        merged.reconciled.append(
            {
                "after_chunk": int(a.get("index", i)),
                "overlap_sec": round(a_end - b_start, 3),
                "cut_at": cut,
                "method": "word timestamps" if spans else "segment middles",
            }
        )
    return windows


def _segment(raw: dict[str, Any], index: int) -> dict[str, Any]:
    seg: dict[str, Any] = {
        "start": float(raw["start"]),
        "end": max(float(raw["end"]), float(raw["start"])),
        "text": str(raw.get("text", "")).strip(),
        "chunk": index,
    }
    if raw.get("speaker"):
        seg["speaker"] = str(raw["speaker"])
    if raw.get("words"):
        seg["words"] = [dict(w) for w in raw["words"]]
    return seg


def _append(merged: Merged, seg: dict[str, Any]) -> None:
    """Add `seg` unless it repeats the previous chunk; never let time go backwards."""
    out = merged.segments
    earlier = [s for s in out[-6:] if s["chunk"] != seg["chunk"]]
    if earlier and is_boundary_duplicate(seg, earlier):
        merged.reconciled.append(
            {
                "after_chunk": earlier[-1]["chunk"],
                "method": "time and word overlap",
                "dropped_text": seg["text"],
                "at": round(seg["start"], 3),
            }
        )
        return
    if out and seg["start"] < out[-1]["end"]:
        seg["start"] = out[-1]["end"]
        seg["end"] = max(seg["end"], seg["start"])
        for w in seg.get("words") or []:
            w["start"] = max(float(w["start"]), seg["start"])
            w["end"] = max(float(w["end"]), w["start"])
    out.append(seg)


def merge_segments(chunks: list[dict[str, Any]]) -> Merged:
    """Ordered segments with every join reconciled by time (see the module doc). Pure."""
    merged = Merged()
    ordered = sorted(chunks, key=lambda c: int(c.get("index", 0)))
    windows = _windows(ordered, merged)
    for chunk, (lo, hi) in zip(ordered, windows, strict=True):
        index = int(chunk.get("index", 0))
        removed: list[str] = []
        for raw in sorted(chunk.get("segments") or [], key=lambda s: float(s["start"])):
            seg = _segment(raw, index)
            if not seg["text"]:
                continue
            clipped, gone = _clip(seg, lo, hi)
            removed += gone
            if clipped is not None and clipped["text"]:
                _append(merged, clipped)
        if removed:
            merged.reconciled.append(
                {"chunk": index, "method": "overlap cut", "words_left_to_neighbour": removed}
            )
    for seg in merged.segments:
        seg["start"], seg["end"] = round(seg["start"], 3), round(seg["end"], 3)
    return merged


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
            words = seg.get("words")
            if words is not None and not (
                isinstance(words, list)
                and all(isinstance(w, dict) and {"start", "end", "word"} <= w.keys() for w in words)
            ):
                raise errors.PayloadError(
                    f"payload.chunks[{i}]: segment words need start, end and word"
                )
    return chunks


def _public(seg: dict[str, Any]) -> dict[str, Any]:
    return {k: seg[k] for k in ("start", "end", "text", "speaker", "words") if k in seg}


class MergeTranscriptionExecutor(TaskExecutor):
    """Ordered, reconciled transcript written as transcript.{json,srt,vtt,txt}."""

    task_type = MERGE_TRANSCRIPTION
    capability = None
    starts_inline = True  # in-memory merge and small file writes: enters no task-bound scope

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
        merged = merge_segments(chunks)
        segments = [_public(s) for s in merged.segments]
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
        text = cues.join_text([s["text"] for s in segments])
        duration = max((s["end"] for s in segments), default=0.0)
        document = {
            "language": language,
            "duration_sec": duration,
            "speakers": speakers,
            "segments": segments,
            "text": text,
            "reconciled": merged.reconciled,
        }
        outputs.write_text_atomic(files["json"], json.dumps(document, ensure_ascii=False, indent=1))
        outputs.write_text_atomic(files["srt"], cues.to_srt(segments))
        outputs.write_text_atomic(files["vtt"], cues.to_vtt(segments))
        outputs.write_text_atomic(files["txt"], cues.to_txt(segments))
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
            "boundary_duplicates_dropped": merged.dropped,
            "reconciled": merged.reconciled,
            "files": {k: str(v) for k, v in files.items()},
        }
        outputs.write_meta(files["json"], self.task_type, chunks, result)
        ctx.progress(100, f"{len(segments)} segments")
        return ExecuteResult(result)
