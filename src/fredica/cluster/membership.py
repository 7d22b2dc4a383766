"""Who is in the cluster (seed 001 §6.1, DESIGN §6): the peers this node knows, how to reach
them, and whether they answer.

A node starts from `cluster.seeds` (host:port) and learns the rest by peer exchange: every
refresh asks each known peer for `/cluster/info` (who it is) and, through `POST /cluster/peers`,
introduces itself and asks whom the peer knows; so a node that lists no seeds learns the nodes
that list it. A peer that answers is `online`; one that stops answering is `offline` after a few
failed calls and is tried again with a growing pause. Each refresh writes what was learned into
this node's node registry (the web UI's nodes page, file fetching), stamped by this node's
clock: when it last heard from the peer, never the peer's own clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from fredica.cluster.remote import RemoteOwner
from fredica.domain import errors
from fredica.domain.models import JSON
from fredica.domain.node_state import REPORTED_INFO
from fredica.store.base import NodeRecord

logger = logging.getLogger(__name__)

OFFLINE_AFTER_FAILURES = 3
MAX_BACKOFF_SEC = 30.0
#: a peer that stopped answering is asked again after at most this many refresh intervals
BACKOFF_INTERVALS = 8


@dataclass
class Peer:
    """A peer as this node sees it."""

    address: str
    node_id: str | None = None
    owner: RemoteOwner | None = None
    info: JSON = field(default_factory=dict)
    failures: int = 0
    retry_at: float = 0.0  # monotonic; no calls before
    last_ok: float | None = None  # monotonic
    #: this node's restart was verified with the peer (its earlier claims there settled):
    #: only then may this node claim from it
    joined: bool = False

    @property
    def online(self) -> bool:
        return self.owner is not None and self.failures < OFFLINE_AFTER_FAILURES


class Membership:
    """The peer table, refreshed every `interval` seconds (see the module docstring)."""

    def __init__(
        self,
        self_id: str,
        self_address: str,
        secret: str,
        seeds: list[str],
        interval: float,
        record: Callable[[NodeRecord], Awaitable[None]],
        timeout: float = 5.0,
        on_contact: Callable[[RemoteOwner, bool], Awaitable[None]] | None = None,
        instance: str = "",
    ) -> None:
        """`on_contact(owner, first)` runs after every answer of a peer (`first`: the first
        since this node started); the peer is offered for claims only once the first one
        returned without error."""
        self._on_contact = on_contact
        #: this process (a node id seen with another instance is a copied data dir)
        self.instance = instance
        #: address -> what is wrong: nodes answering with this node's id
        self.conflicts: dict[str, str] = {}
        self.self_id = self_id
        self.self_address = self_address.rstrip("/")
        self._secret = secret
        self.interval = interval
        self._record = record
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False)
        #: how long the refresh waits for a peer's `/cluster/info`: a few rounds, so that a
        #: suspended peer (its socket accepts, nobody answers) is offline in seconds and does
        #: not hold up the refresh of the others (the rounds run together)
        self.probe_timeout = min(timeout, max(1.0, 4 * interval))
        self._peers: dict[str, Peer] = {}  # address -> peer
        #: more addresses of a known peer, or of this node: not asked again
        self._aliases: set[str] = set()
        for seed in seeds:
            self.add(seed)
        self._task: asyncio.Task[None] | None = None
        #: address -> the question to that peer in flight
        self._asking: dict[str, asyncio.Task[None]] = {}

    @property
    def enabled(self) -> bool:
        return bool(self._secret)

    def add(self, address: str) -> None:
        """Remember a peer address (`host:port` or a URL)."""
        url = address if "://" in address else f"http://{address}"
        url = url.rstrip("/")
        if url != self.self_address and url not in self._peers and url not in self._aliases:
            self._peers[url] = Peer(url)

    # --- the router's view (router.Owners) -------------------------------------------------
    def owners(self) -> list[RemoteOwner]:
        now = time.monotonic()
        return [
            p.owner
            for p in sorted(self._peers.values(), key=lambda p: p.node_id or p.address)
            if p.owner is not None and p.online and p.joined and p.retry_at <= now
        ]

    def owner(self, node_id: str) -> RemoteOwner | None:
        return next((p.owner for p in self._peers.values() if p.node_id == node_id), None)

    def unreachable(self, owner: RemoteOwner, exc: errors.StoreError) -> None:
        """A call of the router failed: pause calls to the peer (once per pause; the refresh
        loop finds out when it answers again)."""
        peer = self._peers.get(owner.address)
        if peer is not None and peer.retry_at <= time.monotonic():
            self._failed(peer, exc)

    def peers(self) -> list[Peer]:
        return list(self._peers.values())

    # --- refresh ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None and self.enabled:
            self._task = asyncio.create_task(self._loop(), name="fredica-membership")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        asking = list(self._asking.values())
        for task in asking:
            task.cancel()
        if asking:
            await asyncio.wait(asking)
        await self._client.aclose()

    async def _loop(self) -> None:
        while True:
            try:
                await self.refresh(wait=False)  # a slow peer does not hold up the others
            except Exception:  # never let discovery die
                logger.exception("membership refresh failed", extra={"action": "membership"})
            await asyncio.sleep(self.interval)

    async def refresh(self, wait: bool = True) -> None:
        """Ask every known peer who it is and whom it knows (concurrently). With `wait`,
        returns once all answered or failed. Without (the refresh loop), each peer's question
        runs on its own: a peer that takes its probe timeout to fail (suspended: its socket
        accepts, nobody answers) does not hold up the next rounds of the others, so their
        answers keep coming every interval (the ownership lease counts on them); a peer
        still being asked from an earlier round is not asked twice."""
        now = time.monotonic()
        due = [p for p in list(self._peers.values()) if p.retry_at <= now]
        if wait:
            await asyncio.gather(*(self._refresh(p) for p in due))
            return
        for peer in due:
            if peer.address not in self._asking:
                self._ask(peer)

    def _ask(self, peer: Peer) -> None:
        task = asyncio.create_task(self._guarded(peer), name=f"fredica-peer-{peer.address}")
        self._asking[peer.address] = task
        task.add_done_callback(lambda _: self._asking.pop(peer.address, None))

    async def _guarded(self, peer: Peer) -> None:
        try:
            await self._refresh(peer)
        except Exception:  # never let discovery die
            logger.exception(
                "membership refresh of %s failed", peer.address, extra={"action": "membership"}
            )

    async def _refresh(self, peer: Peer) -> None:
        probe = peer.owner or RemoteOwner("?", peer.address, self._secret, self._client)
        try:
            info = await probe.info(self.probe_timeout)
            copy = info.get("node_id") == self.self_id and info.get("instance") != self.instance
            try:
                known = await probe.call(
                    "POST",
                    "/cluster/peers",
                    {
                        "node_id": self.self_id,
                        "address": self.self_address,
                        "instance": self.instance,
                    },
                )
            except errors.Conflict:
                if not copy:
                    raise
            if copy:  # it heard of us too (and refused us): neither takes the other for a peer
                self._conflict(peer.address)
                return
        except errors.StoreError as exc:
            self._failed(peer, exc)
            if peer.failures == OFFLINE_AFTER_FAILURES:
                await self._write(peer)  # now offline (last seen: the last answer)
            return
        except errors.FredicaError as exc:  # e.g. 401: a wrong secret on one side
            logger.warning(
                "peer %s refused us: %s", peer.address, exc, extra={"action": "membership"}
            )
            self._failed(peer, exc)
            return
        node_id = str(info.get("node_id") or "")
        known_as = next(
            (p for p in self._peers.values() if p.node_id == node_id and p is not peer), None
        )
        if not node_id or node_id == self.self_id or known_as is not None:
            # ourselves, or a peer already known at another address (the first one stays:
            # a seed may name a route, e.g. a proxy, that peer exchange would bypass)
            self._peers.pop(peer.address, None)
            self._aliases.add(peer.address)
            return
        owner = self._answered(peer, node_id, info)
        await self._contact(peer, owner)
        for item in known.get("peers", []):
            address = item.get("address") if isinstance(item, dict) else None
            if address:
                self.add(str(address))
        await self._write(peer)

    def _answered(self, peer: Peer, node_id: str, info: JSON) -> RemoteOwner:
        if peer.node_id != node_id or peer.owner is None:
            if peer.node_id is None:
                logger.info(
                    "peer %s at %s joined", node_id, peer.address, extra={"action": "peer_up"}
                )
            peer.node_id = node_id
            peer.owner = RemoteOwner(node_id, peer.address, self._secret, self._client)
        if peer.failures >= OFFLINE_AFTER_FAILURES:
            logger.info("peer %s is back", node_id, extra={"action": "peer_up"})
        peer.failures = 0
        peer.retry_at = 0.0
        peer.last_ok = time.monotonic()
        peer.info = info
        return peer.owner

    async def _contact(self, peer: Peer, owner: RemoteOwner) -> None:
        if self._on_contact is None:
            peer.joined = True
            return
        try:
            await self._on_contact(owner, not peer.joined)
        except errors.FredicaError as exc:
            logger.warning("peer %s: %s", owner.node_id, exc, extra={"action": "membership"})
        else:
            peer.joined = True

    def _conflict(self, address: str) -> None:
        """Another process answers with this node's id: its data dir is a copy of this one.
        It is never taken for a peer (each would claim the other's rows as its own)."""
        self._peers.pop(address, None)
        self._aliases.add(address)
        if address not in self.conflicts:
            message = (
                f"the node at {address} has this node's id {self.self_id}: its data dir is a "
                "copy of this one. Give it a fresh data dir (or remove node.id from its "
                "worker.yaml) and restart it"
            )
            self.conflicts[address] = message
            logger.error("%s", message, extra={"action": "node_id_conflict"})

    def refused_copy(self, address: str) -> None:
        """A node with this node's id introduced itself (see `_conflict`)."""
        self._conflict(address.rstrip("/"))

    def _failed(self, peer: Peer, exc: errors.FredicaError) -> None:
        peer.failures += 1
        ceiling = min(MAX_BACKOFF_SEC, self.interval * BACKOFF_INTERVALS)
        pause = min(ceiling, self.interval * 2 ** max(0, peer.failures - 1))
        peer.retry_at = time.monotonic() + pause
        if peer.failures == OFFLINE_AFTER_FAILURES:
            logger.warning(
                "peer %s offline: %s",
                peer.node_id or peer.address,
                exc,
                extra={"action": "peer_down"},
            )

    async def _write(self, peer: Peer) -> None:
        if peer.node_id is None:
            return
        info: dict[str, Any] = dict(peer.info)
        try:
            await self._record(
                NodeRecord(
                    id=peer.node_id,
                    hostname=str(info.get("hostname") or ""),
                    capabilities=list(info.get("capabilities") or []),
                    status=str(info.get("status") or "online") if peer.online else "offline",
                    max_workers=int(info.get("max_workers") or 0),
                    last_seen_at=0.0,
                    address=peer.address,
                    info={k: info[k] for k in REPORTED_INFO if k in info},
                )
            )
        except errors.StoreError as exc:
            logger.warning("peer %s not recorded: %s", peer.node_id, exc)

    # --- pushes -----------------------------------------------------------------------------
    async def wake_peers(self) -> None:
        """Tell the online peers that this node has new ready work (they claim at once
        instead of at their next poll). Best effort."""
        owners = self.owners()
        if owners:
            await asyncio.gather(*(self._wake(o) for o in owners), return_exceptions=True)

    async def _wake(self, owner: RemoteOwner) -> None:
        with contextlib.suppress(errors.FredicaError):
            await owner.call("POST", "/cluster/wake", {"node_id": self.self_id})
