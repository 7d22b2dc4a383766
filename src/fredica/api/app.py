"""The node's HTTP API (FastAPI): `/api/v1` for users, `/healthz`, `/metrics`.

`create_app` only assembles: the lifespan (start and stop the node), the token middleware, the
error table (`api.errors`) and one router per area (`routes_node`, `routes_pipelines`,
`routes_tasks`), plus the routers of the faces above the API (the web UI's, see
`fredica.web.app`). Every route calls one use case of the node service (`request.app.state.node`
through `api.deps`).

Bad input always gets a 4xx with a reason naming what is wrong, never a 500, and nothing is
written: requests are validated completely (pydantic at the edge, then the template) before the
single transaction that creates a pipeline.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response

from fredica import __version__, auth
from fredica.api import deps, errors, routes_node, routes_pipelines, routes_tasks
from fredica.node.service import Node

#: paths that token mode guards; health, metrics and the static UI stay open
GUARDED_PREFIXES = ("/api/v1", "/files/")
API_ROUTERS = (routes_node.router, routes_pipelines.router, routes_tasks.router)


def create_app(
    node: Node, *, manage_lifecycle: bool = True, routers: Iterable[APIRouter] = ()
) -> FastAPI:
    """The ASGI app of `node` with the API's routers and `routers` (faces above the API).

    With `manage_lifecycle`, the app starts and stops the node."""
    app = FastAPI(title="fredica", version=__version__, lifespan=_lifespan(node, manage_lifecycle))
    app.state.node = node
    errors.install(app)
    app.middleware("http")(require_token)
    for router in (*API_ROUTERS, *routers):
        app.include_router(router)
    return app


def _lifespan(
    node: Node, manage_lifecycle: bool
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if manage_lifecycle:
            await node.start()
        try:
            yield
        finally:
            if manage_lifecycle:
                await node.stop()

    return lifespan


async def require_token(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Token mode guards the user API and result files. Browsers cannot set headers on an
    EventSource or a download: `?token=` works too."""
    request.state.publisher = None
    node = deps.get_node(request)
    if request.url.path.startswith(GUARDED_PREFIXES) and node.auth.enabled:
        try:
            request.state.publisher = node.auth.authenticate(
                request.headers.get("authorization"), request.query_params.get("token")
            )
        except auth.Unauthorized as exc:
            return errors.answer(exc)
    return await call_next(request)
