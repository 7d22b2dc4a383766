"""The node's HTTP API (FastAPI): `/api/v1` for users, `/healthz`, `/metrics`.

`create_app` only assembles: the lifespan (start and stop the node), the token middleware, the
error table (`api.errors`) and one router per area (`routes_node`, `routes_pipelines`,
`routes_tasks`, `routes_files` for peers), plus the routers of the faces above the API (the web
UI's, see `fredica.web.app`). Every route calls one use case of the node service
(`request.app.state.node` through `api.deps`).

Bad input always gets a 4xx with a reason naming what is wrong, never a 500, and nothing is
written: requests are validated completely (pydantic at the edge, then the template) before the
single transaction that creates a pipeline.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fredica import __version__, auth
from fredica.api import (
    deps,
    errors,
    routes_cluster,
    routes_files,
    routes_libraries,
    routes_media,
    routes_node,
    routes_pipelines,
    routes_settings,
    routes_tasks,
)
from fredica.node.service import Node

logger = logging.getLogger(__name__)

#: paths that token mode guards; health, metrics and the static UI stay open
GUARDED_PREFIXES = ("/api/v1", "/files/results/", "/files/outputs/", "/files/player/")
#: paths only peers may use: guarded by the cluster secret, never by a publisher token
CLUSTER_PREFIXES = ("/cluster/", "/files/serve")
#: where a browser cannot send a header (EventSource, a download link): `?token=` is accepted
#: there, for GET only, and nowhere else
QUERY_TOKEN_PATHS = ("/api/v1/events", "/files/results/", "/files/outputs/", "/files/player/")
#: requests whose bodies are limited to `api.max_body_bytes`
LIMITED_PREFIXES = ("/api/", "/cluster/")
#: routes that stream their body and enforce their own limit (uploads: storage.max_upload_mb)
UNLIMITED_PATHS = ("/api/v1/uploads",)
#: the parts of a resumable upload (each bounded by the size announced at its start)
UNLIMITED_PREFIXES = ("/api/v1/uploads/resumable/",)
#: the API's paths, whose error answers the OpenAPI schema declares (not /healthz, /metrics, UI)
API_PREFIXES = ("/api/", "/cluster/", "/files/")
API_ROUTERS = (
    routes_node.router,
    routes_pipelines.router,
    routes_tasks.router,
    routes_cluster.router,
    routes_files.router,
    routes_settings.router,
    routes_media.router,
    routes_libraries.router,
)


def create_app(
    node: Node, *, manage_lifecycle: bool = True, routers: Iterable[APIRouter] = ()
) -> FastAPI:
    """The ASGI app of `node` with the API's routers and `routers` (faces above the API).

    With `manage_lifecycle`, the app starts and stops the node."""
    app = FastAPI(title="fredica", version=__version__, lifespan=_lifespan(node, manage_lifecycle))
    app.state.node = node
    errors.install(app)
    errors.install_openapi(app, declared_error)
    app.middleware("http")(require_token)
    app.add_middleware(BodyLimit, limit=node.settings.max_body_bytes)
    install_log_redaction()
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


def declared_error(path: str, status: int) -> bool:
    """Whether the operation at `path` may answer the error `status`: 401 only behind a token or
    the cluster secret, 403 only behind a token, 413 only where bodies are limited."""
    if not path.startswith(API_PREFIXES):
        return False
    if status == 401:
        return path.startswith(GUARDED_PREFIXES + CLUSTER_PREFIXES)
    if status == 403:
        return path.startswith(GUARDED_PREFIXES)
    if status == 413:
        return path.startswith(LIMITED_PREFIXES)
    return True


async def require_token(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Token mode guards the user API and result files. Browsers cannot set headers on an
    EventSource or a download: `?token=` works too."""
    request.state.publisher = None
    node = deps.get_node(request)
    path = request.url.path
    if path.startswith(CLUSTER_PREFIXES):
        try:
            auth.check_cluster_secret(
                node.cluster_secret, request.headers.get(auth.CLUSTER_SECRET_HEADER)
            )
        except auth.Unauthorized as exc:
            logger.warning(
                "refused %s %s from %s: %s",
                request.method,
                path,
                request.client.host if request.client else "?",
                exc,
                extra={"action": "cluster_auth"},
            )
            return errors.answer(exc)
        return await call_next(request)
    if path.startswith(GUARDED_PREFIXES) and node.auth.enabled:
        query_ok = request.method == "GET" and path.startswith(QUERY_TOKEN_PATHS)
        try:
            request.state.publisher = node.auth.authenticate(
                request.headers.get("authorization"),
                request.query_params.get("token") if query_ok else None,
            )
        except auth.Unauthorized as exc:
            return errors.answer(exc)
    return await call_next(request)


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, whether the client announced the
    length or streams it (then the body is read up to the limit first and replayed); nothing
    of such a request reaches a handler."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not scope["path"].startswith(LIMITED_PREFIXES)
            or scope["path"] in UNLIMITED_PATHS
            or scope["path"].startswith(UNLIMITED_PREFIXES)
        ):
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > self.limit:
                await self._refuse(scope, receive, send)
                return
            await self.app(scope, receive, send)  # the server stops at Content-Length
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = bool(message.get("more_body"))
            if len(body) > self.limit:
                await self._refuse(scope, receive, send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"request body larger than {self.limit} bytes (api.max_body_bytes)"
        response = errors.respond(413, errors.TOO_LARGE, message)
        await response(scope, receive, send)


_TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s\"]*")


class RedactTokens(logging.Filter):
    """Hide `?token=` values in log lines (uvicorn's access log prints the query string)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                _TOKEN_IN_QUERY.sub(r"\1[redacted]", a) if isinstance(a, str) else a
                for a in record.args
            )
        if isinstance(record.msg, str) and "token=" in record.msg:
            record.msg = _TOKEN_IN_QUERY.sub(r"\1[redacted]", record.msg)
        return True


def install_log_redaction() -> None:
    """Once per process, on the loggers that print request lines."""
    for name in ("uvicorn.access", "uvicorn.error", "fredica"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
