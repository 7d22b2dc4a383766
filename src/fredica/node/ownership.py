"""Ownership that moves (DESIGN §4.11; seed 001 §1 "offline tolerance", §7.5): the pipelines a
node created do not wait for it while it sleeps.

A pipeline is owned by one node, whose store is the truth for its rows; `owner_epoch` counts
how often it changed hands. It moves in two ways:

- **Hand-off** (the owner is awake and leaving: `fredica node handoff`, drain, a clean stop).
  The owner freezes the pipeline (no claim, no report of its tasks is accepted), writes down
  durably that a hand-off to a peer began, sends the rows and events to that peer, which adopts
  them at `epoch + 1` in one transaction, then drops its own rows and keeps a replica. A crash
  at any step leaves one owner: after a restart the frozen pipeline stays frozen until the
  target says whether it adopted it (then the old owner demotes itself) or not (then it keeps
  it).
- **Takeover** (the owner is silent). When an owner has not answered for
  `cluster.originator_wait_sec`, the successor takes its active pipelines from its replica at
  `epoch + 1`. The successor is the same on every node: among this node and the online peers
  that hold a replica of the owner, the one whose replica is freshest (the highest cursor),
  then the lowest node id; nobody takes over while any online peer heard from the owner in the
  last half of the wait.

The old owner fences itself: with peers known, an owner in contact (an answer within half of
`originator_wait_sec`, on a clock that counts while the machine sleeps) with fewer than half of
the nodes it knows, itself included, may have been taken over, so it acts on none of its own
rows (no claim, no liveness judgement, no report accepted, and its own running attempts wait at
their next checkpoint) until a peer answers and it has asked that peer which of its pipelines
moved: those it demotes, and it goes on with the rest. Its returning rows never overwrite the
successor's, because replicas merge by epoch first.
The same question is asked at the first contact with every peer after a start, and again
whenever a peer's `/cluster/info` shows that the set of pipelines it took over changed, so two
halves of a partition that both kept a pipeline meet with one owner: the higher epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
from collections.abc import Callable, Sequence

from fredica.cluster import protocol
from fredica.cluster.membership import Membership, Peer
from fredica.cluster.remote import RemoteOwner
from fredica.cluster.router import OwnerRouter
from fredica.domain import errors
from fredica.domain.clock import Clock, boottime
from fredica.domain.models import JSON, Pipeline
from fredica.node import settle
from fredica.store.base import TaskStore, Transfer

logger = logging.getLogger(__name__)

KEY_HANDOFFS = "ownership.handoffs"  # app_config: hand-offs begun and not yet settled
CRASH_ENV = "FREDICA_CRASH_AT"  # tests: the hand-off step at which this process kills itself
MAX_PIPELINES = 100_000  # active pipelines moved at once, at most


def crash_point(step: str) -> None:
    """Fault injection for the hand-off tests: with `FREDICA_CRASH_AT=<step>` in its
    environment the process kills itself (SIGKILL, as `kill -9`) on reaching `step`."""
    if os.environ.get(CRASH_ENV) == step:
        logger.error("crash point %s reached: killing this process", step)
        os.kill(os.getpid(), signal.SIGKILL)


class Lease:
    """Whether this node may act as the owner of its pipelines (see the module docstring).

    The node acts while the nodes it is in contact with (itself included) are at least half of
    the nodes it knows: with two nodes it always acts (a sleeping desktop must not stop the
    NAS), with three it acts while it hears one peer. Contact with a peer is an answer within
    `lapse_after`. After a lapse (or a start after a long absence) it acts again only once a
    peer has answered and been asked which of this node's pipelines moved. A node that was
    itself away (suspended, its machine asleep: its own clock did not tick for `lapse_after`)
    lapses too, whatever the count: with two nodes, the one that slept is the one that may
    have been taken over."""

    def __init__(self, wait: float, now: Callable[[], float] = boottime) -> None:
        self.wait = wait
        self._now = now
        self.confirmed = True
        #: some peer is known (this run): only then can anybody take this node's work over
        self.peers_known = False
        #: the peers known now (online or not) and when each last answered (`now()`)
        self.known: set[str] = set()
        self._contacts: dict[str, float] = {}
        self._since = now()
        self._ticked = now()

    @property
    def lapse_after(self) -> float:
        """Silence (seconds) after which a peer no longer counts as in contact."""
        return self.wait / 2

    def in_contact(self) -> int:
        """The known peers that answered within `lapse_after`."""
        now = self._now()
        return sum(
            1
            for peer in self.known
            if now - self._contacts.get(peer, self._since) < self.lapse_after
        )

    def _enough(self) -> bool:
        return 2 * (1 + self.in_contact()) >= 1 + len(self.known)

    def restart_clock(self) -> None:
        """The clock's ticks begin (at the start of the ownership loops)."""
        self._ticked = self._now()

    def tick(self) -> None:
        """This node's own clock ran (every interval, from a loop that does nothing else)."""
        self._check_away()
        self._ticked = self._now()

    def _check_away(self) -> None:
        away = self._now() - self._ticked
        if self.peers_known and self.confirmed and away >= self.lapse_after:
            self.confirmed = False
            logger.warning(
                "this node was away (suspended or asleep) for %.0fs: it acts on none of its "
                "pipelines until a peer answers (one may have taken them over)",
                away,
                extra={"action": "owner_lapsed"},
            )

    def valid(self) -> bool:
        if not self.peers_known:
            return True
        self._check_away()
        if self.confirmed and not self._enough():
            self.confirmed = False
            logger.warning(
                "in contact with %d of %d peer(s) within %.0fs: this node acts on none of its "
                "pipelines until more answer (one of them may be taking them over)",
                self.in_contact(),
                len(self.known),
                self.lapse_after,
                extra={"action": "owner_lapsed"},
            )
        return self.confirmed

    def heard(self, peer: str) -> None:
        """A peer answered (and, if the lease had lapsed, the moves were checked)."""
        self._contacts[peer] = self._now()
        self.confirmed = self._enough()

    def unconfirm(self) -> None:
        self.confirmed = False


class Ownership:
    """The node's side of moving ownership: the lease, takeover, hand-off and the answers to
    the peers' ownership questions (`/cluster/owners`, `/cluster/adopt`, `/cluster/owner`)."""

    def __init__(
        self,
        node_id: str,
        store: TaskStore,
        membership: Membership,
        router: OwnerRouter,
        wait: float,
        clock: Clock,
        changed: Callable[[str], None],
        pull: Callable[[str], None],
        cancel: Callable[[str, str], bool],
        takeover: bool = True,
    ) -> None:
        self.node_id = node_id
        self._store = store
        self._membership = membership
        self._router = router
        self.wait = wait
        self._clock = clock
        self._changed = changed
        self._pull = pull
        self._cancel = cancel
        #: whether silent owners are taken over (and so whether this node fences itself)
        self.takeover = takeover
        self.lease = Lease(wait)
        self._started = boottime()
        #: owner id -> when (boottime) this node last saw it online
        self._last_seen: dict[str, float] = {}
        #: the owners not online at the last tick (`wait_marks`)
        self._silent: set[str] = set()
        #: what peers read from `/cluster/info`: per owner replicated here, its cursor and
        #: how long this node has not seen it
        self.view: dict[str, JSON] = {}
        #: per creator, a digest of the pipelines this node owns that it did not create
        self.took_over: dict[str, str] = {}
        #: peer id -> the digest of its `took_over[self]` last looked at
        self._seen_digests: dict[str, str] = {}
        #: hand-offs begun and not settled: pipeline id -> {target, epoch}
        self._handoffs: dict[str, JSON] = {}
        #: tasks of pipelines being handed off: no report of them is accepted meanwhile
        self._frozen: set[str] = set()
        #: pipelines whose hand-off runs now in this process: it settles them itself
        self._handing_off: set[str] = set()
        self._claims_closed = False
        self._lock = asyncio.Lock()
        self.moves = 0  # pipelines moved to or from this node since it started
        self._task: asyncio.Task[None] | None = None
        self._awake: asyncio.Task[None] | None = None
        self._announcing: set[asyncio.Task[None]] = set()

    # --- authority (router.Authority) --------------------------------------------------------
    def may_act(self, task_id: str | None = None) -> bool:
        if not self.lease.valid():
            return False
        if task_id is None:
            # no claims while a hand-off is unsettled (after a restart mid-hand-off, until its
            # target says whether it adopted the pipeline): the store's claim does not know
            # which pipelines are frozen, and a pending task of one may be the target's now
            return not self._claims_closed and not self._handoffs
        return task_id not in self._frozen

    def wait_marks(self) -> dict[str, JSON]:
        """Per other owner not online now: how long it has been silent and how long the
        cluster waits before another node takes its pipelines over (None with takeover off:
        they wait for it; the UI's "waiting for owner")."""
        now = boottime()
        online = {p.node_id for p in self._membership.peers() if p.online and p.node_id}
        return {
            owner: {
                "silent_sec": round(now - seen, 1),
                "wait_sec": self.wait if self.takeover else None,
            }
            for owner, seen in self._last_seen.items()
            if owner not in online
        }

    def info(self) -> JSON:
        """What peers read about this node's ownership (`/cluster/info`)."""
        return {"owner_view": self.view, "took_over": self.took_over}

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self, last_seen: float | None) -> None:
        """Restore unsettled hand-offs (their pipelines stay frozen); an owner that may have
        been away long enough for a takeover (its last presence, by its own clock) asks its
        peers before it acts."""
        raw = await self._store.get_config(KEY_HANDOFFS)
        self._handoffs = json.loads(raw) if raw else {}
        for pipeline_id in self._handoffs:
            await self._freeze(pipeline_id)
        if self._handoffs:
            logger.warning(
                "%d hand-off(s) unsettled since before the restart: those pipelines wait until "
                "their target answers",
                len(self._handoffs),
                extra={"action": "handoff"},
            )
        away = self._clock.now() - last_seen if last_seen else 0.0
        # peers known: from the seeds, or from the node registry (a node with no seeds, the
        # one the others name as theirs, learns its peers only when they call it)
        known = bool(self._membership.peers()) or any(
            r.id != self.node_id for r in await self._store.list_nodes()
        )
        if self.takeover and known and away >= self.lease.lapse_after:
            self.lease.peers_known = True
            self.lease.unconfirm()
        await self._refresh_took_over()
        self.lease.restart_clock()
        self._task = asyncio.create_task(self._loop(), name="fredica-ownership")
        self._awake = asyncio.create_task(self._awake_loop(), name="fredica-ownership-awake")

    async def stop(self) -> None:
        for task in self._announcing:
            task.cancel()
        if self._awake is not None:
            self._awake.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._awake
            self._awake = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _awake_loop(self) -> None:
        """Ticks the lease's own clock: a gap in it means this process was suspended."""
        step = max(0.05, min(self._membership.interval, self.lease.lapse_after / 4))
        while True:
            self.lease.tick()
            await asyncio.sleep(step)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._membership.interval)
            try:
                await self.tick()
            except errors.FredicaError as exc:
                logger.warning("ownership check: %s", exc, extra={"action": "ownership"})

    async def tick(self) -> None:
        """Look at the peers: who is online, whom to take over, which moves to check."""
        now = boottime()
        peers = [p for p in self._membership.peers() if p.node_id]
        self.lease.peers_known = self.takeover and (self.lease.peers_known or bool(peers))
        self.lease.known = {p.node_id for p in peers if p.node_id}
        self._note_seen(peers, now)
        self.view = await self.owner_view()
        silent = set(self.wait_marks())
        if silent != self._silent:
            # an owner went silent or came back: open pages redraw their "waiting for owner"
            self._silent = silent
            self._changed("")
        for peer in peers:
            await self._check_moves(peer)
        for owner, mark in self.view.items():
            if not self.takeover or float(mark["silent_sec"]) < self.wait:
                continue
            if await self._is_successor(owner):
                await self.take_over(owner)

    async def owner_view(self) -> dict[str, JSON]:
        """Per owner replicated here: this replica's cursor and how long this node has not
        seen the owner (`GET /cluster/owner-view`, asked fresh by a would-be successor)."""
        now = boottime()
        view: dict[str, JSON] = {}
        for owner in await self._store.replica_freshness():
            seen = self._last_seen.setdefault(owner, self._started)
            view[owner] = {
                "cursor": await self._store.replica_cursor(owner),
                "silent_sec": round(now - seen, 3),
                # this node owns pipelines `owner` created: it took them over already
                "took_over": owner in self.took_over,
            }
        return view

    # --- takeover -------------------------------------------------------------------------------
    async def _is_successor(self, owner: str) -> bool:
        """The deterministic successor rule (module docstring). Every online peer is asked
        for its view now: views carried by `/cluster/info` can be older than the owner's
        last changes, and two nodes that each compared their fresh cursor with the other's
        stale one would both take over."""
        mine = self.view.get(owner)
        if mine is None:
            return False
        candidates = [(-int(mine["cursor"]), self.node_id)]
        for peer in self._membership.peers():
            if not (peer.online and peer.node_id and peer.owner) or peer.node_id == owner:
                continue
            try:
                views = await peer.owner.call("GET", "/cluster/owner-view")
            except errors.StoreError:
                continue  # it stopped answering: it is not a candidate
            theirs = views.get(owner) if isinstance(views, dict) else None
            if not isinstance(theirs, dict):
                continue
            if float(theirs.get("silent_sec", 0.0)) < self.lease.lapse_after:
                return False  # it heard from the owner lately: the owner is not gone
            if theirs.get("took_over") and not mine.get("took_over"):
                return False  # it is the successor already (its cursor may have moved)
            candidates.append((-int(theirs.get("cursor", 0)), peer.node_id))
        return min(candidates)[1] == self.node_id

    async def take_over(self, owner: str) -> list[str]:
        """Adopt every active pipeline of the silent `owner` from this node's replica,
        corrected first by what the online peers run or ran of it (node/settle.py); the
        results among that are applied before anything of it can be claimed here."""
        async with self._lock:
            replicas = await self._store.replica_pipelines(limit=MAX_PIPELINES)
            active = [p for p in replicas if p.owner_id == owner and not p.status.is_terminal]
            if not active:
                return []
            if self._heard_lately(owner):
                # it came back while this node decided (the rows just read may even be ones
                # it made since, pulled on its return): it is not silent, nothing moves
                logger.info(
                    "owner %s answered again: no takeover", owner, extra={"action": "takeover"}
                )
                return []
            words = await self._gather_claims(owner)
            if words is None:
                return []  # a peer that may hold claims did not say: asked again next tick
            moved: list[tuple[Pipeline, Transfer]] = []
            reports: list[settle.Word] = []
            self._claims_closed = True  # nothing of it is claimed before its reports apply
            try:
                for pipeline in active:
                    replica = await self._store.replica_transfer(pipeline.id)
                    transfer, theirs = settle.patch(replica, words, self._clock.now())
                    move = {"previous": owner, "how": "takeover"}
                    if await self._store.adopt_pipeline(transfer, pipeline.owner_epoch + 1, move):
                        moved.append((pipeline, transfer))
                        reports += theirs
                await self._apply_reports(reports)
                if moved:
                    await self._requeue_held_by(owner)
            finally:
                self._claims_closed = False
            if not moved:
                return []
            logger.warning(
                "owner %s silent for %.0fs: this node took over %d pipeline(s)",
                owner,
                float(self.view.get(owner, {}).get("silent_sec", 0.0)),
                len(moved),
                extra={"action": "takeover"},
            )
            await self._settle_adopted([t for _, t in moved], owner)
            return [p.id for p, _ in moved]

    async def _requeue_held_by(self, owner: str) -> None:
        """What the silent owner itself was running goes back to the queue now, by the
        start-up rules (as for a node that restarted): it has been silent for the whole wait
        and fenced itself after half of it, so its attempts can report nothing any more, and
        waiting for `stale_after_sec` + `reclaim_after_sec` as well would only hold the
        pipeline up. A peer's claim vouched for in the settle phase is not the owner's."""
        report = await self._store.recover_startup(owner)
        if report.snapshot:
            logger.warning(
                "takeover of %s: what it ran itself goes back to the queue: %s",
                owner,
                report.summary(),
                extra={"action": "takeover"},
            )
            for task in report.snapshot:
                self._changed(task.pipeline_id or "")

    def _note_seen(self, peers: Sequence[Peer], now: float) -> None:
        """Silence counts from a peer's last answer to anything (a probe, a pull, a report),
        not from when enough probes failed to call it offline."""
        for peer in peers:
            if peer.node_id is None:
                continue
            answered = peer.owner.answered_at if peer.owner is not None else None
            if answered is not None:
                seen = self._last_seen.get(peer.node_id, 0.0)
                self._last_seen[peer.node_id] = max(seen, answered)
            elif peer.online:
                self._last_seen[peer.node_id] = now

    def _heard_lately(self, owner: str) -> bool:
        """Whether `owner` answered any request within the wait, checked again after the
        replica's pipelines are read: a pull brings rows only from an owner that answered,
        so a pipeline it made after its return is never taken from it."""
        now = boottime()
        self._note_seen(self._membership.peers(), now)
        seen = self._last_seen.get(owner)
        return seen is not None and now - seen < self.wait

    async def _gather_claims(self, owner: str) -> list[settle.Word] | None:
        """What this node and every peer run or ran of `owner`'s tasks; None when a peer
        heard from within the wait did not answer (offline for a moment, or too slow): its
        claims and the results it keeps would be missed, and a task it ran would run again.
        A peer silent for the whole wait counts as gone, like the owner."""
        answers = [await self._router.claims_of(owner)]
        now = boottime()
        for peer in self._membership.peers():
            if not peer.node_id or peer.node_id in (owner, self.node_id):
                continue
            try:
                if not (peer.online and peer.owner):
                    raise errors.StoreError("offline")
                answers.append(await peer.owner.call("GET", "/cluster/claims", owner=owner))
            except errors.FredicaError as exc:
                seen = self._last_seen.get(peer.node_id)
                if seen is not None and now - seen < self.wait:
                    logger.warning(
                        "takeover of %s postponed: peer %s did not say what it holds: %s",
                        owner,
                        peer.node_id,
                        exc,
                        extra={"action": "takeover"},
                    )
                    return None
                # gone as long as the owner: it sends its outbox to the new owner later
                logger.warning(
                    "takeover of %s: peer %s, silent for the whole wait, is not asked: %s",
                    owner,
                    peer.node_id,
                    exc,
                    extra={"action": "takeover"},
                )
        words = [w for a in answers if isinstance(a, dict) for w in settle.words_of(a)]
        logger.info(
            "takeover of %s: %d word(s) from %d node(s) on what runs or ran",
            owner,
            len(words),
            len(answers),
            extra={"action": "takeover"},
        )
        return words

    async def _apply_reports(self, reports: Sequence[settle.Word]) -> None:
        """Apply the results the old owner had accepted (or that still wait in an outbox)
        to this node's store, as their claimer's reports (the store's fences apply)."""
        for word in reports:
            assert word.body is not None
            try:
                if word.kind == "complete":
                    item = protocol.completion_from_json(word.body)
                    outcome = (await self._store.complete_and_claim([item], None, word.node_id))[0][
                        0
                    ]
                    if isinstance(outcome, errors.FredicaError):
                        raise outcome
                else:
                    await self._store.fail(protocol.failure_from_json(word.body), word.node_id)
            except errors.FredicaError as exc:
                logger.warning(
                    "takeover: the %s of %s (attempt %d, by %s) not applied: %s",
                    word.kind,
                    word.task_id,
                    word.attempt,
                    word.node_id,
                    exc,
                    extra={"action": "takeover"},
                )

    async def claims_view(self, owner: str) -> JSON:
        """`GET /cluster/claims`: what this node runs or ran of `owner`'s tasks."""
        return await self._router.claims_of(owner)

    async def _settle_adopted(self, transfers: Sequence[Transfer], previous: str) -> None:
        """After adopting: this node's claims of those tasks are local now, results it kept
        for the old owner apply here, and the peers learn the new owner."""
        tasks = [t for tr in transfers for t in tr.tasks]
        self._router.moved(tasks, None)
        await self._store.outbox_readdress([t.id for t in tasks], self.node_id)
        await self._router.deliver_own_outbox()
        self.moves += len(transfers)
        await self._refresh_took_over()
        for transfer in transfers:
            self._changed(transfer.pipeline.id)
        await self._announce(transfers, previous)

    async def _announce(self, transfers: Sequence[Transfer], previous: str) -> None:
        """Tell every peer that this node owns `transfers`' pipelines now, at the epoch after
        theirs (`POST /cluster/owner`)."""
        body = {
            "owner": self.node_id,
            "previous": previous,
            "pipelines": [
                {
                    "id": tr.pipeline.id,
                    "epoch": tr.pipeline.owner_epoch + 1,
                    "tasks": [t.id for t in tr.tasks],
                }
                for tr in transfers
            ],
        }
        for peer in self._membership.owners():
            with contextlib.suppress(errors.FredicaError):
                await peer.call("POST", "/cluster/owner", body)

    async def learn(self, body: JSON) -> JSON:
        """A peer says it owns these pipelines now (`POST /cluster/owner`): reports of their
        tasks go to it, results kept for the old owner are readdressed, and its rows are
        pulled now."""
        owner_id = _text(body, "owner")
        items = body.get("pipelines")
        if not isinstance(items, list):
            raise errors.InvalidRequest("pipelines must be a list")
        task_ids = [str(t) for item in items if isinstance(item, dict) for t in item["tasks"]]
        if owner_id == self.node_id:
            return {"ok": True}
        owner = self._membership.owner(owner_id)
        held = set(task_ids)
        if owner is not None:
            self._router.moved([t for t in self._router.held_tasks() if t.id in held], owner)
        readdressed = await self._store.outbox_readdress(task_ids, owner_id)
        self._pull(owner_id)
        return {"ok": True, "readdressed": readdressed}

    # --- the old owner's side: which of mine moved? ------------------------------------------
    async def on_contact(self, peer: RemoteOwner, first: bool) -> None:
        """A peer answered (membership): after a start or a lapse, ask it what moved; settle
        hand-offs it was the target of."""
        lapsed = not self.lease.valid()
        if first or lapsed:
            await self._reconcile(peer)
        await self._settle_handoffs(peer)
        if lapsed:
            # this node could not hear its claimers meanwhile: their silence is not theirs
            await self._store.forgive_silence()
            logger.info(
                "peer %s answered: this node acts as the owner of its pipelines again",
                peer.node_id,
                extra={"action": "owner_confirmed"},
            )
        self.lease.heard(peer.node_id)

    async def _check_moves(self, peer: Peer) -> None:
        """Ask a peer again when the set of this node's pipelines it owns changed."""
        digest = (peer.info.get("took_over") or {}).get(self.node_id)
        if peer.node_id is None or peer.owner is None or not peer.online:
            return
        if digest is None or self._seen_digests.get(peer.node_id) == digest:
            return
        await self._reconcile(peer.owner)
        self._seen_digests[peer.node_id] = str(digest)

    async def _reconcile(self, peer: RemoteOwner) -> None:
        answer = await peer.call("GET", "/cluster/owners", created_by=self.node_id)
        for item in answer.get("moved", []):
            pipeline_id, owner, epoch = str(item[0]), str(item[1]), int(item[2])
            if owner != self.node_id:
                await self._demote(pipeline_id, epoch, peer)

    async def _demote(self, pipeline_id: str, epoch: int, via: RemoteOwner) -> None:
        try:
            mine = await self._store.get_pipeline(pipeline_id)
        except errors.NotFound:
            return
        if mine.owner_epoch >= epoch:
            return
        answer = await via.call("GET", "/cluster/pipelines/transfer", id=pipeline_id)
        transfer = protocol.decode("transfer", protocol.transfer_from_json, answer)
        demoted = await self._store.demote_pipeline(transfer)
        if not demoted:
            return
        new_owner = self._membership.owner(transfer.pipeline.owner_id)
        mine_running = [t for t in transfer.tasks if t.claimed_by == self.node_id]
        if new_owner is not None:
            self._router.moved(mine_running, new_owner)
        # what this node still runs of the pipeline and the new owner does not count as its
        # claim (reclaimed meanwhile, or never seen there) stops before it does anything more
        still_mine = {t.id for t in mine_running} if new_owner is not None else set()
        for task_id in demoted:
            if task_id not in still_mine:
                self._cancel(task_id, f"pipeline {pipeline_id} moved to another owner")
        self._frozen.difference_update(demoted)
        self.moves += 1
        self._changed(pipeline_id)
        logger.warning(
            "pipeline %s is owned by %s now (epoch %d): this node keeps a replica of it",
            pipeline_id,
            transfer.pipeline.owner_id,
            transfer.pipeline.owner_epoch,
            extra={"action": "demoted"},
        )

    # --- hand-off -------------------------------------------------------------------------------
    def pick_target(self, target_id: str | None = None) -> RemoteOwner:
        """The peer to hand off to: `target_id`, else an online peer marked `node.always_on`,
        else the one up the longest (then the lowest id)."""
        peers = [p for p in self._membership.peers() if p.online and p.joined and p.owner]
        if target_id:
            chosen = next((p for p in peers if p.node_id == target_id), None)
            if chosen is None or chosen.owner is None:
                raise errors.InvalidRequest(f"node {target_id} is not an online peer")
            return chosen.owner
        if not peers:
            raise errors.Conflict("no peer is online to hand the pipelines to")
        best = min(
            peers,
            key=lambda p: (
                not p.info.get("always_on"),
                -float(p.info.get("uptime_sec") or 0.0),
                p.node_id or "",
            ),
        )
        assert best.owner is not None
        return best.owner

    async def hand_off(self, target_id: str | None = None) -> JSON:
        """Move every active pipeline this node owns to one peer (see the module docstring);
        returns what moved and to whom."""
        target = self.pick_target(target_id)
        async with self._lock:
            own = await self._store.list_pipelines(limit=MAX_PIPELINES)
            active = [p for p in own if p.owner_id == self.node_id and not p.status.is_terminal]
            moved: list[str] = []
            self._claims_closed = True
            try:
                for pipeline in active:
                    if await self._hand_off_one(pipeline, target):
                        moved.append(pipeline.id)
            finally:
                self._claims_closed = False
        if moved:
            logger.warning(
                "handed %d pipeline(s) to %s",
                len(moved),
                target.node_id,
                extra={"action": "handoff"},
            )
        return {"target": target.node_id, "handed_off": moved}

    async def _hand_off_one(self, pipeline: Pipeline, target: RemoteOwner) -> bool:
        # while it runs, a contact with the target must not settle it: asked before the
        # adopt arrives, the target says "not mine", and the durable mark would be erased
        # (after a crash right after the adopt this node would then act on its stale rows)
        self._handing_off.add(pipeline.id)
        try:
            return await self._hand_off_steps(pipeline, target)
        finally:
            self._handing_off.discard(pipeline.id)

    async def _hand_off_steps(self, pipeline: Pipeline, target: RemoteOwner) -> bool:
        epoch = pipeline.owner_epoch + 1
        await self._freeze(pipeline.id)
        crash_point("handoff_frozen")
        self._handoffs[pipeline.id] = {"target": target.node_id, "epoch": epoch}
        await self._save_handoffs()
        crash_point("handoff_marked")
        transfer = await self._store.export_pipeline(pipeline.id)
        try:
            answer = await target.call(
                "POST",
                "/cluster/adopt",
                {
                    "transfer": protocol.transfer_to_json(transfer),
                    "epoch": epoch,
                    "previous": self.node_id,
                },
            )
        except errors.StoreError as exc:
            # it may have adopted before the answer was lost: settled at the next contact
            logger.warning(
                "hand-off of %s to %s unsettled: %s",
                pipeline.id,
                target.node_id,
                exc,
                extra={"action": "handoff"},
            )
            return False
        except errors.FredicaError as exc:
            logger.warning(
                "%s refused pipeline %s: %s",
                target.node_id,
                pipeline.id,
                exc,
                extra={"action": "handoff"},
            )
            await self._unfreeze(pipeline.id)
            return False
        crash_point("handoff_adopted")
        adopted = protocol.decode("transfer", protocol.transfer_from_json, answer["transfer"])
        await self._finish_handoff(adopted, target)
        return True

    async def _finish_handoff(self, adopted: Transfer, target: RemoteOwner) -> None:
        await self._store.demote_pipeline(adopted)
        self._router.moved([t for t in adopted.tasks if t.claimed_by == self.node_id], target)
        crash_point("handoff_demoted")
        await self._unfreeze(adopted.pipeline.id)
        self.moves += 1
        self._changed(adopted.pipeline.id)

    async def _settle_handoffs(self, peer: RemoteOwner) -> None:
        """Hand-offs to `peer` left unsettled (a lost answer, a crash): did it adopt?"""
        mine = {
            pid: h
            for pid, h in self._handoffs.items()
            if h.get("target") == peer.node_id and pid not in self._handing_off
        }
        if not mine:
            return
        answer = await peer.call("GET", "/cluster/owners", created_by=self.node_id)
        taken = {str(i[0]): int(i[2]) for i in answer.get("moved", []) if i[1] == peer.node_id}
        for pipeline_id, record in mine.items():
            if pipeline_id in self._handing_off or self._handoffs.get(pipeline_id) is not record:
                continue  # a hand-off of it began meanwhile: the answer may predate its adopt
            if taken.get(pipeline_id, -1) >= int(self._handoffs[pipeline_id]["epoch"]):
                await self._demote(pipeline_id, taken[pipeline_id], peer)
            logger.info(
                "hand-off of %s to %s settled: %s",
                pipeline_id,
                peer.node_id,
                "it owns it" if pipeline_id in taken else "this node keeps it",
                extra={"action": "handoff"},
            )
            await self._unfreeze(pipeline_id)

    async def _freeze(self, pipeline_id: str) -> None:
        tasks = await self._store.list_tasks(pipeline_id, limit=MAX_PIPELINES)
        self._frozen.update(t.id for t in tasks)

    async def _unfreeze(self, pipeline_id: str) -> None:
        with contextlib.suppress(errors.NotFound):
            tasks = await self._store.list_tasks(pipeline_id, limit=MAX_PIPELINES)
            self._frozen.difference_update(t.id for t in tasks)
        replica = await self._store.replica_tasks(pipeline_id, limit=MAX_PIPELINES)
        self._frozen.difference_update(t.id for t in replica)
        if self._handoffs.pop(pipeline_id, None) is not None:
            await self._save_handoffs()

    async def _save_handoffs(self) -> None:
        await self._store.set_config(KEY_HANDOFFS, json.dumps(self._handoffs))

    # --- the new owner's side -----------------------------------------------------------------
    async def adopt(self, body: JSON) -> JSON:
        """`POST /cluster/adopt`: take a pipeline a peer hands off; answers with the rows as
        adopted (the old owner keeps them as its replica)."""
        transfer = protocol.decode("transfer", protocol.transfer_from_json, body.get("transfer"))
        epoch = body.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise errors.InvalidRequest("epoch must be an integer")
        previous = _text(body, "previous")
        if transfer.pipeline.owner_id != previous:
            raise errors.InvalidRequest(
                f"pipeline {transfer.pipeline.id} is owned by {transfer.pipeline.owner_id}, "
                f"not by {previous}"
            )
        async with self._lock:
            adopted = await self._store.adopt_pipeline(
                transfer, epoch, {"previous": previous, "how": "handoff"}
            )
            crash_point("adopt_committed")
            if adopted:
                # what this node runs of it reports here now, and what it kept for the old
                # owner applies here
                ids = {t.id for t in transfer.tasks}
                self._router.moved([t for t in self._router.held_tasks() if t.id in ids], None)
                await self._store.outbox_readdress(list(ids), self.node_id)
                await self._router.deliver_own_outbox()
                self.moves += 1
                await self._refresh_took_over()
                self._changed(transfer.pipeline.id)
                # the peers' reports of its tasks come here now, and the results they keep
                # for the old owner are readdressed (else this node, hearing nothing of them,
                # would reclaim them and run them twice); told from here, not by the old
                # owner, so that it holds also when the old owner dies right after this
                self._announcing.add(
                    asyncio.create_task(self._announce([transfer], previous), name="announce")
                )
                self._announcing = {t for t in self._announcing if not t.done()}
        answer = await self._store.export_pipeline(transfer.pipeline.id)
        return {"adopted": adopted, "transfer": protocol.transfer_to_json(answer)}

    async def moved_for(self, created_by: str) -> JSON:
        """`GET /cluster/owners`: the pipelines `created_by` made that another node owns now,
        as far as this node knows."""
        moved = await self._store.moved_away(created_by)
        return {"moved": [list(m) for m in moved]}

    async def transfer_for(self, pipeline_id: str) -> JSON:
        """`GET /cluster/pipelines/transfer`: a pipeline as this node has it (its own rows,
        else its replica), for an old owner demoting itself."""
        try:
            transfer = await self._store.export_pipeline(pipeline_id)
        except errors.NotFound:
            transfer = await self._store.replica_transfer(pipeline_id)
        return protocol.transfer_to_json(transfer)

    async def _refresh_took_over(self) -> None:
        by_creator: dict[str, list[str]] = {}
        for pipeline_id, creator, epoch in await self._store.adopted():
            if creator != self.node_id:
                by_creator.setdefault(creator, []).append(f"{pipeline_id}:{epoch}")
        self.took_over = {
            creator: hashlib.sha256(";".join(items).encode()).hexdigest()[:16]
            for creator, items in by_creator.items()
        }


def _text(body: JSON, key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise errors.InvalidRequest(f"{key} must be a non-empty string")
    return value
