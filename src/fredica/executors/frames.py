"""Frame batches shared by OCR_FRAME_BATCH and DETECT_FRAME_BATCH, and their merges.

A batch payload names its frames either as the seed's `frame_paths` (timestamps then come from
`fps` / `start_sec` and the frame number in `frame_000123.png`) or as `frames`
(`[{path, timestamp_sec}]`, what the batch splitting at EXTRACT_FRAMES writes). A merge payload
carries the `batches` (each batch task's result, patched in by the pipeline as batches finish).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fredica.domain import errors
from fredica.executors import outputs

DEFAULT_BATCH_SIZE = 50
MAX_BATCH_SIZE = 1000
_NUMBER = re.compile(r"(\d+)(?=\.[A-Za-z]+$)")


@dataclass(frozen=True, slots=True)
class Frame:
    path: str
    timestamp_sec: float | None


def _timestamp(path: str, fps: float | None, start: float) -> float | None:
    m = _NUMBER.search(Path(path).name)
    if fps is None or m is None:
        return None
    return round(start + (int(m.group(1)) - 1) / fps, 3)


def batch_frames(payload: dict[str, Any], data_dir: Path) -> list[Frame]:
    """The frames of a batch payload, resolved against `data_dir`; PayloadError if none."""
    frames = payload.get("frames")
    if frames is not None:
        if not isinstance(frames, list) or not all(
            isinstance(f, dict) and isinstance(f.get("path"), str) for f in frames
        ):
            raise errors.PayloadError("payload.frames must be a list of {path, timestamp_sec}")
        out = [
            Frame(str(outputs.resolve(data_dir, f["path"])), _float(f.get("timestamp_sec")))
            for f in frames
        ]
    else:
        paths = payload.get("frame_paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise errors.PayloadError("payload needs frame_paths (a list of image paths)")
        fps = payload.get("fps")
        fps_value = float(fps) if isinstance(fps, int | float) and fps > 0 else None
        start = float(payload.get("start_sec") or 0)
        out = [
            Frame(str(outputs.resolve(data_dir, p)), _timestamp(p, fps_value, start)) for p in paths
        ]
    if not out:
        raise errors.PayloadError("the batch has no frames")
    if len(out) > MAX_BATCH_SIZE:
        raise errors.PayloadError(f"a batch holds at most {MAX_BATCH_SIZE} frames, got {len(out)}")
    missing = [f.path for f in out if not Path(f.path).is_file()]
    if missing:
        # frames live on the node that extracted them (SOFT affinity): another node may have
        # them, so this is a RESOURCE error, which excludes this node for the retry
        raise errors.ResourceError(
            f"{len(missing)} frame file(s) not on this node, e.g. {missing[0]}", hint="FILE_REMOTE"
        )
    return out


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def split(frames: list[dict[str, Any]], batch_size: int) -> list[list[dict[str, Any]]]:
    """Consecutive batches of at most `batch_size` frames (the seed's default is 50)."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    return [frames[i : i + batch_size] for i in range(0, len(frames), batch_size)]


def merged_frames(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every frame result of every batch in `payload.batches`, in time order."""
    batches = payload.get("batches")
    if not isinstance(batches, list):
        raise errors.PayloadError("payload.batches must be a list of batch results")
    frames: list[dict[str, Any]] = []
    for batch in batches:
        if not isinstance(batch, dict) or not isinstance(batch.get("frames"), list):
            raise errors.PayloadError("every entry of payload.batches needs a frames list")
        frames.extend(f for f in batch["frames"] if isinstance(f, dict))
    expected = payload.get("batch_count")
    if isinstance(expected, int) and expected != len(batches):
        raise errors.PayloadError(f"expected {expected} batch results, got {len(batches)}")
    frames.sort(key=lambda f: (f.get("timestamp_sec") is None, f.get("timestamp_sec") or 0.0))
    return frames


def frame_step(frames: list[dict[str, Any]]) -> float:
    """The typical time between two frames (1 s when unknown)."""
    times = [f["timestamp_sec"] for f in frames if isinstance(f.get("timestamp_sec"), int | float)]
    steps = sorted(b - a for a, b in itertools.pairwise(times) if b > a)
    return steps[len(steps) // 2] if steps else 1.0
