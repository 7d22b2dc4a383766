"""What a claim may take: types, excluded nodes, affinity, retry_after."""

from __future__ import annotations

from fredica.domain.models import Affinity, ErrorType, NewTask
from fredica.store.base import ClaimFilter, Failure

from .conftest import NODE, make_pipeline


async def test_claim_filters_types_excluded_nodes_affinity_and_retry_after(store, clock) -> None:
    await make_pipeline(
        store,
        NewTask("A", id="a"),
        NewTask("B", id="b"),
        NewTask("A", id="hard-other", affinity=Affinity.hard("node-z")),
        NewTask("A", id="hard-me", affinity=Affinity.hard(NODE)),
        NewTask("A", id="soft-other", affinity=Affinity.soft("node-z")),
    )
    clock.set(101.0)
    got = await store.claim(ClaimFilter(limit=10, types=frozenset({"A"})))
    assert sorted(t.id for t in got) == ["a", "hard-me", "soft-other"]
    assert await store.claim(ClaimFilter(limit=10, types=frozenset())) == []
    # RESOURCE excludes this node; RATE_LIMITED waits for retry_after
    await store.start("a", 1)
    clock.set(102.0)
    await store.fail(Failure("a", 1, "oom", ErrorType.RESOURCE))
    assert (await store.get_task("a")).excluded_nodes == [NODE]
    clock.set(103.0)
    assert await store.claim(ClaimFilter(limit=10, types=frozenset({"A"}))) == []
    # same priority and creation time: the order between a and b is not part of the contract
    assert sorted(t.id for t in await store.claim(ClaimFilter(limit=10), "node-b")) == ["a", "b"]
    await store.start("b", 1, "node-b")
    clock.set(104.0)
    await store.fail(Failure("b", 1, "429", ErrorType.RATE_LIMITED, retry_after_sec=60), "node-b")
    assert (await store.get_task("b")).retry_after == 164.0
    clock.set(150.0)
    assert await store.claim(ClaimFilter(limit=10), "node-b") == []
    clock.set(165.0)
    assert [t.id for t in await store.claim(ClaimFilter(limit=10), "node-b")] == ["b"]


async def test_hard_affinity_is_claimed_only_by_its_node(store) -> None:
    await make_pipeline(store, NewTask("A", id="pinned", affinity=Affinity.hard("node-z")))
    assert await store.claim(ClaimFilter(limit=10)) == []
    [task] = await store.claim(ClaimFilter(limit=10), "node-z")
    assert task.id == "pinned" and task.affinity == Affinity.hard("node-z")
