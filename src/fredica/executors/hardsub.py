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
band holding it is the region.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import analyze, ffmpeg, httperrors, outputs, subtitles
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

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
OCR_PARALLEL = 2
OCR_LOOKS = (
    ("white", "format=gray,lutyuv=y='if(gte(val,220),0,255)'"),
    ("grey", "format=gray"),
)
TESSERACT_HINT = "install tesseract (Debian: apt-get install tesseract-ocr)"
_JSON = re.compile(r"\{.*\}", re.DOTALL)


def sample_times(duration: float, count: int, skip: float) -> list[float]:
    """`count` instants evenly inside [skip, 1 - skip] of the duration (frame centres)."""
    span = duration * (1 - 2 * skip)
    return [round(duration * skip + span * (i + 0.5) / count, 3) for i in range(count)]


async def grab_frames(ctx: TaskContext, video: Path, times: list[float], out: Path) -> list[Path]:
    frames = []
    for i, t in enumerate(times):
        frame = out / f"frame_{i:02d}.png"
        await ffmpeg.run(
            ctx,
            ["-ss", f"{t:.3f}", "-i", str(video), "-frames:v", "1", str(frame)],
            what=f"sampling a frame at {t:.1f}s of {video.name}",
        )
        if not frame.is_file():
            raise errors.PermanentError(f"no frame at {t:.1f}s of {video}")
        frames.append(frame)
        ctx.progress(5 + 35 * (i + 1) / len(times), f"frame {i + 1}/{len(times)}")
    return frames


# --- OCR fallback --------------------------------------------------------------------------
def parse_tsv(tsv: str, offset_px: float, scale: float, height: float) -> list[dict[str, Any]]:
    """Confident words of tesseract TSV output, with their rows as fractions of the frame."""
    words = []
    for line in tsv.splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) < 12 or not cols[11].strip():
            continue
        conf = float(cols[10]) / 100
        text = cols[11].strip()
        if conf <= OCR_CONFIDENCE or sum(ch.isalnum() for ch in text) < MIN_WORD_CHARS:
            continue
        top = (offset_px + int(cols[7]) / scale) / height
        bottom = (offset_px + (int(cols[7]) + int(cols[9])) / scale) / height
        words.append({"text": text, "confidence": round(conf, 3), "top": top, "bottom": bottom})
    return words


async def ocr_frame(ctx: TaskContext, frame: Path, height: int, lang: str) -> list[dict[str, Any]]:
    """Confident words in the lower part of one frame: first with only near-white pixels kept
    as black-on-white text (the usual subtitle colour, clean of the picture behind), then, when
    that finds nothing, the plain grey picture (other colours)."""
    exe = shutil.which("tesseract")
    if exe is None:
        raise errors.PermanentError(f"no vision LLM and no OCR for the fallback: {TESSERACT_HINT}")
    offset = int(height * OCR_FROM)
    words: list[dict[str, Any]] = []
    for name, look in OCR_LOOKS:
        crop = frame.with_name(f"{frame.stem}_{name}.png")
        await ffmpeg.run(
            ctx,
            ["-i", str(frame), "-vf", f"crop=iw:ih-{offset}:0:{offset},scale=iw*2:ih*2,{look}",
             str(crop)],
            what=f"preparing {frame.name} for OCR",
        )  # fmt: skip
        result = await ctx.run_process([exe, str(crop), "-", "-l", lang, "--psm", "11", "tsv"])
        words = parse_tsv(result.stdout, offset, 2.0, height)
        if words:
            break
    return words


async def ocr_frames(
    ctx: TaskContext, frames: list[Path], height: int, lang: str
) -> list[list[dict[str, Any]]]:
    """OCR of every frame, two at a time."""
    gate = asyncio.Semaphore(OCR_PARALLEL)
    done = 0

    async def one(frame: Path) -> list[dict[str, Any]]:
        nonlocal done
        async with gate:
            await ctx.checkpoint()
            words = await ocr_frame(ctx, frame, height, lang)
        done += 1
        ctx.progress(40 + 55 * done / len(frames), f"OCR {done}/{len(frames)}")
        return words

    return list(await asyncio.gather(*(one(f) for f in frames)))


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
        video = subtitles.input_file(ctx, payload, "video_path")
        count = int(outputs.payload_number(payload, "sample_frames", 8, low=1, high=64))
        skip = outputs.payload_number(payload, "sample_skip_pct", 0.05, low=0, high=0.45)
        info = await ffmpeg.probe(ctx, video)
        _, height = subtitles.video_size(info)
        if not info.duration_sec:
            raise errors.PermanentError(f"{video}: unknown duration, cannot sample frames")
        times = sample_times(info.duration_sec, count, skip)
        frames = await grab_frames(ctx, video, times, ctx.output_dir)
        backend = analyze.choose_backend(ctx)
        if has_vision(ctx, backend):
            ctx.event("tool", f"{backend} vision")
            result = await ask_vision(ctx, backend, frames)
            result["detection_method"] = "vision_llm"
        else:
            ctx.event("tool", "tesseract (OCR fallback)")
            lang = str(payload.get("ocr_lang") or ctx.backend_config.get("ocr_lang") or "eng")
            min_frames = int(
                outputs.payload_number(payload, "min_text_frames", 2, low=1, high=count)
            )
            result = ocr_verdict(await ocr_frames(ctx, frames, height, lang), min_frames)
            result["detection_method"] = "ocr_fallback"
        region = result.get("region") or {}
        result.update(
            {
                "backend": backend,
                "sample_times": times,
                "video_path": str(video),
                "y_top_pct": region.get("y_top_pct"),
                "y_bottom_pct": region.get("y_bottom_pct"),
            }
        )
        ctx.progress(100, "hard subtitles found" if result["has_subtitle"] else "no hard subtitles")
        return ExecuteResult(result)
