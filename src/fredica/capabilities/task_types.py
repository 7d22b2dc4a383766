"""Task type -> required capability function (seed 001 §2.1, plus NETWORK_TEST of appendix A).

A task declares only WHAT it needs; the scheduler picks the backend. Types mapped to None need
no capability and may run on any node (merges, subtitle formatting, the network test).
DOWNLOAD_VIDEO's function depends on `payload.source_platform`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from fredica.capabilities import catalog
from fredica.domain import errors

F = catalog.CapabilityFunction

DOWNLOAD_VIDEO = "DOWNLOAD_VIDEO"

TASK_FUNCTIONS: Mapping[str, catalog.CapabilityFunction | None] = MappingProxyType(
    {
        DOWNLOAD_VIDEO: None,  # resolved from payload.source_platform, see required_function()
        "DOWNLOAD_SUBTITLE": F.DOWNLOAD_BILIBILI,
        "EXTRACT_AUDIO": F.FFMPEG,
        "SPLIT_AUDIO": F.FFMPEG,
        "DETECT_LANGUAGE": F.TRANSCRIBE,
        "TRANSCRIBE_CHUNK": F.TRANSCRIBE,
        "MERGE_TRANSCRIPTION": None,
        "AI_ANALYZE": F.AI_ANALYZE,
        "TRANSCODE": F.FFMPEG,
        "GENERATE_THUMBNAIL": F.FFMPEG,
        "EXTRACT_FRAMES": F.FFMPEG,
        "DETECT_SCENES": F.FFMPEG,
        "OCR_FRAME_BATCH": F.OCR,
        "MERGE_OCR_RESULTS": None,
        "DETECT_FRAME_BATCH": F.OBJECT_DETECT,
        "MERGE_DETECT_RESULTS": None,
        "TRANSLATE_TEXT": F.TRANSLATE,
        "UPSCALE_VIDEO": F.SUPER_RESOLUTION,
        "ENHANCE_AUDIO": F.SPEECH_ENHANCE,
        "DIARIZE_AUDIO": F.SPEAKER_DIARIZE,
        "DETECT_EMOTION": F.EMOTION_DETECT,
        "EXTRACT_SUBTITLE": F.FFMPEG,
        "FORMAT_SUBTITLE": None,
        "SYNC_SUBTITLE": F.SUBTITLE_SYNC,
        "DETECT_HARDCODED_SUBTITLE": F.AI_ANALYZE,
        "BLUR_SUBTITLE_REGION": F.FFMPEG,
        "BURN_SUBTITLE": F.FFMPEG,
        "GENERATE_TTS": F.TTS,
        "FINGERPRINT_AUDIO": F.AUDIO_FINGERPRINT,
        "FINGERPRINT_VIDEO": F.FFMPEG,
        "NETWORK_TEST": None,
    }
)

TASK_TYPES: tuple[str, ...] = tuple(TASK_FUNCTIONS)

# Task types that need no capability function and run anywhere.
ANYWHERE_TASK_TYPES: frozenset[str] = frozenset(
    t for t, f in TASK_FUNCTIONS.items() if f is None and t != DOWNLOAD_VIDEO
)

# §2.6: the node that downloads a video must also have FFMPEG, or the HARD-affine EXTRACT_AUDIO
# that follows could never be claimed (deadlock). Scoring enforces this co-requirement.
CO_REQUIRED: Mapping[str, tuple[catalog.CapabilityFunction, ...]] = MappingProxyType(
    {DOWNLOAD_VIDEO: (F.FFMPEG,)}
)

# payload.source_platform values -> download function. yt-dlp's "YouTube / generic platform"
# function covers the other named video platforms.
SOURCE_PLATFORMS: Mapping[str, catalog.CapabilityFunction] = MappingProxyType(
    {
        "bilibili": F.DOWNLOAD_BILIBILI,
        "youtube": F.DOWNLOAD_YOUTUBE,
        "ytdlp": F.DOWNLOAD_YOUTUBE,
        "twitter": F.DOWNLOAD_YOUTUBE,
        "x": F.DOWNLOAD_YOUTUBE,
        "instagram": F.DOWNLOAD_YOUTUBE,
        "vimeo": F.DOWNLOAD_YOUTUBE,
        "tiktok": F.DOWNLOAD_YOUTUBE,
        "http": F.DOWNLOAD_HTTP,
        "https": F.DOWNLOAD_HTTP,
        "direct": F.DOWNLOAD_HTTP,
        "hls": F.DOWNLOAD_HLS,
        "dash": F.DOWNLOAD_HLS,
        "m3u8": F.DOWNLOAD_HLS,
    }
)

_BILIBILI_HOSTS = ("bilibili.com", "b23.tv")
_YOUTUBE_HOSTS = ("youtube.com", "youtu.be")


def _platform_from_url(url: str) -> catalog.CapabilityFunction | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return None
    host = (parts.hostname or "").lower()
    path = parts.path.lower()
    if any(host == h or host.endswith("." + h) for h in _BILIBILI_HOSTS):
        return F.DOWNLOAD_BILIBILI
    if any(host == h or host.endswith("." + h) for h in _YOUTUBE_HOSTS):
        return F.DOWNLOAD_YOUTUBE
    if path.endswith((".m3u8", ".mpd")):
        return F.DOWNLOAD_HLS
    return F.DOWNLOAD_HTTP


def download_function(payload: Mapping[str, Any]) -> catalog.CapabilityFunction:
    """The DOWNLOAD_* function of a DOWNLOAD_VIDEO payload.

    `source_platform` decides (seed 001 §2.1); without it the URL (`url` or `source_url`) is
    classified by host and extension. Raises errors.PayloadError when neither is usable, so the
    task fails permanently instead of waiting forever for a node that can never exist.
    """
    platform = payload.get("source_platform")
    if isinstance(platform, str) and platform.strip():
        key = platform.strip().lower()
        if key in SOURCE_PLATFORMS:
            return SOURCE_PLATFORMS[key]
        raise errors.PayloadError(
            f"unknown source_platform {platform!r}; expected one of "
            + ", ".join(sorted(SOURCE_PLATFORMS))
        )
    for key in ("url", "source_url"):
        url = payload.get(key)
        if isinstance(url, str) and url:
            found = _platform_from_url(url)
            if found is not None:
                return found
    raise errors.PayloadError("DOWNLOAD_VIDEO needs payload.source_platform or an http(s) url")


def is_known_task_type(task_type: str) -> bool:
    """Whether the task type is one of the seed's types (or NETWORK_TEST)."""
    return task_type in TASK_FUNCTIONS


def required_function(
    task_type: str,
    payload: Mapping[str, Any] | None = None,
    extra: Mapping[str, catalog.CapabilityFunction | None] | None = None,
) -> catalog.CapabilityFunction | None:
    """The capability function a task needs, or None when it can run on any node.

    `extra` lets plugins add task types. Raises errors.PayloadError for an unknown task type or
    an unusable DOWNLOAD_VIDEO payload.
    """
    if task_type == DOWNLOAD_VIDEO:
        return download_function(payload or {})
    if extra is not None and task_type in extra:
        return extra[task_type]
    if task_type not in TASK_FUNCTIONS:
        raise errors.PayloadError(f"unknown task type {task_type!r}")
    return TASK_FUNCTIONS[task_type]


def co_required_functions(task_type: str) -> tuple[catalog.CapabilityFunction, ...]:
    """Functions the claiming node must ALSO have (DOWNLOAD_VIDEO -> FFMPEG, seed §2.6)."""
    return CO_REQUIRED.get(task_type, ())


def task_types_for(function: catalog.CapabilityFunction) -> tuple[str, ...]:
    """Task types served by a function (DOWNLOAD_VIDEO for every DOWNLOAD_* function)."""
    found = [t for t, f in TASK_FUNCTIONS.items() if f is function]
    if function in catalog.DOWNLOAD_FUNCTIONS:
        found.insert(0, DOWNLOAD_VIDEO)
    return tuple(found)


def servable_task_types(functions: Iterable[catalog.CapabilityFunction]) -> frozenset[str]:
    """Task types a node with these functions may claim (a cheap pre-filter before scoring):
    the run-anywhere types, the types of its functions, and DOWNLOAD_VIDEO when it has a
    DOWNLOAD_* function and FFMPEG (the payload decides which download function is needed)."""
    have = set(functions)
    out = set(ANYWHERE_TASK_TYPES)
    out.update(t for t, f in TASK_FUNCTIONS.items() if f is not None and f in have)
    if have & catalog.DOWNLOAD_FUNCTIONS and all(f in have for f in CO_REQUIRED[DOWNLOAD_VIDEO]):
        out.add(DOWNLOAD_VIDEO)
    return frozenset(out)
