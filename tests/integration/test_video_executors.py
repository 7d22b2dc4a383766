"""The video executors one at a time, for real: ffmpeg on generated video with burned-in text
and hard scene cuts, rapidocr and tesseract reading the text, pHash across a re-encode, a
paused TRANSCODE, thumbnails, and object detection with an ONNX model built by the test."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from fredica.domain import errors
from fredica.domain.models import CachePolicy
from fredica.executors import detect, ocr, phash, scenes, video
from fredica.executors.context import TaskContext
from tests.media_support import make_context
from tests.video_support import (
    SCENE_CUTS,
    SETUP,
    SUBTITLES,
    build_color_detector,
    objects_frame,
    pattern_video,
    scene_video,
    subtitled_video,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("clips")
    return {
        "subtitled": subtitled_video(d / "subtitled.mp4"),
        "scenes": scene_video(d / "scenes.mp4"),
        "pattern": pattern_video(d / "pattern.mp4", "testsrc2"),
        "other": pattern_video(d / "other.mp4", "mandelbrot"),
    }


async def run(tmp_path: Path, executor: Any, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
    ctx = await make_context(tmp_path, executor.task_type, payload, **kw)
    result = (await executor.execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


@pytest.mark.parametrize("method", ["ffmpeg-scene", "pyscenedetect"])
async def test_scene_cuts_are_found_within_one_frame(
    tmp_path: Path, clips: dict[str, Path], method: str
) -> None:
    payload = {"video_path": str(clips["scenes"]), "method": method}
    result = await run(tmp_path, scenes.DetectScenesExecutor(), payload)
    assert result["method"] == method
    cuts = result["cuts_sec"]
    assert len(cuts) == len(SCENE_CUTS), result["scenes"]
    for found, truth in zip(cuts, SCENE_CUTS, strict=True):
        assert abs(found - truth) <= 0.1 + 1e-6  # one frame interval at 10 fps
    assert [s["start_sec"] for s in result["scenes"]] == [0.0, *cuts]
    assert result["scenes"][-1]["end_sec"] == pytest.approx(6.5, abs=0.05)
    thumbs = [Path(s["thumbnail_path"]) for s in result["scenes"]]
    assert len(set(thumbs)) == 3 and all(t.stat().st_size > 0 for t in thumbs)


async def test_scene_method_and_threshold_come_from_worker_yaml(
    tmp_path: Path, clips: dict[str, Path]
) -> None:
    cfg = {"scene_threshold": 0.99, "scene_detect_backend": "ffmpeg-scene"}
    high = await run(tmp_path, scenes.DetectScenesExecutor(),
                     {"video_path": str(clips["scenes"])}, backend_config=cfg)  # fmt: skip
    assert high["threshold"] == 0.99 and high["method"] == "ffmpeg-scene"
    assert high["cuts_sec"] == []
    # "" = auto: pyscenedetect when the package is installed (it is, in the dev install)
    assert scenes.choose_method({}, {"scene_detect_backend": ""}) == "pyscenedetect"
    with pytest.raises(errors.PayloadError, match="method"):
        scenes.choose_method({"method": "magic"}, {})


async def _frames(tmp_path: Path, clip: Path, **extra: Any) -> dict[str, Any]:
    payload = {"video_path": str(clip), "fps": 1, "output_dir": "frames/m1", **extra}
    return await run(tmp_path, video.ExtractFramesExecutor(), payload)


@pytest.mark.parametrize("backend", ["rapidocr", "tesseract"])
async def test_ocr_reads_the_burned_subtitles_and_merges_them_into_spans(
    tmp_path: Path, clips: dict[str, Path], backend: str
) -> None:
    if backend == "tesseract" and shutil.which("tesseract") is None:
        pytest.fail(f"tesseract is not installed: {SETUP}")
    frames = await _frames(tmp_path, clips["subtitled"])
    assert frames["frame_count"] == 6
    assert [f["timestamp_sec"] for f in frames["frames"]] == [0, 1, 2, 3, 4, 5]
    batch = await run(
        tmp_path, ocr.OcrFrameBatchExecutor(),
        {"frames": frames["frames"], "mode": "subtitle", "language": "en"}, backend=backend,
    )  # fmt: skip
    assert batch["backend"] == backend and batch["region"] == "bottom"
    read = [" ".join(t["text"] for t in f["texts"]) for f in batch["frames"]]
    for second, text in enumerate(read):
        expected = SUBTITLES[0][0] if second < 3 else SUBTITLES[1][0]
        assert text.replace(" ", "") == expected.replace(" ", ""), read
    box = batch["frames"][0]["texts"][0]["bbox"]
    assert box[1] >= 360 * 0.8 - 1 and box[3] <= 360  # whole-frame pixels, bottom band
    merged = await run(tmp_path, ocr.MergeOcrResultsExecutor(),
                       {"batches": [batch], "output_path": "ocr/m1/ocr.json"})  # fmt: skip
    spans = [(s["start_sec"], s["end_sec"], s["text"].replace(" ", "")) for s in merged["spans"]]
    assert spans == [
        (0.0, 3.0, SUBTITLES[0][0].replace(" ", "")),
        (3.0, 6.0, SUBTITLES[1][0].replace(" ", "")),
    ]
    assert Path(merged["text_path"]).read_text().count("\n") == 2


async def test_extract_frames_reuses_complete_outputs(
    tmp_path: Path, clips: dict[str, Path]
) -> None:
    payload = {"video_path": str(clips["subtitled"]), "fps": 2, "output_dir": "frames/m2",
               "start_sec": 1, "end_sec": 3, "format": "jpg"}  # fmt: skip
    ctx = await make_context(
        tmp_path, "EXTRACT_FRAMES", payload, cache_policy=CachePolicy.CHECK_EXISTING
    )
    executor = video.ExtractFramesExecutor()
    assert await executor.can_skip(ctx.task, ctx) is None
    result = (await executor.execute(ctx.task, ctx)).result_json
    assert result is not None and result["frame_count"] == 4
    assert [f["timestamp_sec"] for f in result["frames"]] == [1.0, 1.5, 2.0, 2.5]
    reused = await executor.can_skip(ctx.task, ctx)
    assert reused is not None and reused["reused"]
    Path(result["frames"][2]["path"]).unlink()  # a missing frame: run again
    assert await executor.can_skip(ctx.task, ctx) is None


async def test_reencoding_keeps_the_phash_close_and_another_video_is_far(
    tmp_path: Path, clips: dict[str, Path]
) -> None:
    encoded = await run(
        tmp_path, video.TranscodeExecutor(),
        {"input_path": str(clips["pattern"]), "video_codec": "h264", "crf": 38, "width": 320,
         "container": "mkv", "output_path": "out/small.mkv"},
        backend="ffmpeg-cpu",
    )  # fmt: skip
    assert encoded["encoder"] == "libx264"
    assert encoded["size_bytes"] < encoded["source_size_bytes"]
    prints = {}
    for name, path in (("a", clips["pattern"]), ("b", encoded["output_path"]),
                       ("c", clips["other"])):  # fmt: skip
        prints[name] = await run(
            tmp_path / name, video.FingerprintVideoExecutor(), {"video_path": str(path)}
        )
    assert prints["a"]["hash_count"] == 8
    same = video.compare_fingerprints(prints["a"], prints["b"])
    other = video.compare_fingerprints(prints["a"], prints["c"])
    assert same["mean_distance"] <= 4 and same["similarity"] >= 0.85, same
    assert other["mean_distance"] >= 20 and other["similarity"] <= 0.4, other


def _cpu_ticks(pgid: int) -> int:
    """utime + stime of every process in a process group (clock ticks)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 (pgrp) is index 2 after the command
            total += int(fields[11]) + int(fields[12])
    return total


async def test_paused_transcode_stops_using_cpu(tmp_path: Path, clips: dict[str, Path]) -> None:
    payload = {"input_path": str(clips["pattern"]), "video_codec": "hevc", "width": 1920,
               "crf": 20, "output_path": "out/big.mp4"}  # fmt: skip
    ctx = await make_context(tmp_path, "TRANSCODE", payload, backend="ffmpeg-cpu")
    job = asyncio.ensure_future(video.TranscodeExecutor().execute(ctx.task, ctx))
    groups = await _running_groups(ctx)
    ctx.control.pause()
    await asyncio.sleep(0.3)
    before = sum(_cpu_ticks(g) for g in groups)
    await asyncio.sleep(1.5)
    paused_growth = sum(_cpu_ticks(g) for g in groups) - before
    ctx.control.resume()
    await asyncio.sleep(1.0)
    running_growth = sum(_cpu_ticks(g) for g in groups) - before - paused_growth
    ctx.control.cancel("test over")
    with pytest.raises(errors.TaskCancelled):
        await job
    assert paused_growth == 0, f"{paused_growth} ticks while paused"
    assert running_growth > 20, f"only {running_growth} ticks after resume"
    assert not Path(ctx.data_dir / "out" / "big.mp4").exists()


async def _running_groups(ctx: TaskContext) -> set[int]:
    """Wait until the encoder is running (progress reported), return its process groups."""
    for _ in range(300):
        groups = set(ctx.control._process_groups)
        if groups and ctx.last_progress > 0:
            return groups
        await asyncio.sleep(0.05)
    raise AssertionError("the transcode never started encoding")


async def test_thumbnails_cover_sequence_and_sprite(tmp_path: Path, clips: dict[str, Path]) -> None:
    result = await run(tmp_path, video.GenerateThumbnailExecutor(),
                       {"video_path": str(clips["pattern"]), "count": 6, "columns": 3,
                        "width": 160})  # fmt: skip
    assert len(result["thumbnails"]) == 6 and result["sprite_rows"] == 2
    assert [t["timestamp_sec"] for t in result["thumbnails"]] == pytest.approx(
        [i * 8 / 6 for i in range(6)], abs=0.01
    )
    from PIL import Image

    with Image.open(result["sprite_path"]) as sprite:
        assert sprite.width == 3 * 160 and sprite.height == 2 * 90
    with Image.open(result["cover_path"]) as cover:
        assert cover.size == (160, 90)


async def test_detection_finds_the_person_and_the_car_and_merge_drops_flickers(
    tmp_path: Path,
) -> None:
    model = build_color_detector(tmp_path / "detector.onnx")
    frame = objects_frame(tmp_path / "frame_000001.png")
    payload = {"frames": [{"path": str(frame), "timestamp_sec": 0.0}], "conf_threshold": 0.5}
    cfg = {"model_path": str(model)}
    batch = await run(tmp_path, detect.DetectFrameBatchExecutor(), payload,
                      backend="yolo-onnx", backend_config=cfg)  # fmt: skip
    dets = batch["frames"][0]["detections"]
    people = [d for d in dets if d["label"] == "person"]
    cars = [d for d in dets if d["label"] == "car"]
    assert people and cars, dets
    for d, (x0, y0, x1, y1) in [(p, (40, 60, 120, 200)) for p in people] + [
        (c, (200, 150, 300, 220)) for c in cars
    ]:
        cx, cy = (d["bbox"][0] + d["bbox"][2]) / 2, (d["bbox"][1] + d["bbox"][3]) / 2
        assert x0 <= cx <= x1 and y0 <= cy <= y1, d
    only_cars = await run(tmp_path / "c", detect.DetectFrameBatchExecutor(),
                          {**payload, "classes": ["car"]}, backend="yolo-onnx",
                          backend_config=cfg)  # fmt: skip
    assert {d["label"] for d in only_cars["frames"][0]["detections"]} == {"car"}
    assert only_cars["model"] == "detector.onnx"
    ctx = await make_context(tmp_path / "x", "DETECT_FRAME_BATCH", {**payload, "model": "yolov8x"},
                       backend="yolo-onnx", backend_config=cfg)  # fmt: skip
    with pytest.raises(errors.ResourceError, match="'yolov8x' is not configured here"):
        await detect.DetectFrameBatchExecutor().execute(ctx.task, ctx)
    # merge: the car on 3 consecutive frames is kept, a person on one frame is a flicker
    car = {"label": "car", "confidence": 0.9, "bbox": [1, 1, 5, 5]}
    person = {"label": "person", "confidence": 0.8, "bbox": [1, 1, 5, 5]}
    frames = [{"path": f"f{i}", "timestamp_sec": float(i), "detections": [car]} for i in range(3)]
    frames[1]["detections"] = [car, person]
    merged = await run(tmp_path / "m", detect.MergeDetectResultsExecutor(),
                       {"batches": [{"frames": frames[1:]}, {"frames": frames[:1]}]})  # fmt: skip
    assert merged["labels"] == {"car": 3}
    assert merged["tracks"] == [{"label": "car", "start_sec": 0.0, "end_sec": 3.0, "frames": 3,
                                 "max_confidence": 0.9}]  # fmt: skip


async def test_detection_without_a_model_file_is_a_resource_error(tmp_path: Path) -> None:
    frame = objects_frame(tmp_path / "f.png")
    cfg = {"model_path": "/nope.onnx"}
    ctx = await make_context(tmp_path, "DETECT_FRAME_BATCH", {"frame_paths": [str(frame)]},
                       backend="yolo-onnx", backend_config=cfg)  # fmt: skip
    with pytest.raises(errors.ResourceError, match="model file not found"):
        await detect.DetectFrameBatchExecutor().execute(ctx.task, ctx)


async def test_bad_payloads_are_named(tmp_path: Path, clips: dict[str, Path]) -> None:
    src = str(clips["pattern"])
    with pytest.raises(errors.PayloadError, match="cannot go into a webm"):
        await run(tmp_path, video.TranscodeExecutor(),
                  {"input_path": src, "container": "webm", "video_codec": "h264"})  # fmt: skip
    with pytest.raises(errors.PayloadError, match="fps"):
        await run(tmp_path, video.ExtractFramesExecutor(), {"video_path": src, "fps": 0})
    with pytest.raises(errors.PermanentError, match=r"no video stream|cannot read"):
        bad = tmp_path / "x.mp4"
        bad.write_bytes(b"not a video")
        await run(tmp_path, scenes.DetectScenesExecutor(), {"video_path": str(bad)})
    assert phash.distance("ffffffffffffffff", "0000000000000000") == 64
