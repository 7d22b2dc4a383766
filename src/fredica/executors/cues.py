"""Subtitle cues and transcript files (SRT, VTT, TXT) from merged transcript segments.

A Whisper segment can run for 30 s and hundreds of characters; shown as one subtitle it cannot
be read. Segments are therefore split into cues of at most MAX_CUE_SEC seconds and MAX_LINES
lines: by word timestamps when the segment has them (each cue starts and ends with its words),
otherwise by interpolating times over the characters. Lines are measured in display columns:
Latin text wraps at LINE_COLUMNS characters on spaces, CJK text (written without spaces) at
CJK_LINE_CHARS characters, each CJK character being as wide as two Latin ones.
"""

from __future__ import annotations

import re
import textwrap
import unicodedata
from typing import Any

MAX_CUE_SEC = 7.0
MAX_LINES = 2
LINE_COLUMNS = 42
CJK_LINE_CHARS = 16
_SENTENCE_END = (".", "!", "?", "。", "！", "？", "…")


def is_wide(char: str) -> bool:
    """East Asian wide or full-width characters (CJK ideographs, kana, hangul)."""
    return unicodedata.east_asian_width(char) in ("W", "F")


def is_cjk_text(text: str) -> bool:
    """Mostly wide characters: written without spaces, wrapped by character."""
    letters = [c for c in text if not c.isspace() and unicodedata.category(c)[0] in "LN"]
    return bool(letters) and sum(is_wide(c) for c in letters) * 2 >= len(letters)


def wrap_lines(text: str) -> list[str]:
    """The lines `text` takes on screen (Latin: on spaces; CJK: every CJK_LINE_CHARS)."""
    text = " ".join(text.split())
    if not text:
        return []
    if is_cjk_text(text):
        return [text[i : i + CJK_LINE_CHARS] for i in range(0, len(text), CJK_LINE_CHARS)]
    return textwrap.wrap(text, LINE_COLUMNS) or [text]


def fits(text: str, start: float, end: float) -> bool:
    """Whether `text` shown from `start` to `end` is one readable cue."""
    return end - start <= MAX_CUE_SEC + 1e-6 and len(wrap_lines(text)) <= MAX_LINES


def join_words(words: list[str]) -> str:
    """Whisper word tokens carry their own leading spaces (none in CJK): concatenate."""
    return "".join(words).strip()


def _cue(start: float, end: float, text: str, seg: dict[str, Any]) -> dict[str, Any]:
    cue: dict[str, Any] = {"start": round(start, 3), "end": round(end, 3), "text": text}
    if seg.get("speaker"):
        cue["speaker"] = seg["speaker"]
    return cue


def _by_words(seg: dict[str, Any]) -> list[dict[str, Any]]:
    """Greedy cues over timed words; a cue also ends after a sentence once half full."""
    cues: list[dict[str, Any]] = []
    current: list[dict[str, Any]] = []
    for word in seg["words"]:
        trial = [*current, word]
        text = join_words([str(w["word"]) for w in trial])
        if current and not fits(text, float(current[0]["start"]), float(word["end"])):
            cues.append(_flush(current, seg))
            current = [word]
            continue
        current = trial
        long_enough = float(word["end"]) - float(current[0]["start"]) >= MAX_CUE_SEC / 2
        if long_enough and str(word["word"]).strip().endswith(_SENTENCE_END):
            cues.append(_flush(current, seg))
            current = []
    if current:
        cues.append(_flush(current, seg))
    return cues


def _flush(words: list[dict[str, Any]], seg: dict[str, Any]) -> dict[str, Any]:
    start = float(words[0]["start"])
    # a single word the model stretched over a long silence still gets a readable cue length
    end = min(max(float(words[-1]["end"]), start), start + MAX_CUE_SEC)
    return _cue(start, end, join_words([str(w["word"]) for w in words]), seg)


def _pieces(text: str) -> list[str]:
    """Units that may not be split: words (Latin) or characters (CJK)."""
    if is_cjk_text(text):
        return [c for c in text if not c.isspace()]
    return text.split()


def _by_characters(seg: dict[str, Any]) -> list[dict[str, Any]]:
    """No word timestamps: cut the text into cues and share the time by characters."""
    start, end, text = float(seg["start"]), float(seg["end"]), str(seg["text"])
    pieces = _pieces(text)
    sep = "" if is_cjk_text(text) else " "
    total = max(1, sum(len(p) for p in pieces))
    per_char = (end - start) / total
    groups: list[list[str]] = []
    for piece in pieces:
        if groups:
            trial = [*groups[-1], piece]
            chars = sum(len(p) for p in trial)
            if fits(sep.join(trial), 0.0, chars * per_char):
                groups[-1] = trial
                continue
        groups.append([piece])
    cues: list[dict[str, Any]] = []
    at = start
    for group in groups:
        length = sum(len(p) for p in group) * per_char
        cues.append(_cue(at, min(end, at + length), sep.join(group), seg))
        at += length
    return cues


def split_cues(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Readable cues (<= MAX_CUE_SEC, <= MAX_LINES lines) covering every segment's text."""
    cues: list[dict[str, Any]] = []
    for seg in segments:
        if fits(str(seg["text"]), float(seg["start"]), float(seg["end"])):
            cues.append(_cue(float(seg["start"]), float(seg["end"]), str(seg["text"]), seg))
        elif seg.get("words"):
            cues.extend(_by_words(seg))
        else:
            cues.extend(_by_characters(seg))
    return [c for c in cues if c["text"]]


# --- file formats ---------------------------------------------------------------------------
def _clock(seconds: float, sep: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _label(cue: dict[str, Any]) -> str:
    return f"[{cue['speaker']}] {cue['text']}" if cue.get("speaker") else str(cue["text"])


def to_srt(segments: list[dict[str, Any]]) -> str:
    """SRT with segments split into readable cues."""
    blocks = []
    for i, cue in enumerate(split_cues(segments), 1):
        stamp = f"{_clock(cue['start'], ',')} --> {_clock(cue['end'], ',')}"
        blocks.append(f"{i}\n{stamp}\n" + "\n".join(wrap_lines(_label(cue))) + "\n")
    return "\n".join(blocks)


def to_vtt(segments: list[dict[str, Any]]) -> str:
    """WebVTT with segments split into readable cues (speakers as voice tags)."""
    blocks = ["WEBVTT\n"]
    for cue in split_cues(segments):
        text = "\n".join(wrap_lines(str(cue["text"])))
        if cue.get("speaker"):
            text = f"<v {cue['speaker']}>{text}"
        blocks.append(f"{_clock(cue['start'], '.')} --> {_clock(cue['end'], '.')}\n{text}\n")
    return "\n".join(blocks)


def to_txt(segments: list[dict[str, Any]]) -> str:
    """Plain text; with speaker labels, one paragraph per change of speaker."""
    if not any(seg.get("speaker") for seg in segments):
        joined = join_text([str(s["text"]) for s in segments])
        return "\n".join(textwrap.wrap(joined, 100)) + "\n"
    paragraphs: list[tuple[str, list[str]]] = []
    for seg in segments:
        speaker = str(seg.get("speaker") or "UNKNOWN")
        if not paragraphs or paragraphs[-1][0] != speaker:
            paragraphs.append((speaker, []))
        paragraphs[-1][1].append(seg["text"])
    return "\n\n".join(f"{who}: {join_text(parts)}" for who, parts in paragraphs) + "\n"


_SPACE_BEFORE_CJK = re.compile(
    r"(?<=[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]) (?=[\u3000-\u9fff])"
)


def join_text(parts: list[str]) -> str:
    """Segment texts joined by spaces, except between two CJK characters."""
    return _SPACE_BEFORE_CJK.sub("", " ".join(p.strip() for p in parts if p.strip()))
