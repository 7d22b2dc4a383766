"""The node's whole HTTP app: the API (`fredica.api.app`) plus the web UI's routers.

The UI sits above the API: it uses the API's dependencies and error table, and the API knows
nothing of it.
"""

from __future__ import annotations

from fastapi import FastAPI

from fredica.api import app as api_app
from fredica.node.service import Node
from fredica.web import events, files, player, recovery, routes

ROUTERS = (routes.router, events.router, recovery.router, files.router, player.router)


def create_app(node: Node, *, manage_lifecycle: bool = True) -> FastAPI:
    """The ASGI app of `node`: API and web UI. With `manage_lifecycle`, the app starts and
    stops the node."""
    return api_app.create_app(node, manage_lifecycle=manage_lifecycle, routers=ROUTERS)
