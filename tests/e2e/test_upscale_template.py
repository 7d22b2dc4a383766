"""The `upscale` template end to end through `fredica process --template upscale` against a
real `fredica serve` node (super_resolution enabled, realesrgan-ncnn auto-detected from its
wheel): UPSCALE_VIDEO doubles the resolution, then TRANSCODE is spawned HARD-affine to the node
that holds the upscaled file; bad parameters are a 4xx before anything is created."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fredica.cli.demo import free_port
from tests.e2e.conftest import FAST_CONFIG, ServedNode
from tests.e2e.test_video_templates import last_pipeline, of_type, process
from tests.video_support import run_ffmpeg

pytestmark = pytest.mark.slow

UPSCALE_CONFIG = """\
capabilities:
  super_resolution:
    enabled: true
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedNode]:
    tmp = tmp_path_factory.mktemp("upscale-node")
    config = tmp / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2) + UPSCALE_CONFIG)
    served = ServedNode(tmp / "data", config, free_port(), tmp / "node.log").start()
    yield served
    if served.proc is not None and served.proc.poll() is None:
        served.terminate()


def test_upscale_then_transcode_on_the_same_node(node: ServedNode, tmp_path: Path) -> None:
    clip = tmp_path / "small.mp4"
    run_ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=5:duration=1", "-c:v", "libx264",
               "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(clip))  # fmt: skip
    params = ("scale=2", "content_type=anime", "video_codec=h264", "crf=30")
    out = process(node, "upscale", clip, *params)
    assert "upscaled x2 (realesrgan-ncnn, model realesrgan-anime): 64x48 -> 128x96" in out
    data = last_pipeline(node, "upscale")
    up = of_type(data, "UPSCALE_VIDEO")[0]
    assert up["backend"] == "realesrgan-ncnn" and up["result"]["width"] == 128
    transcode = of_type(data, "TRANSCODE")[0]
    assert transcode["status"] == "completed" and transcode["depends_on"] == [up["id"]]
    assert transcode["affinity"] == {"kind": "HARD", "node_id": up["claimed_by"]}
    assert transcode["payload"]["input_path"] == up["result"]["output_path"]
    assert transcode["result"]["video_stream"] and "128x96" in transcode["result"]["video_stream"]
    assert node.path(transcode["result"]["output_path"]).is_file()
    with node.client() as client:
        caps = client.get("/api/v1/nodes").json()["nodes"][0]["capabilities"]
        request = {"source": str(clip), "template": "upscale"}
        bad = client.post("/api/v1/pipelines", json={**request, "params": {"scale": 3}})
        wrong = client.post("/api/v1/pipelines", json={**request, "params": {"container": "webm"}})
    assert ("SUPER_RESOLUTION", "realesrgan-ncnn") in {(c["function"], c["backend"]) for c in caps}
    assert not any(c["backend"] == "ffmpeg-lanczos" for c in caps)  # only when configured
    assert bad.status_code == 422 and "scale must be 2 or 4" in bad.text
    assert wrong.status_code == 422 and "webm" in wrong.text
