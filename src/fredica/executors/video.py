"""The FFMPEG video family (seed 001 §3.4, §3.6, §3.14): TRANSCODE, GENERATE_THUMBNAIL,
EXTRACT_FRAMES, DETECT_SCENES and FINGERPRINT_VIDEO, plus `compare_fingerprints`.

Every run goes through `ffmpeg.run`, so pause stops the encoder (SIGSTOP) and cancel kills it.
TRANSCODE picks its encoder from the backend the selector chose (`ffmpeg-nvenc` ->
`h264_nvenc`, `ffmpeg-vaapi` -> `h264_vaapi`, ...) and records the encoder it ran; a GPU backend
is declared only where detection found its encoder and device (capabilities/declare.py).
Outputs are written under temporary names and renamed when complete; EXTRACT_FRAMES writes a
whole directory and swaps it in, so OCR and detection reuse one set of frames (CHECK_EXISTING).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.executors import audio, ffmpeg, outputs, phash
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

logger = logging.getLogger(__name__)

TRANSCODE = "TRANSCODE"
GENERATE_THUMBNAIL = "GENERATE_THUMBNAIL"
EXTRACT_FRAMES = "EXTRACT_FRAMES"
FINGERPRINT_VIDEO = "FINGERPRINT_VIDEO"

VAAPI_DEVICE = "/dev/dri/renderD128"
ENCODERS: dict[str, dict[str, str]] = {
    "ffmpeg-cpu": {"h264": "libx264", "hevc": "libx265", "av1": "libsvtav1", "vp9": "libvpx-vp9"},
    "ffmpeg-nvenc": {"h264": "h264_nvenc", "hevc": "hevc_nvenc", "av1": "av1_nvenc"},
    "ffmpeg-vaapi": {"h264": "h264_vaapi", "hevc": "hevc_vaapi", "av1": "av1_vaapi"},
    "ffmpeg-videotoolbox": {"h264": "h264_videotoolbox", "hevc": "hevc_videotoolbox"},
}
CONTAINERS: dict[str, tuple[frozenset[str], str]] = {  # container -> (video codecs, audio)
    "mp4": (frozenset({"h264", "hevc", "av1", "copy"}), "aac"),
    "mov": (frozenset({"h264", "hevc", "copy"}), "aac"),
    "mkv": (frozenset({"h264", "hevc", "av1", "vp9", "copy"}), "aac"),
    "webm": (frozenset({"vp9", "av1", "copy"}), "libopus"),
}
AUDIO_CODECS = {"aac": "aac", "opus": "libopus", "copy": "copy", "none": ""}


# --- shared helpers (also used by the OCR and detection executors) ---------------------------


# payload paths: absolute or relative to the data dir, exactly as the audio executors read them
target = audio.payload_output


def fresh_dir(out_dir: Path) -> Path:
    """A new empty temporary directory next to `out_dir` (swapped in by `swap_dir`)."""
    tmp = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.part")
    with outputs.disk_errors(f"creating {tmp}"):
        tmp.mkdir(parents=True)
    return tmp


def swap_dir(tmp: Path, out_dir: Path) -> None:
    """Replace `out_dir` by the completed `tmp` (the old one is removed afterwards)."""
    with outputs.disk_errors(f"moving results to {out_dir}"):
        if out_dir.exists():
            trash = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.old")
            os.replace(out_dir, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(tmp, out_dir)


def discard_dir(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(tmp)


async def video_info(ctx: TaskContext, source: Path) -> ffmpeg.MediaInfo:
    """Probe `source`; PermanentError unless it has a video stream and a duration."""
    info = await ffmpeg.probe(ctx, source)
    if not info.video_streams:
        raise errors.PermanentError(f"{source} has no video stream")
    if not info.duration_sec or info.duration_sec <= 0:
        raise errors.PermanentError(f"{source}: ffmpeg reports no duration")
    return info


def _choice(
    payload: dict[str, Any], key: str, default: str, allowed: set[str] | dict[str, Any]
) -> str:
    value = payload.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, str) or value not in allowed:
        raise errors.PayloadError(
            f"payload.{key} must be one of {', '.join(sorted(allowed))}, got {value!r}"
        )
    return value


def _optional_int(payload: dict[str, Any], key: str, low: int, high: int) -> int | None:
    if payload.get(key) is None:
        return None
    return int(outputs.payload_number(payload, key, low, low=low, high=high))


class CachedExecutor(TaskExecutor):
    """CHECK_EXISTING through the output's sidecar (outputs.reusable): a subclass says where
    its index file is and what its inputs are (`locate`)."""

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        """(the output whose sidecar records the result, the inputs that made it)."""
        raise NotImplementedError

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        if not outputs.caches(task):
            return None
        try:
            index, inputs = await self.locate(task, ctx)
        except errors.TaskError:
            return None  # execute() reports the problem properly
        return outputs.reusable(index, self.task_type, inputs)

    def done(
        self, ctx: TaskContext, index: Path, inputs: Any, result: dict[str, Any], note: str
    ) -> ExecuteResult:
        """Write the index (JSON of the result) and its sidecar; report 100%."""
        outputs.write_text_atomic(index, json.dumps(result, indent=1))
        outputs.write_meta(index, self.task_type, inputs, result)
        ctx.progress(100, note)
        return ExecuteResult(result)


async def _src(ctx: TaskContext, task: models.Task) -> Path:
    return await ctx.payload_input(task.payload, "video_path", "input_path")


# --- TRANSCODE ---------------------------------------------------------------------------------


def transcode_args(backend: str, payload: dict[str, Any]) -> tuple[list[str], list[str], str]:
    """(args before -i, args after -i, encoder) for a TRANSCODE payload on `backend`.

    Pure (tested directly). Codec/container combinations that cannot work are PayloadErrors."""
    container = _choice(payload, "container", "mp4", CONTAINERS)
    codecs, default_audio = CONTAINERS[container]
    codec = _choice(payload, "video_codec", "h264", {*ENCODERS["ffmpeg-cpu"], "copy"})
    if codec not in codecs:
        raise errors.PayloadError(f"video_codec {codec} cannot go into a {container} container")
    table = ENCODERS.get(backend, ENCODERS["ffmpeg-cpu"])
    if codec != "copy" and codec not in table:
        raise errors.PayloadError(f"backend {backend} has no {codec} encoder")
    encoder = "copy" if codec == "copy" else table[codec]
    crf = _optional_int(payload, "crf", 0, 63)
    bitrate = payload.get("bitrate")
    if bitrate is not None and not (
        isinstance(bitrate, str) and re.fullmatch(r"\d+[kKmM]?", bitrate)
    ):
        raise errors.PayloadError(f"payload.bitrate must look like 2500k or 4M, got {bitrate!r}")
    width = _optional_int(payload, "width", 16, 16384)
    height = _optional_int(payload, "height", 16, 16384)
    before: list[str] = []
    after = ["-map", "0:v:0", "-c:v", encoder]
    filters: list[str] = []
    if width or height:
        if codec == "copy":
            raise errors.PayloadError("width/height need re-encoding (video_codec is copy)")
        filters.append(f"scale={width or -2}:{height or -2}")
    if codec != "copy":
        after += _quality_args(backend, crf, bitrate)
        if backend == "ffmpeg-vaapi":
            before += ["-vaapi_device", VAAPI_DEVICE]
            filters += ["format=nv12", "hwupload"]
        elif backend == "ffmpeg-cpu" and codec in ("h264", "hevc"):
            after += ["-pix_fmt", "yuv420p"]
    if filters:
        after += ["-vf", ",".join(filters)]
    after += _audio_args(payload, default_audio)
    if container == "mp4":
        after += ["-movflags", "+faststart"]
    after += ["-f", {"mkv": "matroska"}.get(container, container)]
    return before, after, encoder


def _audio_args(payload: dict[str, Any], default_audio: str) -> list[str]:
    audio_name = payload.get("audio_codec") or ("opus" if default_audio == "libopus" else "aac")
    audio = AUDIO_CODECS[_choice({"a": audio_name}, "a", "aac", AUDIO_CODECS)]
    if not audio:
        return ["-an"]
    args = ["-map", "0:a:0?", "-c:a", audio]
    if audio != "copy":
        args += ["-b:a", str(payload.get("audio_bitrate") or "128k")]
    return args


def _quality_args(backend: str, crf: int | None, bitrate: str | None) -> list[str]:
    if bitrate:
        return ["-b:v", bitrate]
    q = 23 if crf is None else crf
    if backend == "ffmpeg-nvenc":
        return ["-rc", "vbr", "-cq", str(q), "-preset", "p5"]
    if backend == "ffmpeg-vaapi":
        return ["-qp", str(q)]
    if backend == "ffmpeg-videotoolbox":
        return ["-q:v", str(max(1, min(100, 100 - q * 2)))]  # 1-100, higher is better
    return ["-crf", str(q), "-preset", "medium"]


class TranscodeExecutor(CachedExecutor):
    """Video -> re-encoded video (codec, CRF or bitrate, container, resolution)."""

    task_type = TRANSCODE
    capability = "FFMPEG"
    pausable = True

    def _inputs(self, task: models.Task, source: Path, backend: str) -> dict[str, Any]:
        settings = {k: v for k, v in task.payload.items() if k not in ("video_path", "input_path")}
        return {
            "source": outputs.fingerprint_file(source),
            "settings": settings,
            "backend": backend,
        }

    async def _paths(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Path]:
        source = await ctx.payload_input(task.payload, "input_path", "video_path")
        container = str(task.payload.get("container") or "mp4")
        return source, target(ctx, task.payload, "output_path", f"transcoded.{container}")

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        source, out = await self._paths(task, ctx)
        return out, self._inputs(task, source, ctx.backend or "ffmpeg-cpu")

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        source, out = await self._paths(task, ctx)
        backend = ctx.backend or "ffmpeg-cpu"
        before, after, encoder = transcode_args(backend, task.payload)
        info = await video_info(ctx, source)
        ctx.event("tool", f"ffmpeg {ffmpeg.executable(ctx.backend_config)} encoder {encoder}")
        with outputs.disk_errors(f"creating {out.parent}"):
            out.parent.mkdir(parents=True, exist_ok=True)
        tmp = outputs.temp_sibling(out)
        try:
            await ffmpeg.run(
                ctx,
                [*before, "-i", str(source), *after, str(tmp)],
                what=f"transcoding {source}",
                duration_sec=info.duration_sec,
                note=f"transcoding ({encoder})",
            )
            with outputs.disk_errors(f"writing {out}"):
                os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        probed = await ffmpeg.probe(ctx, out)
        result = {
            "output_path": str(out),
            "backend": backend,
            "encoder": encoder,
            "size_bytes": out.stat().st_size,
            "source_size_bytes": source.stat().st_size,
            "duration_sec": probed.duration_sec,
            "video_stream": probed.video_streams[0] if probed.video_streams else None,
            "source_path": str(source),
        }
        outputs.write_meta(out, self.task_type, self._inputs(task, source, backend), result)
        ctx.progress(100, f"transcoded with {encoder}")
        return ExecuteResult(result)


# --- GENERATE_THUMBNAIL ------------------------------------------------------------------------


class GenerateThumbnailExecutor(CachedExecutor):
    """A cover image, a sequence of evenly spaced thumbnails and a sprite sheet of them."""

    task_type = GENERATE_THUMBNAIL
    capability = "FFMPEG"
    pausable = True

    def _settings(self, payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "width": int(outputs.payload_number(payload, "width", 320, low=16, high=3840)),
            "count": int(outputs.payload_number(payload, "count", 16, low=1, high=400)),
            "columns": int(outputs.payload_number(payload, "columns", 4, low=1, high=40)),
            "cover_at_sec": payload.get("cover_at_sec"),
        }

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        out_dir = target(ctx, task.payload, "output_dir", "thumbnails")
        inputs = {
            "source": outputs.fingerprint_file(await _src(ctx, task)),
            **self._settings(task.payload),
        }
        return out_dir / "index.json", inputs

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        source = await _src(ctx, task)
        index, inputs = await self.locate(task, ctx)
        out_dir = index.parent
        s = self._settings(task.payload)
        info = await video_info(ctx, source)
        duration = float(info.duration_sec or 0)
        cover_at = s["cover_at_sec"]
        if cover_at is None:
            cover_at = duration * 0.1
        cover_at = outputs.payload_number({"c": cover_at}, "c", 0, low=0, high=duration)
        count, columns = s["count"], min(s["columns"], s["count"])
        rows = -(-count // columns)
        interval = duration / count
        tmp = fresh_dir(out_dir)
        try:
            scale = f"scale={s['width']}:-2"
            (tmp / "thumbs").mkdir()
            steps: list[tuple[list[str], str]] = [
                (["-ss", f"{cover_at:.3f}", "-i", str(source), "-frames:v", "1", "-vf", scale,
                  "-q:v", "3", str(tmp / "cover.jpg")], "cover"),
                (["-i", str(source), "-vf",
                  f"fps={count}/{duration:.6f},{scale}", "-frames:v", str(count), "-q:v", "4",
                  str(tmp / "thumbs" / "thumb_%03d.jpg")], "thumbnails"),
                (["-i", str(tmp / "thumbs" / "thumb_%03d.jpg"), "-vf", f"tile={columns}x{rows}",
                  "-frames:v", "1", "-q:v", "4", str(tmp / "sprite.jpg")], "sprite"),
            ]  # fmt: skip
            for i, (args, what) in enumerate(steps):
                await ffmpeg.run(ctx, args, what=f"{what} of {source}", span=(i * 33, i * 33 + 33))
            swap_dir(tmp, out_dir)
        finally:
            discard_dir(tmp)
        thumbs = sorted((out_dir / "thumbs").glob("thumb_*.jpg"))
        if not thumbs:
            raise errors.PermanentError(f"{source}: no thumbnails could be decoded")
        result = {
            "cover_path": str(out_dir / "cover.jpg"),
            "sprite_path": str(out_dir / "sprite.jpg"),
            "sprite_columns": columns,
            "sprite_rows": rows,
            "tile_width": s["width"],
            "interval_sec": round(interval, 3),
            "cover_at_sec": round(cover_at, 3),
            "thumbnails": [
                {"path": str(p), "timestamp_sec": round(i * interval, 3)}
                for i, p in enumerate(thumbs)
            ],
            "source_path": str(source),
        }
        return self.done(ctx, index, inputs, result, f"{len(thumbs)} thumbnails and a sprite")


# --- EXTRACT_FRAMES ----------------------------------------------------------------------------


class ExtractFramesExecutor(CachedExecutor):
    """Frames at `fps` (default 1) between start_sec and end_sec, as PNG or JPEG files."""

    task_type = EXTRACT_FRAMES
    capability = "FFMPEG"
    pausable = True

    def _settings(self, payload: dict[str, Any]) -> dict[str, Any]:
        start = outputs.payload_number(payload, "start_sec", 0, low=0, high=10**7)
        end = payload.get("end_sec")
        if end is not None:
            end = outputs.payload_number(payload, "end_sec", 0, low=start, high=10**7)
            if end <= start:
                raise errors.PayloadError("payload.end_sec must be after start_sec")
        return {
            "fps": outputs.payload_number(payload, "fps", 1, low=0.01, high=60),
            "format": _choice(payload, "format", "png", {"png", "jpg"}),
            "start_sec": start,
            "end_sec": end,
        }

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        out_dir = target(ctx, task.payload, "output_dir", "frames")
        inputs = {
            "source": outputs.fingerprint_file(await _src(ctx, task)),
            **self._settings(task.payload),
        }
        return out_dir / "index.json", inputs

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        found = await super().can_skip(task, ctx)
        if found is None:
            return None
        # every frame must still be there (another task may share and clean the directory)
        frames = found.get("frames") or []
        if not all(Path(f["path"]).is_file() for f in frames):
            return None
        return found

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        source = await _src(ctx, task)
        index, inputs = await self.locate(task, ctx)
        out_dir = index.parent
        s = self._settings(task.payload)
        info = await video_info(ctx, source)
        duration = float(info.duration_sec or 0)
        start = float(s["start_sec"])
        if start >= duration:
            raise errors.PayloadError(f"start_sec {start} is past the end ({duration:.2f}s)")
        end = min(float(s["end_sec"] or duration), duration)
        fps = float(s["fps"])
        tmp = fresh_dir(out_dir)
        try:
            args = ["-ss", f"{start:.3f}", "-i", str(source), "-t", f"{end - start:.3f}"]
            args += ["-vf", f"fps={fps:g}", "-fps_mode", "passthrough"]
            if s["format"] == "jpg":
                args += ["-q:v", "2"]
            args.append(str(tmp / f"frame_%06d.{s['format']}"))
            await ffmpeg.run(
                ctx,
                args,
                what=f"extracting frames from {source}",
                duration_sec=end - start,
                span=(0, 95),
                note="extracting frames",
            )
            swap_dir(tmp, out_dir)
        finally:
            discard_dir(tmp)
        files = sorted(out_dir.glob(f"frame_*.{s['format']}"))
        if not files:
            raise errors.PermanentError(f"{source}: no frames between {start}s and {end}s")
        frames = [
            {"index": i, "path": str(p), "timestamp_sec": round(start + i / fps, 3)}
            for i, p in enumerate(files)
        ]
        result = {
            "frames": frames,
            "frame_count": len(frames),
            "fps": fps,
            "format": s["format"],
            "output_dir": str(out_dir),
            "start_sec": start,
            "end_sec": round(end, 3),
            "source_path": str(source),
        }
        return self.done(ctx, index, inputs, result, f"{len(frames)} frames")


# --- FINGERPRINT_VIDEO -------------------------------------------------------------------------


class FingerprintVideoExecutor(CachedExecutor):
    """Frames at 1 fps (payload `fps`) -> a 64-bit DCT perceptual hash each (seed §3.14)."""

    task_type = FINGERPRINT_VIDEO
    capability = "FFMPEG"
    pausable = True

    def _fps(self, payload: dict[str, Any]) -> float:
        return outputs.payload_number(payload, "fps", 1, low=0.05, high=10)

    async def locate(self, task: models.Task, ctx: TaskContext) -> tuple[Path, Any]:
        out = target(ctx, task.payload, "output_path", "fingerprint.json")
        return out, {
            "source": outputs.fingerprint_file(await _src(ctx, task)),
            "fps": self._fps(task.payload),
        }

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        source = await _src(ctx, task)
        out, inputs = await self.locate(task, ctx)
        fps = self._fps(task.payload)
        info = await video_info(ctx, source)
        side = phash.SIDE
        raw = outputs.temp_sibling(out.with_suffix(".gray"))
        with outputs.disk_errors(f"creating {out.parent}"):
            out.parent.mkdir(parents=True, exist_ok=True)
        try:
            await ffmpeg.run(
                ctx,
                ["-i", str(source), "-an", "-vf",
                 f"fps={fps:g},scale={side}:{side}:flags=area,format=gray",
                 "-f", "rawvideo", str(raw)],
                what=f"sampling frames of {source}",
                duration_sec=info.duration_sec,
                span=(0, 90),
                note="sampling frames",
            )  # fmt: skip
            hashes = phash.hash_raw_frames(raw.read_bytes())
        finally:
            raw.unlink(missing_ok=True)
        if not hashes:
            raise errors.PermanentError(f"{source}: no frames to fingerprint")
        result = {
            "algorithm": phash.ALGORITHM,
            "fps": fps,
            "hash_count": len(hashes),
            "hashes": [{"t": round(i / fps, 3), "hash": h} for i, h in enumerate(hashes)],
            "duration_sec": info.duration_sec,
            "fingerprint_path": str(out),
            "source_path": str(source),
        }
        outputs.write_text_atomic(out, json.dumps(result))
        outputs.write_meta(out, self.task_type, inputs, result)
        ctx.progress(100, f"{len(hashes)} frame hashes")
        return ExecuteResult(result)


SAME_VIDEO = 0.75  # similarity above which two fingerprints are reported as one video


def compare_fingerprints(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Similarity of two FINGERPRINT_VIDEO results (see phash.compare)."""
    return phash.compare([h["hash"] for h in a["hashes"]], [h["hash"] for h in b["hashes"]])


def executors() -> tuple[TaskExecutor, ...]:
    return (
        TranscodeExecutor(),
        GenerateThumbnailExecutor(),
        ExtractFramesExecutor(),
        FingerprintVideoExecutor(),
    )
