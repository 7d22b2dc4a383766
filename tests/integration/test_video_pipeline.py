"""The video templates' DAGs and routing on task rows: 120 frames become 3 OCR batches (50, 50,
20) SOFT-affine to the frame node with one merge waiting for all of them, batch results flow
into the merge, merged text into AI_ANALYZE, and the combined transcription + OCR template."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fredica.domain import errors, models
from fredica.domain.spawn import SpawnInput
from fredica.engine.registry import builtin_registry
from fredica.executors import video as video_exec
from fredica.pipelines import video
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext
from tests.unit.test_media_logic import _pipeline, _task

S = models.TaskStatus
CTX = BuildContext(frozenset(), "node-owner")


def _build(name: str, source: str, **params: object) -> models.NewPipeline:
    template = builtin_registry().template(name)
    return template.build(PipelineRequest(template=name, source=source, params=params), CTX)


def _of(spec: models.NewPipeline, ttype: str) -> models.NewTask:
    return next(t for t in spec.tasks if t.type == ttype)


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    path = tmp_path / "clip.mp4"
    path.write_bytes(b"\0" * 10)
    return path


def test_120_frames_make_3_ocr_batches_and_one_merge(clip: Path) -> None:
    spec = _build("ocr_video", str(clip), analyze=True)
    assert [t.type for t in spec.tasks] == ["EXTRACT_FRAMES", "MERGE_OCR_RESULTS", "AI_ANALYZE"]
    frames_new = _of(spec, "EXTRACT_FRAMES")
    assert frames_new.affinity == models.Affinity.hard("node-owner")  # the local file is only here
    assert frames_new.payload["output_dir"].endswith("/1fps-png")
    pipeline = _pipeline(spec)
    result = {"frames": [{"index": i, "path": f"/f/frame_{i + 1:06d}.png", "timestamp_sec": i * 1.0}
                         for i in range(120)]}  # fmt: skip
    done = dataclasses.replace(_task(frames_new, S.COMPLETED, result), claimed_by="node-frames")
    merge = _task(_of(spec, "MERGE_OCR_RESULTS"), S.PENDING)
    analyze = _task(_of(spec, "AI_ANALYZE"), S.PENDING)
    plan = video.video_hook(SpawnInput(done, pipeline, (done, merge, analyze)))
    assert plan is not None
    batches = plan.new_tasks
    assert [t.type for t in batches] == ["OCR_FRAME_BATCH"] * 3
    assert [len(t.payload["frames"]) for t in batches] == [50, 50, 20]
    assert [t.payload["batch_index"] for t in batches] == [0, 1, 2]
    assert batches[2].payload["frames"][0]["timestamp_sec"] == 100.0
    assert all(t.affinity == models.Affinity.soft("node-frames") for t in batches)
    assert all(t.file_node_id == "node-frames" and t.depends_on == (done.id,) for t in batches)
    assert plan.add_dependencies == {merge.id: tuple(t.id for t in batches)}
    assert plan.patch_payloads[merge.id]["batch_count"] == 3
    # batches finish out of order: the merge payload holds every completed one, in order
    rows = [
        _task(t, S.COMPLETED, {"frames": [{"path": f["path"], "timestamp_sec": f["timestamp_sec"],
                                           "texts": [{"text": "hi", "confidence": 0.9}]}
                                          for f in t.payload["frames"]]})
        for t in batches
    ]  # fmt: skip
    second = video.video_hook(SpawnInput(rows[2], pipeline, (rows[2], rows[0], merge)))
    assert second is not None
    assert [b["batch_index"] for b in second.patch_payloads[merge.id]["batches"]] == [0, 2]
    merged = _task(_of(spec, "MERGE_OCR_RESULTS"), S.COMPLETED,
                   {"text": "HELLO", "spans": [{"start_sec": 1.0, "end_sec": 3.0,
                                                "text": "HELLO"}]})  # fmt: skip
    last = video.video_hook(SpawnInput(merged, pipeline, (merged, analyze)))
    assert last is not None
    patch = last.patch_payloads[analyze.id]
    assert "On-screen text (OCR):\nHELLO" in patch["text"]
    assert patch["segments"] == [{"start": 1.0, "end": 3.0, "text": "[on screen] HELLO"}]


def test_batch_size_and_detection_parameters_reach_the_batches(clip: Path) -> None:
    spec = _build("detect_objects", str(clip), batch_size=7, fps=2, classes=["car"],
                  conf_threshold=0.4)  # fmt: skip
    assert spec.params["batch_size"] == 7
    frames_new = _of(spec, "EXTRACT_FRAMES")
    assert frames_new.payload["fps"] == 2
    found = [{"path": f"/f/{i}.png", "timestamp_sec": i / 2} for i in range(15)]
    done = _task(frames_new, S.COMPLETED, {"frames": found})
    merge = _task(_of(spec, "MERGE_DETECT_RESULTS"), S.PENDING)
    plan = video.video_hook(SpawnInput(done, _pipeline(spec), (done, merge)))
    assert plan is not None and [len(t.payload["frames"]) for t in plan.new_tasks] == [7, 7, 1]
    assert all(t.type == "DETECT_FRAME_BATCH" for t in plan.new_tasks)
    assert plan.new_tasks[0].payload["classes"] == ["car"]
    assert plan.new_tasks[0].payload["conf_threshold"] == 0.4


def test_transcribe_ocr_analyses_speech_and_screen_text(clip: Path) -> None:
    spec = _build("transcribe_ocr", str(clip), batch_size=10, chunk_duration_sec=30)
    types = [t.type for t in spec.tasks]
    assert {"EXTRACT_AUDIO", "SPLIT_AUDIO", "MERGE_TRANSCRIPTION", "EXTRACT_FRAMES",
            "MERGE_OCR_RESULTS", "AI_ANALYZE"} <= set(types)  # fmt: skip
    analyze = _of(spec, "AI_ANALYZE")
    assert _of(spec, "MERGE_OCR_RESULTS").id in analyze.depends_on
    assert _of(spec, "MERGE_TRANSCRIPTION").id in analyze.depends_on
    assert spec.params["batch_size"] == 10
    pipeline = _pipeline(spec)
    rows = {t.type: _task(t, S.PENDING) for t in spec.tasks}
    ocr_done = _task(_of(spec, "MERGE_OCR_RESULTS"), S.COMPLETED,
                     {"text": "SLIDE ONE", "spans": []})  # fmt: skip
    said = {"text": "we talk", "segments": [{"start": 0, "end": 1, "text": "we talk"}]}
    talk_done = _task(_of(spec, "MERGE_TRANSCRIPTION"), S.COMPLETED, said)
    template = builtin_registry().template("transcribe_ocr")
    # the transcript finishes last: the analysis still gets both texts
    plan = template.on_task_completed(
        SpawnInput(talk_done, pipeline, (talk_done, ocr_done, rows["AI_ANALYZE"]))
    )
    assert plan is not None
    text = plan.patch_payloads[rows["AI_ANALYZE"].id]["text"]
    assert text.startswith("we talk") and "SLIDE ONE" in text


def test_url_sources_download_first_and_bad_params_are_named(clip: Path) -> None:
    spec = _build("fingerprint", "https://example.org/v.mp4")
    dl, fp = spec.tasks
    assert dl.type == "DOWNLOAD_VIDEO" and fp.depends_on == (dl.id,) and fp.affinity is None
    done = _task(dl, S.COMPLETED, {"video_path": "/d/v.mp4"})
    waiting = _task(fp, S.PENDING)
    plan = video.video_hook(SpawnInput(done, _pipeline(spec), (done, waiting)))
    assert plan is not None and plan.patch_payloads == {waiting.id: {"video_path": "/d/v.mp4"}}
    with pytest.raises(errors.InvalidRequest, match="unknown key"):
        _build("ocr_video", str(clip), bogus=1)
    with pytest.raises(errors.InvalidRequest, match="batch_size"):
        _build("ocr_video", str(clip), batch_size=0)
    with pytest.raises(errors.InvalidRequest, match="webm"):
        _build("transcode", str(clip), container="webm", video_codec="h264")


def test_transcode_arguments_per_backend() -> None:
    payload = {"video_codec": "hevc", "crf": 28, "height": 720, "container": "mkv"}
    before, after, encoder = video_exec.transcode_args("ffmpeg-cpu", payload)
    assert encoder == "libx265" and before == []
    assert after[after.index("-crf") + 1] == "28" and "scale=-2:720" in after
    assert after[-2:] == ["-f", "matroska"]
    _, after, encoder = video_exec.transcode_args("ffmpeg-nvenc", payload)
    assert encoder == "hevc_nvenc" and after[after.index("-cq") + 1] == "28"
    before, after, encoder = video_exec.transcode_args("ffmpeg-vaapi", payload)
    assert encoder == "hevc_vaapi" and before == ["-vaapi_device", "/dev/dri/renderD128"]
    assert "scale=-2:720,format=nv12,hwupload" in after
    _, after, encoder = video_exec.transcode_args("ffmpeg-videotoolbox", {"bitrate": "4M"})
    assert encoder == "h264_videotoolbox" and after[after.index("-b:v") + 1] == "4M"
    _, after, _ = video_exec.transcode_args(
        "ffmpeg-cpu", {"container": "webm", "video_codec": "vp9"}
    )
    assert after[after.index("-c:a") + 1] == "libopus"
    with pytest.raises(errors.PayloadError, match="no vp9 encoder"):
        video_exec.transcode_args("ffmpeg-nvenc", {"container": "webm", "video_codec": "vp9"})
    with pytest.raises(errors.InvalidRequest, match="no text"):
        _build("fingerprint", "https://example.org/v.mp4", analyze=True)
