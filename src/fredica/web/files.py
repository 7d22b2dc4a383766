"""A task's result files: the list (with download URLs) and each file, served only from
`<data_dir>/results/<task_id>/` with symlinks resolved."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.responses import Response

from fredica.api import deps, errors
from fredica.cluster import files as cluster_files
from fredica.domain import errors as domain_errors

router = APIRouter(tags=["web"])

SAFE_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_LISTED_FILES = 1000


@router.get("/api/v1/tasks/{task_id}/files")
async def task_files(task_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """Files under the task's result dir, with their download URLs: a task of this node's, or
    one of another owner's that ran here (its outputs stay on the node that ran it)."""
    data_dir = node.settings.data_dir
    safe = SAFE_TASK_ID.match(task_id) is not None
    try:
        await node.get_task(task_id)
    except domain_errors.NotFound:
        if not (safe and await asyncio.to_thread(has_result_dir, data_dir, task_id)):
            raise
    if not safe:
        return {"files": []}
    files = await asyncio.to_thread(list_result_files, data_dir, task_id)
    for item in files:
        item["url"] = f"/files/results/{task_id}/{item['name']}"
    return {"files": files}


@router.get("/files/results/{task_id}/{name:path}", response_model=None)
async def result_file(task_id: str, name: str, node: deps.NodeDep) -> Response:
    """A file of a task's outputs: only under `<data_dir>/results/<task_id>/`, symlinks
    resolved; `..` and absolute names are refused with 400, anything outside with 404."""
    found = await asyncio.to_thread(resolve_result_file, node.settings.data_dir, task_id, name)
    if isinstance(found, str):
        return errors.respond(400, errors.MALFORMED, found)
    if found is None:
        raise domain_errors.NotFound(f"no file {name!r} in the results of task {task_id}")
    return FileResponse(found.target, filename=found.target.name, content_disposition_type="inline")


@router.get("/files/outputs/{task_id}", response_model=None)
async def task_output(task_id: str, path: str, node: deps.NodeDep) -> Response:
    """A file that a task's result names (`?path=` exactly as the result has it): thumbnails,
    sprites and scene frames, which the video executors write under the data dir rather than
    the task's result dir. Served only if it is on this node, under its data dir and not
    private; 404 when the result names no such file, 400 for a malformed path."""
    task = await node.get_task(task_id)
    if path not in set(named_strings(task.result)):
        raise domain_errors.NotFound(f"the result of task {task_id} names no file {path!r}")
    data_dir = node.settings.data_dir.resolve()
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            candidate = candidate.resolve().relative_to(data_dir)
        except (ValueError, OSError):
            raise domain_errors.NotFound(f"{path!r} is not on this node") from None
    try:
        found = await node.served_file(candidate.as_posix())
    except cluster_files.PathRefused as exc:
        return errors.respond(400, errors.MALFORMED, exc.message)
    return FileResponse(found.target, stat_result=found.stat, content_disposition_type="inline")


def named_strings(value: Any) -> Iterator[str]:
    """Every string in a result (nested lists and objects included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from named_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from named_strings(item)


@dataclass(frozen=True)
class ResultFile:
    base: Path
    target: Path


def resolve_result_file(data_dir: Path, task_id: str, name: str) -> ResultFile | str | None:
    """The file `name` under `<data_dir>/results/<task_id>/`, symlinks resolved.

    Returns a reason string for a malformed request (400) and None when there is no such file
    inside the task's result dir (404), including a symlink that points outside it.
    """
    if not SAFE_TASK_ID.match(task_id) or ".." in task_id:
        return "invalid task id"
    root = (data_dir / "results").resolve()
    base = (root / task_id).resolve()
    target = cluster_files.resolve_under(base, name)
    if isinstance(target, str):
        return target
    if base.parent != root or target is None or not target.is_file():
        return None  # (or the task dir itself is a symlink leading elsewhere)
    return ResultFile(base, target)


def has_result_dir(data_dir: Path, task_id: str) -> bool:
    """Whether this node holds a result dir for the task (it ran the task here)."""
    root = (data_dir / "results").resolve()
    base = (root / task_id).resolve()
    return base.parent == root and base.is_dir()


def list_result_files(data_dir: Path, task_id: str) -> list[dict[str, Any]]:
    """Every file under the task's result dir (at most MAX_LISTED_FILES), by name."""
    if not has_result_dir(data_dir, task_id):
        return []
    base = (data_dir / "results" / task_id).resolve()
    files: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            resolved = path.resolve()
            if not resolved.is_relative_to(base) or not resolved.is_file():
                continue
            files.append(
                {"name": path.relative_to(base).as_posix(), "size": resolved.stat().st_size}
            )
            if len(files) >= MAX_LISTED_FILES:
                return sorted(files, key=lambda f: str(f["name"]))
    return sorted(files, key=lambda f: str(f["name"]))
