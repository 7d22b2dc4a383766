"""Source files from the browser: `POST /api/v1/uploads` (the request body is the file,
streamed into the data dir's `uploads/`) and the read-only `media_folders` to pick from; the
material list."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from fredica.api import deps, errors
from fredica.node import uploads

router = APIRouter()

UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post("/api/v1/uploads", status_code=201, openapi_extra=UPLOAD_BODY)
async def upload(
    request: Request,
    node: deps.NodeDep,
    name: Annotated[
        str, Query(min_length=1, max_length=1000, description="The file's name on the client.")
    ],
) -> JSONResponse:
    """Stream the request body into `uploads/<name>` (the name sanitized; ` (1)` added when it
    exists). Answers the absolute `path` to give a pipeline as its `source`. A body over
    `storage.max_upload_mb` answers 413 and nothing is kept; an interrupted upload leaves no
    file behind."""
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else None
    try:
        info = await node.uploads.receive(name, request.stream(), declared)
    except uploads.UploadTooLarge as exc:
        return errors.respond(413, errors.TOO_LARGE, exc.message)
    except ClientDisconnect:
        return errors.respond(400, errors.MALFORMED, "the upload was interrupted")
    return JSONResponse(status_code=201, content=info)


@router.get("/api/v1/media-folders")
async def media_folders(node: deps.NodeDep) -> dict[str, Any]:
    """The configured read-only roots (worker.yaml `media_folders`)."""
    return {"folders": node.media_folders.list_roots()}


@router.get("/api/v1/media-folders/{root_id}")
async def media_folder_root(root_id: int, node: deps.NodeDep) -> dict[str, Any]:
    """The top of media folder `root_id`."""
    return await node.media_folders.listing(root_id, "")


@router.get("/api/v1/media-folders/{root_id}/{path:path}")
async def media_folder_listing(root_id: int, path: str, node: deps.NodeDep) -> dict[str, Any]:
    """A folder inside media folder `root_id`: its subfolders, then its files with the
    `source` path to give a pipeline. A path leaving the root answers 4xx."""
    return await node.media_folders.listing(root_id, path)


@router.get("/api/v1/materials")
async def materials(
    node: deps.NodeDep,
    limit: Annotated[int, Query(ge=1, le=500, description="Materials per answer.")] = 100,
) -> dict[str, Any]:
    """The materials of the newest pipelines, newest first: title (the downloader's title, the
    file name or the URL), duration, the URL of its thumbnail when this node made one, and one
    status badge derived from all the material's pipelines."""
    return {"materials": await node.materials.list(limit)}
