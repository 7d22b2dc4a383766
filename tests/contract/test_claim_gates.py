"""Claim filters that leave work to other nodes: types, cloud/local-only preferences."""

from __future__ import annotations

from fredica.domain.models import CloudPreference, NewTask
from fredica.store.base import ClaimFilter

from .conftest import make_pipeline


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
