"""Composition: the only module that names a concrete store class (DESIGN §4.14).

`open_store` picks the store for a node's settings: the embedded SQLite file in the data dir
by default, or PostgreSQL when `store.url` (or `$FREDICA_STORE_URL`) is set. `build_node` wires
the store, the registry with its plugins and the clock into a `Node`.
"""

from __future__ import annotations

import os

from fredica.domain.clock import Clock, OffsetClock
from fredica.engine.registry import Registry, builtin_registry
from fredica.node.service import DB_FILENAME, Node, NodeSettings
from fredica.store.base import TaskStore

STORE_URL_ENV = "FREDICA_STORE_URL"


def store_url(settings: NodeSettings) -> str:
    """The configured store URL ("" for the embedded SQLite file); the environment wins."""
    return os.environ.get(STORE_URL_ENV) or settings.store_url


def open_store(
    settings: NodeSettings, clock: Clock | None = None, hostable: bool = False
) -> TaskStore:
    """Open (and migrate) the store this node's settings name. With `hostable` (the node uses
    the built-in registry with its plugins and the system clock, which a child process can
    rebuild) and `settings.store_process`, the embedded SQLite store runs in a process of its
    own (`store.hosted`)."""
    url = store_url(settings)
    if url:
        from fredica.store import postgres

        pg = settings.config.store if settings.config is not None else None
        return postgres.PostgresTaskStore(
            url,
            settings.node_id,
            clock=clock,
            listen_url=pg.listen_url if pg is not None else "",
            prepare=pg.prepared_statements if pg is not None else True,
        )
    path = settings.data_dir / DB_FILENAME
    if hostable and settings.store_process:
        from fredica.store import hosted

        offset = clock.offset if isinstance(clock, OffsetClock) else 0.0
        return hosted.open_hosted(
            "fredica.node.store_child", path, settings.node_id, settings.plugins, offset
        )
    from fredica.store import sqlite

    return sqlite.SQLiteTaskStore(path, settings.node_id, clock=clock)


def build_node(
    settings: NodeSettings,
    registry: Registry | None = None,
    clock: Clock | None = None,
    store: TaskStore | None = None,
) -> Node:
    """A node with its store, executors, templates and plugins."""
    hostable = registry is None and clock is None
    registry = registry or builtin_registry()
    offset = settings.config.node.clock_offset_sec if settings.config is not None else 0.0
    if clock is None and offset:
        clock = OffsetClock(offset)
    if settings.plugins:
        registry.load_plugins(settings.plugins)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return Node(settings, store or open_store(settings, clock, hostable), registry, clock)
