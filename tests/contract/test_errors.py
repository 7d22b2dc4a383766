"""Driver errors become `StoreError` at the seam; a database opens with its schema migrated
once; a file that is not a database is refused at open."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from fredica.domain import errors
from fredica.domain.models import NewTask
from fredica.store import pg_schema, schema

from .conftest import NODE, make_pipeline, open_store, raw_execute


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
