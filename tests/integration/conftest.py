from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fredica.api.app import create_app
from fredica.config import schema as config_schema
from fredica.domain.models import NewPipeline, NewTask
from fredica.node import compose
from fredica.node.service import Node
from fredica.store.sqlite import SQLiteTaskStore

from .test_engine import fast_settings

NODE = "node-a"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteTaskStore]:
    s = SQLiteTaskStore(tmp_path / "fredica.db", NODE)
    yield s
    s.close()


def make_pipeline(
    store: SQLiteTaskStore, *tasks: NewTask, material: str = "m1", now: float = 100.0
) -> str:
    pipeline, _ = store.create_pipeline(NewPipeline("custom", material, tuple(tasks)), now)
    return pipeline.id


@contextlib.asynccontextmanager
async def node_client(
    data_dir: Path,
    make_app: Callable[..., FastAPI] = create_app,
    config: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    """A started node (real SQLite, real engine, the test plugin; `config`: its worker.yaml
    as a dict) and an ASGI client of its app (`make_app`: the API's, or the web UI's)."""
    settings = fast_settings(data_dir)
    if config is not None:
        settings = dataclasses.replace(settings, config=config_schema.parse_config(config, "test"))
    node = compose.build_node(settings)
    await node.start()
    app = make_app(node, manage_lifecycle=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        yield client, node
    await node.stop(grace=1)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    async with node_client(tmp_path) as pair:
        yield pair
