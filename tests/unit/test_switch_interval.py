"""A store shortens the interpreter's switch interval: every statement its thread runs gives up
the interpreter lock and must take it back, and with Python's default of 5 ms each statement of
a transaction could wait that long while the event loop runs Python."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fredica.store import sql
from fredica.store.sqlite import SQLiteTaskStore


@pytest.fixture
def default_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


async def test_a_store_shortens_the_switch_interval(tmp_path: Path, default_interval: None) -> None:
    store = SQLiteTaskStore(tmp_path / "a.db", "n")
    try:
        assert sys.getswitchinterval() == pytest.approx(sql.SWITCH_INTERVAL)
    finally:
        await store.close()


async def test_a_shorter_interval_set_by_the_application_is_kept(
    tmp_path: Path, default_interval: None
) -> None:
    sys.setswitchinterval(0.0002)
    store = SQLiteTaskStore(tmp_path / "a.db", "n")
    try:
        assert sys.getswitchinterval() == pytest.approx(0.0002)
    finally:
        await store.close()
