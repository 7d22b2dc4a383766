"""What subscribers hear after commits: READY when work may have become claimable, CHANGED when
rows changed. PostgreSQL delivers them through LISTEN, so other nodes' commits are heard too."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from fredica.domain.models import NewTask
from fredica.store.base import ClaimFilter, Signal

from .conftest import PG_KINDS, make_pipeline

WAIT = 10.0  # seconds: an upper bound, never a sleep


class Heard:
    """A thread-safe record of the signals a listener received."""

    def __init__(self) -> None:
        self.signals: list[Signal] = []
        self._cond = threading.Condition()

    def __call__(self, signal: Signal) -> None:
        with self._cond:
            self.signals.append(signal)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[Signal]], bool]) -> list[Signal]:
        with self._cond:
            assert self._cond.wait_for(lambda: predicate(self.signals), WAIT), self.signals
            return list(self.signals)

    def after_connect(self, kind: str) -> int:
        """PostgreSQL's listener looks once (READY, CHANGED) when it connects: from then on
        every commit is heard. Returns the position after that."""
        if kind == "sqlite":
            return 0
        self.wait_for(lambda s: s[:2] == [Signal.READY, Signal.CHANGED])
        return 2


async def test_ready_after_new_work_changed_after_any_change(kind, store) -> None:
    heard = Heard()
    store.subscribe(heard)
    mark = heard.after_connect(kind)
    assert heard.signals[mark:] == []

    await make_pipeline(store, NewTask("T", id="a"))
    task = (await store.claim(ClaimFilter(limit=1)))[0]  # changes rows, makes nothing ready
    await store.release(task.id, task.attempt, "shutting down")  # claimable again

    expected = [Signal.CHANGED, Signal.READY, Signal.CHANGED, Signal.CHANGED, Signal.READY]
    got = heard.wait_for(lambda s: len(s) >= mark + len(expected))
    assert got[mark:] == expected


async def test_a_write_that_changes_no_row_is_silent(kind, store) -> None:
    heard = Heard()
    store.subscribe(heard)
    mark = heard.after_connect(kind)
    await store.set_config("k", "v")
    await store.claim(ClaimFilter(limit=5))  # nothing to claim
    await make_pipeline(store, NewTask("T", id="a"))
    # the first signal after the mark is the pipeline's: the two writes before said nothing
    got = heard.wait_for(lambda s: len(s) >= mark + 2)
    assert got[mark : mark + 2] == [Signal.CHANGED, Signal.READY]


@pytest.mark.parametrize("kind", PG_KINDS)
async def test_postgres_listener_hears_work_created_by_another_node(
    kind, make_store, store
) -> None:
    heard = Heard()
    store.subscribe(heard)
    mark = heard.after_connect(kind)
    other = make_store("node-z")
    await make_pipeline(other, NewTask("T", id="z1"))
    got = heard.wait_for(lambda s: Signal.READY in s[mark:])
    assert Signal.READY in got[mark:]
