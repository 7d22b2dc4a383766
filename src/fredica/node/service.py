"""The node service: the use cases every face (HTTP API, web UI, CLI) calls.

Nothing above this module touches a store: the faces call these methods, and this module calls
the owner-store contract (`store.base.TaskStore`) and the engine. Which store a node uses is
decided in `node.compose`, the only module that names a concrete store class. A single node is
a cluster of one: it owns the pipelines it creates (`owner_id` = itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import socket
import time
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fredica import auth
from fredica.capabilities import catalog, task_types
from fredica.cluster import discovery, files
from fredica.cluster import membership as membership_mod
from fredica.cluster.gate import ClaimGate, PeerView
from fredica.cluster.membership import Membership
from fredica.cluster.remote import RemoteOwner
from fredica.cluster.router import OwnerRouter
from fredica.config import schema as config
from fredica.domain import errors, models, node_state
from fredica.domain import library as library_rules
from fredica.domain.clock import Clock, SystemClock
from fredica.domain.history import ListFilter
from fredica.domain.models import ShutdownType
from fredica.domain.wire import event_from_json, pipeline_from_json, task_from_json
from fredica.engine.backends import BackendSelector
from fredica.engine.cloudlimits import CloudLimits
from fredica.engine.registry import Registry
from fredica.engine.wakeups import CoalescedCall
from fredica.engine.worker import EngineSettings, WorkerEngine
from fredica.executors import network_test, tasklog
from fredica.node import (
    cleanup,
    cluster,
    cluster_reads,
    disk,
    gctune,
    notify,
    ownership,
    quality,
    recovery,
    servable,
    stranded,
    sweeper,
    task_files,
)
from fredica.node import libraries as node_libraries
from fredica.node import materials as node_materials
from fredica.node import settings as node_settings
from fredica.node import stats as node_stats
from fredica.node import uploads as node_uploads
from fredica.node.lock import DataDirLock
from fredica.node.peers import PeerDesk
from fredica.pipelines.request import NetworkTestRequest, PipelineRequest
from fredica.pipelines.templates import BuildContext
from fredica.store.base import (
    CancelOutcome,
    ChangeBatch,
    NodeRecord,
    Page,
    RecoveryReport,
    RestartLogEntry,
    Signal,
    TaskStore,
    WorkStore,
)

logger = logging.getLogger(__name__)

DB_FILENAME = "fredica.db"
KEY_LAST_SHUTDOWN = "last_shutdown_type"
KEY_PREVIOUS_SHUTDOWN = "previous_shutdown_type"
KEY_RECOVERY = "startup_recovery"
REPLICA_BATCH = 500  # rows per replication pull
STOP_STEP_SEC = 10.0  # seconds a step of stopping may take beyond the shutdown grace
HANDOFF_STOP_SEC = 20.0  # seconds a clean stop may spend handing its pipelines to a peer
NOTIFY_FLUSH_SEC = 5.0  # seconds a stopping node gives its webhook for the notices left
PUSH_INTERVAL = 0.25  # seconds: at most one change notice to the peers per interval
KEY_DRAINING = "draining"  # "1" while drained: survives a restart until `undrain`
NETWORK_FS_TYPES = frozenset({"nfs", "nfs4", "cifs", "smbfs", "smb3", "9p", "fuse.sshfs", "afpfs"})


@dataclass(frozen=True)
class NodeSettings:
    node_id: str
    data_dir: Path
    hostname: str = field(default_factory=socket.gethostname)
    host: str = "127.0.0.1"
    port: int = 7631
    engine: EngineSettings | None = None
    plugins: tuple[str, ...] = ()
    extra_task_types: frozenset[str] = frozenset()
    #: the node's worker.yaml (None: every default, as an empty file would give)
    config: config.WorkerConfig | None = None
    config_path: Path | None = None
    #: "" for the embedded SQLite file in `data_dir`, else a postgresql:// URL
    store_url: str = ""
    #: run the embedded SQLite store in a process of its own (`store.process`; a node built
    #: in-process for tests and tools keeps it on a thread unless asked)
    store_process: bool = False
    max_body_bytes: int = 1_048_576

    def engine_settings(self) -> EngineSettings:
        return self.engine or EngineSettings(node_id=self.node_id, data_dir=self.data_dir)


class ChangeFeed:
    """A version number that moves on every change, for long-polls and server-sent events."""

    def __init__(self) -> None:
        self.version = 0
        self._event = asyncio.Event()
        self.last_pipeline: str = ""
        #: set when the node is shutting down: long-lived readers (event streams) end
        self.closed = asyncio.Event()

    def close(self) -> None:
        self.closed.set()
        self._event.set()

    def notify(self, pipeline_id: str) -> None:
        self.version += 1
        self.last_pipeline = pipeline_id
        self._event.set()

    @property
    def is_closed(self) -> bool:
        return self.closed.is_set()

    async def wait(self, after: int, timeout: float) -> int:
        """Wait until the version exceeds `after` (or timeout, or the feed closes); returns the
        current version."""
        while self.version <= after and not self.closed.is_set():
            self._event.clear()
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except TimeoutError:
                break
        return self.version


class RegistryPeers:
    """Peers' addresses from the node registry (`PeerDirectory` of `cluster.files`): the
    membership code keeps a row for every peer it knows, with the address it listens on."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store

    async def address(self, node_id: str) -> str | None:
        rows = await self._store.list_nodes()
        return next((row.address for row in rows if row.id == node_id), None)


class Node:
    def __init__(
        self,
        settings: NodeSettings,
        store: TaskStore,
        registry: Registry,
        clock: Clock | None = None,
    ) -> None:
        """Use `node.compose.build_node`, which opens the configured store."""
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.registry = registry
        self._store = store
        store.set_hooks(registry.spawn_hook)
        self.changes = ChangeFeed()
        self._changed_call = CoalescedCall(lambda: self.changes.notify(""))
        cfg = settings.config or config.parse_config({}, "defaults")
        #: this process: a node answering with this node's id and another instance is a copy
        self.instance = uuid.uuid4().hex
        #: the home cluster (a secret and no shared database): peers claim each other's work
        self.membership: Membership | None = None
        self.router: OwnerRouter | None = None
        work_store: WorkStore = store
        if cfg.cluster.cluster_secret and not settings.store_url:
            self.membership = Membership(
                settings.node_id,
                self.address,
                cfg.cluster.cluster_secret,
                list(cfg.cluster.seeds),
                settings.engine_settings().heartbeat_interval,
                store.upsert_node,
                on_contact=self._peer_contact,
                instance=self.instance,
            )
            work_store = self.router = OwnerRouter(store, self.membership, self.peer_info)
        #: the home cluster: this node's pipelines move to a peer when it leaves or is silent
        self.ownership: ownership.Ownership | None = None
        #: zeroconf announce and browse (`cluster.mode: auto`); seeds only in `manual`
        self.discovery: discovery.Discovery | None = None
        if self.membership is not None and cfg.cluster.mode == "auto":
            self.discovery = discovery.Discovery(
                settings.node_id, settings.host, settings.port, self.membership
            )
        self._wake_peers = CoalescedCall(self._push_wake)
        self._last_push = 0.0
        self._push_later = False
        self._pulling: set[str] = set()
        self.engine = WorkerEngine(
            work_store,
            self.registry,
            settings.engine_settings(),
            self.clock,
            on_change=self.changes.notify,
        )
        if self.membership is not None or settings.store_url:
            # with peers, a node leaves work to better ones (seed 001 §6.3)
            poll = settings.engine_settings().poll_interval
            self.engine.gate = ClaimGate(settings.node_id, cfg.scheduling.defer_window_polls * poll)
        self.peers = PeerDesk(
            store,
            self.engine,
            self.peer_info,
            self.changes.notify,
            self.membership.add if self.membership is not None else None,
            self._owner_changed,
            self.membership.refused_copy if self.membership is not None else None,
        )
        if self.membership is not None and self.router is not None:
            self.ownership = ownership.Ownership(
                settings.node_id,
                store,
                self.membership,
                self.router,
                cfg.cluster.originator_wait_sec,
                self.clock,
                self.changes.notify,
                self._owner_changed,
                self.engine.signal_cancel,
                takeover=cfg.cluster.takeover,
            )
            self.router.authority = self.peers.authority = self.ownership
            self.engine.gate_for = self.router.gate_for
        self._handoff_on_stop = cfg.cluster.handoff_on_stop
        self._always_on = cfg.node.always_on
        self._up_since = time.monotonic()
        self.auth = auth.Authenticator(cfg.auth, self.clock, settings.config_path)
        self.previous_shutdown: ShutdownType = ShutdownType.FIRST_START
        self.recovery: RecoveryReport | None = None
        self._crash = recovery.CrashRecovery(store, settings.node_id, self.clock)
        self.started_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._presence: asyncio.Task[None] | None = None
        self._stranded: asyncio.Task[None] | None = None
        self._lock = DataDirLock(settings.data_dir)
        self._background: set[asyncio.Future[Any]] = set()
        hashes = files.FileHashes()
        private = [settings.config_path] if settings.config_path is not None else []
        #: what peers may read from this node (`/files/serve`), and how it reads theirs
        self.files = files.LocalFiles(settings.data_dir, hashes, private)
        self.peer_files = files.PeerFiles(
            settings.data_dir, self.cluster_secret, RegistryPeers(store), hashes=hashes
        )
        #: seed 001 §7.7: disk-heavy work waits for room, and the data dir is cleaned up
        self.disk = disk.DiskGate(
            settings.data_dir,
            settings.node_id,
            int(cfg.capabilities.download.disk_min_free_gb * disk.GIB),
            disk.disk_task_types(registry.task_types, self._plugin_functions()),
        )
        self.engine.disk = self.disk
        self.sweeper = sweeper.Sweeper(
            settings.data_dir,
            sweeper.StoreFacts(store, settings.node_id, settings.data_dir, self.engine.held_tasks),
            cleanup.Policy(
                keep_intermediate=cfg.storage.intermediate_cleanup == "never",
                retain_sec=cfg.storage.results_retain_days * cleanup.DAY,
                peer_cache_max_bytes=int(cfg.storage.peer_cache_max_gb * disk.GIB),
            ),
            self.clock,
            cfg.storage.cleanup_interval_sec,
            on_freed=self.disk.forget_usage,
        )
        self._sweeping: asyncio.Task[None] | None = None
        #: worker.yaml `notifications`: a webhook told when a pipeline of this node ends
        self.notifier = notify.Notifier(cfg.notifications, settings.node_id, self.address)
        #: the notifier's side loops while it runs: (follow the changes, send)
        self._notifying: tuple[asyncio.Task[None], asyncio.Task[None]] | None = None
        #: the settings page, uploads, media folders and charts (their own modules)
        self.settings_desk = node_settings.SettingsDesk(settings.config_path, cfg)
        self.uploads = node_uploads.Uploads(
            settings.data_dir,
            lambda: self.settings_desk.current().storage.max_upload_mb * node_uploads.MB,
        )
        self.resumable_uploads = node_uploads.ResumableUploads(self.uploads)
        self.media_folders = node_uploads.MediaFolders(
            lambda: list(self.settings_desk.current().media_folders)
        )
        self.stats = node_stats.Stats(store)
        self.materials = node_materials.Materials(store, settings.node_id, settings.data_dir)
        #: watch folders (`libraries:`): new and changed files become pipelines
        self.libraries = node_libraries.Libraries(
            cfg.libraries,
            settings.node_id,
            store,
            self.clock,
            self._create_for_library,
            self._existing_pipeline,
            self.library_watcher,
            lambda: self.registry.template_names,
        )
        self.libraries.check()

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    # --- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Detect how the last run ended, recover, register this node, start the engine."""
        self._loop = asyncio.get_running_loop()
        self.lock_data_dir()
        self._warn_if_exposed()
        # commits by other processes sharing the store (PostgreSQL) refresh the UI too
        self._store.subscribe(self._on_store_signal)
        warn_if_network_fs(self.settings.data_dir)
        cfg = self.settings.config or config.parse_config({}, "defaults")
        selector = await asyncio.to_thread(
            BackendSelector.from_config, cfg, self._plugin_functions()
        )
        selector.limits = CloudLimits.from_config(
            cfg,
            selector.capabilities,
            self.settings.data_dir,
            self.auth.cloud_budget,
            self.auth.cloud_refusal,
        )
        self.engine.selector = selector
        updates = selector.runtime_cache_updates(cfg)
        if updates and self.settings.config_path is not None:
            # cache the hardware scores in worker.yaml `_runtime` (comments survive)
            await asyncio.to_thread(config.write_runtime, self.settings.config_path, updates)
        now = self.clock.now()
        last = await self._store.get_config(KEY_LAST_SHUTDOWN)
        if last is None:
            self.previous_shutdown = ShutdownType.FIRST_START
        elif last == ShutdownType.CLEAN.value:
            self.previous_shutdown = ShutdownType.CLEAN
        else:  # PENDING_CHECK left behind: the process never reached a clean stop
            self.previous_shutdown = ShutdownType.CRASH
        await self._store.set_config(KEY_PREVIOUS_SHUTDOWN, self.previous_shutdown.value)
        await self._store.set_config(KEY_LAST_SHUTDOWN, ShutdownType.PENDING_CHECK.value)
        if self.membership is not None:
            # whoever ran this owner's tasks while it was down could not reach it: their
            # silence counts from now, before the liveness monitor first looks
            forgiven = await self._store.forgive_silence()
            if forgiven:
                logger.info("%d task(s) running on peers: heard from now", forgiven)
        if self.cluster_secret:  # without it no peer would answer
            self.engine.peer_files = self.peer_files
        if await self._store.get_config(KEY_DRAINING) == "1":
            self.engine.set_draining(True)  # before the engine's first claim
            logger.info(
                "node is draining (fredica node undrain ends it)", extra={"action": "drain"}
            )
        if self.ownership is not None:
            # before the engine's first claim: unsettled hand-offs stay frozen
            await self.ownership.start(await self._last_presence())
        gctune.tune_once()  # start-up has built what lives as long as the process
        self.recovery = await self.engine.start()
        await self._store.set_config(KEY_RECOVERY, json.dumps(self.recovery.summary()))
        await self.register_self()
        self.started_at = now
        self._presence = asyncio.create_task(self._presence_loop(), name="fredica-presence")
        self._stranded = asyncio.create_task(
            stranded.watch(self.fail_stranded, self.settings.engine_settings().poll_interval),
            name="fredica-stranded",
        )
        self._sweeping = asyncio.create_task(self.sweeper.run(self.changes), name="fredica-sweep")
        if self.notifier.enabled:
            await self._start_notifier()
        self.libraries.start()
        if self.membership is not None:
            self.membership.start()
        if self.discovery is not None:
            await self.discovery.start()
        logger.info(
            "node %s started (previous shutdown %s)",
            self.node_id,
            self.previous_shutdown.value,
            extra={"action": "node_start"},
        )

    async def _last_presence(self) -> float | None:
        """When this node last recorded itself in its node registry (its own clock)."""
        mine = next((n for n in await self._store.list_nodes() if n.id == self.node_id), None)
        return mine.last_seen_at if mine is not None and mine.last_seen_at else None

    def _plugin_functions(self) -> dict[str, catalog.CapabilityFunction | None]:
        """Capability functions of executor types the seed's table does not know (plugins)."""
        out: dict[str, catalog.CapabilityFunction | None] = {}
        for task_type in self.registry.task_types:
            if task_types.is_known_task_type(task_type):
                continue
            executor = self.registry.executor(task_type)
            needed = executor.capability if executor is not None else None
            out[task_type] = catalog.CapabilityFunction(needed) if needed else None
        return out

    async def register_self(self, status: str | None = None) -> None:
        engine = self.settings.engine_settings()
        if status is None:
            status = self.state().value
        await self._store.upsert_node(
            NodeRecord(
                id=self.node_id,
                hostname=self.settings.hostname,
                capabilities=self._capability_rows(),
                status=status,
                max_workers=engine.max_workers,
                last_seen_at=0.0,  # the store stamps its own time
                address=self.address,
                info={
                    "task_types": sorted(self.servable_types()),
                    "running": self.engine.running_count,
                    "quarantine": self.engine.quarantine.reason
                    if self.engine.quarantine.active
                    else None,
                    # what the peers' score gate reads (seed 001 §6.3)
                    "free_slots": self.free_slots,
                    "scores": self.type_scores(),
                    **self.disk_info(),
                    "active_api_calls": self.active_api_calls(),
                    "cloud_spend_today": self.cloud_spend_today(),
                },
            )
        )

    def _warn_if_exposed(self) -> None:
        if self.settings.host in ("127.0.0.1", "::1", "localhost") or self.auth.enabled:
            return
        logger.warning(
            "LISTENING ON %s WITHOUT AUTHENTICATION: anyone who can reach this address can "
            "create and cancel work. Set auth.mode: token in worker.yaml (fredica token create) "
            "or listen on 127.0.0.1",
            self.settings.host,
            extra={"action": "exposed"},
        )

    @property
    def cluster_secret(self) -> str:
        """`cluster.cluster_secret` ("" when unset: the node answers no peer requests)."""
        cfg = self.settings.config
        return cfg.cluster.cluster_secret if cfg is not None else ""

    @property
    def address(self) -> str:
        """The URL peers reach this node at (a wildcard listen address is replaced by this
        machine's own LAN address: `0.0.0.0` means nothing to another machine)."""
        return f"http://{discovery.advertised_host(self.settings.host)}:{self.settings.port}"

    def lock_data_dir(self) -> None:
        """Take this node's data dir, or raise `DataDirInUse` naming the node that has it."""
        self._lock.acquire(self.address)

    async def _presence_loop(self) -> None:
        """Refresh this node's row in the node registry every heartbeat interval: with a
        shared store (PostgreSQL) that row is how the other nodes see this one."""
        interval = self.settings.engine_settings().heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            try:
                await self.register_self()
                await self.refresh_gate()
                await self.refresh_cloud_limits()
            except errors.StoreError as exc:
                logger.warning("presence not recorded: %s", exc, extra={"action": "presence"})

    def _on_store_signal(self, signal: Signal) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        if signal is Signal.CHANGED:
            self._changed_call.schedule(self._loop)
        if self.membership is not None:
            # peers claim new ready work and refresh their replica of these rows (one push
            # per PUSH_INTERVAL at most, the last change always pushed)
            self._wake_peers.schedule(self._loop)

    async def _peer_contact(self, owner: RemoteOwner, first: bool) -> None:
        """A peer answered: deliver the results waiting for it; the first time since this node
        started, settle what this node held there before it crashed (after the results, so a
        result kept across the crash still counts)."""
        if self.router is None:
            return
        if self.ownership is not None:
            await self.ownership.on_contact(owner, first)
        await self.router.deliver_outbox(owner)
        await self.pull_replica(owner)
        if first:
            answer = await owner.verify(self.node_id)
            if answer.get("interrupted"):
                logger.warning(
                    "owner %s requeued what this node held there before its restart: %s",
                    owner.node_id,
                    answer["interrupted"],
                    extra={"action": "verify"},
                )

    async def pull_replica(self, owner: RemoteOwner, max_batches: int = 20) -> int:
        """Read `owner`'s changes since the last pull into this node's replica (on start, on
        every contact, and when the owner says it changed); returns the rows applied."""
        applied = 0
        for _ in range(max_batches):
            cursor = await self._store.replica_cursor(owner.node_id)
            batch = await owner.diff(cursor, REPLICA_BATCH)
            # applied even when empty: the replica's freshness is when the owner last answered
            applied += await self._store.apply_replica(owner.node_id, batch)
            if len(batch.tasks) + len(batch.pipelines) < REPLICA_BATCH:
                break
        if applied:
            self.changes.notify("")
        return applied

    def _push_wake(self) -> None:
        """This node's rows changed: the peers may claim new work and pull the changes now
        rather than at their next poll and refresh."""
        if self.membership is None or not self.membership.owners() or self._loop is None:
            return
        wait = self._last_push + PUSH_INTERVAL - time.monotonic()
        if wait > 0:
            if not self._push_later:
                self._push_later = True
                self._loop.call_later(wait, self._pushed_later)
            return
        self._last_push = time.monotonic()
        self._background_call(self.membership.wake_peers())

    def _pushed_later(self) -> None:
        self._push_later = False
        self._push_wake()

    def _owner_changed(self, node_id: str) -> None:
        """A peer said its rows changed: pull them (one pull per owner at a time)."""
        owner = self.membership.owner(node_id) if self.membership is not None else None
        if owner is None or node_id in self._pulling:
            return
        self._pulling.add(node_id)

        async def pull() -> None:
            try:
                await self.pull_replica(owner)
            except errors.FredicaError as exc:
                logger.info("replica of %s not pulled: %s", node_id, exc)
            finally:
                self._pulling.discard(node_id)

        self._background_call(pull())

    def _background_call(self, coro: Coroutine[Any, Any, None]) -> None:
        future = asyncio.ensure_future(coro)
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    async def _forward_quietly(self, claimer: str, task_id: str) -> None:
        try:
            await self._forward(claimer, task_id, "cancel")
        except errors.FredicaError as exc:
            logger.info("cancel of %s not forwarded: %s", task_id, exc)

    def peer_info(self) -> dict[str, Any]:
        """What this node tells its peers about itself (`/cluster/info`, heartbeats), with its
        machine's cores, load, memory and free disk for their nodes page (a statvfs and a read
        of /proc/meminfo: cheap enough to run inline)."""
        engine = self.settings.engine_settings()
        running = self.engine.running_count
        return {
            **cluster.local_stats(self.settings.data_dir),
            "node_id": self.node_id,
            "instance": self.instance,
            "hostname": self.settings.hostname,
            "address": self.address,
            "status": self.state().value,
            "max_workers": engine.max_workers,
            "running": running,
            "free_slots": max(0, engine.max_workers - running),
            "task_types": sorted(self.engine.claimable_types()),
            "capabilities": self._capability_rows(),
            "scores": self.type_scores(),
            **self.disk_info(),
            "active_api_calls": self.active_api_calls(),
            "always_on": self._always_on,
            "uptime_sec": round(time.monotonic() - self._up_since, 1),
            **(self.ownership.info() if self.ownership is not None else {}),
            "cloud_spend_today": self.cloud_spend_today(),
            "libraries": self.libraries.names(),
        }

    def cloud_spend_today(self) -> dict[str, Any] | None:
        """This node's cloud spend of today (UTC), for the peers' cluster-wide budgets."""
        selector = self.engine.selector
        if selector is None or selector.limits is None:
            return None
        return selector.limits.spend_report()

    def active_api_calls(self) -> dict[str, int]:
        """This node's cloud API calls in flight per backend (seed 001 §7.8)."""
        selector = self.engine.selector
        if selector is None or selector.limits is None:
            return {}
        return selector.limits.active_calls(self.engine.active_by_backend)

    def disk_info(self) -> dict[str, Any]:
        """What peers and the UI learn of this node's disk beyond its free space: the minimum
        it keeps free and the disk-heavy types it leaves to others for lack of room."""
        return {
            "disk_min_free": self.disk.min_free,
            "disk_held": sorted(self.disk.held(self.disk.disk_types)),
        }

    @property
    def free_slots(self) -> int:
        """Slots free for new work (none while draining or quarantined)."""
        if not self.engine.claimable_types():
            return 0
        return max(0, self.settings.engine_settings().max_workers - self.engine.load)

    def type_scores(self) -> dict[str, float]:
        """This node's effective score per task type it can claim, at its current load."""
        selector = self.engine.selector
        if selector is None:
            return {}
        return selector.type_scores(
            self.engine.claimable_types(), self.engine.active_by_backend, self.engine.load
        )

    async def refresh_gate(self) -> None:
        """Give the score gate what the peers last reported (node registry rows: written by
        membership in a home cluster, by each node itself on a shared database)."""
        if self.engine.gate is None:
            return
        now = await self._store.now()
        fresh = now - self.settings.engine_settings().stale_after
        self.engine.gate.update(
            PeerView(
                node_id=row.id,
                online=row.status in ("online", "busy") and row.last_seen_at >= fresh,
                free_slots=int(row.info.get("free_slots") or 0),
                scores={str(k): float(v) for k, v in dict(row.info.get("scores") or {}).items()},
            )
            for row in await self._store.list_nodes()
        )

    async def refresh_cloud_limits(self) -> None:
        """Give the cloud limits what the peers last reported: the API calls of the live ones,
        for the cluster-wide `cluster_max_concurrent` (seed 001 §7.8), and today's spend of
        every one (offline too: spent is spent), for the cluster-wide daily budgets."""
        selector = self.engine.selector
        if selector is None or selector.limits is None or not selector.limits.max_concurrent:
            return
        now = await self._store.now()
        fresh = now - self.settings.engine_settings().stale_after
        peers = [row for row in await self._store.list_nodes() if row.id != self.node_id]
        changed = selector.limits.set_peer_calls(
            {
                row.id: dict(row.info.get("active_api_calls") or {})
                for row in peers
                if row.status not in ("offline",) and row.last_seen_at >= fresh
            }
        )
        spent = selector.limits.set_peer_spend(
            {row.id: row.info.get("cloud_spend_today") for row in peers}
        )
        if changed or spent:
            self.engine.wake()  # room freed on the peers is claimable now

    def _capability_rows(self) -> list[dict[str, Any]]:
        selector = self.engine.selector
        caps = [] if selector is None else selector.capabilities
        return [
            {
                "function": c.function.value,
                "backend": c.backend,
                "accelerator": type(c.accelerator).__name__,
                "models": list(c.models),
                "score": c.score,
            }
            for c in caps
        ]

    def request_shutdown(self) -> None:
        """The server is about to stop (safe from a signal handler or another thread): end
        long-lived responses now, or the server would wait for them before shutting down."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.changes.close)

    async def stop(self, grace: float | None = None) -> None:
        """Graceful stop: finish or release running work, then record a CLEAN shutdown."""
        self.changes.close()
        await self.libraries.stop()
        for side in (self._presence, self._stranded, self._sweeping):
            if side is not None:
                await _cancel(side)
        if self.discovery is not None:
            # unregister (mDNS goodbye) while the network is up
            await self._bounded("mDNS discovery", self.discovery.stop(), STOP_STEP_SEC)
        if self.ownership is not None:
            if self._handoff_on_stop:
                # while the peers are still there; the running work then reports to the new
                # owners until the engine releases it
                await self._bounded("the hand-off", self._hand_off_quietly(), HANDOFF_STOP_SEC)
            await self.ownership.stop()
        shutdown_grace = self.settings.engine_settings().shutdown_grace if grace is None else grace
        await self._bounded("the engine", self.engine.stop(grace), shutdown_grace + STOP_STEP_SEC)
        if self.membership is not None:
            await self._bounded("membership", self.membership.stop(), STOP_STEP_SEC)
        if self._notifying is not None:
            await self._bounded(
                "notifications", self._stop_notifier(), NOTIFY_FLUSH_SEC + STOP_STEP_SEC
            )
        await self.register_self("offline")
        await self._store.set_config(KEY_LAST_SHUTDOWN, ShutdownType.CLEAN.value)
        await self._store.close()
        self._lock.release()
        logger.info("node %s stopped cleanly", self.node_id, extra={"action": "node_stop"})

    async def _start_notifier(self) -> None:
        """Follow the change feed from now on and post a notice per ended pipeline."""
        self.notifier.cursor = await self._store.latest_cursor()
        follow = self.notifier.follow(self.changes, self.changes_since, self._tasks_of)
        self._notifying = (
            asyncio.create_task(follow, name="fredica-notify-follow"),
            asyncio.create_task(self.notifier.send_forever(), name="fredica-notify-send"),
        )

    async def _stop_notifier(self) -> None:
        """After the engine stopped: notice the ends its last work caused, and give the
        webhook a few seconds to take what is queued."""
        assert self._notifying is not None
        follow, send = self._notifying
        await _cancel(follow)
        await self.notifier.catch_up(self.changes_since, self._tasks_of)
        await self.notifier.flush(NOTIFY_FLUSH_SEC)
        await _cancel(send)

    async def _tasks_of(self, pipeline_id: str) -> list[models.Task]:
        return await self._store.list_tasks(pipeline_id, limit=100_000)

    @staticmethod
    async def _bounded(what: str, step: Coroutine[Any, Any, None], timeout: float) -> None:
        """One step of `stop`: a stop always ends, and says which step did not."""
        try:
            await asyncio.wait_for(step, timeout)
        except TimeoutError:
            logger.error(
                "stopping: %s did not finish within %gs; going on",
                what,
                timeout,
                extra={"action": "node_stop"},
            )

    async def close(self) -> None:
        """Release the store of a node that was never started (tools, tests)."""
        await self._store.close()
        self._lock.release()

    # --- pipelines -------------------------------------------------------------------------
    def known_task_types(self) -> frozenset[str]:
        return self.registry.task_types | self.settings.extra_task_types

    async def create_pipeline(
        self, request: PipelineRequest, publisher: auth.Publisher | None = None
    ) -> tuple[models.Pipeline, bool]:
        """Validate and create; returns (pipeline, deduplicated). Nothing is written on error."""
        template = self.registry.template(request.template)
        publisher_id = publisher.token_id if publisher else None
        spec = template.build(
            request, BuildContext(self.known_task_types(), self.node_id, publisher_id)
        )
        if publisher is not None:
            recent = await self._store.count_created_since(
                publisher.token_id, self.clock.now() - 86400
            )
            auth.check_create(
                publisher,
                request.template,
                request.cloud_preference.value,
                len(spec.tasks),
                recent,
            )
            kept = auth.keep_local(publisher, spec.tasks, self._cloud_section)
            made_local = {
                new.type: refusal
                for old, new in zip(spec.tasks, kept, strict=True)
                if old.cloud_preference is not new.cloud_preference
                and (refusal := auth.cloud_refusal(publisher, self._cloud_section(new) or ""))
            }
            spec = dataclasses.replace(spec, tasks=kept)
        await self._refuse_unservable(spec, made_local if publisher is not None else {})
        pipeline, deduplicated = await self._store.create_pipeline(spec)
        if not deduplicated:
            self.changes.notify(pipeline.id)
            self.engine.wake()
        return pipeline, deduplicated

    async def _create_for_library(self, request: PipelineRequest) -> tuple[str, bool]:
        pipeline, deduplicated = await self.create_pipeline(request)
        return pipeline.id, deduplicated

    async def _existing_pipeline(self, material_id: str, template: str) -> str | None:
        """A pipeline of this material and template, this node's or a replica of another's
        (any status: a library file is processed once, "process again" is explicit)."""
        where = ListFilter(q=material_id, template=template)
        for pipeline in await self.cluster_pipelines(None, 20, 0, where):
            if pipeline.material_id == material_id and pipeline.template == template:
                return pipeline.id
        return None

    def library_watcher(self, name: str) -> str | None:
        """The node that watches library `name`: this one alone, else the lowest node id among
        the online peers that have it, decided once every known peer was reached (its
        replica pulled) or is offline; None until then."""
        if self.membership is None:
            return self.node_id
        peers = [
            library_rules.PeerLibraries(
                peer.node_id,
                peer.online and peer.joined,
                peer.failures >= membership_mod.OFFLINE_AFTER_FAILURES,
                tuple(peer.info.get("libraries") or ()),
            )
            for peer in self.membership.peers()
        ]
        return library_rules.elect_watcher(self.node_id, name, peers)

    def _cloud_section(self, task: models.NewTask) -> str | None:
        """The capability section whose cloud permission a task needs ('ai_analyze'), if
        its function is known."""
        selector = self.engine.selector
        if selector is not None:
            function = selector.function_of(task.type, task.payload)
        else:
            function = task_types.TASK_FUNCTIONS.get(task.type)
        return function.value.lower() if function is not None else None

    async def _refuse_unservable(
        self, spec: models.NewPipeline, made_local: Mapping[str, str] | None = None
    ) -> None:
        """`InvalidRequest` naming the task types of `spec` that no known node (any row of the
        node registry, this node by its live view) can ever run; `Forbidden` when that is
        because the token keeps a type local (`made_local`: type -> the token's limit) and no
        node has a local backend for it."""
        selector = self.engine.selector
        if selector is None:  # not started: what this node can do is not known yet
            return
        here = self._own_view()
        if not servable.unservable(spec.tasks, [here], selector.plugin_functions):
            return  # this node can run it all: the registry cannot change the answer
        rows = await self._store.list_nodes()
        views = [servable.NodeView.of(r) for r in rows if r.id != self.node_id]
        found = servable.unservable(spec.tasks, [*views, here], selector.plugin_functions)
        if not found:
            return
        message = servable.describe(found, selector.why_not)
        made_local = made_local or {}
        limits = sorted({made_local[u.task_type] for u in found if u.task_type in made_local})
        if limits:
            raise errors.Forbidden(f"{'; '.join(limits)}: {message}")
        raise errors.InvalidRequest(message)

    def _own_view(self) -> servable.NodeView:
        """What this node can run, from its live capabilities."""
        selector = self.engine.selector
        caps = [] if selector is None else selector.capabilities
        return servable.NodeView(
            self.node_id,
            frozenset(c.function for c in caps),
            self.servable_types(),
            frozenset(c.function for c in caps if c.is_cloud),
            frozenset(c.function for c in caps if not c.is_cloud),
        )

    async def fail_stranded(self) -> list[str]:
        """Fail (with the reason) the pending tasks owned here that every online node able to
        run them has excluded after RESOURCE failures (`node.stranded`). Returns their ids."""
        selector = self.engine.selector
        if selector is None:
            return []
        now = await self._store.now()
        fresh = now - self.settings.engine_settings().stale_after
        views = [
            servable.NodeView.of(row)
            for row in await self._store.list_nodes()
            if row.id != self.node_id
            and row.status in ("online", "busy")
            and row.last_seen_at >= fresh
        ]
        here = self._own_view()
        runnable = stranded.runnable_on(
            self.known_task_types(), [*views, here], selector.plugin_functions
        )
        ids = await self._store.fail_stranded(runnable)
        if ids:
            logger.warning(
                "%d task(s) failed: no online node may run them any more (%s)",
                len(ids),
                ", ".join(ids[:5]),
                extra={"action": "stranded"},
            )
            self.changes.notify("")
        return ids

    def servable_types(self) -> frozenset[str]:
        """Task types this node can run at all (executor here, capability declared), busy or
        not: what it tells the cluster in its registry row."""
        selector = self.engine.selector
        if selector is None:
            return self.registry.task_types
        return selector.claimable_types(self.registry.task_types)

    async def network_test(
        self, request: NetworkTestRequest, publisher: auth.Publisher | None = None
    ) -> tuple[str, str]:
        params: dict[str, Any] = {"timeout_ms": request.timeout_ms}
        if request.urls is not None:
            params["urls"] = request.urls
        pipeline, _ = await self.create_pipeline(
            PipelineRequest(template="network_test", params=params), publisher
        )
        tasks = await self._store.list_tasks(pipeline.id)
        task = next(t for t in tasks if t.type == network_test.TASK_TYPE)
        return pipeline.id, task.id

    async def _owner_of(
        self, task_id: str | None = None, pipeline_id: str | None = None
    ) -> RemoteOwner | None:
        """The owner of a task or pipeline this node knows only from its replica (None: no
        replica of it); `StoreError` if that owner cannot be reached now."""
        if self.membership is None:
            return None
        if task_id is not None:
            row: models.Task | models.Pipeline | None = await self._store.replica_task(task_id)
        else:
            row = await self._store.replica_pipeline(pipeline_id or "")
        if row is None:
            return None
        owner = self.membership.owner(row.owner_id)
        if owner is None:
            raise errors.StoreError(
                f"{'task' if task_id else 'pipeline'} {task_id or pipeline_id} belongs to node "
                f"{row.owner_id}, which this node cannot reach now"
            )
        return owner

    async def _forward_pipeline(self, pipeline_id: str, action: str) -> dict[str, Any] | None:
        """A user's action on another owner's pipeline, executed by its owner (None: this
        node has no replica of it either)."""
        owner = await self._owner_of(pipeline_id=pipeline_id)
        if owner is None:
            return None
        answer = await owner.call(
            "POST", "/cluster/control", {"pipeline_id": pipeline_id, "action": action}
        )
        assert isinstance(answer, dict)
        return answer

    async def control_for_peer(self, body: dict[str, Any]) -> dict[str, Any]:
        """A user's action that another node forwarded to this owner."""
        action = body.get("action")
        if not isinstance(action, str):
            raise errors.InvalidRequest("action must be a string")
        task_id, pipeline_id = body.get("task_id"), body.get("pipeline_id")
        if isinstance(task_id, str) and task_id:
            return {"task": (await self._local_task_action(task_id, action)).to_json()}
        if not isinstance(pipeline_id, str) or not pipeline_id:
            raise errors.InvalidRequest("name a task_id or a pipeline_id")
        if action == "cancel":
            return {"pipeline": (await self._cancel_pipeline(pipeline_id)).to_json()}
        if action == "retry":
            pipeline, retried = await self._retry_pipeline(pipeline_id)
            return {"pipeline": pipeline.to_json(), "retried": retried}
        if action == "delete":
            return {"deleted_tasks": await self._delete_pipeline(pipeline_id)}
        raise errors.InvalidRequest(f"unknown action {action!r}; use cancel, retry or delete")

    async def cancel_pipeline(self, pipeline_id: str) -> models.Pipeline:
        try:
            return await self._cancel_pipeline(pipeline_id)
        except errors.NotFound:
            answer = await self._forward_pipeline(pipeline_id, "cancel")
            if answer is None:
                raise
            return pipeline_from_json(answer["pipeline"])

    async def _cancel_pipeline(self, pipeline_id: str) -> models.Pipeline:
        outcomes = await self._store.cancel_pipeline(pipeline_id)
        self._signal(outcomes)
        self.changes.notify(pipeline_id)
        return await self._store.get_pipeline(pipeline_id)

    async def retry_pipeline(self, pipeline_id: str) -> tuple[models.Pipeline, list[str]]:
        """Every failed or cancelled task of the pipeline back to pending at once; returns the
        pipeline and those tasks' ids (`IllegalTransition` if there are none). Another owner's
        pipeline is retried by its owner."""
        try:
            return await self._retry_pipeline(pipeline_id)
        except errors.NotFound:
            answer = await self._forward_pipeline(pipeline_id, "retry")
            if answer is None:
                raise
            return pipeline_from_json(answer["pipeline"]), list(answer["retried"])

    async def _retry_pipeline(self, pipeline_id: str) -> tuple[models.Pipeline, list[str]]:
        retried = await self._store.retry_pipeline(pipeline_id)
        self.engine.wake()
        self.changes.notify(pipeline_id)
        return await self._store.get_pipeline(pipeline_id), retried

    async def delete_pipeline(self, pipeline_id: str) -> list[str]:
        """Remove a finished pipeline with its tasks, events, result files and task logs;
        returns the ids of the tasks removed (`Conflict` while any task is active). Another
        owner's pipeline is deleted by its owner."""
        try:
            return await self._delete_pipeline(pipeline_id)
        except errors.NotFound:
            owner = await self._owner_of(pipeline_id=pipeline_id)
            answer = await self._forward_pipeline(pipeline_id, "delete")
            if answer is None or owner is None:
                raise
            # the owner's tombstones, read now: the node the user asked shows it gone at once
            with contextlib.suppress(errors.StoreError):
                await self.pull_replica(owner)
            return list(answer["deleted_tasks"])

    async def _delete_pipeline(self, pipeline_id: str) -> list[str]:
        task_ids = await self._store.delete_pipeline(pipeline_id)
        await asyncio.to_thread(task_files.remove, self.settings.data_dir, task_ids)
        self.changes.notify(pipeline_id)
        return task_ids

    # --- tasks -----------------------------------------------------------------------------
    async def task_action(self, task_id: str, action: str) -> models.Task:
        """A user's action on a task: executed here if this node owns it, else by its owner
        (a task this node knows from its replica)."""
        try:
            return await self._local_task_action(task_id, action)
        except errors.NotFound:
            owner = await self._owner_of(task_id=task_id)
            if owner is None:
                raise
        answer = await owner.call(
            "POST", "/cluster/control", {"task_id": task_id, "action": action}
        )
        return task_from_json(answer["task"])

    async def _local_task_action(self, task_id: str, action: str) -> models.Task:
        if action == "cancel":
            outcome = await self._store.cancel_task(task_id)
            self._signal([outcome])
        elif action == "retry":
            await self._store.retry_task(task_id)
            self.engine.wake()
        elif action == "skip":
            await self._store.skip_task(task_id)
            self.engine.wake()
        elif action in ("pause", "resume"):
            task = await self._store.get_task(task_id)
            if task.status is not models.TaskStatus.RUNNING:
                raise errors.IllegalTransition(
                    f"task {task_id} is {task.status.value}; only running tasks can {action}"
                )
            if task.claimed_by != self.node_id:
                await self._forward(task.claimed_by, task_id, action)
            elif action == "pause":
                await self.engine.pause(task_id)
            else:
                await self.engine.resume(task_id)
        else:
            raise errors.InvalidRequest(
                f"unknown action {action!r}; use cancel, pause, resume, retry or skip"
            )
        task = await self._store.get_task(task_id)
        self.changes.notify(task.pipeline_id or "")
        return task

    async def _forward(self, claimer: str | None, task_id: str, action: str) -> None:
        """Pass a user's pause, resume or cancel to the peer running the task (DESIGN §4.9)."""
        owner = self.membership.owner(claimer) if self.membership and claimer else None
        if owner is None:
            raise errors.IllegalTransition(
                f"task {task_id} runs on node {claimer}, which this node cannot reach"
            )
        await owner.call("POST", "/cluster/tasks/signal", {"task_id": task_id, "action": action})

    def _signal(self, outcomes: list[CancelOutcome]) -> None:
        for outcome in outcomes:
            if outcome.cancelled:
                continue
            if outcome.running_on != self.node_id:
                # the claimer also learns it from its next heartbeat's feedback
                if outcome.running_on and self.membership is not None:
                    self._background_call(
                        self._forward_quietly(outcome.running_on, outcome.task_id)
                    )
                continue
            if not self.engine.signal_cancel(outcome.task_id):
                logger.warning(
                    "task %s is marked running here but is not executing yet (a claim in "
                    "flight?): it is cancelled as it arrives, else the liveness monitor "
                    "reclaims it",
                    outcome.task_id,
                    extra={"action": "cancel_orphan"},
                )

    # --- state and drain (seed 001 §2.2) ------------------------------------------------------
    def state(self) -> node_state.NodeStatus:
        """This node's state as it reports it: online, busy, draining or quarantined."""
        return node_state.node_status(
            reachable=True,
            draining=self.engine.draining,
            quarantined=self.engine.quarantine.active,
            running=self.engine.running_count,
            max_workers=self.settings.engine_settings().max_workers,
        )

    def drain_state(self) -> dict[str, Any]:
        """What `fredica node drain` / `undrain` answer: the state and the work still running."""
        return {
            "node_id": self.node_id,
            "status": self.state().value,
            "draining": self.engine.draining,
            "running": self.engine.running_count,
            "max_workers": self.settings.engine_settings().max_workers,
        }

    async def drain(self) -> dict[str, Any]:
        """Claim nothing new and let the running work finish (seed 001 §2.2 `draining`); tasks
        claimed ahead and not started go back for the other nodes. Remembered across restarts
        until `undrain`. Draining twice is harmless."""
        await self._store.set_config(KEY_DRAINING, "1")
        if not self.engine.draining:
            self.engine.set_draining(True)
            logger.info(
                "draining: %d task(s) still running",
                self.engine.running_count,
                extra={"action": "drain"},
            )
        answer = await self._state_changed()
        if (
            self._handoff_on_stop
            and self.ownership is not None
            and self.membership
            and self.membership.owners()
        ):
            answer["handoff"] = await self.ownership.hand_off()
        return answer

    async def hand_off(self, target: str | None = None) -> dict[str, Any]:
        """Move every active pipeline this node owns to a peer now (`fredica node handoff`:
        before this machine sleeps): `target`, else a peer with `node.always_on`, else the one
        up the longest. Nothing of them then waits for this node."""
        if self.ownership is None:
            raise errors.Conflict(
                "this node has no peers to hand its pipelines to (set cluster.cluster_secret "
                "and seeds; on PostgreSQL nothing waits on a node anyway)"
            )
        answer = await self.ownership.hand_off(target)
        self.changes.notify("")
        return answer

    async def _hand_off_quietly(self) -> None:
        try:
            answer = await self.hand_off()
        except errors.FredicaError as exc:
            logger.info("no hand-off: %s", exc, extra={"action": "handoff"})
        else:
            logger.info("hand-off: %s", answer, extra={"action": "handoff"})

    async def undrain(self) -> dict[str, Any]:
        """Claim work again."""
        await self._store.set_config(KEY_DRAINING, "0")
        if self.engine.draining:
            self.engine.set_draining(False)
            logger.info("no longer draining", extra={"action": "undrain"})
        return await self._state_changed()

    async def _state_changed(self) -> dict[str, Any]:
        await self.register_self()  # the node registry (and, with PostgreSQL, every node) sees it
        self.changes.notify("")
        return self.drain_state()

    # --- status ----------------------------------------------------------------------------
    def health(self) -> str:
        """`ok`, or why this node cannot do its work: `engine_failed`, `disk_full`,
        `store_unavailable` (the database cannot be reached; the store reconnects by itself)."""
        if self.engine.failure is not None:
            return "engine_failed"
        return self._store.degraded or "ok"

    def healthy(self) -> bool:
        """False while the node cannot do its work (`/healthz` answers 503)."""
        return self.health() == "ok"

    @property
    def running(self) -> int:
        """Tasks executing on this node now."""
        return self.engine.running_count

    async def status(self) -> dict[str, Any]:
        # the status answers while the database is down: it says so instead of failing
        store_error: str | None = None
        try:
            counts: dict[str, int] | None = await self._store.count_by_status()
        except errors.StoreError as exc:
            counts, store_error = None, exc.message
        # the disk first: a hand-back (on a thread) between the two reads would otherwise show
        # a held type still among `task_types`; holds only appear, so this order is consistent
        disk = await asyncio.to_thread(self.disk.state)
        engine = self.settings.engine_settings()
        return {
            "node_id": self.node_id,
            "hostname": self.settings.hostname,
            "address": self.address,
            # result paths are relative to it (files on this node: data dir / path)
            "data_dir": str(self.settings.data_dir.resolve()),
            # nodes answering with this node's id (a copied data dir), with what to do
            "id_conflicts": sorted(self.membership.conflicts.values()) if self.membership else [],
            "started_at": self.started_at,
            "max_workers": engine.max_workers,
            "running": self.engine.running_count,
            "state": self.state().value,
            "draining": self.engine.draining,
            "task_counts": counts,
            "task_types": sorted(self.engine.claimable_types()),
            "templates": self.registry.template_names,
            "previous_shutdown_type": self.previous_shutdown.value,
            "startup_recovery": self.recovery.summary() if self.recovery else None,
            "engine_stats": dict(self.engine.stats),
            "healthy": self.health() == "ok",
            "quarantine": {
                "active": self.engine.quarantine.active,
                "remaining_sec": round(self.engine.quarantine.remaining, 1),
                "reason": self.engine.quarantine.reason,
            },
            "health": self.health(),
            # why the store cannot answer now (the database is down or restarting), or None
            "store_error": store_error,
            # results computed here for other owners, not yet acknowledged (seed 001 §7.4)
            "outbox": await self._outbox_size(),
            # free space, the work held back for lack of it, and the clean-up (seed 001 §7.7)
            "disk": {**disk, "cleanup": self.sweeper.state()},
            # cloud API calls in flight, their ceilings and today's spend (seed 001 §7.8)
            "cloud": self.cloud_state(),
        }

    async def _outbox_size(self) -> int | None:
        if self.router is None:
            return 0
        try:
            return len(await self._store.outbox_list())
        except errors.StoreError:
            return None

    def cloud_state(self) -> dict[str, Any] | None:
        selector = self.engine.selector
        if selector is None or selector.limits is None:
            return None
        return selector.limits.state(self.engine.active_by_backend)

    async def cluster_view(self) -> dict[str, Any]:
        """Every known node with slots used, load, memory and free disk (the UI's panel)."""
        rows = await self.known_nodes()
        local = await asyncio.to_thread(cluster.local_stats, self.settings.data_dir)
        selector = self.engine.selector
        detected = cluster.hardware(selector.capabilities if selector is not None else ())
        live = cluster.Live(
            status=self.state().value,
            running=self.engine.running_count,
            max_workers=self.settings.engine_settings().max_workers,
            task_types=sorted(self.engine.claimable_types()),
            info={**local, **detected, **self.disk_info()},
        )
        return cluster.view(rows, self.node_id, live)

    async def served_file(self, path: str) -> files.ServedFile:
        """A file of this node's data dir for a peer (`GET /files/serve`), with its sha256.
        Raises `files.PathRefused` (a malformed path, a directory) or `NotFound`."""
        return await self.files.stat(path)

    async def local_file(self, path: str) -> Path:
        """A file of this node's data dir that its own web UI may stream (the same rules as
        `served_file`, without hashing it). Raises `files.PathRefused` or `NotFound`."""
        return await self.files.find(path)

    # --- crash recovery (seed 001 §7.5) ---------------------------------------------------------
    def _run(self) -> recovery.Run:
        summary = self.recovery.summary() if self.recovery else None
        return recovery.Run(self.started_at, self.previous_shutdown, summary)

    async def recovery_state(self) -> dict[str, Any]:
        """Whether the crash-recovery question is open, with the counts the dialog shows."""
        return await self._crash.state(self._run())

    async def answer_recovery(self, action: str) -> dict[str, Any]:
        """Answer the crash-recovery question once per run: `continue`, `cancel_pending` or
        `cancel_all` (every active pipeline this node owns)."""
        answer, outcomes = await self._crash.answer(self._run(), action)
        self._signal(outcomes)
        self.changes.notify("")
        return answer

    # --- what the UI asks before it creates (seed 001 §2.7.2) -----------------------------------
    def quality_defaults(self) -> dict[str, str]:
        return quality.quality_defaults(self.settings.config)

    def template_descriptions(self) -> dict[str, str]:
        """Template name -> description, by name."""
        names = self.registry.template_names
        return {name: self.registry.template(name).description for name in names}

    def template_task_types(self, name: str) -> list[str]:
        """Every task type template `name` declares it can create ([] if it declares none)."""
        return quality.declared_task_types(self.registry, name)

    async def quality_check(self, request: PipelineRequest) -> list[dict[str, Any]]:
        """Task types whose `quality` default `request` would lower, with that default."""
        ctx = BuildContext(self.known_task_types(), self.node_id)
        types = await asyncio.to_thread(quality.request_task_types, self.registry, request, ctx)
        return quality.lowered_defaults(types, request, self.quality_defaults())

    # --- reads (what the faces show) ------------------------------------------------------------
    async def list_pipelines(
        self, status: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[models.Pipeline]:
        return await self._store.list_pipelines(status, limit, offset)

    async def page_pipelines(
        self,
        status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> Page[models.Pipeline]:
        return await self._store.page_pipelines(status, limit, cursor, offset, where)

    async def get_pipeline(self, pipeline_id: str) -> models.Pipeline:
        return await self._store.get_pipeline(pipeline_id)

    async def pipeline_with_tasks(
        self, pipeline_id: str
    ) -> tuple[models.Pipeline, list[models.Task]]:
        """A pipeline and its tasks: this node's own, else the replica of another owner's."""
        try:
            pipeline = await self._store.get_pipeline(pipeline_id)
        except errors.NotFound:
            replica = await self._store.replica_pipeline(pipeline_id)
            if replica is None:
                raise
            return replica, await self._store.replica_tasks(pipeline_id, limit=100_000)
        return pipeline, await self._store.list_tasks(pipeline_id, limit=100_000)

    async def replica_marks(self) -> dict[str, dict[str, Any]]:
        """Per other owner: how fresh this node's replica of its rows is (`pulled_at`, this
        node's clock, and `age_sec`), and while that owner is not online, `waiting`: how long
        it has been silent and after how long a peer takes its pipelines over (`wait_sec`;
        null with `cluster.takeover` off: its pipelines wait until it is back)."""
        now = self.clock.now()
        silent = self.ownership.wait_marks() if self.ownership is not None else {}
        return {
            owner: {
                "owner": owner,
                "pulled_at": at,
                "age_sec": round(max(0.0, now - at), 3),
                "waiting": silent.get(owner),
            }
            for owner, at in (await self._store.replica_freshness()).items()
        }

    async def cluster_tasks(
        self,
        pipeline_id: str | None,
        status: list[str] | None,
        task_type: str | None,
        limit: int,
        offset: int,
        where: ListFilter | None = None,
    ) -> list[models.Task]:
        """This node's tasks and the replicas of every other owner's, in one list (newest
        first; a pipeline's oldest first), searched and filtered by `where` on both."""
        want = limit + offset
        page = await self._store.page_tasks(pipeline_id, status, task_type, want, None, 0, where)
        remote = await cluster_reads.replica_tasks(
            self._store, pipeline_id, status, task_type, want, where
        )
        merged = sorted(
            [*page.items, *remote], key=lambda t: t.created_at, reverse=pipeline_id is None
        )
        return merged[offset : offset + limit]

    async def cluster_pipelines(
        self, status: str | None, limit: int, offset: int, where: ListFilter | None = None
    ) -> list[models.Pipeline]:
        """This node's pipelines and the replicas of every other owner's, newest first,
        searched and filtered by `where` on both."""
        want = limit + offset
        statuses = [status] if status else None
        page = await self._store.page_pipelines(status, want, None, 0, where)
        remote = await cluster_reads.replica_pipelines(self._store, statuses, want, where)
        merged = sorted([*page.items, *remote], key=lambda p: p.created_at, reverse=True)
        return merged[offset : offset + limit]

    async def list_tasks(
        self,
        pipeline_id: str | None = None,
        status: list[str] | None = None,
        task_type: str | None = None,
        limit: int = 500,
        offset: int = 0,
    ) -> list[models.Task]:
        return await self._store.list_tasks(pipeline_id, status, task_type, limit, offset)

    async def page_tasks(
        self,
        pipeline_id: str | None = None,
        status: list[str] | None = None,
        task_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        offset: int = 0,
        where: ListFilter | None = None,
    ) -> Page[models.Task]:
        return await self._store.page_tasks(
            pipeline_id, status, task_type, limit, cursor, offset, where
        )

    async def get_task(self, task_id: str) -> models.Task:
        return await self._store.get_task(task_id)

    async def task_with_events(self, task_id: str) -> tuple[models.Task, list[models.TaskEvent]]:
        """A task and its events: this node's own, else as its owner has them now, else (the
        owner unreachable) the replica's row without events."""
        try:
            task = await self._store.get_task(task_id)
        except errors.NotFound:
            replica = await self._store.replica_task(task_id)
            if replica is None:
                raise
            owner = self.membership.owner(replica.owner_id) if self.membership else None
            if owner is None:
                return replica, []
            try:
                answer = await owner.call("GET", "/cluster/tasks/get", task_id=task_id, events=1)
            except errors.StoreError:
                return replica, []
            events = [event_from_json(e) for e in answer.get("events", [])]
            return task_from_json(answer["task"]), events
        return task, await self._store.task_events(task_id)

    async def task_events(self, task_id: str) -> list[models.TaskEvent]:
        return await self._store.task_events(task_id)

    async def task_log(
        self, task_id: str, attempt: int | None = None, offset: int = 0
    ) -> tasklog.LogChunk:
        """What an attempt of the task printed (None: its latest attempt that left a log),
        from logical byte `offset`, read here or from the node that ran it (any owner's
        task, `node.cluster_reads`); `NotFound` names what is missing."""
        task, events = await self.task_with_events(task_id)  # NotFound: no such task
        executors = {e.node_id for e in events} | {task.claimed_by or "", task.owner_id}
        executors -= {self.node_id, ""}
        peer = self.membership.owner if self.membership is not None else (lambda _n: None)
        return await cluster_reads.read_log(
            self.settings.data_dir, task_id, executors, peer, attempt, offset
        )

    async def task_log_here(self, task_id: str, attempt: int | None, offset: int) -> dict[str, Any]:
        """What this node holds of a task's logs, for a peer reading them (`read_log`)."""
        return await asyncio.to_thread(
            cluster_reads.local_log, self.settings.data_dir, task_id, attempt, offset
        )

    async def count_by_status(self) -> dict[str, int]:
        return await self._store.count_by_status()

    async def nodes(self) -> list[NodeRecord]:
        """Every node of the cluster this node knows, itself refreshed first."""
        return (await self.node_table())[0]

    async def node_table(self) -> tuple[list[NodeRecord], float]:
        """`nodes()` and the store's clock now (what `last_seen_at` is measured against)."""
        await self.register_self()
        return await self.known_nodes(), await self._store.now()

    async def known_nodes(self) -> list[NodeRecord]:
        """The node registry, each peer's state judged here (`observed_status`): a node
        silent for longer than `stale_after` (by the store's clock) is offline whatever its
        row last said, one with no free slot in the load it reported is busy."""
        rows = await self._store.list_nodes()
        now = await self._store.now()
        stale_after = self.settings.engine_settings().stale_after
        return [
            r
            if r.id == self.node_id
            else dataclasses.replace(
                r,
                status=node_state.observed_status(
                    r.status, r.info, r.max_workers, now - r.last_seen_at <= stale_after
                ).value,
            )
            for r in rows
        ]

    async def restart_log(self, limit: int = 100) -> list[RestartLogEntry]:
        return await self._store.restart_log(limit)

    async def latest_change_cursor(self) -> int:
        return await self._store.latest_cursor()

    async def changes_since(self, cursor: int, limit: int) -> ChangeBatch:
        """Rows of every owner this node's store holds, changed after `cursor`."""
        return await self._store.changes_since(None, cursor, limit)

    async def get_setting(self, key: str) -> str | None:
        return await self._store.get_config(key)

    async def put_setting(self, key: str, value: str) -> None:
        await self._store.set_config(key, value)


async def _cancel(side: asyncio.Task[None]) -> None:
    """Cancel a side loop and wait until it ended."""
    side.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await side


def warn_if_network_fs(path: Path) -> None:
    """SQLite's locking is unreliable on network filesystems: say so at start-up (DESIGN §4.10)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return
    resolved = str(path.resolve())
    best = ("", "")
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and resolved.startswith(parts[1]) and len(parts[1]) > len(best[0]):
            best = (parts[1], parts[2])
    if best[1] in NETWORK_FS_TYPES:
        logger.warning(
            "data dir %s is on a network filesystem (%s); keep the database on a local disk",
            path,
            best[1],
            extra={"action": "network_fs"},
        )
