"""Watch folders (`/api/v1/libraries`): the libraries of this node, their files, a scan now and
"process again" (docs/libraries.md). Libraries are configured in worker.yaml (`libraries:`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from fredica.api import deps

router = APIRouter(tags=["libraries"])


@router.get("/api/v1/libraries")
async def list_libraries(node: deps.NodeDep) -> dict[str, Any]:
    """Every configured library: folder, template, patterns, timing, which node watches it,
    the last scan and its error, and the count of files per status."""
    return {"libraries": await node.libraries.overview()}


@router.get("/api/v1/libraries/{name}/files")
async def library_files(name: str, node: deps.NodeDep) -> dict[str, Any]:
    """The files of a library: path, size, mtime, sha256, status (`settling`, `queued`,
    `watched_elsewhere`, `gone`, `error`), its pipeline and its history. 404 for an unknown
    library."""
    return {"library": name, "files": await node.libraries.files(name)}


@router.post("/api/v1/libraries/{name}/rescan")
async def rescan_library(name: str, node: deps.NodeDep) -> dict[str, Any]:
    """Scan the folder now; answers what the scan did (`found`, `taken`, `settling`, `gone`,
    or `error` when the folder cannot be read)."""
    return {"library": name, **await node.libraries.rescan(name)}


@router.post("/api/v1/libraries/{name}/files/{file_id}/reprocess")
async def reprocess_file(name: str, file_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """Process a file again: a new pipeline of the library's template (an active pipeline of
    the same content is returned instead, `deduplicated: true`). 404 for an unknown library or
    file, 409 for a file that is gone."""
    return {"library": name, **await node.libraries.reprocess(name, file_id)}
