"""Disk space before claiming (seed 001 §7.7): which work needs room, how much a task will
write (`estimatedOutputBytes`), and the gate that leaves such work to other nodes while this
node's data dir is short of space.

The seed's rule is `canClaimTask`: a DOWNLOAD_* or FFMPEG-class task may be claimed only if
`free - estimatedOutputBytes > disk_min_free_gb`. A node cannot see a task's estimate before it
claims it, so the gate has two steps:

- Before claiming, per type (`DiskGate.held_types`): a disk type whose default estimate does not
  fit is not claimable here, so other nodes take it and no retry is spent. For a task that
  carries no estimate this is exactly the seed's rule.
- After claiming, per task (`DiskGate.shortfall`): the task's own estimate (payload, duration
  hints or the size of its local input) is checked before its executor writes anything. A task
  that does not fit goes back to pending (not a retry: the seed says the node "does not claim
  it"), and its type is held here until the free space covers what it needs, or for
  `HOLD_AFTER_SHORTFALL` seconds (then smaller tasks of the type may fit), so the node does not
  claim it again at once and other nodes take it meanwhile.

A write that still runs out of space fails as RESOURCE with hint DISK_FULL (`executors.outputs`).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fredica.capabilities import catalog, task_types
from fredica.domain import models
from fredica.executors import download, outputs

logger = logging.getLogger(__name__)

GIB = 1 << 30
MIB = 1 << 20
#: seconds a type stays held after a task of it did not fit (unless the space frees sooner)
HOLD_AFTER_SHORTFALL = 300.0
USAGE_TTL = 0.5  # seconds a measurement of the free space is reused (claims poll often)

#: functions whose work writes large files: the seed's "DOWNLOAD_VIDEO or FFMPEG-class" tasks
#: (every download function, as `disk_min_free_gb` is "the disk check of every download")
DISK_FUNCTIONS: frozenset[catalog.CapabilityFunction] = catalog.DOWNLOAD_FUNCTIONS | {
    catalog.CapabilityFunction.FFMPEG
}

#: what a task of each type writes when nothing better is known (bytes)
DEFAULT_ESTIMATES: Mapping[str, int] = {
    "DOWNLOAD_VIDEO": 2 * GIB,  # an hour of 1080p at ~4 Mbit/s
    "DOWNLOAD_SUBTITLE": 1 * MIB,
    "EXTRACT_AUDIO": 256 * MIB,  # 16 kHz mono PCM: 115 MB per hour
    "SPLIT_AUDIO": 256 * MIB,
    "TRANSCODE": 2 * GIB,
    "EXTRACT_FRAMES": 1 * GIB,
    "GENERATE_THUMBNAIL": 64 * MIB,
    "DETECT_SCENES": 64 * MIB,
    "EXTRACT_SUBTITLE": 16 * MIB,
    "BLUR_SUBTITLE_REGION": 2 * GIB,
    "BURN_SUBTITLE": 2 * GIB,
    "FINGERPRINT_VIDEO": 16 * MIB,
}
DEFAULT_ESTIMATE = 1 * GIB  # a disk type not in the table (a plugin's)
#: output bytes per input byte, for types whose output follows their input's size
INPUT_RATIOS: Mapping[str, float] = {
    "DOWNLOAD_VIDEO": 1.0,  # a local source copied in (a hard link costs nothing, a copy all)
    "EXTRACT_AUDIO": 1.0,  # PCM of a compressed source is smaller unless the source is audio
    "SPLIT_AUDIO": 1.1,  # the chunks are the audio again, with their overlaps
    "TRANSCODE": 1.0,
    "BLUR_SUBTITLE_REGION": 1.0,
    "BURN_SUBTITLE": 1.0,
    "EXTRACT_FRAMES": 2.0,
}
#: types whose output is PCM audio: a duration gives the size exactly
PCM_TYPES = frozenset({"EXTRACT_AUDIO", "SPLIT_AUDIO"})
PCM_SAMPLE_RATE = 16_000  # Hz, what EXTRACT_AUDIO writes unless the payload says otherwise
DEFAULT_VIDEO_BITRATE = 8_000_000  # bits/s assumed for a video of known duration only
ESTIMATE_KEYS = ("estimatedOutputBytes", "estimated_output_bytes")
INPUT_KEYS = ("video_path", "input_path", "audio_path")


@dataclass(frozen=True, slots=True)
class Estimate:
    """How many bytes a task will write, and which rule said so."""

    bytes: int
    rule: str


def disk_task_types(
    types: Iterable[str], plugin_functions: Mapping[str, catalog.CapabilityFunction | None]
) -> frozenset[str]:
    """The task types among `types` whose function writes large files (DOWNLOAD_VIDEO, every
    DOWNLOAD_* and FFMPEG type, and plugin types declaring one of those functions)."""
    out = set()
    for task_type in types:
        if task_type == task_types.DOWNLOAD_VIDEO:
            out.add(task_type)
            continue
        function = task_types.TASK_FUNCTIONS.get(task_type, plugin_functions.get(task_type))
        if function in DISK_FUNCTIONS:
            out.add(task_type)
    return frozenset(out)


def default_estimate(task_type: str) -> int:
    return DEFAULT_ESTIMATES.get(task_type, DEFAULT_ESTIMATE)


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


def estimate_output_bytes(
    task_type: str, payload: Mapping[str, Any], input_bytes: int | None = None
) -> Estimate:
    """What a task will write (pure). In order: the payload's `estimatedOutputBytes` (seed
    §7.7: filled from the material's metadata); a duration hint (`duration_sec`) times the
    output's rate (PCM for audio types, else `bitrate_kbps` or `bitrate` bit/s, or a high
    video rate); the size of its local input times the type's ratio; the type's default."""
    for key in ESTIMATE_KEYS:
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return Estimate(value, f"payload.{key}")
    duration = _positive(payload.get("duration_sec"))
    if duration is not None:
        if task_type in PCM_TYPES:
            rate = _positive(payload.get("sample_rate")) or PCM_SAMPLE_RATE
            channels = _positive(payload.get("channels")) or 1
            ratio = INPUT_RATIOS.get(task_type, 1.0)
            size = int(duration * rate * 2 * channels * ratio)
            return Estimate(size, f"{duration:g} s of {rate:g} Hz PCM")
        kbps = _positive(payload.get("bitrate_kbps"))
        bits = kbps * 1000 if kbps is not None else _positive(payload.get("bitrate"))
        if bits is not None:
            return Estimate(int(duration * bits / 8), f"{duration:g} s at {bits / 1000:g} kbit/s")
        if task_type in INPUT_RATIOS or task_type == task_types.DOWNLOAD_VIDEO:
            size = int(duration * DEFAULT_VIDEO_BITRATE / 8)
            return Estimate(size, f"{duration:g} s at {DEFAULT_VIDEO_BITRATE // 1000} kbit/s")
    if input_bytes is not None and task_type in INPUT_RATIOS:
        ratio = INPUT_RATIOS[task_type]
        return Estimate(int(input_bytes * ratio), f"input of {input_bytes} bytes × {ratio:g}")
    return Estimate(default_estimate(task_type), f"default for {task_type}")


def local_input_bytes(task: models.Task, data_dir: Path, node_id: str) -> int | None:
    """The size of the task's input file when it is on this node (None: unknown)."""
    if task.file_node_id not in (None, node_id):
        return None
    for key in INPUT_KEYS:
        value = task.payload.get(key)
        if isinstance(value, str) and value:
            return _size(outputs.resolve(data_dir, value))
    url = task.payload.get("source_url")
    local = download.local_source(url) if isinstance(url, str) else None
    return _size(local) if local is not None else None


def _size(path: Path) -> int | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size if path.is_file() else None


def show_bytes(n: float) -> str:
    """Bytes for people (GiB, MiB, KiB)."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


@dataclass(slots=True)
class _Hold:
    need: int  # free bytes the task that did not fit needs (estimate + minimum)
    until: float  # monotonic
    reason: str


class DiskGate:
    """Whether this node has room for disk-heavy work (module doc). Thread-safe: the engine
    asks on the event loop, the per-task check runs in a worker thread."""

    def __init__(
        self,
        data_dir: Path,
        node_id: str,
        min_free_bytes: int,
        disk_types: frozenset[str],
        *,
        usage: Callable[[Path], tuple[int, int]] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        hold_sec: float = HOLD_AFTER_SHORTFALL,
    ) -> None:
        self.data_dir = data_dir
        self.node_id = node_id
        self.min_free = min_free_bytes
        self.disk_types = disk_types
        self.hold_sec = hold_sec
        self._usage = usage or _disk_usage
        self._now = monotonic
        self._lock = threading.Lock()
        self._measured: tuple[float, int, int] | None = None  # (at, free, total)
        self._holds: dict[str, _Hold] = {}
        self.released = 0  # tasks handed back for lack of room

    # --- measuring ---------------------------------------------------------------------------
    def usage(self) -> tuple[int, int]:
        """(free, total) bytes of the data dir's file system (measured at most every
        USAGE_TTL seconds); (0, 0) when it cannot be measured."""
        now = self._now()
        with self._lock:
            if self._measured is not None and now - self._measured[0] < USAGE_TTL:
                return self._measured[1], self._measured[2]
        free, total = self._usage(self.data_dir)
        with self._lock:
            self._measured = (now, free, total)
        return free, total

    def forget_usage(self) -> None:
        """Measure again at the next question (space was just freed)."""
        with self._lock:
            self._measured = None

    # --- the type gate -------------------------------------------------------------------------
    def held(self, types: Iterable[str]) -> dict[str, str]:
        """The disk types among `types` this node does not claim now, each with why."""
        wanted = [t for t in types if t in self.disk_types]
        if not wanted:
            return {}
        free, _ = self.usage()
        now = self._now()
        out: dict[str, str] = {}
        with self._lock:
            for task_type in wanted:
                hold = self._holds.get(task_type)
                if hold is not None and (now >= hold.until or free >= hold.need):
                    del self._holds[task_type]
                    hold = None
                if hold is not None:
                    out[task_type] = hold.reason
                    continue
                need = default_estimate(task_type)
                if free - need <= self.min_free:
                    out[task_type] = (
                        f"{show_bytes(free)} free; {task_type} needs {show_bytes(need)} (default "
                        f"estimate) + {show_bytes(self.min_free)} kept free (disk_min_free_gb)"
                    )
        return out

    def held_types(self, types: frozenset[str]) -> frozenset[str]:
        """`held(types)` as a set (the engine's claim filter leaves these out)."""
        return frozenset(self.held(types))

    # --- the per-task check ----------------------------------------------------------------------
    def applies(self, task_type: str) -> bool:
        """Whether tasks of this type need room (the others skip the check)."""
        return task_type in self.disk_types

    def shortfall(self, task: models.Task) -> str | None:
        """None if the task's estimated output fits (seed: `free - required > minFree`), else
        why not; the type is then held (module doc). Blocking (stat calls): run in a thread."""
        if task.type not in self.disk_types:
            return None
        estimate = estimate_output_bytes(
            task.type, task.payload, local_input_bytes(task, self.data_dir, self.node_id)
        )
        self.forget_usage()  # the last measure may be older than the work that ran since
        free, _ = self.usage()
        if free - estimate.bytes > self.min_free:
            return None
        reason = (
            f"not enough disk for {task.type} here: it needs {show_bytes(estimate.bytes)} "
            f"({estimate.rule}) + {show_bytes(self.min_free)} kept free (disk_min_free_gb), "
            f"{show_bytes(free)} free"
        )
        with self._lock:
            self._holds[task.type] = _Hold(
                estimate.bytes + self.min_free + 1, self._now() + self.hold_sec, reason
            )
            self.released += 1
        logger.warning(
            "task %s handed back: %s", task.id, reason, extra={"action": "disk_shortfall"}
        )
        return reason

    def state(self) -> dict[str, Any]:
        """What `GET /api/v1/status` shows under `disk`."""
        # The count first: a hand-back adds its hold in the same locked step that counts it,
        # so a count read before the holds is never ahead of them (one running on a thread
        # between the two reads would otherwise show a hand-back without its hold).
        with self._lock:
            released = self.released
        free, total = self.usage()
        held = self.held(sorted(self.disk_types))
        return {
            "path": str(self.data_dir.resolve()),
            "free_bytes": free,
            "total_bytes": total,
            "min_free_bytes": self.min_free,
            "low": bool(held),
            "disk_types": sorted(self.disk_types),
            "held_types": held,
            "handed_back": released,
        }


def _disk_usage(path: Path) -> tuple[int, int]:
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        logger.warning("cannot measure the disk of %s: %s", path, exc, extra={"action": "disk"})
        return 0, 0
    return usage.free, usage.total
