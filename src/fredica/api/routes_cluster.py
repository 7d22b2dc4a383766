"""The cluster endpoints (DESIGN §6), for peers only: every path here is guarded by the
`X-Cluster-Secret` header (see `api.app.require_token`), never by a publisher token.

Bodies are JSON objects; the values inside are the store contract's (`cluster.protocol`). Each
route calls one use case of the node's `PeerDesk` (`node.peers`), and errors answer through the
one error table, so the peer's client raises the same exception class again.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query

from fredica.api import deps
from fredica.domain import errors
from fredica.domain.models import JSON

router = APIRouter(prefix="/cluster", tags=["cluster"])

JsonBody = Annotated[dict[str, Any], Body()]


@router.get("/info")
async def info(node: deps.NodeDep) -> JSON:
    """Who this node is: id, address, version, slots, load, task types, capabilities."""
    return node.peers.info()


@router.get("/peers")
async def peers(node: deps.NodeDep) -> JSON:
    """The nodes this node knows, with their addresses (peer exchange)."""
    return await node.peers.peers()


@router.post("/peers")
async def introduce(body: JsonBody, node: deps.NodeDep) -> JSON:
    """A peer introduces itself (`node_id`, `address`) and asks whom this node knows."""
    address = body.get("address")
    if not isinstance(address, str) or not address.startswith(("http://", "https://")):
        raise errors.InvalidRequest("address must be the peer's http(s):// URL")
    node.peers.introduce(address, body.get("node_id"), body.get("instance"))
    return await node.peers.peers()


@router.post("/heartbeat")
async def heartbeat(body: JsonBody, node: deps.NodeDep) -> JSON:
    """A claimer's heartbeat for the tasks of this owner it runs, with its load; answered with
    `task_status_feedback` (a task it lost, or must cancel)."""
    node_id = body.get("node_id")
    if not isinstance(node_id, str) or not node_id:
        raise errors.InvalidRequest("node_id must be the sending node's id")
    return await node.peers.heartbeat(node_id, body.get("tasks", []), body.get("node"))


@router.post("/tasks/claim")
async def claim(body: JsonBody, node: deps.NodeDep) -> JSON:
    """Claim ready tasks of this owner for the node `node_id` (compare-and-set here)."""
    node_id = body.get("node_id")
    if not isinstance(node_id, str) or not node_id:
        raise errors.InvalidRequest("node_id must be the claiming node's id")
    flt = body.get("filter")
    if not isinstance(flt, dict):
        raise errors.InvalidRequest("filter must be an object")
    request_id = body.get("request_id")
    return await node.peers.claim(
        node_id, flt, request_id if isinstance(request_id, str) and request_id else None
    )


@router.post("/tasks/report")
async def report(body: JsonBody, node: deps.NodeDep) -> JSON:
    """A claimer's report on a task of this owner: start, progress, event, paused, complete,
    fail or release, fenced by `(task_id, attempt)` and the claimer."""
    return await node.peers.report(body)


@router.post("/tasks/verify")
async def verify(body: JsonBody, node: deps.NodeDep) -> JSON:
    """A claimer restarted: settle what it held here (none of it resumes; it is requeued or
    failed by the retry rules), before it claims again."""
    node_id = body.get("node_id")
    if not isinstance(node_id, str) or not node_id:
        raise errors.InvalidRequest("node_id must be the restarted node's id")
    return await node.peers.verify(node_id)


@router.get("/tasks/get")
async def get_task(
    node: deps.NodeDep,
    task_id: Annotated[str, Query(min_length=1)],
    events: Annotated[bool, Query()] = False,
) -> JSON:
    """One task of this owner as it stands (with its events if asked)."""
    return await node.peers.get_task(task_id, events)


@router.post("/control")
async def control(body: JsonBody, node: deps.NodeDep) -> JSON:
    """A user's action on a task (`task_id`: cancel, pause, resume, retry, skip) or a pipeline
    (`pipeline_id`: cancel, retry, delete) of this owner, forwarded by the node the user asked."""
    return await node.control_for_peer(body)


@router.get("/tasks/diff")
async def diff(
    node: deps.NodeDep,
    since: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> JSON:
    """This owner's tasks and pipelines changed after the cursor `since` (0: all), whole
    transactions at a time, and the cursor to continue from (replication pull)."""
    return await node.peers.diff(since, limit)


@router.get("/digest")
async def digest(node: deps.NodeDep, owner: Annotated[str, Query(min_length=1)]) -> JSON:
    """sha256 of `owner`'s rows as (id, change_seq), from this node's own rows if it is the
    owner, else from its replica: equal on every node that is up to date."""
    return await node.peers.digest(owner)


@router.post("/tasks/signal")
async def signal(body: JsonBody, node: deps.NodeDep) -> JSON:
    """The owner forwards a cancel, pause or resume of a task running on this node."""
    return await node.peers.signal(body)


@router.post("/wake")
async def wake(node: deps.NodeDep, body: Annotated[dict[str, Any] | None, Body()] = None) -> JSON:
    """A peer (`node_id`) changed its rows: claim now if work became ready, and read its
    changes."""
    sender = (body or {}).get("node_id")
    node.peers.wake(sender if isinstance(sender, str) else None)
    return {"ok": True}
