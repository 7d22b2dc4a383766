"""Driver errors become `StoreError` at the seam; a database opens with its schema migrated
once; a file that is not a database is refused at open."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import psycopg
import pytest

from fredica.domain import errors
from fredica.domain.models import NewTask
from fredica.store import pg_schema, schema
from fredica.store.postgres import PREPARED_HINT, PostgresTaskStore

from .conftest import NODE, claim_one, complete, direct_url, make_pipeline, open_store, raw_execute


async def test_a_closed_store_raises_store_error(store) -> None:
    await make_pipeline(store, NewTask("T", id="a"))
    await store.close()
    with pytest.raises(errors.StoreError, match="closed"):
        await store.get_task("a")
    with pytest.raises(errors.StoreError):
        await store.add_task(NewTask("T"))
    await store.close()  # closing twice is harmless


async def test_driver_errors_become_store_errors(store, kind, target) -> None:
    await make_pipeline(store, NewTask("T", id="a"))
    raw_execute(kind, target, "DROP TABLE task_event")
    with pytest.raises(errors.StoreError) as read_error:
        await store.task_events("a")
    with pytest.raises(errors.StoreError) as write_error:
        await make_pipeline(store, NewTask("T", id="b"), material="m2")
    for caught in (read_error, write_error):
        assert not isinstance(caught.value, (sqlite3.Error, psycopg.Error))
        assert isinstance(caught.value.__cause__, (sqlite3.Error, psycopg.Error))
        assert "task_event" in str(caught.value)
    # the failed write wrote nothing
    assert [t.id for t in await store.list_tasks()] == ["a"]


async def test_reopening_applies_no_migration_twice(make_store, kind, target) -> None:
    first = make_store()
    await first.close()
    second = make_store()  # reopening applies nothing twice
    await make_pipeline(second, NewTask("T", id="a"))
    latest = schema.SCHEMA_VERSION if kind == "sqlite" else pg_schema.SCHEMA_VERSION
    versions = [r[0] for r in raw_execute(kind, target, "SELECT version FROM schema_version")]
    assert sorted(versions) == list(range(1, latest + 1))
    if kind == "sqlite":
        assert raw_execute(kind, target, "PRAGMA journal_mode")[0][0] == "wal"


async def test_a_database_of_a_newer_schema_is_refused(make_store, kind, target, clock) -> None:
    await make_store().close()
    raw_execute(kind, target, "INSERT INTO schema_version (version) VALUES (999)")
    with pytest.raises(errors.StoreError, match="newer than this fredica"):
        open_store(kind, target, NODE, clock)


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_sqlite_file_that_is_not_a_database_is_refused_at_open(kind, target, clock) -> None:
    with open(target, "wb") as f:
        f.write(b"this is not a database, just some bytes " * 100)
    with pytest.raises(errors.StoreError, match="cannot open the database"):
        open_store(kind, target, NODE, clock)


@pytest.mark.parametrize("kind", ["pgbouncer"])
async def test_a_store_whose_prepared_statements_a_pooler_loses_turns_them_off_and_goes_on(
    kind, target, clock, pg_server, pg_bouncer, caplog
) -> None:
    """`prepared_statements` left on behind a transaction-mode PgBouncer 1.18: the first
    transaction that meets a lost statement runs again without, and so does every later one;
    the node says so once and what to set."""
    store = PostgresTaskStore(
        target, NODE, clock=clock, listen_url=direct_url(target), prepare=True
    )
    try:
        # psycopg prepares what a connection ran 5 times (each task's claim and completion)
        pid = await make_pipeline(store, *(NewTask("T", id=f"t{i}") for i in range(20)))
        for _ in range(10):
            await complete(store, await claim_one(store))
        # PgBouncer's server connections end (as they do when it recycles them): a new one
        # has none of the statements the store's connections prepared
        dbname = target.rsplit("/", 1)[1]
        pg_server.terminate_backends(dbname)
        deadline = time.monotonic() + 10
        while pg_bouncer.connections(dbname)[1] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for _ in range(10):
            await complete(store, await claim_one(store))
        assert (await store.get_pipeline(pid)).done_tasks == 20
        assert store.prepare is False
        said = [r.getMessage() for r in caplog.records if "prepared statement" in r.getMessage()]
        assert len(said) == 1 and PREPARED_HINT in said[0], said
    finally:
        await store.close()
