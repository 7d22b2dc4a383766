"""External download tools for DOWNLOAD_VIDEO / DOWNLOAD_SUBTITLE: curl, aria2c, yt-dlp and
ffmpeg for HLS. Each runs through `TaskContext.run_process` (pause = SIGSTOP, cancel = kill),
reports progress from the tool's own output and has its failures classified here.

yt-dlp runs as `python -m yt_dlp` from this interpreter (the PyPI package), so it is present
wherever fredica is installed with its media extras; its cookies come from the node's
`backend_config` (`cookies_file`, or `sessdata` for bilibili), never from the payload.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fredica.domain import errors
from fredica.executors import ffmpeg, outputs, process
from fredica.executors.context import TaskContext

_PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)%")
_ARIA_PERCENT = re.compile(r"\((\d{1,3})%\)")
_HTTP_CODE = re.compile(r"(?:returned error|HTTP Error)[: ]+(\d{3})")
YTDLP_PROGRESS = "FREDICA_PROGRESS"
YTDLP_FILE = "FREDICA_FILE:"
YTDLP_TITLE = "FREDICA_TITLE:"  # the info dict's `title`, JSON-encoded (`%(title)j`)

_CREDENTIAL_MARKERS = (
    "sign in",
    "login",
    "log in",
    "cookies",
    "members-only",
    "premium",
    "大会员",
    "需要登录",
)
_PERMANENT_MARKERS = (
    "unsupported url",
    "video unavailable",
    "is not a valid url",
    "private video",
    "has been removed",
    "no video formats found",
    "requested format is not available",
)
_TRANSIENT_MARKERS = (
    "connection refused",
    "timed out",
    "temporary failure",
    "connection reset",
    "network is unreachable",
    "remote end closed",
)


def have(binary: str) -> str | None:
    return shutil.which(binary)


def have_ytdlp() -> bool:
    return importlib.util.find_spec("yt_dlp") is not None


def _http_status_error(code: int, message: str, provider: str) -> errors.TaskError:
    if code == 429:
        return errors.RateLimitedError(message, provider=provider)
    if code >= 500:
        return errors.TransientError(message)
    return errors.PermanentError(message)


# --- curl ------------------------------------------------------------------------------------
CURL_TRANSIENT = {5, 6, 7, 16, 18, 28, 35, 52, 55, 56, 92}


async def curl(ctx: TaskContext, url: str, part: Path) -> None:
    """`curl -C -` resumes from the part file; progress from its `-#` bar."""
    exe = have("curl")
    if exe is None:
        raise errors.PermanentError("backend http-curl needs curl on PATH (apt-get install curl)")

    def on_err(line: str) -> None:
        if m := _PERCENT.search(line):
            ctx.progress(min(99.0, float(m.group(1))), "curl")

    argv = [exe, "-L", "--fail", "-C", "-", "--connect-timeout", "20", "-#", "-o", str(part), url]
    try:
        await ctx.run_process(argv, on_stderr_line=on_err, capture_stdout=False)
    except process.ProcessFailed as exc:
        tail = " ".join(ln for ln in exc.stderr.splitlines() if "curl:" in ln)[-300:]
        message = f"downloading {url} with curl failed (exit {exc.returncode}): {tail}".strip()
        if (m := _HTTP_CODE.search(exc.stderr)) is not None:
            raise _http_status_error(int(m.group(1)), message, "http") from exc
        if exc.returncode in CURL_TRANSIENT:
            raise errors.TransientError(message) from exc
        raise errors.PermanentError(message) from exc


# --- aria2c ----------------------------------------------------------------------------------
ARIA_PERMANENT = {3, 9, 16, 24, 26, 28}  # not found, disk full(9), bad file, auth, bad URL...


async def aria2c(ctx: TaskContext, url: str, part: Path, connections: int = 8) -> None:
    """Multi-connection download with `--continue` into the part file."""
    exe = have("aria2c")
    if exe is None:
        raise errors.PermanentError("backend http-aria2c needs aria2c (apt-get install aria2)")

    console: list[str] = []

    def on_out(line: str) -> None:
        console.append(line)
        if m := _ARIA_PERCENT.search(line):
            ctx.progress(min(99.0, float(m.group(1))), "aria2c")

    argv = [
        exe,
        "--continue=true",
        "--allow-overwrite=true",
        "--auto-file-renaming=false",
        "--enable-color=false",
        f"--max-connection-per-server={connections}",
        f"--split={connections}",
        "--summary-interval=1",
        "--console-log-level=error",
        "--download-result=hide",
        "--connect-timeout=20",
        "--max-tries=1",
        "-d",
        str(part.parent),
        "-o",
        part.name,
        url,
    ]
    try:
        await ctx.run_process(argv, on_stdout_line=on_out, capture_stdout=False)
    except process.ProcessFailed as exc:
        # aria2c reports on stdout: the last "-> [...] errorCode=N reason" line says why
        text = "\n".join(console) + exc.stderr
        reasons = [ln.split("]", 1)[-1].strip() for ln in console if "errorCode=" in ln]
        detail = reasons[-1] if reasons else " ".join(text.split())[-300:]
        if exc.returncode == 3:
            detail = f"HTTP 404 not found ({detail})"
        message = f"downloading {url} with aria2c failed (exit {exc.returncode}): {detail}"
        if exc.returncode == 9:
            raise errors.ResourceError(message, hint="DISK_FULL") from exc
        if (m := re.search(r"status=(\d{3})", text)) is not None:
            raise _http_status_error(int(m.group(1)), message, "http") from exc
        if exc.returncode in ARIA_PERMANENT:
            raise errors.PermanentError(message) from exc
        raise errors.TransientError(message) from exc


# --- yt-dlp ----------------------------------------------------------------------------------
@contextlib.contextmanager
def cookie_file(config: dict[str, Any], directory: Path) -> Iterator[Path | None]:
    """The cookies for yt-dlp: a configured cookies.txt, or a private temp file holding
    bilibili's SESSDATA (deleted afterwards: credentials never stay in the data dir)."""
    configured = config.get("cookies_file")
    if isinstance(configured, str) and configured:
        path = Path(configured).expanduser()
        if not path.is_file():
            raise errors.AwaitingCredentialError(f"cookies_file {path} does not exist")
        yield path
        return
    sessdata = config.get("sessdata")
    if not (isinstance(sessdata, str) and sessdata):
        yield None
        return
    tmp = directory / f".cookies.{os.getpid()}.txt"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("# Netscape HTTP Cookie File\n")
        fh.write(f".bilibili.com\tTRUE\t/\tFALSE\t0\tSESSDATA\t{sessdata}\n")
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def classify_ytdlp(stderr: str, returncode: int, url: str) -> errors.TaskError:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("ERROR")]
    detail = (lines[-1] if lines else " ".join(stderr.split())[-300:])[:400]
    message = f"yt-dlp could not download {url}: {detail}"
    low = detail.lower()
    if (m := _HTTP_CODE.search(detail)) is not None:
        return _http_status_error(int(m.group(1)), message, "yt-dlp")
    if any(marker in low for marker in _TRANSIENT_MARKERS):
        return errors.TransientError(message)
    if any(marker in low for marker in _CREDENTIAL_MARKERS):
        return errors.AwaitingCredentialError(message)
    if any(marker in low for marker in _PERMANENT_MARKERS):
        return errors.PermanentError(message)
    return errors.TransientError(message)


def _read_title(encoded: str, meta: dict[str, str]) -> None:
    """yt-dlp's `%(title)j` (a JSON string) into `meta["title"]` when it is a usable one."""
    with contextlib.suppress(ValueError):
        title = json.loads(encoded)
        if isinstance(title, str) and title.strip():
            meta["title"] = title.strip()


async def ytdlp(
    ctx: TaskContext,
    url: str,
    out_dir: Path,
    template: str,
    extra: list[str],
    meta: dict[str, str] | None = None,
) -> list[Path]:
    """Run yt-dlp; returns the files it wrote (from `--print after_move:filepath`). `meta`,
    when given, receives the `title` of yt-dlp's info dict for the video."""
    if not have_ytdlp():
        raise errors.PermanentError("yt-dlp is not installed: pip install yt-dlp")
    written: list[Path] = []

    def on_out(line: str) -> None:
        if line.startswith(YTDLP_FILE):
            written.append(Path(line[len(YTDLP_FILE) :].strip()))
        elif line.startswith(YTDLP_TITLE) and meta is not None:
            _read_title(line[len(YTDLP_TITLE) :], meta)
        elif line.startswith(YTDLP_PROGRESS):
            parts = line.split()
            try:
                done = float(parts[1])
                total = next((float(p) for p in parts[2:] if p not in ("NA", "None")), 0.0)
            except (ValueError, IndexError):
                return
            if total > 0:
                ctx.progress(min(99.0, 100 * done / total), f"yt-dlp {done / 1e6:.1f} MB")

    argv = [
        sys.executable,
        "-m",
        "yt_dlp",
        "--newline",
        "--progress",
        "--no-simulate",
        "--no-playlist",
        "--no-mtime",
        "--socket-timeout",
        "30",
        "--retries",
        "1",
        "--ffmpeg-location",
        ffmpeg.executable(ctx.backend_config),
        "--progress-template",
        f"download:{YTDLP_PROGRESS} %(progress.downloaded_bytes)s "
        "%(progress.total_bytes)s %(progress.total_bytes_estimate)s",
        "--print",
        f"after_move:{YTDLP_FILE}%(filepath)s",
        "--print",
        f"after_move:{YTDLP_TITLE}%(title)j",
        "-P",
        str(out_dir),
        "-o",
        template,
        *extra,
    ]
    with cookie_file(ctx.backend_config, out_dir) as cookies:
        if cookies is not None:
            argv += ["--cookies", str(cookies)]
        proxy = ctx.backend_config.get("proxy")
        if isinstance(proxy, str) and proxy:
            argv += ["--proxy", proxy]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            await ctx.run_process([*argv, url], on_stdout_line=on_out, env=env)
        except process.ProcessKilled:
            raise
        except process.ProcessFailed as exc:
            raise classify_ytdlp(exc.stderr, exc.returncode, url) from exc
    return [p for p in written if p.exists()]


# --- ffmpeg for HLS / DASH -------------------------------------------------------------------
async def hls_ffmpeg(ctx: TaskContext, url: str, out_dir: Path) -> Path:
    """`ffmpeg -i playlist -c copy` into MP4 (seed §3.1 hls-ffmpeg)."""
    info = await ffmpeg.probe(ctx, url)
    final = out_dir / "video.mp4"
    tmp = outputs.temp_sibling(final)
    try:
        await ffmpeg.run(
            ctx,
            ["-i", url, "-c", "copy", "-bsf:a", "aac_adtstoasc", "-f", "mp4", str(tmp)],
            what=f"downloading stream {url}",
            duration_sec=info.duration_sec,
            note="hls",
        )
        with outputs.disk_errors(f"writing {final}"):
            os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final
