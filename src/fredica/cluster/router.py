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
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from fredica.cluster import protocol
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

#: reports an owner acknowledged, kept for a takeover's settle phase (the newest, at most)
DELIVERED_KEPT = 4096


class Owners(Protocol):
    """The peers whose rows this node may claim (membership)."""

    def owners(self) -> list[RemoteOwner]:
        """Reachable peers, in a stable order."""
        ...

    def unreachable(self, owner: RemoteOwner, exc: errors.StoreError) -> None:
        """A call to `owner` failed in transport: membership may back off from it."""
        ...


class Authority(Protocol):
    """Whether this node may act as the owner of its rows now (DESIGN §4.11)."""

    def may_act(self, task_id: str | None = None) -> bool:
        """None: claim, judge liveness, accept reports at all (its lease on its pipelines is
        confirmed). A task id: also that task's pipeline is not being handed off."""
        ...


UNCONFIRMED = (
    "this node cannot confirm now that it still owns the task's pipeline (out of contact "
    "with every peer for too long, or handing it off): the report waits"
)


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
        #: set by the node: while it says no, this node acts on none of its own rows
        self.authority: Authority | None = None
        #: task id -> the owner that granted the claim (absent: this node's own store)
        self._claimed: dict[str, RemoteOwner] = {}
        #: each task claimed from a peer, as claimed (the answer for an outboxed result)
        self._tasks: dict[str, Task] = {}
        #: task id -> (owner id, attempt, kind, report as sent): the reports owners
        #: acknowledged lately. An owner that goes silent may not have passed them to any
        #: replica yet; its successor asks for them before it opens the pipeline to claims
        self._delivered: OrderedDict[str, tuple[str, int, str, JSON]] = OrderedDict()
        #: task id -> (owner id, attempt, kind, report): reports on their way to an owner. One
        #: sent to an owner that has just been suspended waits for the request's timeout; the
        #: successor takes it from here meanwhile
        self._inflight: dict[str, tuple[str, int, str, JSON]] = {}
        #: tasks of pipelines this node has taken over or been handed (the newest): a report
        #: of them still on its way to the old owner comes back here
        self._rehomed: OrderedDict[str, None] = OrderedDict()
        self._turn = itertools.count()

    @property
    def node_id(self) -> str:
        return self.local.node_id

    @property
    def out_of_process(self) -> bool:
        """As the local store: the owners' stores are other processes anyway."""
        return self.local.out_of_process

    # --- what only the local store does ---------------------------------------------------
    def subscribe(self, listener: SignalListener) -> None:
        self.local.subscribe(listener)

    async def monitor(self, liveness: Liveness) -> MonitorReport:
        if not self._may_act():
            # an owner that may have been taken over does not judge its claimers' silence
            return MonitorReport([], [], [], [])
        return await self.local.monitor(liveness)

    # --- the owner's authority (DESIGN §4.11) -----------------------------------------------
    def _may_act(self, task_id: str | None = None) -> bool:
        return self.authority is None or self.authority.may_act(task_id)

    def _check_local(self, task_id: str) -> None:
        if not self._may_act(task_id):
            raise errors.StoreError(f"task {task_id}: {UNCONFIRMED}")

    def owns_locally(self, task_id: str) -> bool:
        """Is this task's claim held at this node's own store (not at a peer's)?"""
        return task_id not in self._claimed

    def gate_for(self, task_id: str) -> Callable[[], bool]:
        """The gate an attempt of `task_id` waits at (`TaskControl.gate`): open while the task
        is another owner's, or this node may act as its owner."""
        return lambda: task_id in self._claimed or self._may_act(task_id)

    def moved(self, tasks: Sequence[Task], owner: RemoteOwner | None) -> None:
        """These tasks belong to `owner` now (None: to this node's own store): every later
        report of them goes there."""
        for task in tasks:
            if owner is None:
                self._claimed.pop(task.id, None)
                self._tasks.pop(task.id, None)
                self._rehomed[task.id] = None
                while len(self._rehomed) > DELIVERED_KEPT:
                    self._rehomed.popitem(last=False)
            else:
                self._claimed[task.id] = owner
                self._tasks[task.id] = task

    def held_tasks(self) -> list[Task]:
        """The tasks this node holds claims of at its peers, as claimed."""
        return list(self._tasks.values())

    async def recover_startup(self, node_id: str | None = None) -> RecoveryReport:
        return await self.local.recover_startup(node_id)

    # --- claims -----------------------------------------------------------------------------
    async def claim(self, flt: ClaimFilter, node_id: str | None = None) -> list[Task]:
        claimed = await self.local.claim(flt, node_id) if self._may_act() else []
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
            try:
                got = await owner.claim(_remote_filter(flt, free), node_id or self.node_id)
            except errors.StoreError as exc:
                self._owners.unreachable(owner, exc)
                continue
            except errors.FredicaError as exc:
                logger.warning("claim at %s refused: %s", owner.node_id, exc)
                continue
            self._remember(owner, got)
            claimed += got
            free -= len(got)
        return claimed

    # --- reports ----------------------------------------------------------------------------
    async def start(self, task_id: str, attempt: int, node_id: str | None = None) -> Task:
        owner = self._claimed.get(task_id)
        if owner is None:
            self._check_local(task_id)
            return await self.local.start(task_id, attempt, node_id)
        return await owner.start(task_id, attempt, node_id or self.node_id)

    async def release(
        self, task_id: str, attempt: int, reason: str, node_id: str | None = None
    ) -> Task:
        owner = self._claimed.get(task_id)
        if owner is None:
            self._check_local(task_id)
            return await self.local.release(task_id, attempt, reason, node_id)
        return await self._final(
            task_id, attempt, owner.release(task_id, attempt, reason, node_id or self.node_id)
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
        if self.authority is not None:
            # no answer for work this node may no longer own: its attempts stay unconfirmed
            mine = [t for t in mine if self._may_act(t[0])]
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
        """Each owner's part goes to its owner, in one round trip that also claims from that
        owner for the slots still free after this node's own store claimed. A result for a
        peer that cannot be reached goes into this node's durable outbox and counts as
        accepted here: it is delivered when the owner answers again (`deliver_outbox`), so
        neither the batch nor the local results wait for it."""
        claimer = node_id or self.node_id
        outcomes: dict[int, Completed | errors.FredicaError] = {}
        mine_idx, theirs_idx = self._split(list(range(len(items))), lambda i: items[i].task_id)
        my_starts, their_starts = self._split(starts, lambda s: s.task_id)
        for i in mine_idx:
            self._check_local(items[i].task_id)
        for start in my_starts:
            self._check_local(start.task_id)
        local_claim = claim if self._may_act() else None
        local_outcomes, claimed = await self.local.complete_and_claim(
            [items[i] for i in mine_idx], local_claim, node_id, my_starts
        )
        outcomes.update(zip(mine_idx, local_outcomes, strict=True))
        free = claim.limit - _started(claimed, claim) if claim is not None else 0
        for owner in set(theirs_idx) | set(their_starts):
            idx = theirs_idx.get(owner, [])
            part = [items[i] for i in idx]
            want = _remote_filter(claim, free) if claim is not None and free > 0 else None
            for item in part:
                body = protocol.completion_to_json(item)
                self._inflight[item.task_id] = (owner.node_id, item.attempt, "complete", body)
            try:
                got, more = await owner.complete_and_claim(
                    part, their_starts.get(owner, []), claimer, want
                )
            except errors.StoreError as exc:
                self._owners.unreachable(owner, exc)
                got, more = await self._outbox_completions(owner, part, exc), []
            else:
                got = await self._keep_moved(owner, part, got)
                for item, outcome in zip(part, got, strict=True):
                    if not isinstance(outcome, errors.FredicaError):
                        sent = self._inflight[item.task_id]
                        self._note_delivered(owner.node_id, "complete", item.attempt, sent[3])
            finally:
                for item in part:
                    self._inflight.pop(item.task_id, None)
            outcomes.update(zip(idx, got, strict=True))
            for i in idx:
                self._forget(items[i].task_id, items[i].attempt)
            self._remember(owner, more)
            claimed += more
            free -= len(more)
        if claim is not None and free > 0:
            claimed += await self._claim_remote(claim, free, node_id)
        return [outcomes[i] for i in range(len(items))], claimed

    async def fail(self, failure: Failure, node_id: str | None = None) -> Task:
        owner = self._claimed.get(failure.task_id)
        if owner is None:
            self._check_local(failure.task_id)
            return await self.local.fail(failure, node_id)
        body = protocol.failure_to_json(failure)
        self._inflight[failure.task_id] = (owner.node_id, failure.attempt, "fail", body)
        try:
            task = await self._final(
                failure.task_id, failure.attempt, owner.fail(failure, node_id or self.node_id)
            )
        except errors.StoreError as exc:
            self._owners.unreachable(owner, exc)
            held = self._tasks.get(failure.task_id)
            target = self._owner_now(failure.task_id, owner)
            await self.local.outbox_put(target, failure.task_id, failure.attempt, "fail", body)
            self._forget(failure.task_id, failure.attempt)
            if target == self.node_id:  # this node owns the pipeline now
                await self.deliver_own_outbox()
                return await self.local.get_task(failure.task_id)
            if held is None:
                raise
            logger.warning(
                "owner %s unreachable: the failure of %s waits in the outbox (%s)",
                owner.node_id,
                failure.task_id,
                exc,
                extra={"action": "outbox"},
            )
            # as far as this node knows: the owner applies its retry policy on delivery
            return dataclasses.replace(
                held, error=failure.error, error_type=failure.error_type.value
            )
        finally:
            self._inflight.pop(failure.task_id, None)
        self._note_delivered(owner.node_id, "fail", failure.attempt, body)
        return task

    async def _final(self, task_id: str, attempt: int, report: Awaitable[Task]) -> Task:
        """A report that ends this node's claim: forgotten unless it did not reach the owner."""
        try:
            task = await report
        except errors.StoreError:
            raise
        except errors.FredicaError:
            self._forget(task_id, attempt)  # the owner refused: the claim is gone anyway
            raise
        self._forget(task_id, attempt)
        return task

    def _remember(self, owner: RemoteOwner, tasks: list[Task]) -> None:
        for task in tasks:
            self._claimed[task.id] = owner
            self._tasks[task.id] = task

    def _forget(self, task_id: str, attempt: int) -> None:
        """Forget the claim of `task_id` that `attempt` ended. A newer attempt of the same task
        that this node claimed again (the owner reclaimed it while the older one could not
        report, and the older one learns so only now) keeps its owner: its heartbeats and
        reports still go there."""
        task = self._tasks.get(task_id)
        if task is not None and task.attempt > attempt:
            return
        self._claimed.pop(task_id, None)
        self._tasks.pop(task_id, None)

    # --- the outbox (seed 001 §7.4) --------------------------------------------------------
    async def _outbox_completions(
        self, owner: RemoteOwner, items: list[CompletionItem], exc: errors.StoreError
    ) -> list[Completed | errors.FredicaError]:
        """Keep results the owner could not take; they count as accepted here."""
        home = False
        for item in items:
            target = self._owner_now(item.task_id, owner)
            home = home or target == self.node_id
            await self.local.outbox_put(
                target,
                item.task_id,
                item.attempt,
                "complete",
                protocol.completion_to_json(item),
            )
        if items:
            logger.warning(
                "owner %s unreachable: %d result(s) wait in the outbox (%s)",
                owner.node_id,
                len(items),
                exc,
                extra={"action": "outbox"},
            )
        if home:  # this node owns the pipeline now: applied at once
            await self.deliver_own_outbox()
        return [
            Completed(i.task_id, i.attempt, self._pipeline(i.task_id), TaskStatus.COMPLETED)
            for i in items
        ]

    async def _keep_moved(
        self,
        owner: RemoteOwner,
        items: list[CompletionItem],
        outcomes: list[Completed | errors.FredicaError],
    ) -> list[Completed | errors.FredicaError]:
        """Results the owner could not take for now (the task moved to another owner, whose
        address this node learns soon): kept in the outbox like those of an unreachable
        owner."""
        waiting = [
            i for i, o in zip(items, outcomes, strict=True) if isinstance(o, errors.StoreError)
        ]
        if not waiting:
            return outcomes
        kept = iter(await self._outbox_completions(owner, waiting, errors.OwnerMoved("moved")))
        return [next(kept) if isinstance(o, errors.StoreError) else o for o in outcomes]

    def _owner_now(self, task_id: str, asked: RemoteOwner) -> str:
        """Whom a result that `asked` could not take waits for: the task's owner now. A peer
        may have taken the pipeline over while the report to `asked` was on its way (`moved`);
        the results addressed to the old owner were readdressed then, this one was not yet."""
        owner = self._claimed.get(task_id)
        if owner is None and task_id in self._rehomed:
            return self.node_id
        return (owner or asked).node_id

    def _pipeline(self, task_id: str) -> str | None:
        task = self._tasks.get(task_id)
        return task.pipeline_id if task is not None else None

    async def deliver_own_outbox(self) -> int:
        """Results this node kept for tasks whose pipeline it has since taken over: applied
        to its own store now. Returns how many were applied or dropped."""
        done = 0
        for item in await self.local.outbox_list(limit=1000):
            if item.owner_id != self.node_id:
                continue
            try:
                if item.kind == "complete":
                    completion = protocol.completion_from_json(item.body)
                    outcome = (await self.local.complete_and_claim([completion]))[0][0]
                    if isinstance(outcome, errors.FredicaError):
                        raise outcome
                else:
                    await self.local.fail(protocol.failure_from_json(item.body))
            except errors.StoreError:
                break
            except errors.FredicaError as exc:
                logger.warning(
                    "the %s of %s (attempt %d), kept for the old owner, dropped: %s",
                    item.kind,
                    item.task_id,
                    item.attempt,
                    exc,
                    extra={"action": "outbox"},
                )
            await self.local.outbox_done(item.id)
            done += 1
        return done

    async def deliver_outbox(self, owner: RemoteOwner) -> int:
        """Send `owner` the results waiting for it, oldest first; each is forgotten once the
        owner acknowledged it, or refused it for good (a reclaimed attempt: the result of a
        zombie is dropped). Returns how many were delivered or dropped."""
        done = 0
        for item in await self.local.outbox_list(limit=1000):
            if item.owner_id != owner.node_id:
                continue
            try:
                if item.kind == "complete":
                    completion = protocol.completion_from_json(item.body)
                    outcome = (await owner.complete([completion], [], self.node_id))[0]
                    if isinstance(outcome, errors.FredicaError):
                        raise outcome
                else:
                    await owner.fail(protocol.failure_from_json(item.body), self.node_id)
            except errors.StoreError as exc:
                await self.local.outbox_tried(item.id, str(exc))
                self._owners.unreachable(owner, exc)
                break
            except errors.FredicaError as exc:
                logger.warning(
                    "owner %s refused the %s of %s (attempt %d), dropped: %s",
                    owner.node_id,
                    item.kind,
                    item.task_id,
                    item.attempt,
                    exc,
                    extra={"action": "outbox"},
                )
            else:
                self._note_delivered(owner.node_id, item.kind, item.attempt, item.body)
                logger.info(
                    "owner %s acknowledged the %s of %s",
                    owner.node_id,
                    item.kind,
                    item.task_id,
                    extra={"action": "outbox"},
                )
            await self.local.outbox_done(item.id)
            done += 1
        return done

    # --- what this node holds of one owner's tasks (a takeover's settle phase) -------------
    def _note_delivered(self, owner_id: str, kind: str, attempt: int, body: JSON) -> None:
        task_id = str(body["task_id"])
        self._delivered.pop(task_id, None)
        self._delivered[task_id] = (owner_id, attempt, kind, body)
        while len(self._delivered) > DELIVERED_KEPT:
            self._delivered.popitem(last=False)

    async def claims_of(self, owner_id: str) -> JSON:
        """What this node runs or ran of `owner_id`'s tasks (`GET /cluster/claims`): the
        claims it holds there (`running`: task id and attempt) and the reports it sent there,
        acknowledged lately, on their way or still in its outbox (`reports`: kind, attempt,
        report). A
        node taking over a silent owner's pipelines asks every peer this first: a claim the
        owner granted, or a result it accepted, may not have reached any replica yet."""
        running = [
            {"task_id": t.id, "attempt": t.attempt}
            for t in self._tasks.values()
            if (o := self._claimed.get(t.id)) is not None and o.node_id == owner_id
        ]
        reports = [
            {"kind": kind, "attempt": attempt, "body": body}
            for owner, attempt, kind, body in [*self._delivered.values(), *self._inflight.values()]
            if owner == owner_id
        ]
        for item in await self.local.outbox_list(limit=10_000):
            if item.owner_id == owner_id:
                reports.append({"kind": item.kind, "attempt": item.attempt, "body": item.body})
        return {"node_id": self.node_id, "running": running, "reports": reports}

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


def _remote_filter(flt: ClaimFilter, free: int) -> ClaimFilter:
    """What to ask of a peer: only the free slots, never ahead (a task claimed ahead would
    wait in this node's queue where its owner cannot see it)."""
    return dataclasses.replace(flt, limit=free, ahead=0, ahead_types=frozenset())


def _started(claimed: list[Task], flt: ClaimFilter) -> int:
    """How many of `claimed` fill free slots (the rest were claimed ahead, not started)."""
    if not flt.ahead or not flt.start:
        return len(claimed)
    return sum(1 for t in claimed if t.status is TaskStatus.RUNNING)
