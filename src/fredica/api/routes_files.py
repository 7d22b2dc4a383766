"""Files for peers (DESIGN §6): `GET /files/serve?path=` and `GET /files/serve/stat?path=`.

Both sit under the `/files/serve` prefix that the middleware guards with `X-Cluster-Secret`
(never a publisher token). What is served is decided by `cluster.files.LocalFiles`: regular
files under the node's data dir, named relative to it, symlinks resolved, private files never.
A malformed path, a directory or a special file answers 400, anything not served 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.responses import Response

from fredica.api import deps, errors
from fredica.cluster import files

router = APIRouter(tags=["cluster"])


async def _served(node: deps.NodeDep, path: str) -> files.ServedFile | Response:
    try:
        return await node.served_file(path)
    except files.PathRefused as exc:
        return errors.respond(400, errors.MALFORMED, exc.message)


@router.get(files.SERVE_PATH, response_model=None)
async def serve_file(path: str, node: deps.NodeDep) -> Response:
    """The file's bytes: 200 whole, or 206 for a `Range` request (416 when it cannot be
    satisfied). `ETag` and `X-Content-SHA256` carry the sha256 of the whole file, so a client
    resuming with `If-Range` gets the whole file again if it changed."""
    found = await _served(node, path)
    if isinstance(found, Response):
        return found
    headers = {files.SHA256_HEADER: found.sha256, "ETag": f'"{found.sha256}"'}
    return FileResponse(found.target, stat_result=found.stat, headers=headers)


@router.get(files.STAT_PATH, response_model=None)
async def stat_file(path: str, node: deps.NodeDep) -> dict[str, Any] | Response:
    """`{"path", "size", "sha256", "mtime"}` of the file `/files/serve` would send."""
    found = await _served(node, path)
    return found if isinstance(found, Response) else found.to_json()
