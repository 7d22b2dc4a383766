"""The contract suite runs every test against every store implementation (huey's StorageTests
model): the embedded SQLite file, a real PostgreSQL server, and the same server through a
transaction-mode PgBouncer (the store's pool through the pooler with prepared statements off,
its `LISTEN` on a direct connection). Time is a `ManualClock`: the store stamps what it writes
with it, so the tests set it instead of sleeping.

A test that holds for one implementation only overrides `kind` with
`@pytest.mark.parametrize("kind", ["sqlite"])` and says so in its name."""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from bench.pgserver import PGBOUNCER_SETUP, PgBouncer, PgServer, pgbouncer_binary

from fredica.domain import errors
from fredica.domain.clock import ManualClock
from fredica.domain.models import NewPipeline, NewTask, Task
from fredica.store.base import ClaimFilter, CompletionItem, TaskStore
from fredica.store.postgres import PostgresTaskStore
from fredica.store.sqlite import SQLiteTaskStore

NODE = "node-a"
KINDS = ("sqlite", "postgres", "pgbouncer")
PG_KINDS = ("postgres", "pgbouncer")

StoreFactory = Callable[..., TaskStore]


_SCHEMAS = itertools.count(1)


@pytest.fixture(scope="session")
def pg_contract_db(pg_server: PgServer) -> str:
    """One database for the contract suite: creating a database per test costs ~1 s."""
    return pg_server.create_database()


@pytest.fixture
def pg_url(pg_contract_db: str) -> str:
    """A fresh, empty schema of the suite's database, as every connection's search_path: as
    isolated as a fresh database for the store (it names no schema), and ~500x cheaper."""
    name = f"contract_{next(_SCHEMAS)}"
    with psycopg.connect(pg_contract_db, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")  # type: ignore[arg-type]
    return f"{pg_contract_db}?options=-csearch_path%3D{name}"


# "<PgBouncer's port> <the server's port>": how `open_store` finds a database's direct URL
# (for `LISTEN`) from its URL through PgBouncer, in this process and the ones it spawns
BOUNCER_ENV = "FREDICA_TEST_PGBOUNCER_PORTS"


@pytest.fixture(scope="session")
def pg_bouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    """A transaction-mode PgBouncer in front of the session's server (at most 4 server
    connections per database, however many stores connect)."""
    if pgbouncer_binary() is None:
        pytest.fail(f"PgBouncer is not installed: {PGBOUNCER_SETUP}")
    bouncer = PgBouncer(pg_server)
    bouncer.start()
    os.environ[BOUNCER_ENV] = f"{bouncer.port} {pg_server.port}"
    yield bouncer
    os.environ.pop(BOUNCER_ENV, None)
    bouncer.stop()


def direct_url(url: str) -> str:
    """The URL through the session's PgBouncer, `url`, made direct to the server."""
    bouncer, server = os.environ[BOUNCER_ENV].split()
    return url.replace(f"127.0.0.1:{bouncer}/", f"127.0.0.1:{server}/", 1)


@pytest.fixture
def pgbouncer_url(pg_server: PgServer, pg_bouncer: PgBouncer) -> str:
    """A fresh database through PgBouncer (a database, not a schema: PgBouncer passes no
    `options` such as a search_path to the server)."""
    return pg_bouncer.via(pg_server.create_database())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The database every store of the test opens: a file path or a postgresql:// URL."""
    if kind == "sqlite":
        return str(tmp_path / "fredica.db")
    return str(request.getfixturevalue("pg_url" if kind == "postgres" else "pgbouncer_url"))


def open_store(kind: str, target: str, node_id: str, clock: ManualClock) -> TaskStore:
    if kind == "sqlite":
        return SQLiteTaskStore(target, node_id, clock=clock)
    if kind == "pgbouncer":
        return PostgresTaskStore(
            target, node_id, clock=clock, listen_url=direct_url(target), prepare=False
        )
    return PostgresTaskStore(target, node_id, clock=clock)


@pytest.fixture
async def make_store(kind: str, target: str, clock: ManualClock) -> AsyncIterator[StoreFactory]:
    """Opens stores on one shared database: a second call is another node (or process view).
    Every store it opened is closed at teardown."""
    opened: list[TaskStore] = []

    def factory(node_id: str = NODE, store_clock: ManualClock | None = None) -> TaskStore:
        s = open_store(kind, target, node_id, store_clock or clock)
        opened.append(s)
        return s

    factory.target = target  # type: ignore[attr-defined]
    yield factory
    for s in opened:
        await s.close()


@pytest.fixture
def store(make_store: StoreFactory) -> TaskStore:
    """The store of node-a (closed by `make_store`)."""
    return make_store()


async def make_pipeline(store: TaskStore, *tasks: NewTask, material: str = "m1") -> str:
    pipeline, _ = await store.create_pipeline(NewPipeline("custom", material, tuple(tasks)))
    return pipeline.id


async def claim_one(store: TaskStore, node_id: str | None = None, start: bool = True) -> Task:
    tasks = await store.claim(ClaimFilter(limit=1, start=start), node_id)
    assert len(tasks) == 1
    return tasks[0]


async def complete(store: TaskStore, task: Task, result: dict[str, Any] | None = None) -> Task:
    """Complete one task in its claimer's name; raise the error that refused it."""
    done, _ = await store.complete_and_claim(
        [CompletionItem(task.id, task.attempt, result or {"ok": True})],
        node_id=task.claimed_by,
    )
    if isinstance(done[0], errors.FredicaError):
        raise done[0]
    return await store.get_task(task.id)


def raw_execute(kind: str, target: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run SQL on the database behind the stores' back (a damaged row, a dropped table): a
    connection of its own, never a store's. `?` placeholders; returns the rows, if any."""
    if kind == "sqlite":
        conn = sqlite3.connect(target, isolation_level=None)
        try:
            cur = conn.execute(sql, tuple(params))
            return cur.fetchall() if cur.description else []
        finally:
            conn.close()
    with psycopg.connect(target, autocommit=True) as pg:
        pg_cur = pg.execute(sql.replace("?", "%s"), tuple(params))  # type: ignore[arg-type]
        return pg_cur.fetchall() if pg_cur.description else []
