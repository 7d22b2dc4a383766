"""OCR_FRAME_BATCH and MERGE_OCR_RESULTS (seed 001 §3.6).

Backends: `rapidocr` (PP-OCR models that ship in the rapidocr wheel, ONNX Runtime on the CPU)
and `tesseract` (the Debian binary; language data packages per language). The recognition runs
in a child Python process (`ctx.run_in_subprocess`), so pause stops it between frames and
cancel ends it; tesseract's own processes are in the child's process group.

`mode: subtitle` reads only the bottom ~20% of each frame (`region_hint: top` the top 20%),
`mode: document` / `region_hint: full` the whole frame; boxes are given in whole-frame pixels.
MERGE_OCR_RESULTS orders every frame by time and joins adjacent frames showing the same text
into spans (a subtitle shown for 3 s at 1 fps is one span, not three lines).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import frames as frames_mod
from fredica.executors import outputs, video
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

logger = logging.getLogger(__name__)

OCR_FRAME_BATCH = "OCR_FRAME_BATCH"
MERGE_OCR_RESULTS = "MERGE_OCR_RESULTS"
BACKENDS = ("rapidocr", "tesseract")
REGION_SHARE = 0.2  # subtitle mode reads this share of the frame height
DEFAULT_MIN_CONFIDENCE = 0.5
SAME_TEXT_RATIO = 0.8  # adjacent frames whose texts are this similar show the same text
MIN_SPAN_SEC = 0.3  # shorter spans are misreads (see spans())
BRIGHT_TEXT = 210  # grey level above which a subtitle pixel counts as text (tesseract)
TESSERACT_LANGS = {
    "auto": "eng",
    "en": "eng",
    "zh": "chi_sim",
    "ja": "jpn",
    "ko": "kor",
    "zh+en": "chi_sim+eng",
}
_WORDY = re.compile(r"\w", re.UNICODE)


def region(mode: str, hint: str | None) -> str:
    """Which part of the frame to read: bottom | top | full."""
    if hint in ("top", "bottom", "full"):
        return hint
    return "bottom" if mode == "subtitle" else "full"


def crop_box(width: int, height: int, where: str) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of the region to read (pure)."""
    band = max(1, round(height * REGION_SHARE))
    if where == "bottom":
        return 0, height - band, width, height
    if where == "top":
        return 0, 0, width, band
    return 0, 0, width, height


# --- the child process ----------------------------------------------------------------------


def _rapidocr_reader(whole_frame: bool) -> Any:
    from rapidocr import RapidOCR  # optional: imported only where the backend is declared

    engine = RapidOCR(
        params={
            # rapidocr's default scales the SHORT side up to 736 px: a 72 px subtitle band
            # became 6,500 px wide (1.8 s a frame); bounding the long side gives 0.2 s
            "Det.limit_type": "max",
            "Det.limit_side_len": 960,
            # upside-down text is a document matter, not a video subtitle one
            "Global.use_cls": whole_frame,
            "Global.log_level": "warning",
            # batches run side by side (one per worker slot): share the cores between them
            "EngineConfig.onnxruntime.intra_op_num_threads": max(1, (os.cpu_count() or 2) // 2),
        }
    )

    def read(image: Any) -> list[dict[str, Any]]:
        import numpy as np

        out: Any = engine(np.asarray(image.convert("RGB")))
        texts: list[dict[str, Any]] = []
        for text, score, box in zip(
            out.txts or (), out.scores or (), _boxes(out.boxes), strict=False
        ):
            texts.append({"text": str(text), "confidence": round(float(score), 3), "bbox": box})
        return texts

    return read


def _boxes(boxes: Any) -> list[list[int]]:
    if boxes is None:
        return []
    out = []
    for quad in boxes:
        xs = [float(p[0]) for p in quad]
        ys = [float(p[1]) for p in quad]
        out.append([round(min(xs)), round(min(ys)), round(max(xs)), round(max(ys))])
    return out


def parse_tesseract_tsv(tsv: str, min_conf: float) -> list[dict[str, Any]]:
    """Lines of words from `tesseract ... tsv`, dropping words below `min_conf` (0-1) and
    words without a letter or digit (frame edges read as `|`, `_`, `~`). Pure."""
    lines: dict[tuple[str, str, str], list[tuple[str, float, list[int]]]] = {}
    for row in tsv.splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12 or cols[0] != "5":
            continue
        text, conf = cols[11].strip(), float(cols[10]) / 100
        if conf < min_conf or not _WORDY.search(text):
            continue
        left, top, w, h = (int(c) for c in cols[6:10])
        lines.setdefault((cols[2], cols[3], cols[4]), []).append(
            (text, conf, [left, top, left + w, top + h])
        )
    out = []
    for words in lines.values():
        boxes = [b for _, _, b in words]
        out.append(
            {
                "text": " ".join(t for t, _, _ in words),
                "confidence": round(sum(c for _, c, _ in words) / len(words), 3),
                "bbox": [
                    min(b[0] for b in boxes),
                    min(b[1] for b in boxes),
                    max(b[2] for b in boxes),
                    max(b[3] for b in boxes),
                ],
            }
        )
    return out


def _tesseract_reader(language: str, min_conf: float, psm: str, subtitles: bool) -> Any:
    exe = shutil.which("tesseract")
    if exe is None:
        raise errors.ResourceError("tesseract is not installed here", hint="NO_BACKEND")
    lang = TESSERACT_LANGS.get(language, language)
    have = subprocess.run([exe, "--list-langs"], capture_output=True, text=True).stdout.split()
    wanted = lang.split("+")
    if any(x not in have for x in wanted):
        raise errors.ResourceError(
            f"tesseract language data {lang} is not installed here (have {', '.join(have[4:])}); "
            f"Debian: apt-get install tesseract-ocr-{wanted[0].replace('_', '-')}"
        )
    pad = 20

    def run(gray: Any, scale: int) -> list[dict[str, Any]]:
        from PIL import ImageOps

        padded = ImageOps.expand(gray, pad, fill=255)
        with tempfile.NamedTemporaryFile(suffix=".png") as f:
            padded.save(f.name)
            tsv = subprocess.run(
                [exe, f.name, "-", "-l", lang, "--psm", psm, "tsv"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        texts = parse_tesseract_tsv(tsv, min_conf)
        for t in texts:  # back to the cropped image's pixels
            t["bbox"] = [round((v - pad) / scale) for v in t["bbox"]]
        return texts

    def read(image: Any) -> list[dict[str, Any]]:
        gray = image.convert("L")
        scale = 2 if gray.height < 40 else 1
        if scale > 1:
            gray = gray.resize((gray.width * scale, gray.height * scale))
        if subtitles:
            # subtitles are bright text: bright pixels become black ink on white, which hides
            # the picture behind them; dark text falls back to the plain grey image
            ink = gray.point(lambda v: 0 if v > BRIGHT_TEXT else 255)
            found = run(ink, scale)
            if found:
                return found
        return run(gray, scale)

    return read


def ocr_batch(
    reporter: Any,
    backend: str,
    frames: list[tuple[str, float | None]],
    mode: str,
    where: str,
    language: str,
    min_conf: float,
) -> list[dict[str, Any]]:
    """Child-process entry: read every frame, reporting progress; waits while paused."""
    from PIL import Image

    if backend == "rapidocr":
        read = _rapidocr_reader(where == "full")
    else:
        read = _tesseract_reader(
            language, min_conf, "3" if where == "full" else "6", where != "full"
        )
    results = []
    for i, (path, ts) in enumerate(frames):
        reporter.wait_if_paused()
        with Image.open(path) as img:
            left, top, right, bottom = crop_box(img.width, img.height, where)
            texts = read(img.crop((left, top, right, bottom)))
        kept = []
        for t in texts:
            if t["confidence"] < min_conf or not t["text"].strip():
                continue
            x0, y0, x1, y1 = t["bbox"]
            kept.append({**t, "bbox": [x0 + left, y0 + top, x1 + left, y1 + top]})
        kept.sort(key=lambda t: (t["bbox"][1], t["bbox"][0]))
        results.append({"path": path, "timestamp_sec": ts, "texts": kept})
        reporter.progress(100 * (i + 1) / len(frames), f"OCR {i + 1}/{len(frames)} ({backend})")
    return results


# --- executors ------------------------------------------------------------------------------


class OcrFrameBatchExecutor(TaskExecutor):
    """One batch of frames -> the text on each frame, with confidence and box."""

    task_type = OCR_FRAME_BATCH
    capability = "OCR"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        backend = ctx.backend or str(payload.get("backend") or "")
        if backend not in BACKENDS:
            raise errors.ResourceError(
                f"OCR backend {backend or '(none chosen)'} cannot run here; this node runs "
                + " and ".join(BACKENDS),
                hint="NO_BACKEND",
            )
        mode = payload.get("mode") or "subtitle"
        if mode not in ("subtitle", "document", "auto"):
            raise errors.PayloadError(f"payload.mode must be subtitle, document or auto: {mode!r}")
        where = region(mode, payload.get("region_hint"))
        language = str(payload.get("language") or "auto")
        min_conf = outputs.payload_number(
            payload, "min_confidence", DEFAULT_MIN_CONFIDENCE, low=0, high=1
        )
        batch = frames_mod.batch_frames(payload, ctx.data_dir)
        ctx.event("tool", f"{backend} on {len(batch)} frames ({where} region)")
        results = await ctx.run_in_subprocess(
            ocr_batch,
            backend,
            [(f.path, f.timestamp_sec) for f in batch],
            mode,
            where,
            language,
            min_conf,
        )
        result = {
            "frames": results,
            "frame_count": len(results),
            "backend": backend,
            "mode": mode,
            "region": where,
            "language": language,
            "batch_index": payload.get("batch_index"),
        }
        return ExecuteResult(result)


def _same(a: str, b: str) -> bool:
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= SAME_TEXT_RATIO


def spans(frames: list[dict[str, Any]], min_sec: float = MIN_SPAN_SEC) -> list[dict[str, Any]]:
    """Adjacent frames with the same text -> one span {start_sec, end_sec, text} (pure).

    A frame's text is its lines joined top to bottom; a frame without text ends a span. Spans
    shorter than `min_sec` are dropped: nobody can read a text shown that briefly, so at a high
    frame rate a one-frame read is a misread of the picture (at 1 fps one frame is 1 s)."""
    step = frames_mod.frame_step(frames)
    out: list[dict[str, Any]] = []
    open_span: dict[str, Any] | None = None
    for frame in frames:
        text = " ".join(t["text"].strip() for t in frame.get("texts") or []).strip()
        ts = frame.get("timestamp_sec")
        ts = float(ts) if isinstance(ts, int | float) else None
        confs = [float(t.get("confidence", 0)) for t in frame.get("texts") or []]
        if open_span is not None and text and _same(open_span["text"], text):
            open_span["end_sec"] = None if ts is None else round(ts + step, 3)
            open_span["frames"] += 1
            open_span["_conf"].extend(confs)
            continue
        if open_span is not None:
            out.append(open_span)
            open_span = None
        if text:
            open_span = {
                "start_sec": ts,
                "end_sec": None if ts is None else round(ts + step, 3),
                "text": text,
                "frames": 1,
                "_conf": confs,
            }
    if open_span is not None:
        out.append(open_span)
    for span in out:
        conf = span.pop("_conf")
        span["confidence"] = round(sum(conf) / len(conf), 3) if conf else None
    return [s for s in out if s["frames"] * step >= min_sec - 1e-9]


class MergeOcrResultsExecutor(video.CachedExecutor):
    """Every batch's frames, in time order, and the text spans; writes ocr.json and ocr.txt."""

    task_type = MERGE_OCR_RESULTS
    capability = None

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        out = video.target(ctx, task.payload, "output_path", "ocr.json")
        return out, {
            "batches": task.payload.get("batches"),
            "min": task.payload.get("min_span_sec"),
        }

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        out, inputs = await self.locate(task, ctx)
        merged = frames_mod.merged_frames(task.payload)
        min_sec = outputs.payload_number(
            task.payload, "min_span_sec", MIN_SPAN_SEC, low=0, high=3600
        )
        found = spans(merged, min_sec)
        text = "\n".join(s["text"] for s in found)
        txt = out.with_suffix(".txt")
        outputs.write_text_atomic(txt, text + ("\n" if text else ""))
        result = {
            "spans": found,
            "span_count": len(found),
            "text": text,
            "frame_count": len(merged),
            "frames_with_text": sum(1 for f in merged if f.get("texts")),
            "batch_count": len(task.payload.get("batches") or []),
            "ocr_path": str(out),
            "text_path": str(txt),
        }
        outputs.write_text_atomic(out, json.dumps({**result, "frames": merged}, indent=1))
        outputs.write_meta(out, self.task_type, inputs, result)
        ctx.progress(100, f"{len(found)} text span(s)")
        return ExecuteResult(result)


def executors() -> tuple[TaskExecutor, ...]:
    return (OcrFrameBatchExecutor(), MergeOcrResultsExecutor())
