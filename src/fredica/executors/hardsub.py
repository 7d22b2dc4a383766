"""DETECT_HARDCODED_SUBTITLE: does the picture already carry burned-in subtitles, and where?
(seed 001 §2.6).

Eight frames (`sample_frames`) are taken evenly from the video, skipping 5 % (`sample_skip_pct`)
at each end. With a vision LLM among the AI_ANALYZE backends (openai-api / deepseek-api /
openai-compatible / lm-studio over the OpenAI wire protocol, anthropic-api, ollama) the frames go
to the model with the seed's question and its JSON answer decides (`detection_method:
vision_llm`). Without one (the built-in `local-extractive` backend, or a backend configured with
`vision: false`), the frames are read by OCR (tesseract, from Debian's tesseract-ocr): text
found in the lower part of the picture with confidence above 0.7, in at least
`min_text_frames` frames, counts as hard subtitles (`detection_method: ocr_fallback`), and the
band holding it is the region. The result's `backend` is what read the frames: the vision
model's backend, or `tesseract` for the fallback.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import analyze, ffmpeg, httperrors, outputs, subtitles
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

logger = logging.getLogger(__name__)

DETECT_HARDCODED_SUBTITLE = "DETECT_HARDCODED_SUBTITLE"
PROMPT = (
    "These are {n} frames sampled from a video. Decide: (1) is there a hard subtitle in the "
    "picture (text burned into the image, not a subtitle track)? (2) if so, which range of the "
    "picture height holds the subtitle text, as fractions from the top (for example the bottom "
    "84%-96% is 0.84-0.96)? Reply with JSON only, in this form: "
    '{{"has_subtitle": bool, "y_top_pct": float, "y_bottom_pct": float}}'
)
OCR_CONFIDENCE = 0.7  # seed: text in the lower region with confidence > 0.7
OCR_FROM = 0.55  # subtitles are looked for below this fraction of the height
MIN_WORD_CHARS = 2
# tesseract's OpenMP threads only fight each other on small crops like these
OCR_ENV = {**os.environ, "OMP_THREAD_LIMIT": "1"}
OCR_LOOKS = (
    ("white", "format=gray,lutyuv=y='if(gte(val,220),0,255)'"),
    ("grey", "format=gray"),
)
TESSERACT = "tesseract"
TESSERACT_HINT = "install tesseract (Debian: apt-get install tesseract-ocr)"
_JSON = re.compile(r"\{.*\}", re.DOTALL)


def sample_times(duration: float, count: int, skip: float) -> list[float]:
    """`count` instants evenly inside [skip, 1 - skip] of the duration (frame centres)."""
    span = duration * (1 - 2 * skip)
    return [round(duration * skip + span * (i + 0.5) / count, 3) for i in range(count)]


async def grab_frames(ctx: TaskContext, video: Path, times: list[float], out: Path) -> list[Path]:
    """One PNG per instant, all from one ffmpeg run (an input per instant, seeking fast)."""
    args: list[str] = []
    for t in times:
        args += ["-ss", f"{t:.3f}", "-i", str(video)]
    frames = [out / f"frame_{i:02d}.png" for i in range(len(times))]
    for i, frame in enumerate(frames):
        args += ["-map", f"{i}:v:0", "-frames:v", "1", str(frame)]
    await ffmpeg.run(ctx, args, what=f"sampling {len(times)} frames of {video.name}")
    for t, frame in zip(times, frames, strict=True):
        if not frame.is_file():
            raise errors.PermanentError(f"no frame at {t:.1f}s of {video}")
    ctx.progress(30, f"{len(frames)} frames sampled")
    return frames


# --- OCR fallback --------------------------------------------------------------------------
def parse_tsv(
    tsv: str, offset_px: float, scale: float, height: float
) -> dict[int, list[dict[str, Any]]]:
    """Confident words of tesseract TSV output by page (1-based, one page per listed image),
    with their rows as fractions of the frame."""
    pages: dict[int, list[dict[str, Any]]] = {}
    for line in tsv.splitlines():
        cols = line.split("\t")
        if len(cols) < 12 or not cols[11].strip() or not cols[1].isdigit():
            continue
        conf = float(cols[10]) / 100
        text = cols[11].strip()
        if conf <= OCR_CONFIDENCE or sum(ch.isalnum() for ch in text) < MIN_WORD_CHARS:
            continue
        top = (offset_px + int(cols[7]) / scale) / height
        bottom = (offset_px + (int(cols[7]) + int(cols[9])) / scale) / height
        word = {"text": text, "confidence": round(conf, 3), "top": top, "bottom": bottom}
        pages.setdefault(int(cols[1]), []).append(word)
    return pages


async def prepare_crops(ctx: TaskContext, frames: list[Path], height: int) -> list[list[Path]]:
    """For every frame, its lower part enlarged 2x in each of OCR_LOOKS (one ffmpeg run): first
    only near-white pixels kept, as dark text on white (the usual subtitle colour, clean of the
    picture behind), then the plain grey picture (other colours)."""
    offset = int(height * OCR_FROM)
    args: list[str] = []
    for frame in frames:
        args += ["-i", str(frame)]
    crops: list[list[Path]] = []
    for i, frame in enumerate(frames):
        crops.append([])
        for name, look in OCR_LOOKS:
            crop = frame.with_name(f"{frame.stem}_{name}.png")
            vf = f"crop=iw:ih-{offset}:0:{offset},scale=iw*2:ih*2,{look}"
            args += ["-map", f"{i}:v:0", "-vf", vf, "-frames:v", "1", str(crop)]
            crops[-1].append(crop)
    await ffmpeg.run(ctx, args, what="preparing the frames for OCR")
    return crops


async def ocr_frames(
    ctx: TaskContext, frames: list[Path], height: int, lang: str
) -> list[list[dict[str, Any]]]:
    """Confident words of every frame: one tesseract run per look over all the frames still
    without words (the model loads once per run)."""
    exe = shutil.which("tesseract")
    if exe is None:
        raise errors.PermanentError(f"no vision LLM and no OCR for the fallback: {TESSERACT_HINT}")
    crops = await prepare_crops(ctx, frames, height)
    offset = int(height * OCR_FROM)
    found: list[list[dict[str, Any]]] = [[] for _ in frames]
    for look, _ in enumerate(OCR_LOOKS):
        todo = [i for i, words in enumerate(found) if not words]
        if not todo:
            break
        await ctx.checkpoint()
        listing = ctx.output_dir / f"ocr_{look}.txt"
        listing.write_text("".join(f"{crops[i][look]}\n" for i in todo), encoding="utf-8")
        result = await ctx.run_process(
            [exe, str(listing), "-", "-l", lang, "--psm", "11", "tsv"], env=OCR_ENV
        )
        pages = parse_tsv(result.stdout, offset, 2.0, height)
        for page, i in enumerate(todo, 1):
            found[i] = pages.get(page, [])
        ctx.progress(40 + 55 * (look + 1) / len(OCR_LOOKS), f"OCR pass {look + 1}")
    return found


def ocr_verdict(per_frame: list[list[dict[str, Any]]], min_frames: int) -> dict[str, Any]:
    """The seed's result shape from the words OCR found in each frame."""
    hits = [words for words in per_frame if words]
    found = [w for words in hits for w in words]
    if len(hits) < min_frames:
        best = max((w["confidence"] for w in found), default=0.0)
        share = len(hits) / len(per_frame)
        return {
            "has_subtitle": False,
            "confidence": round(1 - best * share, 3),
            "language_hint": None,
            "region": None,
            "frames_with_text": len(hits),
        }
    top = min(w["top"] for w in found)
    bottom = max(w["bottom"] for w in found)
    pad = (bottom - top) * 0.25 + 0.01
    confidence = sum(w["confidence"] for w in found) / len(found) * len(hits) / len(per_frame)
    sample = " ".join(w["text"] for w in hits[0])
    return {
        "has_subtitle": True,
        "confidence": round(confidence, 3),
        "language_hint": None,
        "region": {
            "y_top_pct": round(max(0.0, top - pad), 3),
            "y_bottom_pct": round(min(1.0, bottom + pad), 3),
        },
        "frames_with_text": len(hits),
        "text_sample": sample[:200],
    }


# --- vision LLM ----------------------------------------------------------------------------
def vision_request(
    backend: analyze.Backend, prompt: str, images: list[str]
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The backend's chat request with the frames attached (base64 PNG)."""
    url, headers, body = backend.request("You inspect video frames.", prompt)
    if backend.name == "anthropic-api":
        parts: list[dict[str, Any]] = [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b}}
            for b in images
        ]
        body["messages"] = [{"role": "user", "content": [*parts, {"type": "text", "text": prompt}]}]
    elif backend.name == "ollama":
        body["messages"][-1]["images"] = images
    else:
        content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
        content += [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b}"}}
            for b in images
        ]
        body["messages"][-1]["content"] = content
    return url, headers, body


def parse_vision_reply(content: str) -> dict[str, Any]:
    m = _JSON.search(content)
    try:
        data = json.loads(m.group(0)) if m else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("has_subtitle"), bool):
        raise errors.PermanentError(
            f"the vision model did not answer the asked JSON: {content[:200]!r}"
        )
    result: dict[str, Any] = {"has_subtitle": data["has_subtitle"], "region": None}
    if data["has_subtitle"]:
        top, bottom = float(data.get("y_top_pct", 0.84)), float(data.get("y_bottom_pct", 0.96))
        if top > 1 or bottom > 1:  # percentages instead of fractions
            top, bottom = top / 100, bottom / 100
        if not 0 <= top < bottom <= 1:
            raise errors.PermanentError(
                f"the vision model gave an impossible region {top}-{bottom}"
            )
        result["region"] = {"y_top_pct": round(top, 3), "y_bottom_pct": round(bottom, 3)}
    result["confidence"] = float(data.get("confidence", 0.9))
    result["language_hint"] = data.get("language_hint") or data.get("language")
    return result


async def ask_vision(ctx: TaskContext, name: str, frames: list[Path]) -> dict[str, Any]:
    backend = analyze.Backend(name, ctx.backend_config)
    images = [base64.b64encode(f.read_bytes()).decode() for f in frames]
    url, headers, body = vision_request(backend, PROMPT.format(n=len(frames)), images)
    what = f"{name} {backend.model} (vision)"
    timeout = float(ctx.backend_config.get("timeout_sec", analyze.DEFAULT_TIMEOUT))
    data = await httperrors.post_json(
        ctx, url, what=what, provider=name, timeout=timeout, headers=headers, json=body
    )
    content, usage = backend.reply(data)
    result = parse_vision_reply(content)
    result.update({"model": backend.model, "usage": usage})
    return result


def has_vision(ctx: TaskContext, backend: str) -> bool:
    return backend != analyze.LOCAL and bool(ctx.backend_config.get("vision", True))


class DetectHardcodedSubtitleExecutor(TaskExecutor):
    """Sampled frames -> {has_subtitle, confidence, language_hint, region, detection_method}."""

    task_type = DETECT_HARDCODED_SUBTITLE
    capability = "AI_ANALYZE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        video = await ctx.payload_input(payload, "video_path")
        count = int(outputs.payload_number(payload, "sample_frames", 8, low=1, high=64))
        skip = outputs.payload_number(payload, "sample_skip_pct", 0.05, low=0, high=0.45)
        info = await ffmpeg.probe(ctx, video)
        _, height = subtitles.video_size(info)
        if not info.duration_sec:
            raise errors.PermanentError(f"{video}: unknown duration, cannot sample frames")
        times = sample_times(info.duration_sec, count, skip)
        frames = await grab_frames(ctx, video, times, ctx.output_dir)
        backend = analyze.choose_backend(ctx)
        result: dict[str, Any] | None = None
        vision_error = None
        if has_vision(ctx, backend):
            ctx.event("tool", f"{backend} vision")
            try:
                result = await ask_vision(ctx, backend, frames)
                result["detection_method"] = "vision_llm"
            except errors.PermanentError as exc:  # e.g. a model that takes no images
                logger.warning(
                    "vision detection failed, using OCR: %s",
                    exc.message,
                    extra={"action": "hardsub_vision_fallback"},
                )
                vision_error = exc.message
        ran = backend
        if result is None:
            why = vision_error or f"{backend} has no vision"
            ctx.event("tool", f"{TESSERACT} (OCR fallback: {why})")
            ran = TESSERACT
            lang = str(payload.get("ocr_lang") or "eng")
            min_frames = int(
                outputs.payload_number(payload, "min_text_frames", 2, low=1, high=count)
            )
            result = ocr_verdict(await ocr_frames(ctx, frames, height, lang), min_frames)
            result.update(detection_method="ocr_fallback", ocr_lang=lang, model=None)
            if vision_error:
                result["vision_error"] = vision_error
        region = result.get("region") or {}
        result.update(
            {
                "backend": ran,  # the tool that read the frames, not the one asked first
                "vision_backend": backend if ran == backend else None,
                "sample_times": times,
                "video_path": str(video),
                "y_top_pct": region.get("y_top_pct"),
                "y_bottom_pct": region.get("y_bottom_pct"),
            }
        )
        ctx.progress(100, "hard subtitles found" if result["has_subtitle"] else "no hard subtitles")
        return ExecuteResult(result)
