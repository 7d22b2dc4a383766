"""The tests' PostgreSQL server: `bench/pgserver.py`, failing (never skipping) when PostgreSQL
is not installed."""

from __future__ import annotations

import pytest
from bench import pgserver


def start_server() -> pgserver.PgServer:
    if pgserver.bindir() is None:
        pytest.fail(f"PostgreSQL is not installed: {pgserver.SETUP}")
    server = pgserver.PgServer()
    server.start()
    return server
