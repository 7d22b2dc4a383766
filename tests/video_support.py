"""Generated media for the video tests: ffmpeg test patterns with burned-in text, hard scene
cuts at known times, a frame with coloured objects, and a small YOLOv8-format ONNX detector
built here with the `onnx` package (no YOLO weights ship in any wheel, so the tests build a
model whose output format matches an Ultralytics export)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from fredica.executors import ffmpeg

SETUP = "run `make venv` (imageio-ffmpeg, rapidocr, onnx) and `make system-deps` (tesseract-ocr)"
SCENE_CUTS = (2.0, 4.5)  # seconds; the test video runs at 10 fps
SUBTITLES = (("HELLO WORLD 42", 0, 3), ("SECOND LINE 7", 3, 6))
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"


def ffmpeg_exe() -> str:
    try:
        return ffmpeg.executable()
    except Exception as exc:
        pytest.fail(f"ffmpeg is not available ({exc}): {SETUP}")


def run_ffmpeg(*args: str) -> None:
    subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-y", *args],
        check=True,
        capture_output=True,
        timeout=120,
    )


def _drawtext(text: str, start: float, end: float, size: int = 36) -> str:
    font = f"fontfile={FONT}:" if Path(FONT).is_file() else ""
    return (
        f"drawtext={font}text='{text}':fontsize={size}:fontcolor=white:box=1:"
        f"boxcolor=black@0.8:boxborderw=12:x=(w-text_w)/2:y=h-56:"
        f"enable='between(t,{start},{end - 0.001})'"
    )


def subtitled_video(out: Path, duration: float = 6, fps: int = 10) -> Path:
    """A 640x360 test pattern with two subtitles burned in at the bottom (SUBTITLES)."""
    texts = ",".join(_drawtext(t, s, e) for t, s, e in SUBTITLES)
    run_ffmpeg("-f", "lavfi", "-i", f"testsrc2=size=640x360:rate={fps}:duration={duration}",
               "-vf", texts, "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
               str(out))  # fmt: skip
    return out


def scene_video(out: Path) -> Path:
    """Three very different shots joined with hard cuts at SCENE_CUTS (10 fps)."""
    run_ffmpeg("-f", "lavfi", "-i", "testsrc=size=320x240:rate=10:duration=2",
               "-f", "lavfi", "-i", "smptebars=size=320x240:rate=10:duration=2.5",
               "-f", "lavfi", "-i", "rgbtestsrc=size=320x240:rate=10:duration=2",
               "-filter_complex", "[0][1][2]concat=n=3:v=1:a=0",
               "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
               str(out))  # fmt: skip
    return out


def pattern_video(out: Path, source: str, duration: float = 8, size: str = "640x360") -> Path:
    """`source` is an ffmpeg lavfi source name (testsrc2, mandelbrot, life, ...)."""
    run_ffmpeg("-f", "lavfi", "-i", f"{source}=size={size}:rate=25", "-t", str(duration),
               "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
               str(out))  # fmt: skip
    return out


def objects_video(out: Path) -> Path:
    """4 s at 5 fps: a red "person" box throughout, a blue "car" box from 2 s (for the model
    `build_color_detector` makes)."""
    run_ffmpeg("-f", "lavfi", "-i", "color=c=gray:size=320x240:rate=5:duration=4", "-vf",
               "drawbox=x=40:y=60:w=80:h=140:color=red:t=fill,"
               "drawbox=x=200:y=150:w=100:h=70:color=blue:t=fill:enable='gte(t,2)'",
               "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
               str(out))  # fmt: skip
    return out


def objects_frame(out: Path) -> Path:
    """A 320x240 grey frame with a red 'person' box at (40,60)-(120,200) and a blue 'car' box
    at (200,150)-(300,220)."""
    run_ffmpeg("-f", "lavfi", "-i", "color=c=gray:size=320x240:duration=1", "-vf",
               "drawbox=x=40:y=60:w=80:h=140:color=red:t=fill,"
               "drawbox=x=200:y=150:w=100:h=70:color=blue:t=fill",
               "-frames:v", "1", str(out))  # fmt: skip
    return out


def build_color_detector(out: Path, size: int = 64, cell: int = 8) -> Path:
    """A YOLOv8-format detector: input `images` [1,3,size,size], output [1, 4 + 2, anchors]
    with one anchor per `cell` x `cell` grid cell. Class 0 ('person') scores red cells,
    class 1 ('car') blue cells; each anchor's box is its cell. Names in the `names`
    metadata, as an Ultralytics export writes them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    grid = size // cell
    anchors = grid * grid
    # colour filters averaged over a cell: red = r - (g + b) / 2, blue = b - (r + g) / 2
    w = np.zeros((2, 3, cell, cell), dtype=np.float32)
    w[0, 0], w[0, 1], w[0, 2] = 1.0, -0.5, -0.5
    w[1, 2], w[1, 0], w[1, 1] = 1.0, -0.5, -0.5
    w /= cell * cell
    centers = (np.arange(grid, dtype=np.float32) + 0.5) * cell
    cy, cx = np.meshgrid(centers, centers, indexing="ij")
    boxes = np.stack(
        [cx.ravel(), cy.ravel(), np.full(anchors, cell), np.full(anchors, cell)]
    ).astype(np.float32)[None]
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["colour"], strides=[cell, cell]),
        helper.make_node("Reshape", ["colour", "shape"], ["flat"]),
        helper.make_node("Mul", ["flat", "gain"], ["scaled"]),
        helper.make_node("Sub", ["scaled", "bias"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["scores"]),
        helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array([1, 2, anchors], dtype=np.int64), "shape"),
        numpy_helper.from_array(np.array(20.0, dtype=np.float32), "gain"),
        numpy_helper.from_array(np.array(6.0, dtype=np.float32), "bias"),
        numpy_helper.from_array(boxes, "boxes"),
    ]
    graph = helper.make_graph(
        nodes,
        "colour-detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, anchors])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    entry = model.metadata_props.add()
    entry.key, entry.value = "names", "{0: 'person', 1: 'car'}"
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out
