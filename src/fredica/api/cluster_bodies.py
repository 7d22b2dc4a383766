"""The request bodies of the cluster endpoints (`api.routes_cluster`) as pydantic models, so the
OpenAPI schema says what a peer sends and a malformed body is refused at the edge with a 422
naming the field.

They describe the wire format that `cluster.protocol` and `cluster.remote` write, without
changing it: every field a peer sends today is declared, fields not declared are kept (a newer
peer may send more), and the route hands the node's `PeerDesk` the same JSON object it received
(`as_json`: only the fields the peer sent, extras included). Numbers are bounded to what the
store can hold; times are finite epoch seconds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field

from fredica.domain.models import JSON, ErrorType

MAX_INT = 2**62  # the largest integer a store column takes with room to spare
MAX_EPOCH = 1e11  # seconds; a wall-clock time after this is not a time

Id = Annotated[str, Field(min_length=1, max_length=200)]
Attempt = Annotated[int, Field(ge=0, le=MAX_INT)]
Count = Annotated[int, Field(ge=0, le=MAX_INT)]
Epoch = Annotated[float, Field(ge=0, le=MAX_EPOCH, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=MAX_EPOCH, allow_inf_nan=False)]


class Body(BaseModel):
    """A peer's JSON object: declared fields are checked, others are kept."""

    model_config = ConfigDict(extra="allow")

    def as_json(self) -> JSON:
        """The object as the peer sent it (after validation), for `PeerDesk`."""
        return self.model_dump(mode="json", exclude_unset=True)


class ClaimFilterBody(Body):
    """Which tasks a peer may claim (`protocol.filter_to_json`)."""

    limit: Annotated[int, Field(ge=1, le=1000)]
    types: list[str] | None = None
    start: bool = False
    pausable: dict[str, bool] = Field(default_factory=dict)
    cloud_only_types: list[str] | None = None
    local_only_types: list[str] | None = None
    deferred_types: list[str] = Field(default_factory=list)
    defer_wait: Seconds | None = None
    soft_elsewhere: list[str] = Field(default_factory=list)
    soft_wait: Seconds = 0.0


class Introduce(Body):
    """A peer introduces itself (`membership`)."""

    node_id: Id | None = None
    address: Annotated[str, Field(pattern=r"^https?://\S+$", max_length=500)]
    #: the peer's process (the same node id with another instance: a copied data dir)
    instance: Annotated[str, Field(max_length=100)] | None = None


class NodeReport(Body):
    """What a claimer says about itself in a heartbeat (`Node.peer_info`); every field is
    optional, and the load fields the node registry keeps are typed."""

    node_id: Id | None = None
    hostname: str | None = None
    address: str | None = None
    status: str | None = None
    max_workers: Count | None = None
    running: Count | None = None
    free_slots: Count | None = None
    task_types: list[str] | None = None
    scores: dict[str, float] | None = None
    outbox: Count | None = None
    cpu_count: Count | None = None
    load: list[float] | None = None
    mem_total: Count | None = None
    mem_available: Count | None = None
    disk_free: Count | None = None
    disk_total: Count | None = None
    capabilities: list[dict[str, Any]] | None = None


class Heartbeat(Body):
    node_id: Id
    tasks: list[tuple[Id, Attempt]] = Field(default_factory=list)
    node: NodeReport | None = None


class Claim(Body):
    node_id: Id
    filter: ClaimFilterBody
    request_id: str | None = None


class NodeOnly(Body):
    node_id: Id


class Wake(Body):
    node_id: str | None = None


class Signal(Body):
    task_id: Id
    action: Literal["cancel", "pause", "resume"]


class Control(Body):
    """A user's action on a task or a pipeline of the owner, forwarded by another node."""

    task_id: Id | None = None
    pipeline_id: Id | None = None
    action: Literal["cancel", "pause", "resume", "retry", "skip", "delete"]


# --- reports (`/cluster/tasks/report`, one model per `op`) --------------------------------------


class BackendNote(Body):
    backend: str
    message: str
    chosen_at: Epoch


class Attempted(Body):
    """Names one attempt of one task: what every report is fenced by."""

    task_id: Id
    attempt: Attempt


class CompletionBody(Attempted):
    result: dict[str, Any]
    message: str | None = None
    backend: BackendNote | None = None
    started_at: Epoch | None = None


class StartBody(Attempted):
    started_at: Epoch


class FailureBody(Attempted):
    error: str
    error_type: ErrorType
    retry_after_sec: Seconds | None = None
    backend: BackendNote | None = None
    started_at: Epoch | None = None


class TaskReport(Attempted):
    node_id: Id


class StartReport(TaskReport):
    op: Literal["start"]


class ReleaseReport(TaskReport):
    op: Literal["release"]
    reason: Annotated[str, Field(min_length=1)]


class PausedReport(TaskReport):
    op: Literal["paused"]
    paused: bool = False
    reason: str | None = None


class ProgressReport(Body):
    op: Literal["progress"]
    node_id: Id
    #: `[task_id, attempt, percent, note]` per task
    updates: list[tuple[Id, Attempt, Annotated[int, Field(ge=0, le=100)], str | None]]


class EventReport(Body):
    op: Literal["event"]
    node_id: Id
    task_id: Id
    event_type: Annotated[str, Field(min_length=1)]
    message: str | None = None


class CompleteReport(Body):
    op: Literal["complete"]
    node_id: Id
    items: list[CompletionBody]
    starts: list[StartBody] = Field(default_factory=list)
    claim: ClaimFilterBody | None = None
    request_id: str | None = None


class FailReport(Body):
    op: Literal["fail"]
    node_id: Id
    failure: FailureBody


Report = Annotated[
    StartReport
    | ReleaseReport
    | PausedReport
    | ProgressReport
    | EventReport
    | CompleteReport
    | FailReport,
    Discriminator("op"),  # an unknown op: 422 naming it and the ops there are
]


class Adopt(Body):
    """A pipeline handed off to this node: its rows and events (`cluster.protocol`'s
    transfer), the owner epoch it is adopted at, and the node handing it off."""

    transfer: dict[str, Any]
    epoch: Annotated[int, Field(ge=1, le=MAX_INT)]
    previous: Id


class MovedPipeline(Body):
    id: Id
    epoch: Annotated[int, Field(ge=1, le=MAX_INT)]
    tasks: list[Id]


class OwnerChanged(Body):
    """A node says it owns these pipelines now (after a takeover)."""

    owner: Id
    previous: Id
    pipelines: list[MovedPipeline]
