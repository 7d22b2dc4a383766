"""The store a worker sees in a home cluster (DESIGN §4.1, §4.14 b): its own store for the rows
it owns, and every peer's store (a `RemoteOwner`) for theirs.

A claim goes to this node's own store first, then to the peers in turn; each owner claims from
its own rows with its own compare-and-set, so no two nodes can claim one task. Every later
report of a task (start, heartbeat, progress, pause flag, event, complete, fail, release) goes
to the owner that granted the claim. With no peers this adds one dictionary lookup per report.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from fredica.cluster.remote import RemoteOwner
from fredica.domain import errors
from fredica.domain.models import JSON, Task, TaskStatus
from fredica.store.base import (
    ClaimFilter,
    Completed,
    CompletionItem,
    Failure,
    HeartbeatFeedback,
    Liveness,
    MonitorReport,
    RecoveryReport,
    SignalListener,
    StartItem,
    TaskStore,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Owners(Protocol):
    """The peers whose rows this node may claim (membership)."""

    def owners(self) -> list[RemoteOwner]:
        """Reachable peers, in a stable order."""
        ...

    def unreachable(self, owner: RemoteOwner, exc: errors.StoreError) -> None:
        """A call to `owner` failed in transport: membership may back off from it."""
        ...


class OwnerRouter:
    """The worker's store: `local` for its own rows, `owners` for everybody else's."""

    def __init__(
        self,
        local: TaskStore,
        owners: Owners,
        node_info: Callable[[], JSON] | None = None,
    ) -> None:
        self.local = local
        self._owners = owners
        self._node_info = node_info
        #: task id -> the owner that granted the claim (absent: this node's own store)
        self._claimed: dict[str, RemoteOwner] = {}
        self._turn = itertools.count()

    @property
    def node_id(self) -> str:
        return self.local.node_id

    def remote_of(self, task_id: str) -> RemoteOwner | None:
        return self._claimed.get(task_id)

    # --- what only the local store does ---------------------------------------------------
    def subscribe(self, listener: SignalListener) -> None:
        self.local.subscribe(listener)

    async def monitor(self, liveness: Liveness) -> MonitorReport:
        return await self.local.monitor(liveness)

    async def recover_startup(self, node_id: str | None = None) -> RecoveryReport:
        return await self.local.recover_startup(node_id)

    # --- claims -----------------------------------------------------------------------------
    async def claim(self, flt: ClaimFilter, node_id: str | None = None) -> list[Task]:
        claimed = await self.local.claim(flt, node_id)
        return claimed + await self._claim_remote(flt, flt.limit - _started(claimed, flt), node_id)

    async def _claim_remote(self, flt: ClaimFilter, free: int, node_id: str | None) -> list[Task]:
        """Fill `free` slots from the peers, starting with a different peer each time."""
        owners = self._owners.owners()
        if free <= 0 or not owners:
            return []
        first = next(self._turn) % len(owners)
        claimed: list[Task] = []
        for owner in owners[first:] + owners[:first]:
            if free <= 0:
                break
            want = dataclasses.replace(flt, limit=free, ahead=0, ahead_types=frozenset())
            try:
                got = await owner.claim(want, node_id or self.node_id)
            except errors.StoreError as exc:
                self._owners.unreachable(owner, exc)
                continue
            except errors.FredicaError as exc:
                logger.warning("claim at %s refused: %s", owner.node_id, exc)
                continue
            for task in got:
                self._claimed[task.id] = owner
            claimed += got
            free -= len(got)
        return claimed

    # --- reports ----------------------------------------------------------------------------
    async def start(self, task_id: str, attempt: int, node_id: str | None = None) -> Task:
        owner = self._claimed.get(task_id)
        if owner is None:
            return await self.local.start(task_id, attempt, node_id)
        return await owner.start(task_id, attempt, node_id or self.node_id)

    async def release(
        self, task_id: str, attempt: int, reason: str, node_id: str | None = None
    ) -> Task:
        owner = self._claimed.get(task_id)
        if owner is None:
            return await self.local.release(task_id, attempt, reason, node_id)
        return await self._final(
            task_id, owner.release(task_id, attempt, reason, node_id or self.node_id)
        )

    async def set_paused(
        self,
        task_id: str,
        attempt: int,
        paused: bool,
        reason: str | None,
        node_id: str | None = None,
    ) -> Task:
        owner = self._claimed.get(task_id)
        if owner is None:
            return await self.local.set_paused(task_id, attempt, paused, reason, node_id)
        return await owner.set_paused(task_id, attempt, paused, reason, node_id or self.node_id)

    async def record_event(
        self, task_id: str, event_type: str, message: str | None, node_id: str | None = None
    ) -> None:
        owner = self._claimed.get(task_id)
        if owner is None:
            await self.local.record_event(task_id, event_type, message, node_id)
        else:
            await owner.record_event(task_id, event_type, message, node_id or self.node_id)

    async def get_task(self, task_id: str) -> Task:
        owner = self._claimed.get(task_id)
        if owner is None:
            return await self.local.get_task(task_id)
        return await owner.get_task(task_id)

    async def progress(
        self, updates: Sequence[tuple[str, int, int, str | None]], node_id: str | None = None
    ) -> None:
        mine, theirs = self._split(updates, lambda u: u[0])
        if mine:
            await self.local.progress(mine, node_id)
        for owner, part in theirs.items():
            try:
                await owner.progress(part, node_id or self.node_id)
            except errors.StoreError as exc:  # progress is best effort; the next one follows
                self._owners.unreachable(owner, exc)

    async def heartbeat(
        self, tasks: Sequence[tuple[str, int]], node_id: str | None = None
    ) -> list[HeartbeatFeedback]:
        mine, theirs = self._split(tasks, lambda t: t[0])
        feedback = await self.local.heartbeat(mine, node_id) if mine else []
        info = self._node_info() if self._node_info is not None else None
        for owner, part in theirs.items():
            try:
                feedback += await owner.heartbeat(part, node_id or self.node_id, info)
            except errors.StoreError as exc:
                # the owner judges silence by its own clock; keep working and try again
                self._owners.unreachable(owner, exc)
        return feedback

    async def complete_and_claim(
        self,
        items: Sequence[CompletionItem],
        claim: ClaimFilter | None = None,
        node_id: str | None = None,
        starts: Sequence[StartItem] = (),
    ) -> tuple[list[Completed | errors.FredicaError], list[Task]]:
        """Each owner's part goes to its owner: the peers' first, so that a peer that cannot be
        reached raises `StoreError` before anything local is written (the engine keeps the
        batch and tries again; a part a peer already accepted is accepted again, since the
        owner answers a repeated completion of the same attempt as accepted)."""
        outcomes: dict[int, Completed | errors.FredicaError] = {}
        mine_idx, theirs_idx = self._split(list(range(len(items))), lambda i: items[i].task_id)
        my_starts, their_starts = self._split(starts, lambda s: s.task_id)
        for owner in set(theirs_idx) | set(their_starts):
            idx = theirs_idx.get(owner, [])
            try:
                got = await owner.complete(
                    [items[i] for i in idx], their_starts.get(owner, []), node_id or self.node_id
                )
            except errors.StoreError as exc:
                self._owners.unreachable(owner, exc)
                raise
            outcomes.update(zip(idx, got, strict=True))
            for i in idx:
                self._claimed.pop(items[i].task_id, None)
        local_outcomes, claimed = await self.local.complete_and_claim(
            [items[i] for i in mine_idx], claim, node_id, my_starts
        )
        outcomes.update(zip(mine_idx, local_outcomes, strict=True))
        if claim is not None:
            free = claim.limit - _started(claimed, claim)
            claimed += await self._claim_remote(claim, free, node_id)
        return [outcomes[i] for i in range(len(items))], claimed

    async def fail(self, failure: Failure, node_id: str | None = None) -> Task:
        owner = self._claimed.get(failure.task_id)
        if owner is None:
            return await self.local.fail(failure, node_id)
        return await self._final(failure.task_id, owner.fail(failure, node_id or self.node_id))

    async def _final(self, task_id: str, report: Awaitable[Task]) -> Task:
        """A report that ends this node's claim: forgotten unless it did not reach the owner."""
        try:
            task = await report
        except errors.StoreError:
            raise
        except errors.FredicaError:
            self._claimed.pop(task_id, None)  # the owner refused: the claim is gone anyway
            raise
        self._claimed.pop(task_id, None)
        return task

    def forget(self, task_id: str) -> None:
        """The task left this node without a report (lost to a reclaim)."""
        self._claimed.pop(task_id, None)

    def _split(
        self, values: Sequence[T], task_of: Callable[[T], str]
    ) -> tuple[list[T], dict[RemoteOwner, list[T]]]:
        mine: list[T] = []
        theirs: dict[RemoteOwner, list[T]] = {}
        if not self._claimed:
            return list(values), theirs
        for value in values:
            owner = self._claimed.get(task_of(value))
            if owner is None:
                mine.append(value)
            else:
                theirs.setdefault(owner, []).append(value)
        return mine, theirs


def _started(claimed: list[Task], flt: ClaimFilter) -> int:
    """How many of `claimed` fill free slots (the rest were claimed ahead, not started)."""
    if not flt.ahead or not flt.start:
        return len(claimed)
    return sum(1 for t in claimed if t.status is TaskStatus.RUNNING)
