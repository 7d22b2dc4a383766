"""A pipeline that no known node can ever run is refused at once, naming what is missing;
one that a known node (even an offline one) can run is accepted and waits for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fredica.capabilities import catalog
from fredica.store.base import NodeRecord
from fredica.store.sqlite import SQLiteTaskStore

from .conftest import node_client

NOTHING_OPTIONAL = {
    "capabilities": {"ai_analyze": {"enabled": False}, "download": {"youtube": {"enabled": False}}}
}


def _custom(*tasks: dict[str, Any], material: str = "m") -> dict[str, Any]:
    return {"template": "custom", "material_id": material, "tasks": list(tasks)}


async def test_work_no_known_node_can_run_is_refused_naming_capability_and_key(
    tmp_path: Path,
) -> None:
    async with node_client(tmp_path, config=NOTHING_OPTIONAL) as (client, node):
        # A YouTube download where YouTube is disabled: 422 naming the type, the capability
        # and the worker.yaml key; nothing is written
        youtube = {"url": "https://www.youtube.com/watch?v=dQw4w9WgXcQ"}
        r = await client.post(
            "/api/v1/pipelines",
            json=_custom(
                {"ref": "dl", "type": "DOWNLOAD_VIDEO", "payload": youtube},
                {"ref": "s", "type": "TEST_SLEEP", "depends_on": ["dl"]},
            ),
        )
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error.startswith("no known node can run this pipeline: DOWNLOAD_VIDEO needs ")
        assert "DOWNLOAD_YOUTUBE" in error
        assert "capabilities.download.youtube.enabled is false" in error
        assert (await client.get("/api/v1/pipelines")).json()["pipelines"] == []
        assert (await client.get("/api/v1/tasks")).json()["tasks"] == []
        # an analysis with ai_analyze disabled, next to work the node can do
        r = await client.post(
            "/api/v1/pipelines",
            json=_custom({"ref": "a", "type": "TEST_ANALYZE"}, {"ref": "s", "type": "TEST_SLEEP"}),
        )
        assert r.status_code == 422
        assert "TEST_ANALYZE needs AI_ANALYZE" in r.json()["error"]
        assert "capabilities.ai_analyze.enabled is false" in r.json()["error"]
        assert "TEST_SLEEP" not in r.json()["error"]
        # what the node can run is accepted as before
        sleep = _custom({"ref": "s", "type": "TEST_SLEEP"})
        ok = await client.post("/api/v1/pipelines", json=sleep)
        assert ok.status_code == 201

        # Given a known peer that declares AI_ANALYZE (offline now: it may come back)
        peer = SQLiteTaskStore(tmp_path / "fredica.db", "peer")
        try:
            await peer.upsert_node(
                NodeRecord(
                    "peer",
                    "gpu-box",
                    [{"function": catalog.CapabilityFunction.AI_ANALYZE.value, "backend": "x"}],
                    "offline",
                    2,
                    0.0,
                    None,
                    {"task_types": ["TEST_ANALYZE"]},
                )
            )
        finally:
            await peer.close()
        # Then the analysis is accepted and waits for it, unclaimed here
        r = await client.post(
            "/api/v1/pipelines", json=_custom({"ref": "a", "type": "TEST_ANALYZE"}, material="n")
        )
        assert r.status_code == 201, r.text
        task = (await client.get(f"/api/v1/tasks/{r.json()['tasks']['a']}")).json()
        assert (task["status"], task["attempt"]) == ("pending", 0)
        # and this node tells the cluster which task types it can run
        mine = next(n for n in await node.known_nodes() if n.id == node.node_id)
        assert "TEST_SLEEP" in mine.info["task_types"]
        assert "TEST_ANALYZE" not in mine.info["task_types"]


async def test_work_this_node_can_run_is_created_without_reading_the_registry(
    tmp_path: Path,
) -> None:
    # The registry can only add nodes that run more: when this node runs it all, creating the
    # pipeline reads no node rows (a read per create cost the no-op benchmark ~6 %).
    async with node_client(tmp_path, config=NOTHING_OPTIONAL) as (client, node):
        store = node._store
        reads = 0
        list_nodes = store.list_nodes

        async def counted() -> list[NodeRecord]:
            nonlocal reads
            reads += 1
            return await list_nodes()

        store.list_nodes = counted  # type: ignore[method-assign]
        ok = await client.post(
            "/api/v1/pipelines", json=_custom({"ref": "s", "type": "TEST_SLEEP"})
        )
        assert ok.status_code == 201, ok.text
        assert reads == 0
        # work this node cannot run still asks the registry before it is refused
        r = await client.post(
            "/api/v1/pipelines", json=_custom({"ref": "a", "type": "TEST_ANALYZE"}, material="n")
        )
        assert r.status_code == 422
        assert reads == 1
