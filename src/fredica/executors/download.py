"""DOWNLOAD_VIDEO and DOWNLOAD_SUBTITLE (seed 001 §2.1, §3.1).

DOWNLOAD_VIDEO backends:
- `file`: a local path or file:// URL, hard-linked (or copied) into the data dir;
- `http`: httpx, resuming an interrupted download with a Range request (a `.download.part`
  file plus the validator it was fetched with); `http-curl` / `http-aria2c` when installed;
- `youtube-ytdlp`, `bilibili-ytdlp`, `http-ytdlp`, `hls-ytdlp`: yt-dlp;
- `hls-ffmpeg`: ffmpeg reading the playlist.
The node picks the backend (`ctx.backend`, or `backend_config["backend"]`), else the source
decides (platform URL -> yt-dlp, .m3u8 -> ffmpeg, other http -> httpx). Bytes land under a
temporary name and are renamed when complete; CHECK_EXISTING reuses a completed download of the
same source.

DOWNLOAD_SUBTITLE fetches a platform's subtitles with yt-dlp. Bilibili serves them only to a
logged-in user: without cookies the task fails AWAITING_CREDENTIAL (no automatic retry; the
user configures credentials and retries, or skips it).
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from fredica.domain import errors, models
from fredica.executors import download_tools, httperrors, outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

DOWNLOAD_VIDEO = "DOWNLOAD_VIDEO"
DOWNLOAD_SUBTITLE = "DOWNLOAD_SUBTITLE"
PART = ".download.part"
PART_STATE = ".download.part.json"
MARKER = "download"  # the CHECK_EXISTING sidecar is download.meta.json in the output dir
COPY_BLOCK = 8 << 20
HTTP_BLOCK = 1 << 20
RESUMES_PER_ATTEMPT = 3
YTDLP_BACKENDS = frozenset({"youtube-ytdlp", "bilibili-ytdlp", "http-ytdlp", "hls-ytdlp"})
BACKENDS = frozenset({"file", "http", "http-curl", "http-aria2c", "hls-ffmpeg", *YTDLP_BACKENDS})
_PLATFORM_HOSTS = {
    "bilibili-ytdlp": ("bilibili.com", "b23.tv"),
    "youtube-ytdlp": ("youtube.com", "youtu.be", "twitter.com", "x.com", "vimeo.com"),
}
_MIME_EXT = {
    "video/mp4": ".mp4",
    "video/webm": ".webm",
    "video/x-matroska": ".mkv",
    "audio/mpeg": ".mp3",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "video/quicktime": ".mov",
    "audio/mp4": ".m4a",
    "audio/ogg": ".ogg",
}


def local_source(source: str) -> Path | None:
    """The local path of a file:// URL or absolute path source, else None."""
    if source.startswith("file://"):
        return Path(unquote(urlsplit(source).path))
    if source.startswith("/"):
        return Path(source)
    return None


def is_bilibili(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return any(host == h or host.endswith("." + h) for h in _PLATFORM_HOSTS["bilibili-ytdlp"])


def auto_backend(url: str, platform: str | None) -> str:
    """The backend the source implies (used when the node did not choose one)."""
    if local_source(url) is not None:
        return "file"
    key = (platform or "").strip().lower()
    if key == "bilibili" or is_bilibili(url):
        return "bilibili-ytdlp"
    host = (urlsplit(url).hostname or "").lower()
    yt_hosts = _PLATFORM_HOSTS["youtube-ytdlp"]
    if key in ("youtube", "ytdlp", "twitter", "x", "instagram", "vimeo", "tiktok") or any(
        host == h or host.endswith("." + h) for h in yt_hosts
    ):
        return "youtube-ytdlp"
    if key in ("hls", "dash", "m3u8") or urlsplit(url).path.lower().endswith((".m3u8", ".mpd")):
        return "hls-ffmpeg"
    if urlsplit(url).scheme in ("http", "https"):
        return "http"
    raise errors.PayloadError(f"unsupported source {url!r}: expected http(s)://, file:// or /path")


def choose_backend(ctx: TaskContext, url: str, platform: str | None) -> str:
    implied = auto_backend(url, platform)
    chosen = ctx.backend or ctx.backend_config.get("backend")
    if not chosen or implied == "file":
        return implied
    if chosen not in BACKENDS:
        raise errors.PermanentError(f"unknown download backend {chosen!r}")
    return str(chosen)


def _extension(url: str, content_type: str | None) -> str:
    suffix = Path(unquote(urlsplit(url).path)).suffix.lower()
    if 1 < len(suffix) <= 6 and suffix[1:].isalnum():
        return suffix
    mime = (content_type or "").split(";")[0].strip().lower()
    return _MIME_EXT.get(mime) or mimetypes.guess_extension(mime or "") or ".bin"


class DownloadVideoExecutor(TaskExecutor):
    """Source URL or local file -> `<output_dir>/video.<ext>`."""

    task_type = DOWNLOAD_VIDEO
    capability = None  # DOWNLOAD_* by payload.source_platform (capabilities.task_types)
    pausable = True

    def _inputs(self, url: str) -> dict[str, Any]:
        local = local_source(url)
        if local is not None and local.exists():
            return {"source_url": url, "source": outputs.fingerprint_file(local)}
        return {"source_url": url}

    def _out_dir(self, task: models.Task, ctx: TaskContext) -> Path:
        value = task.payload.get("output_dir")
        if value is not None and not isinstance(value, str):
            raise errors.PayloadError("payload.output_dir must be a path string")
        return outputs.resolve(ctx.data_dir, value) if value else ctx.output_dir

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        url = task.payload.get("source_url")
        if not outputs.caches(task) or not isinstance(url, str):
            return None
        try:
            out_dir = self._out_dir(task, ctx)
        except errors.TaskError:
            return None
        return outputs.reusable(out_dir / MARKER, self.task_type, self._inputs(url))

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        url = outputs.payload_str(task.payload, "source_url")
        assert url is not None
        platform = task.payload.get("source_platform")
        backend = choose_backend(ctx, url, platform if isinstance(platform, str) else None)
        out_dir = self._out_dir(task, ctx)
        with outputs.disk_errors(f"creating {out_dir}"):
            out_dir.mkdir(parents=True, exist_ok=True)
        ctx.event("tool", backend)
        meta: dict[str, str] = {}  # what the downloader knows of the video (yt-dlp: title)
        if backend == "file":
            path = await self._file(ctx, url, out_dir)
        elif backend == "http":
            path = await http_download(ctx, url, out_dir)
        elif backend in ("http-curl", "http-aria2c"):
            part = out_dir / PART
            if backend == "http-curl":
                await download_tools.curl(ctx, url, part)
            else:
                await download_tools.aria2c(ctx, url, part)
            path = out_dir / f"video{_extension(url, None)}"
            with outputs.disk_errors(f"writing {path}"):
                os.replace(part, path)
        elif backend == "hls-ffmpeg":
            path = await download_tools.hls_ffmpeg(ctx, url, out_dir)
        else:
            files = await download_tools.ytdlp(
                ctx, url, out_dir, "video.%(ext)s", ["--merge-output-format", "mp4"], meta
            )
            if not files:
                raise errors.PermanentError(f"yt-dlp finished but wrote no file for {url}")
            path = files[-1]
        size = path.stat().st_size
        if size <= 0:
            raise errors.PermanentError(f"downloaded file from {url} is empty")
        result = {
            "video_path": str(path),
            "size_bytes": size,
            "backend": backend,
            "source_url": url,
        }
        if meta.get("title"):
            # the store names the pipeline after it (`store.work.name_pipelines`)
            result["material_title"] = meta["title"]
        outputs.write_meta(out_dir / MARKER, self.task_type, self._inputs(url), result)
        ctx.progress(100, f"{size / 1e6:.1f} MB")
        return ExecuteResult(result)

    async def _file(self, ctx: TaskContext, url: str, out_dir: Path) -> Path:
        """Hard-link a local file into the data dir; copy it (in blocks, pausable) when the
        data dir is on another file system."""
        source = local_source(url)
        assert source is not None
        if not source.is_file():
            raise errors.PermanentError(f"source file not found: {source}")
        final = out_dir / f"video{source.suffix.lower() or '.bin'}"
        tmp = outputs.temp_sibling(final)
        try:
            try:
                os.link(source, tmp)
            except OSError:
                total = source.stat().st_size
                with outputs.disk_errors(f"copying {source}"):
                    await _copy_blocks(ctx, source, tmp, total)
            with outputs.disk_errors(f"writing {final}"):
                os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        return final


async def _copy_blocks(ctx: TaskContext, source: Path, target: Path, total: int) -> None:
    done = 0
    with source.open("rb") as src, target.open("wb") as dst:
        while True:
            await ctx.checkpoint()
            block = await asyncio.to_thread(src.read, COPY_BLOCK)
            if not block:
                break
            await asyncio.to_thread(dst.write, block)
            done += len(block)
            ctx.progress(99 * done / max(total, 1), f"copied {done / 1e6:.1f} MB")


def _total_from(response: httpx.Response, have: int) -> int | None:
    if response.status_code == 206:
        rng = response.headers.get("content-range", "")
        total = rng.rsplit("/", 1)[-1]
        return int(total) if total.isdigit() else None
    length = response.headers.get("content-length")
    return int(length) if length and length.isdigit() else None


async def http_download(ctx: TaskContext, url: str, out_dir: Path) -> Path:
    """GET `url` into `<out_dir>/video.<ext>`, resuming a previous part file when the server
    supports ranges and the resource is unchanged (If-Range on the stored validator)."""
    part, state_path = out_dir / PART, out_dir / PART_STATE
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        state = {}
    if state.get("url") != url:
        part.unlink(missing_ok=True)
        state = {"url": url}
    timeout = httpx.Timeout(30.0, read=float(ctx.backend_config.get("read_timeout_sec", 60)))
    resumes = 0
    async with httpx.AsyncClient(follow_redirects=True, timeout=timeout, trust_env=False) as client:
        while True:
            have = part.stat().st_size if part.exists() else 0
            headers = {}
            if have and state.get("validator"):
                headers = {"Range": f"bytes={have}-", "If-Range": str(state["validator"])}
            start_have = have
            try:
                async with client.stream("GET", url, headers=headers) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise httperrors.for_status(response, f"downloading {url}")
                    append = response.status_code == 206
                    total = _total_from(response, have)
                    validator = response.headers.get("etag") or response.headers.get(
                        "last-modified"
                    )
                    state.update(
                        validator=validator,
                        content_type=response.headers.get("content-type"),
                    )
                    outputs.write_text_atomic(state_path, json.dumps(state))
                    have = have if append else 0
                    with (
                        outputs.disk_errors(f"writing {part}"),
                        part.open("ab" if append else "wb") as fh,
                    ):
                        async for block in response.aiter_bytes(HTTP_BLOCK):
                            fh.write(block)
                            have += len(block)
                            if total:
                                ctx.progress(
                                    99 * have / total, f"{have / 1e6:.1f}/{total / 1e6:.1f} MB"
                                )
                            await ctx.checkpoint()
                if total is not None and have < total:
                    raise httpx.ReadError(f"connection closed at {have} of {total} bytes")
                break
            except httpx.HTTPError as exc:
                # resume at once when the connection broke mid-way and bytes kept arriving
                progressed = part.exists() and part.stat().st_size > start_have
                if progressed and state.get("validator") and resumes < RESUMES_PER_ATTEMPT:
                    resumes += 1
                    ctx.event("resume", f"resuming at {part.stat().st_size} bytes: {exc}")
                    continue
                raise httperrors.for_transport(exc, url, f"downloading {url}") from exc
    final = out_dir / f"video{_extension(url, state.get('content_type'))}"
    with outputs.disk_errors(f"writing {final}"):
        os.replace(part, final)
    state_path.unlink(missing_ok=True)
    return final


class DownloadSubtitleExecutor(TaskExecutor):
    """Platform subtitles (bilibili CC / AI subtitles need a login) -> SRT files."""

    task_type = DOWNLOAD_SUBTITLE
    capability = "DOWNLOAD_BILIBILI"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        url = outputs.payload_str(task.payload, "source_url")
        assert url is not None
        cfg = ctx.backend_config
        if is_bilibili(url) and not (cfg.get("cookies_file") or cfg.get("sessdata")):
            raise errors.AwaitingCredentialError(
                "bilibili subtitles need a logged-in account: set sessdata (or cookies_file) "
                "in this node's bilibili backend config, then retry this task, or skip it"
            )
        languages = task.payload.get("languages") or ["zh-Hans", "zh-CN", "ai-zh", "en"]
        if not isinstance(languages, list) or not all(isinstance(x, str) for x in languages):
            raise errors.PayloadError("payload.languages must be a list of language codes")
        out_dir = ctx.output_dir
        ctx.event("tool", "bilibili-ytdlp" if is_bilibili(url) else "ytdlp-subtitles")
        extra = [
            "--skip-download",
            "--write-subs",
            "--write-auto-subs",
            "--sub-langs",
            ",".join(languages),
            "--convert-subs",
            "srt",
        ]
        files = await download_tools.ytdlp(ctx, url, out_dir, "subtitle.%(ext)s", extra)
        found = sorted({*files, *out_dir.glob("subtitle.*.srt"), *out_dir.glob("subtitle.*.vtt")})
        subtitles = [
            {
                "language": p.suffixes[-2].lstrip(".") if len(p.suffixes) > 1 else "",
                "path": str(p),
                "format": p.suffix.lstrip("."),
            }
            for p in found
        ]
        ctx.progress(100, f"{len(subtitles)} subtitle file(s)")
        return ExecuteResult({"subtitles": subtitles, "source_url": url})
