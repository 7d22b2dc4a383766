"""A hand-off in progress is not settled by a contact with its target, and a takeover does not
go on without a peer that may hold claims of the silent owner (node/ownership.py).

The owner marks a hand-off durably before it sends the pipeline. A membership contact with the
target meanwhile asks the target whether it adopted the pipeline; asked before the adopt
arrives, the target says no. If that answer settled the hand-off, the mark would be erased and
the pipeline unfrozen, and an owner killed right after the adopt would, on its restart, grant
claims on its old rows that the target owns now (the same task run twice at one attempt).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fredica.cluster.router import OwnerRouter
from fredica.domain import errors
from fredica.domain.clock import ManualClock, boottime
from fredica.domain.models import NewPipeline, NewTask
from fredica.node.ownership import KEY_HANDOFFS, Ownership
from fredica.store.sqlite import SQLiteTaskStore


class NoPeers:
    def owners(self) -> list[Any]:
        return []

    def peers(self) -> list[Any]:
        return []

    def unreachable(self, owner: Any, exc: errors.StoreError) -> None:
        raise AssertionError(exc)


class Target:
    """The hand-off target. While the adopt is on its way a contact settles hand-offs (as the
    membership loop would); then the adopt's answer is lost."""

    node_id = "b"

    def __init__(self) -> None:
        self.ownership: Ownership | None = None
        self.seen_during_adopt: dict[str, Any] = {}

    async def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        if path == "/cluster/owners":
            return {"moved": []}  # it has not adopted anything (yet)
        assert (method, path) == ("POST", "/cluster/adopt")
        assert self.ownership is not None
        await self.ownership.on_contact(self, first=False)  # type: ignore[arg-type]
        self.seen_during_adopt = {
            "handoffs": dict(self.ownership._handoffs),
            "frozen": set(self.ownership._frozen),
            "claims": self.ownership.may_act(),
        }
        raise errors.StoreError("the answer was lost")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteTaskStore]:
    store = SQLiteTaskStore(tmp_path / "a.db", "a", ManualClock(1_000.0))
    yield store
    await store.close()


async def test_a_contact_during_a_hand_off_leaves_it_marked_and_frozen(
    store: SQLiteTaskStore,
) -> None:
    # Given a pipeline of a's being handed off to b
    tasks = (NewTask(type="TEST_X", id="t1"), NewTask(type="TEST_X", id="t2"))
    pipeline, _ = await store.create_pipeline(
        NewPipeline(template="custom", material_id="m", tasks=tasks)
    )
    ownership = _ownership(store, NoPeers())
    target = Target()
    target.ownership = ownership

    # When b is contacted while the adopt is on its way (and its answer is then lost)
    moved = await ownership._hand_off_one(pipeline, target)  # type: ignore[arg-type]

    # Then the contact did not settle it: marked, frozen, no claims meanwhile
    assert moved is False
    seen = target.seen_during_adopt
    assert seen["handoffs"] == {pipeline.id: {"target": "b", "epoch": 1}}
    assert seen["frozen"] == {"t1", "t2"}
    assert seen["claims"] is False
    # and it stays unsettled, durably, until b answers at a later contact
    assert json.loads(await store.get_config(KEY_HANDOFFS) or "{}") == {
        pipeline.id: {"target": "b", "epoch": 1}
    }
    await ownership.on_contact(target, first=False)  # type: ignore[arg-type]
    assert ownership._handoffs == {}
    assert ownership.may_act() and ownership.may_act("t1")


class Peer:
    """A peer as membership lists it; `answers` says what its `/cluster/claims` gives."""

    def __init__(self, node_id: str, online: bool, answers: bool) -> None:
        self.node_id = node_id
        self.online = online
        self.owner = self
        self._answers = answers

    async def call(self, method: str, path: str, **params: Any) -> Any:
        assert (method, path, params) == ("GET", "/cluster/claims", {"owner": "o"})
        if not self._answers:
            raise errors.StoreError("timed out")
        return {"node_id": self.node_id, "running": [{"task_id": "t1", "attempt": 1}]}


class SomePeers(NoPeers):
    def __init__(self, peers: list[Peer]) -> None:
        self._peers = peers

    def peers(self) -> list[Any]:
        return list(self._peers)


def _ownership(store: SQLiteTaskStore, peers: NoPeers) -> Ownership:
    return Ownership(
        "a",
        store,
        peers,  # type: ignore[arg-type]
        OwnerRouter(store, peers),
        wait=60.0,
        clock=store.clock,
        changed=lambda _: None,
        pull=lambda _: None,
        cancel=lambda _a, _b: True,
    )


@pytest.mark.parametrize("online", [True, False])
async def test_a_takeover_waits_for_a_peer_heard_from_within_the_wait(
    store: SQLiteTaskStore, online: bool
) -> None:
    # Given peer b, heard from 10 s ago, that does not answer now (slow, or offline a moment)
    ownership = _ownership(store, SomePeers([Peer("b", online, answers=False)]))
    ownership._last_seen["b"] = boottime() - 10.0
    # Then nothing is gathered: the takeover of silent owner o is postponed
    assert await ownership._gather_claims("o") is None


async def test_a_takeover_goes_on_without_a_peer_silent_for_the_whole_wait(
    store: SQLiteTaskStore,
) -> None:
    # Given c, which answers, and b, silent for longer than the wait
    peers = [Peer("b", False, answers=False), Peer("c", True, answers=True)]
    ownership = _ownership(store, SomePeers(peers))
    ownership._last_seen["b"] = boottime() - 61.0
    ownership._last_seen["c"] = boottime()
    # Then c's word is gathered and b is not waited for
    words = await ownership._gather_claims("o")
    assert words is not None
    assert [(w.node_id, w.task_id, w.attempt, w.kind) for w in words] == [("c", "t1", 1, "running")]
