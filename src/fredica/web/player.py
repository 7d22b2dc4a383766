"""What the web player of a pipeline plays: its media and subtitle tracks.

- `GET /api/v1/pipelines/{id}/player`: the playable outputs of the pipeline's completed tasks
  (a video with burned subtitles, dubbed or spoken audio, the source) and its subtitle tracks
  (the transcript, translations, extracted / formatted / synchronised subtitles) with their
  cues, so the page can show original and translation side by side. Outputs of tasks that ran
  on another node are named by that node (`elsewhere`): their files are there.
- `GET /files/player/{id}/{task_id}/media/{role}`: that task's media file, with `Range`
  support (a browser seeks in a <video> by asking for byte ranges).
- `GET /files/player/{id}/{task_id}/subtitles.vtt`: that task's subtitles as WebVTT (what a
  <track> element reads), whatever format the task wrote.

Only files that a completed task of the pipeline names are served, and of those only the ones
inside the data dir (symlinks resolved, the node's private files excluded, as for peers) and
the pipeline's own local source file (the video the user asked to process, read by its
EXTRACT_AUDIO): a task naming any other file outside the data dir offers nothing. In token
mode these paths need the token (`?token=` works, as a <video> cannot send a header).
"""

from __future__ import annotations

import asyncio
import mimetypes
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.responses import Response

from fredica.api import deps
from fredica.domain import errors, models
from fredica.executors import download
from fredica.executors import subtitle_format as sf

router = APIRouter(tags=["web"])

FILES_PREFIX = "/files/player/"
MAX_SUBTITLE_BYTES = 5 * 1024 * 1024
VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".webm", ".mkv", ".mov", ".ogv"})
AUDIO_SUFFIXES = frozenset({".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg", ".oga", ".opus"})
SUBTITLE_SUFFIXES = frozenset({".srt", ".vtt", ".ass", ".ssa"})
PLAYABLE = VIDEO_SUFFIXES | AUDIO_SUFFIXES


@dataclass(frozen=True)
class Source:
    """Where a task type names a playable file, and what it is to people."""

    task_type: str
    keys: tuple[str, ...]  # result keys ("a.b" for a nested one); the first present wins
    role: str
    #: the task's input rather than its output: the pipeline's own source file, which may lie
    #: outside the data dir (a user's local video), served only when it is that source
    from_payload: bool = False


# In the order the player offers them: the finished product first, the source last.
MEDIA: tuple[Source, ...] = (
    Source("BURN_SUBTITLE", ("video_path",), "subtitled"),
    Source("GENERATE_TTS", ("audio_path",), "speech"),
    Source("TRANSCODE", ("output_path",), "transcoded"),
    Source("ENHANCE_AUDIO", ("audio_path",), "enhanced"),
    Source("DOWNLOAD_VIDEO", ("video_path",), "source"),
    Source("EXTRACT_AUDIO", ("video_path",), "source", from_payload=True),
    Source("EXTRACT_AUDIO", ("audio_path",), "source_audio"),
)
TRACKS: tuple[Source, ...] = (
    Source("MERGE_TRANSCRIPTION", ("files.vtt", "files.srt"), "original"),
    Source("EXTRACT_SUBTITLE", ("subtitle_path",), "original"),
    Source("SYNC_SUBTITLE", ("subtitle_path",), "original"),
    Source("FORMAT_SUBTITLE", ("subtitle_path",), "original"),
    Source("TRANSLATE_TEXT", ("srt_path",), "translation"),
)


def _value(data: dict[str, Any], key: str) -> Any:
    value: Any = data
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def named_file(task: models.Task, source: Source, suffixes: frozenset[str]) -> str | None:
    """The file a completed task names for `source`: relative to the data dir, or absolute
    (None when it names none of these suffixes)."""
    data = (task.payload if source.from_payload else task.result) or {}
    for key in source.keys:
        value = _value(data, key)
        if isinstance(value, str) and value and PurePosixPath(value).suffix.lower() in suffixes:
            return value
    return None


def media_kind(name: str) -> str:
    return "video" if PurePosixPath(name).suffix.lower() in VIDEO_SUFFIXES else "audio"


def _language(task: models.Task) -> str | None:
    result, payload = task.result or {}, task.payload or {}
    for value in (result.get("target_lang"), payload.get("target_lang"), result.get("language")):
        if isinstance(value, str) and value and value != "auto":
            return value
    return None


def read_cues(path: Path) -> list[sf.Cue] | None:
    """The cues of a subtitle file, None when it is too big or not subtitles."""
    try:
        if path.stat().st_size > MAX_SUBTITLE_BYTES:
            return None
        return sf.parse(path.read_text(encoding="utf-8-sig"), name=path.name)
    except (OSError, UnicodeDecodeError, errors.TaskError):
        return None


def _completed(tasks: list[models.Task]) -> list[models.Task]:
    return [t for t in tasks if t.status is models.TaskStatus.COMPLETED and t.result]


def _ran_elsewhere(task: models.Task, node_id: str) -> bool:
    return bool(task.claimed_by) and task.claimed_by != node_id


def _plain_file(path: Path) -> Path | None:
    try:
        target = path.resolve()
        return target if target.is_file() else None
    except (OSError, RuntimeError):
        return None


async def _resolve(
    node: deps.NodeDep, pipeline: models.Pipeline, source: Source, name: str
) -> Path | None:
    """The local file `name` names, if the player may serve it: inside the data dir (by the
    rules peers are served by), or the pipeline's own local source file."""
    if not name.startswith("/"):
        try:
            return await node.local_file(name)
        except (errors.InvalidRequest, errors.NotFound):  # malformed, a directory, private, gone
            return None
    own = download.local_source(str(pipeline.params.get("source") or ""))
    if source.from_payload and own is not None and Path(name) == own:
        return await asyncio.to_thread(_plain_file, own)
    return None


def media_url(pipeline_id: str, task_id: str, role: str) -> str:
    return f"{FILES_PREFIX}{pipeline_id}/{task_id}/media/{role}"


def subtitles_url(pipeline_id: str, task_id: str) -> str:
    return f"{FILES_PREFIX}{pipeline_id}/{task_id}/subtitles.vtt"


@dataclass(frozen=True)
class Offered:
    task: models.Task
    source: Source
    name: str
    path: Path


async def _offered(
    node: deps.NodeDep,
    pipeline: models.Pipeline,
    tasks: list[models.Task],
    table: tuple[Source, ...],
    elsewhere: set[str],
) -> list[Offered]:
    """Every file the completed tasks offer for `table` that this node can serve, in the
    table's order, each file once; the nodes holding the others are added to `elsewhere`."""
    suffixes = SUBTITLE_SUFFIXES if table is TRACKS else PLAYABLE
    found: list[Offered] = []
    for source in table:
        for task in _completed(tasks):
            name = named_file(task, source, suffixes) if task.type == source.task_type else None
            if name is None:
                continue
            if _ran_elsewhere(task, node.node_id):
                elsewhere.add(str(task.claimed_by))
                continue
            path = await _resolve(node, pipeline, source, name)
            if path is not None and all(path != o.path for o in found):
                found.append(Offered(task, source, name, path))
    return found


def _cue_json(cues: list[sf.Cue]) -> list[dict[str, Any]]:
    return [{"start": round(c.start, 3), "end": round(c.end, 3), "text": c.text} for c in cues]


async def player_view(node: deps.NodeDep, pipeline_id: str) -> dict[str, Any]:
    """The media and subtitle tracks of the pipeline this node can serve."""
    pipeline, tasks = await node.pipeline_with_tasks(pipeline_id)
    elsewhere: set[str] = set()
    media = []
    for o in await _offered(node, pipeline, tasks, MEDIA, elsewhere):
        dubbed = o.task.type == "BURN_SUBTITLE" and (o.task.result or {}).get("audio_path")
        role = "dubbed" if dubbed else o.source.role
        media.append(
            {
                "task_id": o.task.id,
                "task_type": o.task.type,
                "role": role,
                "kind": media_kind(o.name),
                "name": PurePosixPath(o.name).name,
                "url": media_url(pipeline_id, o.task.id, o.source.role),
            }
        )
    tracks = []
    for o in await _offered(node, pipeline, tasks, TRACKS, elsewhere):
        cues = await asyncio.to_thread(read_cues, o.path)
        if cues is not None:
            tracks.append(
                {
                    "task_id": o.task.id,
                    "task_type": o.task.type,
                    "role": o.source.role,
                    "language": _language(o.task),
                    "name": PurePosixPath(o.name).name,
                    "url": subtitles_url(pipeline_id, o.task.id),
                    "cues": _cue_json(cues),
                }
            )
    return {"media": media, "tracks": tracks, "elsewhere": sorted(elsewhere)}


async def _task_file(
    node: deps.NodeDep, pipeline_id: str, task_id: str, table: tuple[Source, ...], role: str
) -> Path:
    """The file a task of the pipeline offers to the player in `role` (NotFound otherwise)."""
    pipeline, tasks = await node.pipeline_with_tasks(pipeline_id)
    mine = [t for t in tasks if t.id == task_id]
    for o in await _offered(node, pipeline, mine, table, set()):
        if o.source.role == role or table is TRACKS:
            return o.path
    raise errors.NotFound(f"task {task_id} of pipeline {pipeline_id} has no {role} to play here")


@router.get("/api/v1/pipelines/{pipeline_id}/player")
async def pipeline_player(pipeline_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """`{"media": [...], "tracks": [{..., "cues": [...]}], "elsewhere": [node ids]}`."""
    return await player_view(node, pipeline_id)


@router.get(FILES_PREFIX + "{pipeline_id}/{task_id}/media/{role}", response_model=None)
async def player_media(pipeline_id: str, task_id: str, role: str, node: deps.NodeDep) -> Response:
    """The media file (206 for a `Range` request)."""
    path = await _task_file(node, pipeline_id, task_id, MEDIA, role)
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return FileResponse(path, media_type=kind, content_disposition_type="inline")


@router.get(FILES_PREFIX + "{pipeline_id}/{task_id}/subtitles.vtt", response_model=None)
async def player_subtitles(pipeline_id: str, task_id: str, node: deps.NodeDep) -> Response:
    """The task's subtitles as WebVTT."""
    path = await _task_file(node, pipeline_id, task_id, TRACKS, "subtitles")
    cues = await asyncio.to_thread(read_cues, path)
    if cues is None:
        raise errors.NotFound(f"the subtitles of task {task_id} cannot be read")
    return Response(sf.write_vtt(cues), media_type="text/vtt; charset=utf-8")
