"""The `upscale` template on task rows: UPSCALE_VIDEO HARD-affine to the node holding a local
file, a URL downloaded first, TRANSCODE spawned when the upscale completes, HARD-affine to the
node that ran it and reading its output, and bad parameters named before anything is created."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fredica.domain import errors, models
from fredica.domain.spawn import SpawnInput
from fredica.pipelines import video
from tests.integration.test_video_pipeline import _build, _of, clip  # noqa: F401 (fixture)
from tests.unit.test_media_logic import _pipeline, _task

S = models.TaskStatus


def test_upscale_then_a_transcode_on_the_node_that_holds_the_file(clip: Path) -> None:  # noqa: F811
    spec = _build("upscale", str(clip), scale=4, content_type="anime", video_codec="hevc", crf=24)
    assert [t.type for t in spec.tasks] == ["UPSCALE_VIDEO"]
    up = _of(spec, "UPSCALE_VIDEO")
    assert up.affinity == models.Affinity.hard("node-owner")
    assert up.cache_policy is models.CachePolicy.CHECK_EXISTING
    assert up.payload["scale"] == 4 and up.payload["content_type"] == "anime"
    assert "video_codec" not in up.payload  # the transcode's settings wait for it
    done = dataclasses.replace(
        _task(up, S.COMPLETED, {"output_path": "upscaled/m/x.mkv", "width": 256}),
        claimed_by="node-gpu",
    )
    plan = video.video_hook(SpawnInput(done, _pipeline(spec), (done,)))
    assert plan is not None and [t.type for t in plan.new_tasks] == ["TRANSCODE"]
    encode = plan.new_tasks[0]
    assert encode.affinity == models.Affinity.hard("node-gpu")
    assert encode.file_node_id == "node-gpu" and encode.depends_on == (done.id,)
    assert encode.payload["input_path"] == "upscaled/m/x.mkv"
    assert (encode.payload["video_codec"], encode.payload["crf"]) == ("hevc", 24)
    assert encode.payload["output_path"].startswith("upscaled/") and "scale" not in encode.payload


def test_a_url_is_downloaded_first() -> None:
    spec = _build("upscale", "https://example.org/v.mp4")
    assert [t.type for t in spec.tasks] == ["DOWNLOAD_VIDEO", "UPSCALE_VIDEO"]
    assert _of(spec, "UPSCALE_VIDEO").affinity is None


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"scale": 3}, "scale must be 2 or 4"),
        ({"content_type": "cartoon"}, "content_type"),
        ({"model": 7}, "model must be a model name"),
        ({"container": "webm", "video_codec": "h264"}, "webm"),
        ({"width": 100}, "unknown key"),
        ({"analyze": True}, "unknown key"),
    ],
)
def test_bad_parameters_are_named(clip: Path, params: dict[str, object], match: str) -> None:  # noqa: F811
    with pytest.raises(errors.InvalidRequest, match=match):
        _build("upscale", str(clip), **params)
