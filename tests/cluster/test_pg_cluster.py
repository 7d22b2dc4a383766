"""Three real `fredica serve` processes on one PostgreSQL database form a cluster: no
replication, no peer HTTP. Every task runs to completion once; a node killed with SIGKILL has
its tasks reclaimed by the others, and after restarting it does not run them again."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.support import effect_pipeline, pg_nodes
from tests.e2e.conftest import ServedNode, wait_until

pytestmark = pytest.mark.slow

CONFIG = """\
node:
  max_workers: 3
  shutdown_grace_sec: 2
cluster:
  heartbeat_interval_sec: 0.2
  stale_after_sec: 1
  reclaim_after_sec: 2
scheduling:
  poll_interval_sec: 0.2
  idle_poll_interval_sec: 1
plugins:
  - fredica_testplugin
store:
  url: "{url}"
"""

TASKS = 1000


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[list[ServedNode]]:
    with pg_nodes(tmp_path, CONFIG, pg_url) as nodes:
        yield nodes


def status(node: ServedNode) -> dict[str, Any]:
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False) as client:
        return dict(client.get("/api/v1/status").json())


def effects(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_three_nodes_on_one_postgres_run_each_task_once_and_survive_a_kill(
    cluster: list[ServedNode], tmp_path: Path
) -> None:
    # Given three nodes on one database
    for node in cluster:
        node.start()
    a, b, c = cluster
    ids = {status(n)["node_id"] for n in cluster}
    assert len(ids) == 3
    with a.client() as client:
        nodes = client.get("/api/v1/nodes").json()["nodes"]
        assert ids <= {n["id"] for n in nodes}  # every node's page shows the whole cluster

    # When 1,000 tasks are created on A (one pipeline)
    log = tmp_path / "effects.jsonl"
    pipeline_id = effect_pipeline(a, log, TASKS, 0.02)

    # ... and C is killed with SIGKILL while it runs some of them
    c_id = status(c)["node_id"]
    wait_until(
        lambda: status(c)["running"] > 0 and status(a)["task_counts"]["completed"] > 50,
        60,
        "node C running tasks",
    )
    c.kill9()
    killed_at = time.time()

    # Then the others finish everything, C's tasks included (reclaimed after reclaim_after)
    def finished() -> bool:
        counts = status(a)["task_counts"]
        return counts["completed"] == TASKS

    wait_until(finished, 120, "all tasks completed")
    with b.client() as client:
        pipeline = client.get(f"/api/v1/pipelines/{pipeline_id}").json()
    assert pipeline["status"] == "completed" and pipeline["done_tasks"] == TASKS
    by_id = {t["id"]: t for t in pipeline["tasks"]}

    entries = effects(log)
    ends: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        if e["phase"] == "end":
            ends[e["task"]].append(e)
    assert set(ends) == set(by_id), "some task's effect never happened"
    for task_id, done in ends.items():
        task = by_id[task_id]
        # the completed attempt is the one whose effect ended, on the node that says so
        assert any(
            (e["attempt"], e["node"]) == (task["attempt"], task["claimed_by"]) for e in done
        ), task_id
        # an effect twice only where C finished it and was killed before reporting it
        extra = [
            e for e in done if (e["attempt"], e["node"]) != (task["attempt"], task["claimed_by"])
        ]
        assert all(e["node"] == c_id and e["t"] <= killed_at for e in extra), (task_id, done)

    # the killed node stopped refreshing its row: the others show it offline, and themselves
    # online once their rows no longer carry the full load of the last tasks (a row is
    # refreshed periodically: right after the last completion a peer may still read busy)
    def listed() -> dict[str, str]:
        with a.client() as client:
            return {n["id"]: n["status"] for n in client.get("/api/v1/nodes").json()["nodes"]}

    def c_offline_others_online() -> bool:
        now = listed()
        return now[c_id] == "offline" and list(now.values()).count("online") == 2

    wait_until(c_offline_others_online, 15, "C offline and A and B online in the node list")
    reclaimed = [t for t in by_id.values() if t["attempt"] > 1]
    assert reclaimed, "C was killed while running tasks: some must have been reclaimed"
    assert all(t["claimed_by"] != c_id for t in reclaimed)

    # C restarts: its recovery finds nothing of its own to resume and it runs nothing again
    before = len(entries)
    c.start()
    with c.client() as client:
        wait_until(lambda: client.get("/api/v1/status").json()["startup_recovery"], 10, "status")
        recovery = client.get("/api/v1/status").json()["startup_recovery"]
    assert recovery["interrupted"] == 0
    time.sleep(1.0)  # give a wrongly resumed task the time to show up in the effect log
    assert len(effects(log)) == before
    with c.client() as client:
        assert client.get("/api/v1/status").json()["task_counts"]["completed"] == TASKS


def test_a_node_with_a_broken_tool_is_quarantined_and_the_others_do_the_work(
    cluster: list[ServedNode],
) -> None:
    # Given node A whose tool fails (a broken install) and node B whose tool works
    a, b, _ = cluster
    a.extra_env = {"FREDICA_TEST_TOOL": "false"}
    a.start()
    b.start()
    a_id = status(a)["node_id"]

    # When a dozen tasks that need the tool are created
    tasks = [{"ref": f"t{i}", "type": "TEST_TOOL", "payload": {"seconds": 0.05}} for i in range(12)]
    with a.client() as client:
        r = client.post("/api/v1/pipelines", json={"template": "custom", "tasks": tasks})
        assert r.status_code == 201, r.text
        pipeline_id = r.json()["pipeline_id"]

    # Then B finishes every one of them ...
    def done() -> dict[str, Any] | None:
        with b.client() as client:
            p = client.get(f"/api/v1/pipelines/{pipeline_id}").json()
        return p if p["status"] == "completed" else None

    pipeline = wait_until(done, 60, "the pipeline to complete")
    assert {t["claimed_by"] for t in pipeline["tasks"]} == {status(b)["node_id"]}
    # ... while A, after three failures in a row, stopped claiming instead of failing them all
    failed_on_a = [t for t in pipeline["tasks"] if a_id in t["excluded_nodes"]]
    assert 3 <= len(failed_on_a) <= 4, len(failed_on_a)
    quarantine = status(a)["quarantine"]
    assert quarantine["active"] is True and "lack of resources" in quarantine["reason"]
    with b.client() as client:
        nodes = {n["id"]: n["status"] for n in client.get("/api/v1/nodes").json()["nodes"]}
    assert nodes[a_id] == "quarantined"
