from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.pgserver import PgServer

from tests.pgserver import start_server

PLUGINS = Path(__file__).parent / "plugins"
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One real PostgreSQL server for the session (started on first use)."""
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty database on the session's server."""
    return pg_server.create_database()
