"""Source files from the browser: `POST /api/v1/uploads` (the request body is the file,
streamed into the data dir's `uploads/`) and the read-only `media_folders` to pick from; the
material list."""

from __future__ import annotations

import asyncio
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


@router.post("/api/v1/uploads/resumable", status_code=201)
async def start_resumable_upload(
    node: deps.NodeDep,
    name: Annotated[
        str, Query(min_length=1, max_length=1000, description="The file's name on the client.")
    ],
    size: Annotated[int, Query(ge=1, description="The file's size in bytes.")],
) -> JSONResponse:
    """Start an upload sent in parts: answers its `upload_id` and `offset` 0. Send the parts
    with `PUT /api/v1/uploads/resumable/{upload_id}` and `Content-Range`; after a dropped
    connection ask `GET` for the offset and send the rest. 413 over `storage.max_upload_mb`."""
    try:
        info = await asyncio.to_thread(node.resumable_uploads.start, name, size)
    except uploads.UploadTooLarge as exc:
        return errors.respond(413, errors.TOO_LARGE, exc.message)
    return JSONResponse(status_code=201, content=info)


@router.get("/api/v1/uploads/resumable/{upload_id}")
async def resumable_upload_offset(upload_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """How far an upload stands: `offset` (bytes kept), `size`, `name`. 404 once finished."""
    return await asyncio.to_thread(node.resumable_uploads.offset, upload_id)


@router.put("/api/v1/uploads/resumable/{upload_id}", openapi_extra=UPLOAD_BODY)
async def resumable_upload_part(
    upload_id: str, request: Request, node: deps.NodeDep
) -> JSONResponse:
    """One part: the body is bytes START-END of the file (`Content-Range: bytes
    START-END/SIZE`), START the upload's offset. 200 `{offset, complete: false}`; the last part
    answers 201 `{path, name, size, sha256, complete: true}`. A part not starting at the
    offset answers 409 naming it; a malformed or outside range 400/422 naming the problem. A
    part cut off keeps what arrived (ask the offset)."""
    try:
        info = await node.resumable_uploads.append(
            upload_id, request.headers.get("content-range"), request.stream()
        )
    except ClientDisconnect:
        return errors.respond(400, errors.MALFORMED, "the part was interrupted; ask the offset")
    return JSONResponse(status_code=201 if info["complete"] else 200, content=info)


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
