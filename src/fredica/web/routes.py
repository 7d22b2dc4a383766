"""The web UI's pages and static files, and what the UI asks the node before it acts: its
defaults (`/api/v1/web/config`), the quality trade-off check, the cluster panel.

The pages are one HTML shell with ES modules (routing happens in the browser), so every page
path serves the same `index.html`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from fredica import __version__
from fredica.api import deps
from fredica.executors import network_test
from fredica.pipelines.request import PipelineRequest
from fredica.web.panel import cluster_panel

STATIC_DIR = Path(__file__).parent / "static"
INDEX_HTML = STATIC_DIR / "index.html"
PAGES: tuple[str, ...] = ("/", "/processing", "/tools", "/pipelines/{pipeline_id}")
PAGES += ("/history",)
PAGES += ("/settings", "/charts", "/materials")  # settings, charts, the material list
PAGES += ("/libraries",)  # watch folders

router = APIRouter(tags=["web"])


class _NoCacheStatic(StaticFiles):
    """Static files that the browser revalidates (ETag) on every load.

    ES modules are cached aggressively otherwise, and a node upgraded in place would keep
    serving a mix of old and new modules to an open browser.
    """

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Cache-Control"] = "no-cache"
        return response


async def page() -> FileResponse:
    return FileResponse(INDEX_HTML, headers={"Cache-Control": "no-cache"})


for _path in PAGES:
    router.add_api_route(_path, page, methods=["GET"], include_in_schema=False)
router.mount("/static", _NoCacheStatic(directory=STATIC_DIR), name="static")


@router.get("/api/v1/web/config")
async def web_config(node: deps.NodeDep) -> dict[str, Any]:
    """Defaults the UI shows: network-test targets, quality defaults, template task types."""
    return {
        "node_id": node.node_id,
        "version": __version__,
        "network_test": {
            "default_urls": list(network_test.DEFAULT_URLS),
            "default_timeout_ms": network_test.DEFAULT_TIMEOUT_MS,
        },
        "quality_defaults": node.quality_defaults(),
        "templates": {
            name: {"description": description, "task_types": node.template_task_types(name)}
            for name, description in node.template_descriptions().items()
        },
        "task_types": sorted(node.known_task_types()),
    }


@router.post("/api/v1/web/quality-check")
async def quality_check(body: PipelineRequest, node: deps.NodeDep) -> dict[str, Any]:
    """Task types whose `quality` default this request would lower (seed 001 §2.7.2)."""
    return {"needs_confirmation": await node.quality_check(body)}


@router.get("/api/v1/web/cluster")
async def web_cluster(node: deps.NodeDep) -> dict[str, Any]:
    """Every known node with slots used, load, memory, free disk and capability scores (for
    the UI panel), this node's outbox and the freshness of its replicas (`replicas`)."""
    return await cluster_panel(node)
