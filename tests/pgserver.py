"""The tests' PostgreSQL server: `bench/pgserver.py`, failing (never skipping) when PostgreSQL
is not installed."""

from __future__ import annotations

import pytest
from bench import pgserver


def start_server(crash_safe: bool = False) -> pgserver.PgServer:
    """A started server (`crash_safe`: a crashed server keeps every acknowledged commit)."""
    if pgserver.bindir() is None:
        pytest.fail(f"PostgreSQL is not installed: {pgserver.SETUP}")
    server = pgserver.PgServer(crash_safe=crash_safe)
    server.start()
    return server
