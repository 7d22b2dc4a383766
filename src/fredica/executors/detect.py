"""DETECT_FRAME_BATCH and MERGE_DETECT_RESULTS (seed 001 §3.7).

Backend `yolo-onnx`: a YOLOv8-style detector exported to ONNX (`yolo export format=onnx`), run
with ONNX Runtime on the CPU in a child process. No wheel on PyPI ships YOLO weights and nothing
may be downloaded at run time, so the model is a file the operator configures
(`capabilities.object_detect.providers[].model_path`); without one the backend is not declared.
Class names come from the model's `names` metadata (what Ultralytics writes), else COCO's 80.

The model's output is `[1, 4 + classes, anchors]` (cx, cy, w, h in input pixels, then class
scores); frames are letterboxed to the model's input size, boxes are mapped back to frame
pixels, and overlapping boxes of one class are reduced by non-maximum suppression.
MERGE_DETECT_RESULTS orders frames by time and drops a label seen on fewer than `min_frames`
consecutive frames (a one-frame flicker is usually a false detection).
"""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import frames as frames_mod
from fredica.executors import outputs, video
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

logger = logging.getLogger(__name__)

DETECT_FRAME_BATCH = "DETECT_FRAME_BATCH"
MERGE_DETECT_RESULTS = "MERGE_DETECT_RESULTS"
BACKENDS = ("yolo-onnx",)
DEFAULT_CONF = 0.25
NMS_IOU = 0.45
DEFAULT_MIN_FRAMES = 2
LETTERBOX_FILL = 114
# fmt: off
COCO = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant",
    "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
)
# fmt: on


def class_names(metadata: dict[str, str], count: int) -> list[str]:
    """Class names from Ultralytics' `names` metadata (`{0: 'person', ...}`), else COCO."""
    raw = metadata.get("names")
    if raw:
        try:
            parsed = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            parsed = None
        if isinstance(parsed, dict):
            return [str(parsed.get(i, f"class_{i}")) for i in range(count)]
    if count == len(COCO):
        return list(COCO)
    return [f"class_{i}" for i in range(count)]


def letterbox(width: int, height: int, size: int) -> tuple[float, int, int]:
    """(scale, pad_x, pad_y) fitting a width x height frame into size x size (pure)."""
    scale = min(size / width, size / height)
    return scale, (size - round(width * scale)) // 2, (size - round(height * scale)) // 2


def decode(
    output: Any,
    conf: float,
    names: list[str],
    box_map: tuple[float, int, int],
    frame: tuple[int, int],
) -> list[dict[str, Any]]:
    """YOLOv8 output [4 + classes, anchors] -> detections in frame pixels, after NMS."""
    import numpy as np

    pred = np.asarray(output, dtype=np.float32)
    boxes, scores = pred[:4].T, pred[4:].T
    cls = scores.argmax(axis=1)
    best = scores[np.arange(len(cls)), cls]
    keep = best >= conf
    scale, pad_x, pad_y = box_map
    width, height = frame
    found: list[dict[str, Any]] = []
    for (cx, cy, w, h), c, s in zip(boxes[keep], cls[keep], best[keep], strict=True):
        x0 = max(0.0, (cx - w / 2 - pad_x) / scale)
        y0 = max(0.0, (cy - h / 2 - pad_y) / scale)
        x1 = min(float(width), (cx + w / 2 - pad_x) / scale)
        y1 = min(float(height), (cy + h / 2 - pad_y) / scale)
        found.append(
            {
                "label": names[int(c)],
                "confidence": round(float(s), 3),
                "bbox": [round(x0), round(y0), round(x1), round(y1)],
            }
        )
    return nms(found, NMS_IOU)


def iou(a: list[int], b: list[int]) -> float:
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def nms(dets: list[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    """Greedy non-maximum suppression per label (pure)."""
    kept: list[dict[str, Any]] = []
    for det in sorted(dets, key=lambda d: -d["confidence"]):
        if all(k["label"] != det["label"] or iou(k["bbox"], det["bbox"]) < threshold for k in kept):
            kept.append(det)
    return kept


def detect_batch(
    reporter: Any,
    model_path: str,
    frames: list[tuple[str, float | None]],
    conf: float,
    classes: list[str],
) -> dict[str, Any]:
    """Child-process entry: run the ONNX detector on every frame."""
    import numpy as np
    import onnxruntime
    from PIL import Image

    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    inp = session.get_inputs()[0]
    size = inp.shape[2] if isinstance(inp.shape[2], int) else 640
    meta = session.get_modelmeta().custom_metadata_map
    count = session.get_outputs()[0].shape[1]
    names = class_names(meta, count - 4 if isinstance(count, int) else len(COCO))
    results = []
    for i, (path, ts) in enumerate(frames):
        reporter.wait_if_paused()
        with Image.open(path) as img:
            rgb = img.convert("RGB")
        box_map = letterbox(rgb.width, rgb.height, size)
        scale, pad_x, pad_y = box_map
        canvas = Image.new("RGB", (size, size), (LETTERBOX_FILL,) * 3)
        resized = rgb.resize((round(rgb.width * scale), round(rgb.height * scale)))
        canvas.paste(resized, (pad_x, pad_y))
        tensor = np.asarray(canvas, dtype=np.float32).transpose(2, 0, 1)[None] / 255.0
        output = session.run(None, {inp.name: tensor})[0][0]
        dets = decode(output, conf, names, box_map, (rgb.width, rgb.height))
        if classes:
            dets = [d for d in dets if d["label"] in classes]
        results.append({"path": path, "timestamp_sec": ts, "detections": dets})
        reporter.progress(100 * (i + 1) / len(frames), f"detect {i + 1}/{len(frames)}")
    return {"frames": results, "classes_known": names, "input_size": size}


class DetectFrameBatchExecutor(TaskExecutor):
    """One batch of frames -> labelled boxes per frame."""

    task_type = DETECT_FRAME_BATCH
    capability = "OBJECT_DETECT"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        backend = ctx.backend or ""
        if backend not in BACKENDS:
            raise errors.ResourceError(
                f"object detection backend {backend or '(none chosen)'} cannot run here; this "
                "node runs yolo-onnx",
                hint="NO_BACKEND",
            )
        model_path = ctx.backend_config.get("model_path")
        if not isinstance(model_path, str) or not Path(model_path).is_file():
            raise errors.ResourceError(
                f"yolo-onnx model file not found: {model_path!r} "
                "(capabilities.object_detect.providers[].model_path)",
                hint="NO_MODEL",
            )
        wanted = payload.get("model")
        if wanted is not None and wanted != Path(model_path).stem:
            # the seed lets a pipeline name its model; this node has exactly one configured
            raise errors.ResourceError(
                f"model {wanted!r} is not configured here (this node runs "
                f"{Path(model_path).stem!r})",
                hint="NO_MODEL",
            )
        mode = payload.get("mode") or "object"
        if mode != "object":
            raise errors.PayloadError(f"payload.mode {mode!r}: only 'object' is supported")
        conf = outputs.payload_number(payload, "conf_threshold", DEFAULT_CONF, low=0, high=1)
        classes = payload.get("classes") or []
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise errors.PayloadError("payload.classes must be a list of class names")
        batch = frames_mod.batch_frames(payload, ctx.data_dir)
        ctx.event("tool", f"onnxruntime {Path(model_path).name} on {len(batch)} frames")
        out = await ctx.run_in_subprocess(
            detect_batch, model_path, [(f.path, f.timestamp_sec) for f in batch], conf, classes
        )
        unknown = sorted(set(classes) - set(out["classes_known"]))
        if unknown:
            raise errors.PayloadError(f"payload.classes: the model has no class {unknown[0]!r}")
        result = {
            "frames": out["frames"],
            "frame_count": len(out["frames"]),
            "backend": backend,
            "model": Path(model_path).name,
            "model_input_size": out["input_size"],
            "conf_threshold": conf,
            "classes": classes,
            "batch_index": payload.get("batch_index"),
        }
        return ExecuteResult(result)


def tracks(frames: list[dict[str, Any]], min_frames: int) -> list[dict[str, Any]]:
    """Per label, runs of consecutive frames showing it; runs shorter than `min_frames` are
    flickers and are dropped (pure)."""
    step = frames_mod.frame_step(frames)
    runs: list[dict[str, Any]] = []
    open_runs: dict[str, dict[str, Any]] = {}
    for index, frame in enumerate(frames):
        seen: dict[str, float] = {}
        for det in frame.get("detections") or []:
            seen[det["label"]] = max(seen.get(det["label"], 0.0), float(det["confidence"]))
        for label in list(open_runs):
            if label not in seen:
                runs.append(open_runs.pop(label))
        ts = frame.get("timestamp_sec")
        for label, confidence in seen.items():
            run = open_runs.setdefault(
                label, {"label": label, "start_sec": ts, "first": index, "frames": 0, "max": 0.0}
            )
            run["frames"] += 1
            run["end_sec"] = None if ts is None else round(float(ts) + step, 3)
            run["max"] = max(run["max"], confidence)
    runs.extend(open_runs.values())
    out = []
    for run in sorted(runs, key=lambda r: (r["first"], r["label"])):
        if run["frames"] >= min_frames:
            out.append(
                {
                    "label": run["label"],
                    "start_sec": run["start_sec"],
                    "end_sec": run["end_sec"],
                    "frames": run["frames"],
                    "max_confidence": round(run["max"], 3),
                    "first_frame": run["first"],
                }
            )
    return out


def _kept(frames: list[dict[str, Any]], kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The frames with only the detections that belong to a kept track."""
    spans = [(t["label"], t["first_frame"], t["first_frame"] + t["frames"]) for t in kept]
    out = []
    for index, frame in enumerate(frames):
        dets = [
            d
            for d in frame.get("detections") or []
            if any(label == d["label"] and lo <= index < hi for label, lo, hi in spans)
        ]
        out.append({**frame, "detections": dets})
    return out


class MergeDetectResultsExecutor(video.CachedExecutor):
    """Every batch's frames in time order, flickers removed, tracks and counts per label."""

    task_type = MERGE_DETECT_RESULTS
    capability = None

    def _inputs(self, task: models.Task) -> Any:
        return {"batches": task.payload.get("batches"), "min": task.payload.get("min_frames")}

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        out = video.target(ctx, task.payload, "output_path", "detections.json")
        return out, self._inputs(task)

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        out, inputs = await self.locate(task, ctx)
        min_frames = int(
            outputs.payload_number(task.payload, "min_frames", DEFAULT_MIN_FRAMES, low=1, high=1000)
        )
        merged = frames_mod.merged_frames(task.payload)
        kept = tracks(merged, min_frames)
        labels: dict[str, int] = {}
        for t in kept:
            labels[t["label"]] = labels.get(t["label"], 0) + t["frames"]
        result = {
            "tracks": [{k: v for k, v in t.items() if k != "first_frame"} for t in kept],
            "labels": dict(sorted(labels.items(), key=lambda kv: -kv[1])),
            "frame_count": len(merged),
            "min_frames": min_frames,
            "batch_count": len(task.payload.get("batches") or []),
            "detections_path": str(out),
        }
        body = {**result, "frames": _kept(merged, kept)}
        outputs.write_text_atomic(out, json.dumps(body, indent=1))
        outputs.write_meta(out, self.task_type, inputs, result)
        ctx.progress(100, f"{len(kept)} track(s)")
        return ExecuteResult(result)


def executors() -> tuple[TaskExecutor, ...]:
    return (DetectFrameBatchExecutor(), MergeDetectResultsExecutor())
