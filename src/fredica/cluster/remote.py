"""The remote owner: the part of the owner-store contract a worker uses, executed by another
node over HTTP (DESIGN §4.1, §4.14 b). Every transition is the owner's compare-and-set; this
client only carries it. An owner's refusal comes back as the same exception class it raised
there (`domain.error_table`); an owner that cannot be reached is a `StoreError`, exactly like a
local database that is down, so the engine's handling (keep the batch, try again) is the same.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from fredica.cluster import protocol
from fredica.domain import errors
from fredica.domain.clock import boottime
from fredica.domain.error_table import raise_for
from fredica.domain.models import JSON, Task
from fredica.domain.wire import task_from_json
from fredica.store.base import (
    ChangeBatch,
    ClaimFilter,
    Completed,
    CompletionItem,
    Failure,
    HeartbeatFeedback,
    StartItem,
)

logger = logging.getLogger(__name__)

SECRET_HEADER = "X-Cluster-Secret"


class RemoteOwner:
    """The store of the node `node_id` at `address`, as its peers reach it."""

    def __init__(self, node_id: str, address: str, secret: str, client: httpx.AsyncClient) -> None:
        self.node_id = node_id
        self.address = address.rstrip("/")
        self._secret = secret
        self._client = client
        #: when (`clock.boottime`) the owner last answered a request, whatever the answer:
        #: a takeover checks it last (an owner that answers is not silent)
        self.answered_at: float | None = None

    def __repr__(self) -> str:
        return f"RemoteOwner({self.node_id} at {self.address})"

    async def call(
        self,
        method: str,
        path: str,
        body: JSON | None = None,
        timeout: float | None = None,
        **params: Any,
    ) -> Any:
        """One request; the owner's error answer raised again, a transport failure as
        `StoreError` naming the owner. `timeout` (seconds) replaces the client's for this
        request only."""
        try:
            response = await self._client.request(
                method,
                self.address + path,
                json=body,
                params=params or None,
                headers={SECRET_HEADER: self._secret},
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            raise errors.StoreError(
                f"owner {self.node_id} at {self.address} unreachable: {type(exc).__name__}"
                f" {exc}".rstrip()
            ) from None
        self.answered_at = boottime()
        if response.status_code >= 400:
            code, message = _error_of(response)
            if response.status_code >= 500 and not code:
                raise errors.StoreError(
                    f"owner {self.node_id} answered HTTP {response.status_code}: {message}"
                )
            raise_for(response.status_code, code, f"owner {self.node_id}: {message}")
        return response.json()

    # --- claims ---------------------------------------------------------------------------
    async def claim(self, flt: ClaimFilter, node_id: str) -> list[Task]:
        """Claim at the owner. A claim whose answer was lost in transport is sent once more
        with the same request id, and the owner answers it with the same tasks (else they
        would stay claimed in this node's name until the owner reclaims them)."""
        body = {
            "node_id": node_id,
            "filter": protocol.filter_to_json(flt),
            "request_id": uuid.uuid4().hex,
        }
        try:
            answer = await self.call("POST", "/cluster/tasks/claim", body)
        except errors.StoreError:
            answer = await self.call("POST", "/cluster/tasks/claim", body)
        return protocol.tasks_from_json(answer["tasks"])

    # --- reports --------------------------------------------------------------------------
    async def _report(self, op: str, node_id: str, **fields: Any) -> Any:
        return await self.call(
            "POST", "/cluster/tasks/report", {"op": op, "node_id": node_id, **fields}
        )

    async def start(self, task_id: str, attempt: int, node_id: str) -> Task:
        answer = await self._report("start", node_id, task_id=task_id, attempt=attempt)
        return task_from_json(answer["task"])

    async def release(self, task_id: str, attempt: int, reason: str, node_id: str) -> Task:
        answer = await self._report(
            "release", node_id, task_id=task_id, attempt=attempt, reason=reason
        )
        return task_from_json(answer["task"])

    async def set_paused(
        self, task_id: str, attempt: int, paused: bool, reason: str | None, node_id: str
    ) -> Task:
        answer = await self._report(
            "paused", node_id, task_id=task_id, attempt=attempt, paused=paused, reason=reason
        )
        return task_from_json(answer["task"])

    async def progress(
        self, updates: Sequence[tuple[str, int, int, str | None]], node_id: str
    ) -> None:
        await self._report("progress", node_id, updates=[list(u) for u in updates])

    async def record_event(
        self, task_id: str, event_type: str, message: str | None, node_id: str
    ) -> None:
        await self._report(
            "event", node_id, task_id=task_id, event_type=event_type, message=message
        )

    async def complete(
        self, items: Sequence[CompletionItem], starts: Sequence[StartItem], node_id: str
    ) -> list[Completed | errors.FredicaError]:
        return (await self.complete_and_claim(items, starts, node_id, None))[0]

    async def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        starts: Sequence[StartItem],
        node_id: str,
        claim: ClaimFilter | None,
    ) -> tuple[list[Completed | errors.FredicaError], list[Task]]:
        """The owner's group commit in one round trip: record the starts, accept the
        completions, then claim for `claim` (None: claim nothing). Sent once more with the same
        request id if the answer is lost (see `claim`)."""
        fields = {
            "items": [protocol.completion_to_json(i) for i in items],
            "starts": [protocol.start_to_json(s) for s in starts],
            "claim": None if claim is None else protocol.filter_to_json(claim),
            "request_id": uuid.uuid4().hex,
        }
        try:
            answer = await self._report("complete", node_id, **fields)
        except errors.StoreError:
            answer = await self._report("complete", node_id, **fields)
        outcomes = [protocol.outcome_from_json(d) for d in answer["outcomes"]]
        return outcomes, protocol.tasks_from_json(answer.get("tasks", []))

    async def fail(self, failure: Failure, node_id: str) -> Task:
        answer = await self._report("fail", node_id, failure=protocol.failure_to_json(failure))
        return task_from_json(answer["task"])

    async def heartbeat(
        self, tasks: Sequence[tuple[str, int]], node_id: str, node: JSON | None = None
    ) -> list[HeartbeatFeedback]:
        body = {"node_id": node_id, "tasks": [list(t) for t in tasks], "node": node}
        answer = await self.call("POST", "/cluster/heartbeat", body)
        return [protocol.feedback_from_json(d) for d in answer["task_status_feedback"]]

    async def get_task(self, task_id: str) -> Task:
        answer = await self.call("GET", "/cluster/tasks/get", task_id=task_id)
        return task_from_json(answer["task"])

    async def verify(self, node_id: str) -> JSON:
        """Tell the owner this node restarted: what it held there was interrupted (DESIGN
        §4.6); the owner requeues or fails it by its retry rules and says which."""
        answer = await self.call("POST", "/cluster/tasks/verify", {"node_id": node_id})
        assert isinstance(answer, dict)
        return answer

    # --- replication ------------------------------------------------------------------------
    async def diff(self, since: int, limit: int = 500) -> ChangeBatch:
        """The owner's rows changed after `since`, and the cursor to go on from."""
        answer = await self.call("GET", "/cluster/tasks/diff", since=since, limit=limit)
        return protocol.decode("diff", protocol.batch_from_json, answer)

    async def digest(self, owner_id: str) -> str:
        answer = await self.call("GET", "/cluster/digest", owner=owner_id)
        return str(answer["digest"])

    # --- membership -------------------------------------------------------------------------
    async def info(self, timeout: float | None = None) -> JSON:
        answer = await self.call("GET", "/cluster/info", timeout=timeout)
        assert isinstance(answer, dict)
        return answer


def _error_of(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
    except ValueError:
        return "", response.text[:200] or response.reason_phrase
    if not isinstance(body, dict):
        return "", str(body)[:200]
    return str(body.get("code") or ""), str(body.get("error") or body.get("detail") or "")
