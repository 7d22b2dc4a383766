"""The subtitle tasks of seed 001 §3.4: EXTRACT_SUBTITLE, FORMAT_SUBTITLE, BURN_SUBTITLE and
BLUR_SUBTITLE_REGION (SYNC_SUBTITLE lives in `subsync.py`).

- EXTRACT_SUBTITLE: an embedded subtitle track (by index among the subtitle streams, or by
  language tag) -> SRT / ASS / VTT (`ffmpeg -map 0:s:N`).
- FORMAT_SUBTITLE: pure text work run on the scheduling node (no capability): convert between
  SRT, ASS and VTT, re-break lines by display width (CJK counts double), repair timing.
- BURN_SUBTITLE: render the subtitles into the picture with libass (`ass` filter); the style
  (font, size, colour, outline, top/bottom position) comes from the payload; an optional
  `audio_path` replaces the sound track (a dubbed video).
- BLUR_SUBTITLE_REGION: hide the band y_top_pct..y_bottom_pct of the picture (gaussian,
  pixelate or solid_fill), where DETECT_HARDCODED_SUBTITLE found burned-in text.
The video encoder follows the FFMPEG backend the node chose (libx264 on ffmpeg-cpu, h264_nvenc
on ffmpeg-nvenc, h264_videotoolbox, h264_vaapi after uploading the filtered frames), so what is
recorded is what ran; the GPU encoders are not exercised by the tests here (no GPU).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import ffmpeg, outputs
from fredica.executors import subtitle_format as sf
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

EXTRACT_SUBTITLE = "EXTRACT_SUBTITLE"
FORMAT_SUBTITLE = "FORMAT_SUBTITLE"
BURN_SUBTITLE = "BURN_SUBTITLE"
BLUR_SUBTITLE_REGION = "BLUR_SUBTITLE_REGION"
BLUR_METHODS = ("gaussian", "pixelate", "solid_fill")
_SIZE = re.compile(r"\b(\d{2,5})x(\d{2,5})\b")
_SUB_STREAM = re.compile(r"Stream #0:(\d+)(?:\[[^\]]*\])?(?:\((\w+)\))?: Subtitle: (\w+)")
_CODECS = {
    sf.SubtitleFormat.SRT: "srt",
    sf.SubtitleFormat.ASS: "ass",
    sf.SubtitleFormat.VTT: "webvtt",
}
_ENCODERS = {
    "ffmpeg-nvenc": ["-c:v", "h264_nvenc", "-preset", "p4", "-cq", "23"],
    "ffmpeg-videotoolbox": ["-c:v", "h264_videotoolbox", "-q:v", "60"],
    "ffmpeg-vaapi": ["-c:v", "h264_vaapi", "-qp", "23"],
}
VAAPI = "ffmpeg-vaapi"
RENDER_NODE = "/dev/dri/renderD128"
CPU_ENCODER = ["-c:v", "libx264", "-preset", "veryfast", "-crf", "20"]


def output_file(ctx: TaskContext, payload: dict[str, Any], default: str) -> Path:
    value = payload.get("output_path")
    if value is not None and (not isinstance(value, str) or not value):
        raise errors.PayloadError("payload.output_path must be a path string")
    target = outputs.resolve(ctx.data_dir, value or str(ctx.output_dir / default))
    with outputs.disk_errors(f"creating {target.parent}"):
        target.parent.mkdir(parents=True, exist_ok=True)
    return target


def read_cues(path: Path) -> tuple[list[sf.Cue], sf.SubtitleFormat]:
    """The cues of a subtitle file and its format (PermanentError when unreadable)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise errors.PermanentError(f"cannot read subtitles {path}: {exc}") from exc
    fmt = sf.detect_format(text, path.name)
    return sf.parse(text, fmt), fmt


def fraction(payload: dict[str, Any], key: str, default: float | None = None) -> float:
    if payload.get(key) is None and default is None:
        raise errors.PayloadError(f"payload.{key} is required (a fraction of the height, 0-1)")
    return outputs.payload_number(payload, key, default or 0.0, low=0.0, high=1.0)


def video_size(info: ffmpeg.MediaInfo) -> tuple[int, int]:
    for desc in info.video_streams:
        if m := _SIZE.search(desc):
            return int(m.group(1)), int(m.group(2))
    raise errors.PermanentError("the input has no video stream")


def encoder_args(ctx: TaskContext) -> list[str]:
    """Video encoder for the chosen FFMPEG backend (libx264 unless a GPU backend was chosen)."""
    return list(_ENCODERS.get(ctx.backend or "", CPU_ENCODER))


def filter_path(path: Path) -> str:
    """A path quoted for an ffmpeg filter argument (`ass=filename=...`)."""
    escaped = str(path).replace("\\", "\\\\").replace(":", "\\:").replace("'", "\\'")
    return f"'{escaped}'"


@contextlib.contextmanager
def temp_output(target: Path, suffix: str) -> Iterator[Path]:
    """A temporary name next to `target`, renamed to it when the block succeeds."""
    tmp = outputs.temp_sibling(target).with_suffix(suffix)
    try:
        yield tmp
        with outputs.disk_errors(f"writing {target}"):
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


async def encode(
    ctx: TaskContext,
    source: Path,
    target: Path,
    graph: str,
    *,
    what: str,
    duration: float | None,
    audio: Path | None = None,
) -> None:
    """Re-encode `source` through the filter `graph` (input [0:v], output [v]) into `target`
    (temp name, then rename), with the encoder of the chosen FFMPEG backend."""
    args: list[str] = []
    vmap = "[v]"
    if ctx.backend == VAAPI:  # frames go to the GPU after the CPU filters
        args += ["-vaapi_device", str(ctx.backend_config.get("vaapi_device") or RENDER_NODE)]
        graph += ";[v]format=nv12,hwupload[vhw]"
        vmap = "[vhw]"
    args += ["-i", str(source)]
    if audio is not None:
        args += ["-i", str(audio), "-map", vmap, "-map", "1:a:0", "-c:a", "aac", "-b:a", "128k"]
        args += ["-shortest"] if duration is None else ["-t", f"{duration:.3f}"]
    else:
        args += ["-map", vmap, "-map", "0:a?", "-c:a", "copy"]
    args += ["-filter_complex", graph, *encoder_args(ctx)]
    if ctx.backend != VAAPI:
        args += ["-pix_fmt", "yuv420p"]
    ctx.event("tool", f"ffmpeg {ffmpeg.executable(ctx.backend_config)} ({encoder_args(ctx)[1]})")
    with temp_output(target, target.suffix or ".mp4") as tmp:
        await ffmpeg.run(ctx, [*args, str(tmp)], what=what, duration_sec=duration, note=what)


class ExtractSubtitleExecutor(TaskExecutor):
    """An embedded subtitle track -> a subtitle file."""

    task_type = EXTRACT_SUBTITLE
    capability = "FFMPEG"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "video_path")
        try:
            fmt = sf.SubtitleFormat(str(payload.get("output_format", "srt")).lower())
        except ValueError:
            raise errors.PayloadError("payload.output_format must be srt, ass or vtt") from None
        info = await ffmpeg.probe(ctx, source)
        tracks = [
            {"index": i, "stream": int(s), "language": lang or None, "codec": codec}
            for i, (s, lang, codec) in enumerate(_SUB_STREAM.findall(info.raw))
        ]
        if not tracks:
            raise errors.PermanentError(f"{source} has no subtitle track")
        track = self._pick(tracks, payload)
        target = output_file(ctx, payload, f"track{track['index']}.{fmt.value}")
        args = ["-i", str(source), "-map", f"0:s:{track['index']}", "-c:s", _CODECS[fmt]]
        with temp_output(target, "." + fmt.value) as tmp:
            await ffmpeg.run(
                ctx,
                [*args, str(tmp)],
                what=f"extracting subtitle track {track['index']} of {source}",
            )
        cues, _ = read_cues(target)
        result = {
            "subtitle_path": str(target),
            "format": fmt.value,
            "track": track,
            "tracks": tracks,
            "cue_count": len(cues),
        }
        return ExecuteResult(result)

    @staticmethod
    def _pick(tracks: list[dict[str, Any]], payload: dict[str, Any]) -> dict[str, Any]:
        language = payload.get("language")
        if isinstance(language, str) and language:
            for t in tracks:
                if t["language"] == language:
                    return t
            found = ", ".join(str(t["language"]) for t in tracks)
            raise errors.PermanentError(f"no subtitle track in language {language!r} ({found})")
        index = int(outputs.payload_number(payload, "track", 0, low=0, high=99))
        if index >= len(tracks):
            raise errors.PermanentError(
                f"subtitle track {index} requested but the file has {len(tracks)}"
            )
        return tracks[index]


class FormatSubtitleExecutor(TaskExecutor):
    """Convert, re-break and re-time a subtitle file (runs anywhere; no capability)."""

    task_type = FORMAT_SUBTITLE

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "subtitle_path", "srt_path")
        cues, in_fmt = read_cues(source)
        try:
            fmt = sf.SubtitleFormat(str(payload.get("output_format") or in_fmt.value).lower())
        except ValueError:
            raise errors.PayloadError("payload.output_format must be srt, ass or vtt") from None
        width = int(outputs.payload_number(payload, "max_width", 42, low=4, high=400))
        lines = int(outputs.payload_number(payload, "max_lines", 2, low=1, high=10))
        min_dur = outputs.payload_number(payload, "min_duration_sec", 0.7, low=0, high=30)
        gap = outputs.payload_number(payload, "min_gap_sec", 0.08, low=0, high=5)
        timed, report = sf.fix_timing(cues, min_duration=min_dur, min_gap=gap)
        out = sf.reflow(timed, width, lines)
        target = output_file(ctx, payload, f"{source.stem}.{fmt.value}")
        outputs.write_text_atomic(target, sf.dumps(out, fmt, style_from(payload)))
        return ExecuteResult(
            {
                "subtitle_path": str(target),
                "format": fmt.value,
                "input_format": in_fmt.value,
                "cue_count": len(out),
                "input_cue_count": len(cues),
                "timing": {
                    "dropped_empty": report.dropped_empty,
                    "overlaps_fixed": report.overlaps_fixed,
                    "extended": report.extended,
                    "reordered": report.reordered,
                },
            }
        )


def style_from(payload: dict[str, Any], size: tuple[int, int] | None = None) -> sf.AssStyle:
    """The ASS style a payload asks for (font, font_size, colour, outline_colour, position)."""
    position = payload.get("position", "bottom")
    if position not in ("bottom", "top", "middle"):
        raise errors.PayloadError("payload.position must be bottom, top or middle")
    width, height = size or (384, 288)
    default_size = max(12, round(height * 0.06))
    font_size = int(outputs.payload_number(payload, "font_size", default_size, low=4, high=400))
    font = payload.get("font") or sf.DEFAULT_FONT
    if not isinstance(font, str):
        raise errors.PayloadError("payload.font must be a font family name")
    margin = int(
        outputs.payload_number(payload, "margin_v", round(height * 0.04), low=0, high=4000)
    )
    return sf.AssStyle(
        font=font,
        size=font_size,
        colour=str(payload.get("colour", payload.get("color", "#FFFFFF"))),
        outline_colour=str(payload.get("outline_colour", "#000000")),
        outline=outputs.payload_number(payload, "outline", 2, low=0, high=20),
        alignment={"bottom": 2, "top": 8, "middle": 5}[position],
        margin_v=margin,
        play_res=(width, height),
    )


class BurnSubtitleExecutor(TaskExecutor):
    """Subtitles rendered into the video picture (libass)."""

    task_type = BURN_SUBTITLE
    capability = "FFMPEG"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "video_path")
        subs = await ctx.payload_input(payload, "subtitle_path", "srt_path")
        audio = (
            await ctx.payload_input(payload, "audio_path") if payload.get("audio_path") else None
        )
        cues, fmt = read_cues(subs)
        if not cues:
            raise errors.PermanentError(f"{subs} has no subtitles to burn")
        info = await ffmpeg.probe(ctx, source)
        size = video_size(info)
        target = output_file(ctx, payload, "burned.mp4")
        ass = target.with_name(f".{target.stem}.burn.ass")
        if fmt is sf.SubtitleFormat.ASS and payload.get("keep_ass_style", True):
            text = subs.read_text(encoding="utf-8-sig")  # ASS keeps its own fonts and effects
        else:
            text = sf.write_ass(cues, style_from(payload, size))
        outputs.write_text_atomic(ass, text)
        try:
            await encode(
                ctx,
                source,
                target,
                f"[0:v]ass=filename={filter_path(ass)}[v]",
                what=f"burning {subs.name} into {source.name}",
                duration=info.duration_sec,
                audio=audio,
            )
        finally:
            ass.unlink(missing_ok=True)
        result = {
            "video_path": str(target),
            "subtitle_path": str(subs),
            "cue_count": len(cues),
            "width": size[0],
            "height": size[1],
            "source_path": str(source),
            "audio_path": str(audio) if audio else None,
            "encoder": encoder_args(ctx)[1],
        }
        ctx.progress(100, "burned")
        return ExecuteResult(result)


def blur_filter(
    method: str, top: float, bottom: float, strength: float, size: tuple[int, int]
) -> str:
    """A filter graph hiding rows top..bottom (fractions of the height) of [0:v] into [v]."""
    width, height = size
    y = int(height * top) // 2 * 2
    h = max(2, int(height * bottom + 0.999) - y) // 2 * 2
    h = min(h, height - y)
    if method == "solid_fill":
        return f"[0:v]drawbox=x=0:y={y}:w={width}:h={h}:color=black:t=fill[v]"
    if method == "pixelate":
        block = max(2, int(strength))
        effect = f"pixelize=w={block}:h={block}"
    else:
        effect = f"gblur=sigma={max(1.0, strength):g}:steps=3"
    return (
        f"[0:v]split[base][band];[band]crop={width}:{h}:0:{y},{effect}[hid];"
        f"[base][hid]overlay=0:{y}[v]"
    )


class BlurSubtitleRegionExecutor(TaskExecutor):
    """Hide a horizontal band of the picture (the burned-in subtitles of the original)."""

    task_type = BLUR_SUBTITLE_REGION
    capability = "FFMPEG"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "video_path")
        top, bottom = fraction(payload, "y_top_pct"), fraction(payload, "y_bottom_pct")
        if bottom <= top:
            raise errors.PayloadError(
                f"payload.y_bottom_pct ({bottom}) must be greater than y_top_pct ({top})"
            )
        method = payload.get("blur_method", "gaussian")
        if method not in BLUR_METHODS:
            raise errors.PayloadError(
                f"payload.blur_method must be one of {', '.join(BLUR_METHODS)}"
            )
        strength = outputs.payload_number(payload, "blur_strength", 30, low=1, high=500)
        info = await ffmpeg.probe(ctx, source)
        size = video_size(info)
        target = output_file(ctx, payload, "blurred.mp4")
        graph = blur_filter(str(method), top, bottom, strength, size)
        await encode(
            ctx,
            source,
            target,
            graph,
            what=f"hiding rows {top:.2f}-{bottom:.2f} of {source.name}",
            duration=info.duration_sec,
        )
        ctx.progress(100, "region hidden")
        return ExecuteResult(
            {
                "video_path": str(target),
                "source_path": str(source),
                "y_top_pct": top,
                "y_bottom_pct": bottom,
                "blur_method": method,
                "blur_strength": strength,
                "encoder": encoder_args(ctx)[1],
            }
        )
