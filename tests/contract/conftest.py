"""The contract suite runs every test against every store implementation (huey's StorageTests
model): the embedded SQLite file and a real PostgreSQL server. Time is a `ManualClock`: the
store stamps what it writes with it, so the tests set it instead of sleeping."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from fredica.domain.clock import ManualClock
from fredica.domain.models import NewPipeline, NewTask
from fredica.store.base import TaskStore
from fredica.store.postgres import PostgresTaskStore
from fredica.store.sqlite import SQLiteTaskStore

NODE = "node-a"
KINDS = ("sqlite", "postgres")

StoreFactory = Callable[..., TaskStore]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(100.0)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, clock: ManualClock
) -> StoreFactory:
    """Opens stores on one shared database: a second call is another node (or process view)."""
    target = str(tmp_path / "fredica.db") if kind == "sqlite" else request.getfixturevalue("pg_url")

    def factory(node_id: str = NODE, store_clock: ManualClock | None = None) -> TaskStore:
        if kind == "sqlite":
            return SQLiteTaskStore(target, node_id, clock=store_clock or clock)
        return PostgresTaskStore(target, node_id, clock=store_clock or clock)

    factory.target = target  # type: ignore[attr-defined]
    return factory


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[TaskStore]:
    s = make_store()
    yield s
    await s.close()


async def make_pipeline(store: TaskStore, *tasks: NewTask, material: str = "m1") -> str:
    pipeline, _ = await store.create_pipeline(NewPipeline("custom", material, tuple(tasks)))
    return pipeline.id
