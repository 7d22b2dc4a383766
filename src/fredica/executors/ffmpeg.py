"""ffmpeg as a tool for the media executors: finding it, running it with progress, probing.

ffmpeg comes from PATH when present (users' GPU builds), else from the `imageio-ffmpeg` wheel,
which ships a static binary. Every run goes through `TaskContext.run_process`, so pause stops
the process (SIGSTOP) and cancel kills it. Progress is read from `-progress pipe:1`
(`out_time_us=` lines against the input duration). Failures are classified here, at the seam:
unreadable or corrupt input is PERMANENT with ffmpeg's own message, a full disk is RESOURCE,
network trouble while reading a stream is TRANSIENT, and an ffmpeg that is itself broken here
(a library it needs does not load, a binary for another machine) is RESOURCE too: the input is
fine, another node should run the task, and the node's quarantine counts it.
"""

from __future__ import annotations

import importlib
import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fredica.domain import errors
from fredica.executors import process
from fredica.executors.context import TaskContext

logger = logging.getLogger(__name__)

INSTALL_HINT = "install ffmpeg (Debian: apt-get install ffmpeg) or `pip install imageio-ffmpeg`"

_DURATION = re.compile(r"Duration:\s*(\d+):(\d+):(\d+(?:\.\d+)?)")
_STREAM = re.compile(r"Stream #\d+:\d+(?:\[[^\]]*\])?(?:\([^)]*\))?: (Audio|Video|Subtitle): (.*)")
_RATE = re.compile(r"(\d+) Hz")

# stderr fragments that mean "this input can never be read" (retrying is pointless)
_PERMANENT_MARKERS = (
    "Invalid data found when processing input",
    "moov atom not found",
    "No such file or directory",
    "does not contain any stream",
    "Output file does not contain any stream",
    "matches no streams",
    "Invalid argument",
    "could not find codec parameters",
    "Unknown format",
    "EBML header parsing failed",
    "Error opening input",
    "Permission denied",
    "Server returned 404",
    "Server returned 403",
    "Server returned 401",
    "Server returned 410",
)
#: what the dynamic loader or the kernel print when the ffmpeg binary itself cannot run here
_BROKEN_TOOL_MARKERS = (
    "error while loading shared libraries",
    "cannot open shared object file",
    "symbol lookup error",
    "undefined symbol:",
    "Exec format error",
    "Illegal instruction",
    "version `GLIBC_",
)

_TRANSIENT_MARKERS = (
    "Connection refused",
    "Connection timed out",
    "timed out",
    "Server returned 5",
    "Connection reset",
    "Network is unreachable",
    "Temporary failure in name resolution",
)


def executable(config: dict[str, Any] | None = None) -> str:
    """The ffmpeg to run: `ffmpeg_path` from the backend config, PATH, or imageio-ffmpeg."""
    cfg = config or {}
    configured = cfg.get("ffmpeg_path") or cfg.get("ffmpeg")
    if isinstance(configured, str) and configured:
        return configured
    found = shutil.which("ffmpeg")
    if found:
        return found
    try:
        # optional and untyped: imported lazily so a node without it still starts
        imageio_ffmpeg = importlib.import_module("imageio_ffmpeg")
    except ImportError:
        raise errors.PermanentError(f"ffmpeg not found: {INSTALL_HINT}") from None
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError as exc:
        raise errors.PermanentError(f"ffmpeg not found ({exc}): {INSTALL_HINT}") from exc


def meaningful_stderr(stderr: str, limit: int = 6) -> str:
    """ffmpeg's last few lines that say something (progress and banner lines dropped)."""
    lines = [
        ln.strip()
        for ln in stderr.replace("\r", "\n").splitlines()
        if ln.strip() and not ln.lstrip().startswith(("frame=", "size=", "Press [q]"))
    ]
    return " | ".join(lines[-limit:])


def classify_failure(exc: process.ProcessFailed, what: str) -> errors.TaskError:
    """Map a failed ffmpeg run to the error classes of seed §7.6."""
    text = exc.stderr
    message = f"{what}: ffmpeg exited with code {exc.returncode}: {meaningful_stderr(text)}"
    if _broken_tool(text):  # checked first: the loader's message says "No such file" too
        return errors.ResourceError(f"ffmpeg is broken on this node: {message}", hint="BROKEN_TOOL")
    if "No space left on device" in text:
        return errors.ResourceError(message, hint="DISK_FULL")
    if any(marker in text for marker in _TRANSIENT_MARKERS):
        return errors.TransientError(message)
    if any(marker in text for marker in _PERMANENT_MARKERS):
        return errors.PermanentError(message)
    return errors.TransientError(message)


def _broken_tool(stderr: str) -> bool:
    return any(marker in stderr for marker in _BROKEN_TOOL_MARKERS)


@dataclass(frozen=True, slots=True)
class MediaInfo:
    """What ffmpeg says about an input (`ffmpeg -i`)."""

    duration_sec: float | None
    audio_streams: tuple[str, ...] = ()
    video_streams: tuple[str, ...] = ()
    sample_rate: int | None = None
    raw: str = field(default="", repr=False)

    @property
    def has_audio(self) -> bool:
        return bool(self.audio_streams)


def parse_info(stderr: str) -> MediaInfo:
    duration: float | None = None
    match = _DURATION.search(stderr)
    if match:
        h, m, s = match.groups()
        duration = int(h) * 3600 + int(m) * 60 + float(s)
    audio: list[str] = []
    video: list[str] = []
    rate: int | None = None
    for kind, desc in _STREAM.findall(stderr):
        if kind == "Audio":
            audio.append(desc.strip())
            if rate is None and (r := _RATE.search(desc)):
                rate = int(r.group(1))
        elif kind == "Video":
            video.append(desc.strip())
    return MediaInfo(duration, tuple(audio), tuple(video), rate, stderr)


async def probe(ctx: TaskContext, source: str | Path) -> MediaInfo:
    """Probe `source` with `ffmpeg -i` (exits non-zero by design: no output is given).

    A file ffmpeg cannot open is a PermanentError carrying ffmpeg's message.
    """
    exe = executable(ctx.backend_config)
    result = await ctx.run_process(
        [exe, "-hide_banner", "-nostdin", "-i", str(source)], check=False
    )
    info = parse_info(result.stderr)
    if not (info.audio_streams or info.video_streams):
        detail = meaningful_stderr(result.stderr, limit=2) or "no streams found"
        if _broken_tool(result.stderr):
            raise errors.ResourceError(
                f"ffmpeg ({exe}) is broken on this node, cannot read {source}: {detail}",
                hint="BROKEN_TOOL",
            )
        if any(marker in result.stderr for marker in _TRANSIENT_MARKERS):
            raise errors.TransientError(f"cannot read media {source}: {detail}")
        raise errors.PermanentError(f"cannot read media {source}: {detail}")
    return info


class ProgressParser:
    """Turns `-progress pipe:1` lines into percentages of `duration_sec` (mapped into a span)."""

    def __init__(
        self,
        ctx: TaskContext,
        duration_sec: float | None,
        span: tuple[float, float] = (0.0, 100.0),
        note: str = "ffmpeg",
    ) -> None:
        self.ctx = ctx
        self.duration = duration_sec
        self.low, self.high = span
        self.note = note
        self.out_time = 0.0
        self.speed: str | None = None
        self._last_pct = -1

    def on_line(self, line: str) -> None:
        key, _, value = line.strip().partition("=")
        if key in ("out_time_us", "out_time_ms") and value.strip().lstrip("-").isdigit():
            # both keys carry microseconds (a historic ffmpeg quirk)
            self.out_time = max(0.0, int(value) / 1_000_000)
            self._report()
        elif key == "speed":
            self.speed = value.strip()
        elif key == "progress" and value.strip() == "end":
            self.out_time = self.duration or self.out_time
            self._report()

    def _report(self) -> None:
        if not self.duration:
            return
        frac = min(1.0, self.out_time / self.duration)
        pct = self.low + (self.high - self.low) * frac
        if int(pct) != self._last_pct:
            self._last_pct = int(pct)
            speed = f" at {self.speed}" if self.speed and self.speed != "N/A" else ""
            self.ctx.progress(pct, f"{self.note} {self.out_time:.1f}/{self.duration:.1f}s{speed}")


async def run(
    ctx: TaskContext,
    args: list[str],
    *,
    what: str,
    duration_sec: float | None = None,
    span: tuple[float, float] = (0.0, 100.0),
    note: str = "ffmpeg",
    on_stderr_line: Callable[[str], None] | None = None,
) -> process.ProcessResult:
    """Run ffmpeg with `args` under the task's signals, reporting progress; classify failures."""
    exe = executable(ctx.backend_config)
    argv = [exe, "-hide_banner", "-nostdin", "-y", "-nostats", "-progress", "pipe:1", *args]
    parser = ProgressParser(ctx, duration_sec, span, note)
    try:
        return await ctx.run_process(
            argv,
            on_stdout_line=parser.on_line,
            on_stderr_line=on_stderr_line,
            capture_stdout=False,
        )
    except process.ProcessKilled:
        raise
    except process.ProcessFailed as exc:
        raise classify_failure(exc, what) from exc
