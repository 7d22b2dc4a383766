"""Every video template end to end through `fredica process --template ...` against a real
`fredica serve` node on generated media: OCR (rapidocr, with OCR enabled in worker.yaml) over
120 frames in 3 batches, object detection with a yolo-onnx model file configured in worker.yaml
(built by the test), fingerprint, transcode, thumbnails + scenes, and transcription + OCR."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fredica.cli.demo import free_port
from tests.e2e.conftest import FAST_CONFIG, ServedNode
from tests.media_support import make_media
from tests.video_support import (
    SCENE_CUTS,
    build_color_detector,
    objects_video,
    pattern_video,
    run_ffmpeg,
    scene_video,
    subtitled_video,
)

pytestmark = pytest.mark.slow

VIDEO_CONFIG = """\
capabilities:
  ocr:
    enabled: true
  object_detect:
    enabled: true
    providers:
      - backend: yolo-onnx
        model_path: {model}
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedNode]:
    tmp = tmp_path_factory.mktemp("video-node")
    model = build_color_detector(tmp / "detector.onnx")
    config = tmp / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2) + VIDEO_CONFIG.format(model=model))
    served = ServedNode(tmp / "data", config, free_port(), tmp / "node.log").start()
    yield served
    if served.proc is not None and served.proc.poll() is None:
        served.terminate()


def process(node: ServedNode, template: str, source: Path, *params: str) -> str:
    args = [sys.executable, "-m", "fredica", "process", str(source), "--template", template]
    for p in params:
        args += ["--param", p]
    done = subprocess.run(
        [*args, "--node", node.url],
        capture_output=True,
        text=True,
        env=node.env() | {"COLUMNS": "200"},
        timeout=240,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{out}\n--- node log ---\n{node.log.read_text()[-3000:]}"
    assert "completed" in out
    return out


def last_pipeline(node: ServedNode, template: str) -> dict[str, Any]:
    with node.client() as client:
        items = client.get("/api/v1/pipelines").json()["pipelines"]
        pid = next(p["id"] for p in items if p["template"] == template)
        data: dict[str, Any] = client.get(f"/api/v1/pipelines/{pid}").json()
    return data


def of_type(data: dict[str, Any], task_type: str) -> list[dict[str, Any]]:
    return [t for t in data["tasks"] if t["type"] == task_type]


def test_ocr_video_reads_120_frames_in_3_batches(node: ServedNode, tmp_path: Path) -> None:
    clip = subtitled_video(tmp_path / "subs.mp4", duration=12)
    out = process(node, "ocr_video", clip, "fps=10")
    assert "HELLO WORLD 42" in out and "SECOND LINE 7" in out
    data = last_pipeline(node, "ocr_video")
    frames = of_type(data, "EXTRACT_FRAMES")[0]
    assert frames["result"]["frame_count"] == 120
    batches = sorted(of_type(data, "OCR_FRAME_BATCH"), key=lambda t: t["payload"]["batch_index"])
    assert [len(b["payload"]["frames"]) for b in batches] == [50, 50, 20]
    assert all(b["affinity"] == {"kind": "SOFT", "node_id": frames["claimed_by"]} for b in batches)
    assert all(b["backend"] == "rapidocr" for b in batches)
    merge = of_type(data, "MERGE_OCR_RESULTS")
    assert len(merge) == 1 and set(merge[0]["depends_on"]) >= {b["id"] for b in batches}
    spans = merge[0]["result"]["spans"]
    assert [(s["start_sec"], s["end_sec"]) for s in spans] == [(0.0, 3.0), (3.0, 6.0)]


def test_detect_objects_finds_the_person_and_the_car(node: ServedNode, tmp_path: Path) -> None:
    clip = objects_video(tmp_path / "objects.mp4")
    out = process(node, "detect_objects", clip, "conf_threshold=0.5")
    assert "person" in out and "car" in out
    data = last_pipeline(node, "detect_objects")
    tracks = {t["label"]: t for t in of_type(data, "MERGE_DETECT_RESULTS")[0]["result"]["tracks"]}
    assert (tracks["person"]["start_sec"], tracks["person"]["end_sec"]) == (0.0, 4.0)
    assert (tracks["car"]["start_sec"], tracks["car"]["end_sec"]) == (2.0, 4.0)
    assert of_type(data, "DETECT_FRAME_BATCH")[0]["backend"] == "yolo-onnx"
    with node.client() as client:
        caps = client.get("/api/v1/nodes").json()["nodes"][0]["capabilities"]
    declared = {(c["function"], c["backend"]) for c in caps}
    assert {("OCR", "rapidocr"), ("OCR", "tesseract"), ("OBJECT_DETECT", "yolo-onnx")} <= declared
    assert not any(f == "SUPER_RESOLUTION" for f, _ in declared)


def test_fingerprint_transcode_and_overview(node: ServedNode, tmp_path: Path) -> None:
    clip = scene_video(tmp_path / "scenes.mp4")
    out = process(node, "video_overview", clip)
    assert "scenes: 3" in out and "sprite" in out
    scenes = of_type(last_pipeline(node, "video_overview"), "DETECT_SCENES")[0]["result"]
    assert scenes["cuts_sec"] == pytest.approx(list(SCENE_CUTS), abs=0.1)
    out = process(node, "transcode", clip, "video_codec=h264", "crf=35", "width=160")
    assert "libx264" in out
    encoded = of_type(last_pipeline(node, "transcode"), "TRANSCODE")[0]
    assert (
        encoded["backend"] == "ffmpeg-cpu" and node.path(encoded["result"]["output_path"]).is_file()
    )
    out = process(node, "fingerprint", clip)
    assert "7 frame hashes" in out
    original = of_type(last_pipeline(node, "fingerprint"), "FINGERPRINT_VIDEO")[0]["result"]
    process(node, "fingerprint", node.path(encoded["result"]["output_path"]))
    copy = of_type(last_pipeline(node, "fingerprint"), "FINGERPRINT_VIDEO")[0]["result"]
    other = pattern_video(tmp_path / "other.mp4", "mandelbrot", duration=6.5, size="320x240")
    process(node, "fingerprint", other)
    unrelated = of_type(last_pipeline(node, "fingerprint"), "FINGERPRINT_VIDEO")[0]["result"]
    assert len({original["fingerprint_path"], copy["fingerprint_path"],
                unrelated["fingerprint_path"]}) == 3  # fmt: skip
    same = compare(node, original["fingerprint_path"], copy["fingerprint_path"])
    assert "likely the same video" in same, same
    different = compare(node, original["fingerprint_path"], unrelated["fingerprint_path"])
    assert "different" in different, different


def compare(node: ServedNode, a: str, b: str) -> str:
    first, second = str(node.path(a)), str(node.path(b))  # result paths: under the data dir
    done = subprocess.run(
        [sys.executable, "-m", "fredica", "fingerprint-compare", first, second],
        capture_output=True, text=True, env=node.env() | {"COLUMNS": "200"}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(300)
def test_transcribe_ocr_analyses_speech_and_screen_text(node: ServedNode, tmp_path: Path) -> None:
    speech, _ = make_media(tmp_path)
    clip = tmp_path / "talk_with_slides.mp4"
    run_ffmpeg("-f", "lavfi", "-i", "testsrc2=size=640x360:rate=5", "-i", str(speech),
               "-shortest", "-vf",
               "drawtext=text='FREDICA SLIDE':fontsize=36:fontcolor=white:box=1:"
               "boxcolor=black@0.8:boxborderw=12:x=(w-text_w)/2:y=h-56",
               "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
               "-c:a", "aac", str(clip))  # fmt: skip
    out = process(node, "transcribe_ocr", clip, "chunk_duration_sec=5")
    data = last_pipeline(node, "transcribe_ocr")
    analyze = of_type(data, "AI_ANALYZE")[0]
    assert "fox" in analyze["payload"]["text"].lower()
    assert "On-screen text (OCR):\nFREDICA SLIDE" in analyze["payload"]["text"]
    assert "FREDICA SLIDE" in out
