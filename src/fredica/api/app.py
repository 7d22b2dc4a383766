"""The node's HTTP API (FastAPI): `/api/v1` for users, `/healthz`, `/metrics`.

Bad input always gets a 4xx with a reason naming what is wrong, never a 500, and nothing is
written: requests are validated completely (pydantic at the edge, then the template) before the
single transaction that creates a pipeline.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fredica import __version__, auth
from fredica.domain import errors
from fredica.domain.models import TaskStatus
from fredica.node.service import Node
from fredica.pipelines.request import NetworkTestRequest, PipelineRequest

logger = logging.getLogger(__name__)

TASK_ACTIONS = ("cancel", "pause", "resume", "retry", "skip")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message, "detail": message})


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        path = ""
        for p in loc:
            path += f"[{p}]" if p.isdigit() else (f".{p}" if path else p)
        if err.get("type") == "json_invalid":
            return 400, f"malformed JSON: {err.get('ctx', {}).get('error', err.get('msg'))}"
        parts.append(f"{path or 'body'}: {err.get('msg')}")
    return 422, "; ".join(parts) or "invalid request"


class _Metrics:
    """Prometheus collector reading a snapshot prepared before each scrape."""

    def __init__(self) -> None:
        self.snapshot: dict[str, Any] = {}

    def collect(self) -> Any:
        counts = GaugeMetricFamily("fredica_tasks", "Tasks by status", labels=["status"])
        for status, n in self.snapshot.get("task_counts", {}).items():
            counts.add_metric([status], n)
        yield counts
        running = GaugeMetricFamily("fredica_running_tasks", "Tasks executing on this node")
        running.add_metric([], self.snapshot.get("running", 0))
        yield running
        stats = CounterMetricFamily(
            "fredica_engine_tasks", "Task outcomes on this node since start", labels=["outcome"]
        )
        for outcome, n in self.snapshot.get("engine_stats", {}).items():
            stats.add_metric([outcome], n)
        yield stats


def create_app(node: Node, *, manage_lifecycle: bool = True) -> FastAPI:
    """The ASGI app of `node`. With `manage_lifecycle`, the app starts and stops the node."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if manage_lifecycle:
            await node.start()
        try:
            yield
        finally:
            if manage_lifecycle:
                await node.stop()

    app = FastAPI(title="fredica", version=__version__, lifespan=lifespan)
    app.state.node = node
    metrics = _Metrics()
    registry = CollectorRegistry(auto_describe=True)
    registry.register(metrics)

    @app.exception_handler(RequestValidationError)
    async def on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _validation_message(exc)
        return _error(status, message)

    @app.exception_handler(errors.NotFound)
    async def on_not_found(_: Request, exc: errors.NotFound) -> JSONResponse:
        return _error(404, exc.message)

    @app.exception_handler(errors.IllegalTransition)
    async def on_conflict(_: Request, exc: errors.IllegalTransition) -> JSONResponse:
        return _error(409, exc.message)

    @app.exception_handler(errors.Conflict)
    async def on_conflict_work(_: Request, exc: errors.Conflict) -> JSONResponse:
        return _error(409, exc.message)

    @app.exception_handler(errors.InvalidRequest)
    async def on_invalid(_: Request, exc: errors.InvalidRequest) -> JSONResponse:
        return _error(422, exc.message)

    @app.exception_handler(auth.Unauthorized)
    async def on_unauthorized(_: Request, exc: auth.Unauthorized) -> JSONResponse:
        response = _error(401, exc.message)
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    @app.exception_handler(auth.Forbidden)
    async def on_forbidden(_: Request, exc: auth.Forbidden) -> JSONResponse:
        return _error(403, exc.message)

    @app.middleware("http")
    async def require_token(request: Request, call_next: Any) -> Any:
        # token mode guards the user API and result files; health, metrics and the static UI
        # stay open. Browsers cannot set headers on EventSource or downloads: ?token= works too.
        request.state.publisher = None
        if request.url.path.startswith(("/api/v1", "/files/")) and node.auth.enabled:
            try:
                request.state.publisher = node.auth.authenticate(
                    request.headers.get("authorization"), request.query_params.get("token")
                )
            except auth.Unauthorized as exc:
                return await on_unauthorized(request, exc)
        return await call_next(request)

    @app.exception_handler(errors.StoreError)
    async def on_store(_: Request, exc: errors.StoreError) -> JSONResponse:
        return _error(507 if isinstance(exc, errors.StoreFull) else 503, exc.message)

    # --- health and metrics ----------------------------------------------------------------
    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        health = node.health()
        return JSONResponse(
            status_code=200 if health == "ok" else 503,
            content={
                "ok": health == "ok",
                "state": health,
                "node_id": node.node_id,
                "version": __version__,
            },
        )

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.snapshot = await node.status()
        return PlainTextResponse(
            generate_latest(registry).decode(), media_type="text/plain; version=0.0.4"
        )

    # --- pipelines -------------------------------------------------------------------------
    @app.post("/api/v1/pipelines", status_code=201)
    async def create_pipeline(body: PipelineRequest, request: Request) -> JSONResponse:
        pipeline, deduplicated = await node.create_pipeline(body, request.state.publisher)
        return JSONResponse(
            status_code=200 if deduplicated else 201,
            content={
                "pipeline_id": pipeline.id,
                "deduplicated": deduplicated,
                "status": pipeline.status.value,
                "tasks": pipeline.params.get("refs", {}),
            },
        )

    @app.get("/api/v1/pipelines")
    async def list_pipelines(
        status: str | None = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> dict[str, Any]:
        rows = await node.list_pipelines(status, limit, offset)
        return {"pipelines": [p.to_json() for p in rows]}

    @app.get("/api/v1/pipelines/{pipeline_id}")
    async def get_pipeline(pipeline_id: str) -> dict[str, Any]:
        pipeline, tasks = await node.pipeline_with_tasks(pipeline_id)
        return {**pipeline.to_json(), "tasks": [t.to_json() for t in tasks]}

    @app.delete("/api/v1/pipelines/{pipeline_id}", status_code=202)
    async def cancel_pipeline(pipeline_id: str) -> dict[str, Any]:
        pipeline = await node.cancel_pipeline(pipeline_id)
        return pipeline.to_json()

    @app.get("/api/v1/templates")
    async def templates() -> dict[str, Any]:
        return {
            "templates": [
                {"name": name, "description": node.registry.template(name).description}
                for name in node.registry.template_names
            ],
            "task_types": sorted(node.known_task_types()),
        }

    # --- tasks -----------------------------------------------------------------------------
    @app.get("/api/v1/tasks")
    async def list_tasks(
        pipeline_id: str | None = None,
        status: str | None = None,
        type: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 500,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> dict[str, Any]:
        statuses = [s for s in status.split(",") if s] if status else None
        for s in statuses or []:
            if s not in TaskStatus.__members__.values():
                valid = ", ".join(t.value for t in TaskStatus)
                raise errors.InvalidRequest(f"status: unknown status {s!r}; valid: {valid}")
        rows = await node.list_tasks(pipeline_id, statuses, type, limit, offset)
        return {"tasks": [t.to_json() for t in rows]}

    @app.get("/api/v1/tasks/{task_id}")
    async def get_task(task_id: str) -> dict[str, Any]:
        task, events = await node.task_with_events(task_id)
        return {**task.to_json(), "events": [e.to_json() for e in events]}

    @app.post("/api/v1/tasks/{task_id}/{action}")
    async def task_action(task_id: str, action: str) -> dict[str, Any]:
        if action not in TASK_ACTIONS:
            raise HTTPException(404, f"unknown action {action!r}; use {', '.join(TASK_ACTIONS)}")
        task = await node.task_action(task_id, action)
        return task.to_json()

    # --- seed routes (Appendix A) ------------------------------------------------------------
    @app.post("/api/v1/NetworkTestRoute")
    async def network_test_route(request: Request) -> dict[str, Any]:
        raw = await request.body()
        try:
            data = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise errors.InvalidRequest(f"malformed JSON: {exc}") from exc
        try:
            body = NetworkTestRequest.model_validate(data)
        except Exception as exc:
            raise errors.InvalidRequest(str(exc).replace("\n", " ")) from exc
        pipeline_id, task_id = await node.network_test(body, request.state.publisher)
        return {"pipeline_id": pipeline_id, "task_id": task_id}

    @app.get("/api/v1/WorkerTaskListRoute")
    async def worker_task_list(pipeline_id: str | None = None) -> dict[str, Any]:
        rows = await node.list_tasks(pipeline_id, None, None, 10_000)
        return {"tasks": [t.to_json() for t in rows]}

    # --- node --------------------------------------------------------------------------------
    @app.get("/api/v1/status")
    async def status() -> dict[str, Any]:
        return await node.status()

    @app.get("/api/v1/nodes")
    async def nodes() -> dict[str, Any]:
        return {"nodes": [n.to_json() for n in await node.nodes()]}

    @app.get("/api/v1/restart-log")
    async def restart_log(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
        return {"entries": [e.to_json() for e in await node.restart_log(limit)]}

    @app.get("/api/v1/changes")
    async def changes(
        after: Annotated[int, Query(ge=0)] = 0,
        timeout: Annotated[float, Query(ge=0, le=60)] = 25.0,
    ) -> dict[str, Any]:
        """Long-poll: returns when anything changed after version `after`."""
        version = await node.changes.wait(after, timeout)
        return {"version": version}

    from fredica.web import routes as web_routes  # the UI sits above the API

    web_routes.mount(app, node)
    return app
