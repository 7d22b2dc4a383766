"""Pipelines: create (from a template or explicit tasks), list, show, cancel, retry, delete; the
templates;
and the seed's `NetworkTestRoute` (Appendix A), which creates a network-test pipeline."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pydantic
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from fredica.api import deps, history, routes_tasks
from fredica.api.routes_tasks import CURSOR_HELP, OFFSET_HELP
from fredica.domain import errors
from fredica.domain.history import ListFilter
from fredica.pipelines.request import NetworkTestRequest, PipelineRequest

MAX_OFFSET = 1_000_000_000  # deeper pages answer 422 instead of overflowing the database
router = APIRouter()


@router.post("/api/v1/pipelines", status_code=201)
async def create_pipeline(
    body: PipelineRequest, node: deps.NodeDep, publisher: deps.PublisherDep
) -> JSONResponse:
    """Create a pipeline from a template (`custom`: the tasks listed in the body). 201 with the
    new pipeline; 200 with `deduplicated: true` when an active identical one exists; 422 naming
    what is wrong (an unknown type, a capability no node has, a bad parameter)."""
    pipeline, deduplicated = await node.create_pipeline(body, publisher)
    return JSONResponse(
        status_code=200 if deduplicated else 201,
        content={
            "pipeline_id": pipeline.id,
            "deduplicated": deduplicated,
            "status": pipeline.status.value,
            "tasks": pipeline.params.get("refs", {}),
        },
    )


@router.get("/api/v1/pipelines")
async def list_pipelines(
    node: deps.NodeDep,
    status: Annotated[str | None, Query(description="Only pipelines in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Rows per page.")] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description=OFFSET_HELP)] = 0,
    cursor: Annotated[str | None, Query(description=CURSOR_HELP)] = None,
    scope: Annotated[routes_tasks.Scope, Query(description=routes_tasks.SCOPE_HELP)] = "local",
    where: Annotated[ListFilter, Depends(history.history_filter)] = history.NO_FILTER,
) -> dict[str, Any]:
    """Pipelines, newest first (`created_at`, then id), searched and filtered (the history).
    `next_cursor` continues the list with the same filters (null on its last page); a
    malformed cursor or time answers 422."""
    if scope == "cluster":
        routes_tasks.check_cluster_page(limit, offset, cursor)
        pipelines = await node.cluster_pipelines(status, limit, offset, where)
        return {"pipelines": await routes_tasks.marked(node, pipelines), "next_cursor": None}
    page = await node.page_pipelines(status, limit, cursor, offset, where)
    return {"pipelines": [p.to_json() for p in page.items], "next_cursor": page.next_cursor}


@router.get("/api/v1/pipelines/{pipeline_id}")
async def get_pipeline(pipeline_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """One pipeline with all its tasks (this node's own, or its replica of another owner's,
    marked with the replica's freshness)."""
    pipeline, tasks = await node.pipeline_with_tasks(pipeline_id)
    marks = await routes_tasks.marked(node, [pipeline, *tasks])
    return {**marks[0], "tasks": marks[1:]}


@router.post("/api/v1/pipelines/{pipeline_id}/cancel", status_code=202)
async def cancel_pipeline(pipeline_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """Cancel: tasks not running end at once, running ones are stopped; the pipeline is
    `cancelling` until every task is terminal. 409 if it already ended."""
    return (await node.cancel_pipeline(pipeline_id)).to_json()


@router.post("/api/v1/pipelines/{pipeline_id}/retry")
async def retry_pipeline(pipeline_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """Every failed or cancelled task back to pending in one step (their dependents cancelled
    because of them run again too). 409 if there is nothing to retry."""
    pipeline, retried = await node.retry_pipeline(pipeline_id)
    return {**pipeline.to_json(), "retried": retried}


@router.delete("/api/v1/pipelines/{pipeline_id}")
async def delete_pipeline(pipeline_id: str, node: deps.NodeDep) -> dict[str, Any]:
    """Delete a finished pipeline: its tasks, their events, result files and logs. 409 naming
    how many tasks are still active (cancel it first)."""
    removed = await node.delete_pipeline(pipeline_id)
    return {"pipeline_id": pipeline_id, "deleted": True, "deleted_tasks": len(removed)}


@router.get("/api/v1/templates")
async def templates(node: deps.NodeDep) -> dict[str, Any]:
    """The pipeline templates this node can build, with their descriptions and parameters."""
    return {
        "templates": [
            {"name": name, "description": description}
            for name, description in node.template_descriptions().items()
        ],
        "task_types": sorted(node.known_task_types()),
    }


@router.post("/api/v1/NetworkTestRoute")
async def network_test_route(
    request: Request, node: deps.NodeDep, publisher: deps.PublisherDep
) -> dict[str, Any]:
    """Start a network test: a `network_test` pipeline of one task that measures HTTP latency
    from this node to each of `urls` (an empty body tests the defaults). Answers the pipeline
    and task ids; the task's result holds the latencies."""
    body = _network_test_body(await request.body())
    pipeline_id, task_id = await node.network_test(body, publisher)
    return {"pipeline_id": pipeline_id, "task_id": task_id}


def _network_test_body(raw: bytes) -> NetworkTestRequest:
    """The seed's route accepts an empty body (every default); bad JSON is a 422 like the rest
    of its validation, as the seed's clients expect."""
    try:
        data = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise errors.InvalidRequest(f"malformed JSON: {exc}") from exc
    try:
        return NetworkTestRequest.model_validate(data)
    except pydantic.ValidationError as exc:
        raise errors.InvalidRequest(str(exc).replace("\n", " ")) from exc
