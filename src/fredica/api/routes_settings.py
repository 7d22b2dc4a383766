"""The settings page (`/api/v1/settings`) and the charts' series (`/api/v1/stats/timeseries`).

Reading and changing the settings needs the `admin` permission in token mode (`fredica token
create --admin`); in open mode anyone who reaches the API may, as with every other route.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from fredica.api import deps
from fredica.domain import errors, timeseries

router = APIRouter()


def require_admin(node: deps.NodeDep, publisher: deps.PublisherDep) -> None:
    """In token mode only a token with the `admin` permission reaches the settings."""
    if node.auth.enabled and (publisher is None or not publisher.permissions.admin):
        who = publisher.token_id if publisher is not None else "this request"
        raise errors.Forbidden(
            f"token {who} may not read or change the settings: it needs the admin permission "
            "(fredica token create --admin)"
        )


AdminDep = Annotated[None, Depends(require_admin)]


class SettingsChange(BaseModel):
    """Dotted worker.yaml keys and their new values, e.g. `{"node.max_workers": 4}`. A secret
    sent back as its masked text stays as it is."""

    model_config = ConfigDict(extra="forbid")

    changes: dict[str, Any] = Field(
        description="Keys of GET /api/v1/settings and their new values."
    )


@router.get("/api/v1/settings")
async def get_settings(node: deps.NodeDep, _: AdminDep) -> dict[str, Any]:
    """The common worker.yaml keys with their values (secrets masked), how the page edits
    each, and which changes wait for a restart (`pending_restart`)."""
    return await node.settings_desk.view()


@router.put("/api/v1/settings")
async def put_settings(body: SettingsChange, node: deps.NodeDep, _: AdminDep) -> dict[str, Any]:
    """Change keys in worker.yaml with the validation of `fredica config check`, keeping the
    file's comments. An unknown key or a refused value answers 422 naming the key, and the file
    is left as it was. `restart_required` lists the changes the node applies after a restart."""
    return await node.settings_desk.update(body.changes)


@router.get("/api/v1/stats/timeseries")
async def stats_timeseries(
    node: deps.NodeDep,
    window: Annotated[str, Query(description="How far back: 15m, 1h, 24h, 7d.")] = "1h",
    buckets: Annotated[
        int | None, Query(ge=1, le=timeseries.MAX_BUCKETS, description="Points per series.")
    ] = None,
) -> dict[str, Any]:
    """Throughput (tasks completed per minute), queue depth (pending tasks), running tasks and
    the mean duration per task type, per bucket of the window, from the task events of the
    tasks this node owns."""
    try:
        seconds = timeseries.parse_window(window)
    except ValueError as exc:
        raise errors.InvalidRequest(str(exc)) from None
    return await node.stats.timeseries(seconds, timeseries.bucket_count(seconds, buckets))
