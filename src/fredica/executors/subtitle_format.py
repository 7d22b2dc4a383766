"""Subtitles as data: parse and write SRT, ASS and WebVTT, break lines, repair timing.

Pure (no I/O): the subtitle executors, the translator and the TTS timeline all read and write
subtitles through this module. A subtitle file is a list of `Cue`s (start and end in seconds,
text with "\n" between its lines). Conversions keep text and times; ASS stores centiseconds, so
a time passing through ASS is rounded to 10 ms.

Line breaking counts display width: East Asian wide and full-width characters (CJK) count 2,
everything else 1. Latin text breaks at spaces; CJK text may break between any two characters
except before closing punctuation or after opening punctuation (the usual kinsoku rule).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from fredica.domain import errors


class SubtitleFormat(StrEnum):
    SRT = "srt"
    ASS = "ass"
    VTT = "vtt"


@dataclass(frozen=True, slots=True)
class Cue:
    """One subtitle: shown from `start` to `end` seconds; lines separated by "\n"."""

    start: float
    end: float
    text: str

    @property
    def duration(self) -> float:
        return self.end - self.start


DEFAULT_FONT = "DejaVu Sans"


@dataclass(frozen=True, slots=True)
class AssStyle:
    """The look of burned or ASS subtitles (the ASS `Default` style)."""

    font: str = DEFAULT_FONT
    size: int = 22
    colour: str = "#FFFFFF"  # text colour, #RRGGBB
    outline_colour: str = "#000000"
    outline: float = 2.0
    alignment: int = 2  # numpad layout: 2 = bottom centre, 8 = top centre
    margin_v: int = 16
    play_res: tuple[int, int] = (384, 288)


@dataclass(frozen=True, slots=True)
class TimingReport:
    """What `fix_timing` changed."""

    dropped_empty: int = 0
    overlaps_fixed: int = 0
    extended: int = 0
    reordered: bool = False


_SRT_TIME = re.compile(r"(\d+):(\d{1,2}):(\d{1,2})[,.](\d{1,3})")
_VTT_TIME = re.compile(r"(?:(\d+):)?(\d{1,2}):(\d{1,2})\.(\d{1,3})")
_ARROW = re.compile(r"^\s*(\S+)\s*-->\s*(\S+)")
_ASS_TIME = re.compile(r"(\d+):(\d{1,2}):(\d{1,2})[.:](\d{1,2})")
_ASS_OVERRIDE = re.compile(r"\{[^}]*\}")
_VTT_TAG = re.compile(r"</?[a-z][^>]*>")
_OPENING = set("([{（【「『《〈“‘")
_CLOSING = set(")]}）】」』》〉”’，。、！？；：,.!?;:…")


def _ms(value: float) -> int:
    return max(0, round(value * 1000))


def format_srt_time(seconds: float) -> str:
    ms = _ms(seconds)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


def format_vtt_time(seconds: float) -> str:
    return format_srt_time(seconds).replace(",", ".")


def format_ass_time(seconds: float) -> str:
    cs = max(0, round(seconds * 100))
    return f"{cs // 360_000}:{cs // 6000 % 60:02d}:{cs // 100 % 60:02d}.{cs % 100:02d}"


def _frac(digits: str) -> float:
    return int(digits) / float(10 ** len(digits))


def parse_time(text: str, fmt: SubtitleFormat) -> float:
    """A timestamp of `fmt` in seconds; InvalidSubtitle naming the bad value."""
    text = text.strip()
    if fmt is SubtitleFormat.ASS:
        m = _ASS_TIME.fullmatch(text)
    elif fmt is SubtitleFormat.VTT:
        m = _VTT_TIME.fullmatch(text)
    else:
        m = _SRT_TIME.fullmatch(text)
    if m is None:
        raise InvalidSubtitle(f"bad {fmt.value} timestamp {text!r}")
    h, mi, s, f = m.groups()
    return int(h or 0) * 3600 + int(mi) * 60 + int(s) + _frac(f)


class InvalidSubtitle(errors.PayloadError):
    """The subtitle file cannot be parsed."""


# --- parsing -----------------------------------------------------------------------------
def detect_format(text: str, name: str = "") -> SubtitleFormat:
    """The format of subtitle `text` (by content, then by file name)."""
    head = text.lstrip("\ufeff").lstrip()
    if head.startswith("WEBVTT"):
        return SubtitleFormat.VTT
    if head.startswith("[Script Info]") or "\nDialogue:" in text or head.startswith("Dialogue:"):
        return SubtitleFormat.ASS
    if "-->" in text:
        return SubtitleFormat.SRT
    lowered = name.lower()
    for fmt in SubtitleFormat:
        if lowered.endswith("." + fmt.value) or (
            fmt is SubtitleFormat.ASS and lowered.endswith(".ssa")
        ):
            return fmt
    raise InvalidSubtitle(
        f"not a subtitle file (no SRT, ASS or WebVTT content): {name or text[:40]!r}"
    )


def _blocks(text: str) -> list[list[str]]:
    lines = text.replace("\ufeff", "").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line.rstrip())
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def _timed_blocks(text: str, fmt: SubtitleFormat) -> list[Cue]:
    cues: list[Cue] = []
    for block in _blocks(text):
        at = next((i for i, line in enumerate(block) if "-->" in line), None)
        if at is None:
            if fmt is SubtitleFormat.SRT and not block[0].strip().isdigit():
                raise InvalidSubtitle(f"SRT block without a time line: {block[0]!r}")
            continue  # VTT header, NOTE, STYLE, REGION blocks; a lone SRT index
        m = _ARROW.match(block[at])
        if m is None:
            raise InvalidSubtitle(f"bad {fmt.value} time line {block[at]!r}")
        start, end = parse_time(m.group(1), fmt), parse_time(m.group(2), fmt)
        body = "\n".join(block[at + 1 :])
        if fmt is SubtitleFormat.VTT:
            body = _VTT_TAG.sub("", body).replace("&lt;", "<").replace("&gt;", ">")
            body = body.replace("&amp;", "&")
        cues.append(Cue(start, end, body))
    return cues


def parse_ass(text: str) -> list[Cue]:
    """Dialogue lines of an ASS/SSA file; override tags ({\\...}) are dropped."""
    fields: list[str] | None = None
    cues: list[Cue] = []
    section = ""
    for raw in text.replace("\ufeff", "").splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line.lower()
            continue
        if section != "[events]":
            continue
        key, _, value = line.partition(":")
        if key == "Format":
            fields = [f.strip().lower() for f in value.split(",")]
        elif key == "Dialogue":
            if fields is None:
                raise InvalidSubtitle("ASS [Events] has Dialogue lines before its Format line")
            parts = value.strip().split(",", len(fields) - 1)
            if len(parts) != len(fields):
                raise InvalidSubtitle(f"ASS Dialogue line with too few fields: {line!r}")
            row = dict(zip(fields, parts, strict=True))
            body = _ASS_OVERRIDE.sub("", row["text"]).replace("\\N", "\n").replace("\\n", "\n")
            body = body.replace("\\h", " ")
            start = parse_time(row["start"], SubtitleFormat.ASS)
            cues.append(Cue(start, parse_time(row["end"], SubtitleFormat.ASS), body))
    return sorted(cues, key=lambda c: (c.start, c.end))


def parse(text: str, fmt: SubtitleFormat | str | None = None, name: str = "") -> list[Cue]:
    """Cues of a subtitle file's text (format detected when not given)."""
    kind = SubtitleFormat(fmt) if fmt else detect_format(text, name)
    cues = parse_ass(text) if kind is SubtitleFormat.ASS else _timed_blocks(text, kind)
    for cue in cues:
        if cue.end < cue.start:
            raise InvalidSubtitle(
                f"cue ends before it starts: {format_srt_time(cue.start)} --> "
                f"{format_srt_time(cue.end)}"
            )
    return cues


# --- writing -----------------------------------------------------------------------------
def write_srt(cues: Iterable[Cue]) -> str:
    out = [
        f"{i}\n{format_srt_time(c.start)} --> {format_srt_time(c.end)}\n{c.text}\n"
        for i, c in enumerate(cues, 1)
    ]
    return "\n".join(out)


def write_vtt(cues: Iterable[Cue]) -> str:
    out = ["WEBVTT\n"]
    for c in cues:
        body = c.text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        out.append(f"{format_vtt_time(c.start)} --> {format_vtt_time(c.end)}\n{body}\n")
    return "\n".join(out)


def ass_colour(rgb: str) -> str:
    """#RRGGBB -> ASS &H00BBGGRR."""
    value = rgb.lstrip("#")
    if not re.fullmatch(r"[0-9a-fA-F]{6}", value):
        raise errors.PayloadError(f"colour must be #RRGGBB, got {rgb!r}")
    r, g, b = value[0:2], value[2:4], value[4:6]
    return f"&H00{b}{g}{r}".upper()


def write_ass(cues: Iterable[Cue], style: AssStyle | None = None) -> str:
    s = style or AssStyle()
    width, height = s.play_res
    head = (
        "[Script Info]\nScriptType: v4.00+\nWrapStyle: 2\nScaledBorderAndShadow: yes\n"
        f"PlayResX: {width}\nPlayResY: {height}\n\n[V4+ Styles]\n"
        "Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, "
        "BackColour, Bold, Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, "
        "BorderStyle, Outline, Shadow, Alignment, MarginL, MarginR, MarginV, Encoding\n"
        f"Style: Default,{s.font},{s.size},{ass_colour(s.colour)},&H000000FF,"
        f"{ass_colour(s.outline_colour)},&H80000000,0,0,0,0,100,100,0,0,1,{s.outline:g},0,"
        f"{s.alignment},10,10,{s.margin_v},1\n\n[Events]\n"
        "Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text\n"
    )
    lines = [
        f"Dialogue: 0,{format_ass_time(c.start)},{format_ass_time(c.end)},Default,,0,0,0,,"
        + c.text.replace("\n", "\\N")
        for c in cues
    ]
    return head + "\n".join(lines) + "\n"


def dumps(cues: Sequence[Cue], fmt: SubtitleFormat | str, style: AssStyle | None = None) -> str:
    kind = SubtitleFormat(fmt)
    if kind is SubtitleFormat.ASS:
        return write_ass(cues, style)
    return write_vtt(cues) if kind is SubtitleFormat.VTT else write_srt(cues)


# --- line breaking -----------------------------------------------------------------------
def char_width(ch: str) -> int:
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def text_width(text: str) -> int:
    return sum(char_width(ch) for ch in text)


def _tokens(text: str) -> list[str]:
    """Unbreakable pieces: Latin words (with their trailing space) and single CJK characters
    (closing punctuation glued to the piece before it, opening punctuation to the one after)."""
    tokens: list[str] = []
    cur = ""
    closed = prev_wide = False
    for ch in text:
        if ch == " ":
            cur += ch
            closed = True
            continue
        if ch in _CLOSING:
            cur += ch
            continue
        wide = char_width(ch) == 2
        if cur and (closed or wide or prev_wide) and cur[-1] not in _OPENING:
            tokens.append(cur)
            cur = ""
        cur += ch
        closed = False
        prev_wide = wide and ch not in _OPENING
    if cur:
        tokens.append(cur)
    return tokens


def wrap(text: str, max_width: int) -> list[str]:
    """Break `text` into balanced lines of at most `max_width` columns (a single token longer
    than that stays whole)."""
    if max_width < 4:
        raise errors.PayloadError(f"max_width must be at least 4, got {max_width}")
    flat = " ".join(text.split())
    total = text_width(flat)
    if total <= max_width:
        return [flat] if flat else []
    target = total / math.ceil(total / max_width)
    lines: list[str] = []
    line = ""
    for tok in _tokens(flat):
        candidate = line + tok
        if line and (
            text_width(candidate.rstrip()) > max_width or text_width(line.rstrip()) >= target
        ):
            lines.append(line.rstrip())
            line = tok
        else:
            line = candidate
    if line.strip():
        lines.append(line.rstrip())
    return lines


def reflow(cues: Sequence[Cue], max_width: int, max_lines: int = 2) -> list[Cue]:
    """Re-break every cue's text; a cue needing more than `max_lines` lines is split into
    consecutive cues, its time shared in proportion to their text width."""
    out: list[Cue] = []
    for cue in cues:
        lines = wrap(cue.text, max_width)
        if len(lines) <= max_lines:
            out.append(replace(cue, text="\n".join(lines)))
            continue
        groups = [lines[i : i + max_lines] for i in range(0, len(lines), max_lines)]
        widths = [sum(text_width(x) for x in g) for g in groups]
        total = sum(widths) or 1
        t = cue.start
        for group, width in zip(groups, widths, strict=True):
            end = t + cue.duration * width / total
            out.append(Cue(round(t, 3), round(end, 3), "\n".join(group)))
            t = end
        out[-1] = replace(out[-1], end=cue.end)
    return out


# --- timing ------------------------------------------------------------------------------
def fix_timing(
    cues: Sequence[Cue], min_duration: float = 0.7, min_gap: float = 0.08
) -> tuple[list[Cue], TimingReport]:
    """Sort cues, drop empty ones, end each cue `min_gap` before the next starts (overlaps),
    and stretch cues shorter than `min_duration` into the free time after them."""
    kept = [c for c in cues if c.text.strip()]
    ordered = sorted(kept, key=lambda c: (c.start, c.end))
    out: list[Cue] = []
    overlaps = extended = 0
    for i, cue in enumerate(ordered):
        nxt = ordered[i + 1].start if i + 1 < len(ordered) else math.inf
        end = cue.end
        limit = nxt - min_gap
        if end > limit:
            end = max(cue.start + 0.001, limit)
            overlaps += 1
        if end - cue.start < min_duration and limit > end:
            end = min(cue.start + min_duration, limit)
            extended += 1
        out.append(Cue(cue.start, round(end, 3), cue.text))
    report = TimingReport(len(cues) - len(kept), overlaps, extended, ordered != kept)
    return out, report


CLAMPED_MIN_SEC = 0.5  # a cue pushed wholly before 0 is shown this long (or its own length)


def shift(cues: Sequence[Cue], offset: float) -> list[Cue]:
    """Every cue moved by `offset` seconds; none is dropped: a cue pushed before 0 starts at 0,
    and one pushed wholly before 0 keeps min(its length, CLAMPED_MIN_SEC) from 0."""
    out = []
    for c in cues:
        start = max(0.0, c.start + offset)
        end = max(c.end + offset, start + min(c.end - c.start, CLAMPED_MIN_SEC))
        out.append(Cue(round(start, 3), round(end, 3), c.text))
    return out
