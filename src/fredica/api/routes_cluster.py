"""The cluster endpoints (DESIGN §6), for peers only: every path here is guarded by the
`X-Cluster-Secret` header (see `api.app.require_token`), never by a publisher token.

Bodies are JSON objects; the values inside are the store contract's (`cluster.protocol`),
declared and checked by the models of `api.cluster_bodies` (a malformed body is a 422 naming the
field). Each route calls one use case of the node's `PeerDesk` (`node.peers`) with the object
the peer sent, and errors answer through the one error table, so the peer's client raises the
same exception class again.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query

from fredica.api import cluster_bodies as bodies
from fredica.api import deps
from fredica.domain import errors
from fredica.domain.models import JSON
from fredica.node import ownership

router = APIRouter(prefix="/cluster", tags=["cluster"])


@router.get("/info")
async def info(node: deps.NodeDep) -> JSON:
    """Who this node is: id, address, version, slots, load, task types, capabilities."""
    return node.peers.info()


@router.get("/peers")
async def peers(node: deps.NodeDep) -> JSON:
    """The nodes this node knows, with their addresses (peer exchange)."""
    return await node.peers.peers()


@router.post("/peers")
async def introduce(body: bodies.Introduce, node: deps.NodeDep) -> JSON:
    """A peer introduces itself (`node_id`, `address`) and asks whom this node knows."""
    node.peers.introduce(body.address, body.node_id, body.instance)
    return await node.peers.peers()


@router.post("/heartbeat")
async def heartbeat(body: bodies.Heartbeat, node: deps.NodeDep) -> JSON:
    """A claimer's heartbeat for the tasks of this owner it runs, with its load; answered with
    `task_status_feedback` (a task it lost, or must cancel)."""
    sent = body.as_json()
    return await node.peers.heartbeat(body.node_id, sent.get("tasks", []), sent.get("node"))


@router.post("/tasks/claim")
async def claim(body: bodies.Claim, node: deps.NodeDep) -> JSON:
    """Claim ready tasks of this owner for the node `node_id` (compare-and-set here)."""
    return await node.peers.claim(body.node_id, body.filter.as_json(), body.request_id or None)


@router.post("/tasks/report")
async def report(body: Annotated[bodies.Report, Body()], node: deps.NodeDep) -> JSON:
    """A claimer's report on a task of this owner: start, progress, event, paused, complete,
    fail or release (`op`), fenced by `(task_id, attempt)` and the claimer."""
    return await node.peers.report(body.as_json())


@router.post("/tasks/verify")
async def verify(body: bodies.NodeOnly, node: deps.NodeDep) -> JSON:
    """A claimer restarted: settle what it held here (none of it resumes; it is requeued or
    failed by the retry rules), before it claims again."""
    return await node.peers.verify(body.node_id)


@router.get("/tasks/get")
async def get_task(
    node: deps.NodeDep,
    task_id: Annotated[str, Query(min_length=1)],
    events: Annotated[bool, Query()] = False,
) -> JSON:
    """One task of this owner as it stands (with its events if asked)."""
    return await node.peers.get_task(task_id, events)


@router.get("/tasks/log")
async def task_log(
    node: deps.NodeDep,
    task_id: Annotated[str, Query(min_length=1, max_length=200)],
    attempt: Annotated[int | None, Query(ge=1, le=10**9)] = None,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> JSON:
    """The logs of any owner's task that this node holds (it ran those attempts): the
    attempts logged here and the text of `attempt` (default: the latest here) from `offset`,
    or `log: null` (`node.cluster_reads`)."""
    return await node.task_log_here(task_id, attempt, offset)


@router.post("/control")
async def control(body: bodies.Control, node: deps.NodeDep) -> JSON:
    """A user's action on a task (`task_id`: cancel, pause, resume, retry, skip) or a pipeline
    (`pipeline_id`: cancel, retry, delete) of this owner, forwarded by the node the user asked."""
    return await node.control_for_peer(body.as_json())


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
async def signal(body: bodies.Signal, node: deps.NodeDep) -> JSON:
    """The owner forwards a cancel, pause or resume of a task running on this node."""
    return await node.peers.signal(body.as_json())


@router.post("/wake")
async def wake(node: deps.NodeDep, body: Annotated[bodies.Wake | None, Body()] = None) -> JSON:
    """A peer (`node_id`) changed its rows: claim now if work became ready, and read its
    changes."""
    node.peers.wake(body.node_id if body else None)
    return {"ok": True}


# --- ownership that moves (DESIGN §4.11) --------------------------------------------------------
def _ownership(node: deps.NodeDep) -> ownership.Ownership:
    if node.ownership is None:
        raise errors.Conflict("this node keeps no home-cluster ownership (a shared store)")
    return node.ownership


@router.get("/owner-view")
async def owner_view(node: deps.NodeDep) -> JSON:
    """Per owner this node keeps a replica of: the replica's cursor and how long the owner
    has been silent here (asked by a would-be successor before a takeover)."""
    return await _ownership(node).owner_view()


@router.get("/claims")
async def claims(node: deps.NodeDep, owner: Annotated[str, Query(min_length=1)]) -> JSON:
    """What this node runs or ran of `owner`'s tasks: the claims it holds there and the
    reports it sent lately or keeps in its outbox (asked by a node taking `owner` over)."""
    return await _ownership(node).claims_view(owner)


@router.get("/owners")
async def owners(node: deps.NodeDep, created_by: Annotated[str, Query(min_length=1)]) -> JSON:
    """The pipelines `created_by` made that another node owns now (id, owner, epoch), as far
    as this node knows: an old owner asks this before it acts again."""
    return await _ownership(node).moved_for(created_by)


@router.get("/pipelines/transfer")
async def pipeline_transfer(node: deps.NodeDep, id: Annotated[str, Query(min_length=1)]) -> JSON:
    """A pipeline as this node holds it (its own rows, else its replica), with its tasks."""
    return await _ownership(node).transfer_for(id)


@router.post("/adopt")
async def adopt(body: bodies.Adopt, node: deps.NodeDep) -> JSON:
    """A peer hands this node one of its pipelines (`transfer`) at owner `epoch`; the answer
    carries the rows as adopted."""
    return await _ownership(node).adopt(body.as_json())


@router.post("/owner")
async def owner_changed(body: bodies.OwnerChanged, node: deps.NodeDep) -> JSON:
    """A peer took these pipelines over: reports of their tasks go to it from now on."""
    return await _ownership(node).learn(body.as_json())
