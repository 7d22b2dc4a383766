"""The use cases of the cluster endpoints (`/cluster/...`, DESIGN §6): what this node does for
its peers as the owner of its rows, and as the claimer of theirs.

As owner it executes their claims and reports on its own store, each a compare-and-set in the
claimer's name (`node_id`), so a peer's report is fenced exactly like a local one. As claimer
it takes the signals an owner forwards (cancel, pause, resume of a task running here).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from fredica import __version__
from fredica.cluster import protocol
from fredica.cluster.router import Authority
from fredica.domain import errors
from fredica.domain.models import JSON, TaskStatus
from fredica.domain.node_state import REPORTED_INFO
from fredica.engine.worker import WorkerEngine
from fredica.store.base import Completed, NodeRecord, TaskStore

logger = logging.getLogger(__name__)

ANSWER_TTL = 120.0  # seconds a claim's answer is kept for a repeat of its request
MAX_ANSWERS = 1000


class PeerDesk:
    """Answers the peers (see the module docstring)."""

    def __init__(
        self,
        store: TaskStore,
        engine: WorkerEngine,
        info: Callable[[], JSON],
        changed: Callable[[str], None],
        introduce: Callable[[str], None] | None = None,
        owner_changed: Callable[[str], None] | None = None,
        copy: Callable[[str], None] | None = None,
    ) -> None:
        self._copy = copy
        self._introduce = introduce
        #: answers to claims by (claimer, request id): a repeated request gets the same answer
        self._answers: OrderedDict[tuple[str, str], tuple[float, JSON]] = OrderedDict()
        self._owner_changed = owner_changed
        self._store = store
        self._engine = engine
        self._info = info
        self._changed = changed
        #: set by the node whose pipelines can move: while it says no, peers' claims and
        #: reports wait (503), since another node may own those rows by now
        self.authority: Authority | None = None

    def _check(self, task_id: str | None = None) -> None:
        if self.authority is not None and not self.authority.may_act(task_id):
            raise errors.StoreError(
                "this node cannot confirm now that it owns these rows (out of contact with "
                "its peers, or handing them off); try again later"
            )

    async def _moved(self, task_id: str) -> str | None:
        """The owner a task this node no longer owns moved to (None: not moved)."""
        replica = await self._store.replica_task(task_id)
        if replica is not None and replica.owner_id != self._store.node_id:
            return replica.owner_id
        return None

    async def _raise_if_moved(self, task_id: str) -> None:
        owner = await self._moved(task_id)
        if owner is not None:
            raise errors.OwnerMoved(f"task {task_id} is owned by node {owner} now")

    def info(self) -> JSON:
        return {**self._info(), "version": __version__}

    async def peers(self) -> JSON:
        nodes = await self._store.list_nodes()
        return {
            "peers": [
                {"node_id": n.id, "address": n.address, "status": n.status}
                for n in nodes
                if n.address
            ]
        }

    def introduce(self, address: str, node_id: Any = None, instance: Any = None) -> None:
        """A peer told us its address: membership will ask it who it is. A peer with this
        node's id but another process is a copy of this node's data dir: refused (409)."""
        me = self._info()
        if node_id == me.get("node_id") and instance not in (None, me.get("instance")):
            if self._copy is not None:
                self._copy(address)
            raise errors.Conflict(
                f"node id {node_id} is this node's (at {me.get('address')}): your data dir is a "
                "copy of its data dir; start with a fresh data dir (or remove node.id from "
                "worker.yaml)"
            )
        if self._introduce is not None:
            self._introduce(address)

    async def claim(self, node_id: str, body: JSON, request_id: str | None = None) -> JSON:
        """Claim for `node_id` (once per `request_id`, see `_once`)."""
        return await self._once(node_id, request_id, lambda: self._claim(node_id, body))

    async def _claim(self, node_id: str, body: JSON) -> JSON:
        self._check()
        flt = protocol.decode("claim filter", protocol.filter_from_json, body)
        if flt.limit < 1 or flt.limit > 1000:
            raise errors.InvalidRequest(f"filter.limit must be 1-1000, got {flt.limit}")
        tasks = await self._store.claim(flt, node_id)
        if tasks:
            logger.info(
                "peer %s claimed %d task(s)",
                node_id,
                len(tasks),
                extra={"action": "peer_claim"},
            )
            self._changed(tasks[0].pipeline_id or "")
        return {"tasks": [t.to_json() for t in tasks]}

    async def _once(
        self, node_id: str, request_id: Any, run: Callable[[], Awaitable[JSON]]
    ) -> JSON:
        """`run()`, unless the same request (`request_id` of `node_id`) was answered in the last
        `ANSWER_TTL` seconds: a request repeated because its answer was lost gets the same
        answer instead of a second claim."""
        key = (node_id, request_id) if isinstance(request_id, str) and request_id else None
        kept = self._answers.get(key) if key is not None else None
        if kept is not None and time.monotonic() - kept[0] < ANSWER_TTL:
            return kept[1]
        answer = await run()
        if key is not None:
            self._answers[key] = (time.monotonic(), answer)
            while len(self._answers) > MAX_ANSWERS:
                self._answers.popitem(last=False)
        return answer

    async def heartbeat(self, node_id: str, tasks: Any, node: Any) -> JSON:
        pairs = protocol.decode("tasks", protocol.pairs_from_json, tasks)
        if isinstance(node, dict):
            await self._record_peer(node_id, node)
        if pairs:
            self._check()
        feedback = await self._store.heartbeat(pairs, node_id) if pairs else []
        # a task that moved to another owner is not "lost": say nothing of it here
        kept = [f for f in feedback if f.still_owned or not await self._moved(f.task_id)]
        return {"task_status_feedback": [protocol.feedback_to_json(f) for f in kept]}

    async def _record_peer(self, node_id: str, node: JSON) -> None:
        """A heartbeat carries the claimer's load; keep it in the node registry."""
        known = {n.id: n for n in await self._store.list_nodes()}
        before = known.get(node_id)
        await self._store.upsert_node(
            NodeRecord(
                id=node_id,
                hostname=str(node.get("hostname") or (before.hostname if before else "")),
                capabilities=before.capabilities if before else [],
                status=str(node.get("status") or "online"),
                max_workers=int(node.get("max_workers") or (before.max_workers if before else 0)),
                last_seen_at=0.0,
                address=str(node.get("address") or (before.address if before else "")) or None,
                info={
                    **(before.info if before else {}),
                    **{k: v for k, v in node.items() if k in REPORTED_INFO},
                },
            )
        )

    async def report(self, body: JSON) -> JSON:
        """One report of a claimer: `op` names which (see `cluster.remote.RemoteOwner`). A
        report of a task that moved to another owner answers `OwnerMoved` (503): the claimer
        keeps it and sends it to the new owner."""
        try:
            return await self._report(body)
        except errors.NotFound:
            task_id = body.get("task_id") or (body.get("failure") or {}).get("task_id")
            if isinstance(task_id, str):
                await self._raise_if_moved(task_id)
            raise

    async def _report(self, body: JSON) -> JSON:
        op = body.get("op")
        node_id = _node_id(body)
        if op in ("complete", "fail", "start", "release"):
            self._check(body.get("task_id") if isinstance(body.get("task_id"), str) else None)
        if op == "complete":
            return await self._complete(node_id, body)
        if op == "progress":
            updates = protocol.decode("updates", protocol.progress_from_json, body.get("updates"))
            await self._store.progress(updates, node_id)
            return {"ok": True}
        if op == "event":
            await self._store.record_event(
                _str(body, "task_id"), _str(body, "event_type"), body.get("message"), node_id
            )
            return {"ok": True}
        if op == "fail":
            failure = protocol.decode("failure", protocol.failure_from_json, body.get("failure"))
            task = await self._store.fail(failure, node_id)
        elif op == "start":
            task = await self._store.start(_str(body, "task_id"), _int(body, "attempt"), node_id)
        elif op == "release":
            task = await self._store.release(
                _str(body, "task_id"), _int(body, "attempt"), _str(body, "reason"), node_id
            )
        elif op == "paused":
            task = await self._store.set_paused(
                _str(body, "task_id"),
                _int(body, "attempt"),
                bool(body.get("paused")),
                body.get("reason"),
                node_id,
            )
        else:
            raise errors.InvalidRequest(
                f"unknown report op {op!r}; use start, progress, event, paused, complete, fail"
                " or release"
            )
        self._changed(task.pipeline_id or "")
        return {"task": task.to_json()}

    async def _complete(self, node_id: str, body: JSON) -> JSON:
        return await self._once(
            node_id, body.get("request_id"), lambda: self._complete_now(node_id, body)
        )

    async def _complete_now(self, node_id: str, body: JSON) -> JSON:
        items = protocol.decode(
            "items", lambda v: [protocol.completion_from_json(d) for d in v], body.get("items")
        )
        starts = protocol.decode(
            "starts", lambda v: [protocol.start_from_json(d) for d in v], body.get("starts", [])
        )
        flt = None
        if body.get("claim") is not None:
            flt = protocol.decode("claim filter", protocol.filter_from_json, body["claim"])
        for item in items:
            self._check(item.task_id)
        outcomes, claimed = await self._store.complete_and_claim(items, flt, node_id, starts)
        answered: list[Completed | errors.FredicaError] = []
        for item, outcome in zip(items, outcomes, strict=True):
            if isinstance(outcome, errors.NotFound) and await self._moved(item.task_id):
                outcome = errors.OwnerMoved(f"task {item.task_id} moved to another owner")
            if isinstance(outcome, errors.IllegalTransition):
                # a completion sent again because its answer was lost: already accepted
                task = await self._store.get_task(item.task_id)
                if (
                    task.status is TaskStatus.COMPLETED
                    and task.claimed_by == node_id
                    and task.attempt == item.attempt
                ):
                    outcome = Completed(task.id, task.attempt, task.pipeline_id)
            answered.append(outcome)
        for outcome in answered:
            if isinstance(outcome, Completed):
                self._changed(outcome.pipeline_id or "")
        return {
            "outcomes": [protocol.outcome_to_json(o) for o in answered],
            "tasks": [t.to_json() for t in claimed],
        }

    async def verify(self, node_id: str) -> JSON:
        """A claimer restarted (seed 001 §7.5): what it held here did not survive, so nothing
        resumes; its claims go back by the start-up rules, as if this node had restarted them."""
        report = await self._store.recover_startup(node_id)
        tasks = report.snapshot
        if tasks:
            logger.warning(
                "peer %s restarted: %s",
                node_id,
                report.summary(),
                extra={"action": "peer_verify"},
            )
            self._changed(tasks[0].pipeline_id or "")
        return {
            "should_resume": [],
            "interrupted": [t.id for t in tasks],
            "summary": report.summary(),
        }

    async def diff(self, since: int, limit: int) -> JSON:
        batch = await self._store.changes_since(self._store.node_id, since, limit)
        return protocol.batch_to_json(batch)

    async def digest(self, owner: str) -> JSON:
        replica = owner != self._store.node_id
        return {"owner": owner, "digest": await self._store.digest(owner, replica=replica)}

    async def get_task(self, task_id: str, events: bool = False) -> JSON:
        answer: JSON = {"task": (await self._store.get_task(task_id)).to_json()}
        if events:
            answer["events"] = [e.to_json() for e in await self._store.task_events(task_id)]
        return answer

    # --- as claimer -------------------------------------------------------------------------
    def wake(self, node_id: str | None) -> None:
        """A peer (`node_id`) changed its rows: claim now if work became ready, and read its
        changes into the replica now rather than at the next refresh."""
        self._engine.wake()
        if node_id and self._owner_changed is not None:
            self._owner_changed(node_id)

    async def signal(self, body: JSON) -> JSON:
        """An owner forwards a user's cancel, pause or resume of a task running here."""
        task_id = _str(body, "task_id")
        action = body.get("action")
        if action == "cancel":
            return {"signalled": self._engine.signal_cancel(task_id, "cancelled by user")}
        if action == "pause":
            task = await self._engine.pause(task_id)
        elif action == "resume":
            task = await self._engine.resume(task_id)
        else:
            raise errors.InvalidRequest(f"unknown action {action!r}; use cancel, pause or resume")
        return {"task": task.to_json()}


def _node_id(body: JSON) -> str:
    value = body.get("node_id")
    if not isinstance(value, str) or not value:
        raise errors.InvalidRequest("node_id must be the reporting node's id")
    return value


def _str(body: JSON, key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise errors.InvalidRequest(f"{key} must be a non-empty string")
    return value


def _int(body: JSON, key: str) -> int:
    value = body.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise errors.InvalidRequest(f"{key} must be an integer")
    return value
