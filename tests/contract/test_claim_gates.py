"""Claim filters that leave work to other nodes: types, cloud/local-only preferences."""

from __future__ import annotations

from fredica.domain.models import Affinity, CloudPreference, NewTask
from fredica.store.base import ClaimFilter

from .conftest import NODE, claim_one, complete, make_pipeline


async def test_cloud_and_local_only_tasks_wait_for_a_node_that_can_honour_them(store) -> None:
    await make_pipeline(
        store,
        NewTask("LLM", id="llm-cloud", cloud_preference=CloudPreference.CLOUD_ONLY),
        NewTask("LLM", id="llm-local", cloud_preference=CloudPreference.LOCAL_ONLY),
        NewTask("ASR", id="asr-cloud", cloud_preference=CloudPreference.CLOUD_ONLY),
        NewTask("ASR", id="asr-auto"),
    )
    # a node with a cloud LLM backend but only local ASR
    flt = ClaimFilter(
        limit=10,
        types=frozenset({"LLM", "ASR"}),
        cloud_only_types=frozenset({"LLM"}),
        local_only_types=frozenset({"ASR"}),
    )
    claimed = {t.id for t in await store.claim(flt)}
    assert claimed == {"llm-cloud", "asr-auto"}
    # a node that can run every preference takes what is left
    rest = {t.id for t in await store.claim(ClaimFilter(limit=10), "node-b")}
    assert rest == {"llm-local", "asr-cloud"}


async def test_an_empty_gate_admits_no_task_of_that_preference(store) -> None:
    await make_pipeline(
        store,
        NewTask("T", id="cloud", cloud_preference=CloudPreference.CLOUD_ONLY),
        NewTask("T", id="auto"),
    )
    flt = ClaimFilter(limit=10, cloud_only_types=frozenset())
    assert {t.id for t in await store.claim(flt)} == {"auto"}


async def test_a_deferred_type_is_claimed_only_when_pinned_to_this_node(store) -> None:
    # seed 001 §6.3: a better node is free for ASR, so this node leaves ASR to it, except the
    # tasks that must or should run here
    await make_pipeline(
        store,
        NewTask("ASR", id="free"),
        NewTask("ASR", id="hard-here", affinity=Affinity.hard(NODE)),
        NewTask("ASR", id="soft-here", affinity=Affinity.soft(NODE)),
        NewTask("OCR", id="other-type"),
    )
    flt = ClaimFilter(limit=10, deferred_types=frozenset({"ASR"}))
    assert {t.id for t in await store.claim(flt)} == {"hard-here", "soft-here", "other-type"}
    assert [t.id for t in await store.claim(ClaimFilter(limit=10), "node-b")] == ["free"]


async def test_a_task_soft_pinned_to_an_available_node_waits_for_it_a_while(store, clock) -> None:
    await make_pipeline(
        store,
        NewTask("T", id="soft-b", affinity=Affinity.soft("node-b")),
        NewTask("T", id="soft-gone", affinity=Affinity.soft("node-gone")),
        NewTask("T", id="plain"),
    )
    flt = ClaimFilter(limit=10, soft_elsewhere=frozenset({"node-b"}), soft_wait=30.0)
    # node-b is online with free slots: its SOFT task waits for it
    assert {t.id for t in await store.claim(flt)} == {"soft-gone", "plain"}
    # ...for at most `soft_wait` seconds: then anyone capable takes it
    clock.advance(31)
    assert [t.id for t in await store.claim(flt)] == ["soft-b"]


DEFERRED_ASR = ClaimFilter(limit=10, deferred_types=frozenset({"ASR"}), defer_wait=3.0)


async def test_a_deferred_task_is_claimed_anyway_once_it_has_been_ready_for_the_window(
    store, clock
) -> None:
    # The starvation guard runs per ready task: a task made a moment ago still waits for the
    # better node, however long this node has been deferring its type
    await make_pipeline(store, NewTask("ASR", id="old"))
    assert await store.claim(DEFERRED_ASR) == []
    clock.advance(2.0)
    await make_pipeline(store, NewTask("ASR", id="new"), material="m2")
    clock.advance(1.5)
    assert [t.id for t in await store.claim(DEFERRED_ASR)] == ["old"]
    assert await store.claim(DEFERRED_ASR) == []
    clock.advance(1.6)
    assert [t.id for t in await store.claim(DEFERRED_ASR)] == ["new"]


async def test_the_window_of_a_child_runs_from_when_its_last_parent_completed(store, clock) -> None:
    await make_pipeline(
        store, NewTask("OCR", id="parent"), NewTask("ASR", id="child", depends_on=("parent",))
    )
    clock.advance(100.0)  # the child was created long ago, but it was not ready
    await complete(store, await claim_one(store))
    assert await store.claim(DEFERRED_ASR) == []
    clock.advance(2.9)
    assert await store.claim(DEFERRED_ASR) == []
    clock.advance(0.2)
    assert [t.id for t in await store.claim(DEFERRED_ASR)] == ["child"]


async def test_a_task_back_to_pending_is_ready_again_from_then(store, clock) -> None:
    await make_pipeline(store, NewTask("ASR", id="t"))
    clock.advance(10.0)
    task = await claim_one(store)
    await store.release(task.id, task.attempt, "draining")
    assert await store.claim(DEFERRED_ASR) == []
    clock.advance(3.1)
    assert [t.id for t in await store.claim(DEFERRED_ASR)] == ["t"]
