"""A home cluster reads as one (docs/cluster-reads.md), with real `fredica serve` nodes: a
pipeline deleted on any node leaves every replica, also one that was down meanwhile, and the
log and events of a task are readable on every node, whoever owns it and wherever it ran."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.support import Cluster, get, make_cluster, pipeline_done, post, replicas_agree
from tests.e2e.conftest import ServedNode, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with make_cluster(tmp_path) as nodes:
        yield nodes


def status_of(node: ServedNode, path: str) -> int:
    with node.client() as client:
        return client.get(path).status_code


def finished_pipeline(cluster: Cluster, tmp_path: Path, tasks: list[dict[str, Any]]) -> str:
    """A pipeline of a's that ran to its end, replicated to every started node."""
    a = cluster.nodes["a"]
    pid = str(post(a, "/api/v1/pipelines", {"template": "custom", "tasks": tasks})["pipeline_id"])
    done = wait_until(lambda: pipeline_done(a, pid), 60, "the pipeline to finish")
    assert done["status"] == "completed", cluster.logs()
    wait_until(lambda: replicas_agree(cluster, cluster.ids["a"]), 20, "the replicas to agree")
    return pid


def test_a_pipeline_deleted_on_any_node_is_gone_from_every_replica_even_one_that_was_down(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given a finished pipeline of a's, replicated on b and c
    cluster.start_all()
    a, b, c = (cluster.nodes[n] for n in "abc")
    log = tmp_path / "effects.jsonl"
    tasks = [
        {"ref": f"t{i}", "type": "TEST_EFFECT", "payload": {"effect_log": str(log)}}
        for i in range(3)
    ]
    pid = finished_pipeline(cluster, tmp_path, tasks)
    task_ids = [t["id"] for t in get(a, "/api/v1/tasks", pipeline_id=pid)["tasks"]]
    for node in (b, c):
        assert status_of(node, f"/api/v1/pipelines/{pid}") == 200

    # When c is down, and a user deletes the pipeline on b (which forwards it to its owner a)
    c.terminate()
    with b.client() as client:
        answer = client.delete(f"/api/v1/pipelines/{pid}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["deleted_tasks"] == len(tasks)

    # Then it is gone at once from the owner and from the node the user asked
    for node in (a, b):
        assert status_of(node, f"/api/v1/pipelines/{pid}") == 404
        listed = get(node, "/api/v1/pipelines", scope="cluster")["pipelines"]
        assert pid not in {p["id"] for p in listed}

    # And c, started again, drops its copy from the change feed and never shows it again
    cluster.start("c")
    wait_until(lambda: status_of(c, f"/api/v1/pipelines/{pid}") == 404, 20, "c to drop it")
    wait_until(lambda: replicas_agree(cluster, cluster.ids["a"]), 20, "the replicas to agree")
    for node in (a, b, c):
        assert status_of(node, f"/api/v1/pipelines/{pid}") == 404
        for task_id in task_ids:
            assert status_of(node, f"/api/v1/tasks/{task_id}") == 404
        listed = get(node, "/api/v1/tasks", scope="cluster", limit=1000)["tasks"]
        assert not set(task_ids) & {t["id"] for t in listed}


def log_of(node: ServedNode, task_id: str, **params: Any) -> httpx.Response:
    with node.client() as client:
        return client.get(f"/api/v1/tasks/{task_id}/log", params=params)


def test_another_owners_task_log_and_events_open_from_any_node(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given a task of a's that ran on c (pinned there), printing through its child processes
    cluster.start_all()
    c_id = cluster.ids["c"]
    task = {
        "ref": "print",
        "type": "TEST_PRINT",
        "payload": {"lines": 3},
        "affinity": {"kind": "HARD", "node_id": c_id},
    }
    pid = finished_pipeline(cluster, tmp_path, [task])
    task_id = get(cluster.nodes["a"], "/api/v1/tasks", pipeline_id=pid)["tasks"][0]["id"]

    # Then its log opens on every node: the owner a, the executor c, and b (neither)
    for name in "abc":
        node = cluster.nodes[name]
        response = log_of(node, task_id)
        assert response.status_code == 200, (name, response.text)
        assert "program out 2" in response.text and "child err 2" in response.text
        assert response.headers["X-Log-Attempts"] == "1"
        # following it from its end reads nothing more
        end = response.headers["X-Log-End"]
        again = log_of(node, task_id, offset=end)
        assert again.status_code == 200 and again.text == ""
        assert again.headers["X-Log-End"] == end
        # an attempt that never ran is a 404 naming those that did
        missing = log_of(node, task_id, attempt=2)
        assert missing.status_code == 404 and "logged: 1" in missing.text
        # and its events, as the owner keeps them, say it ran on c
        events = get(node, f"/api/v1/tasks/{task_id}/events")
        assert events["owner_id"] == cluster.ids["a"]
        claimed = [e for e in events["events"] if e["event_type"] == "claimed"]
        assert claimed and claimed[0]["node_id"] == c_id

    # and through the CLI too, on b, by a short id of a's task
    printed = cluster.nodes["b"].cli("task", "log", task_id[:8])
    assert "program out 2" in printed.stdout

    # When c is down, the log cannot be read and the answer says which node has it
    cluster.nodes["c"].terminate()
    gone = log_of(cluster.nodes["b"], task_id)
    assert gone.status_code == 404 and c_id in gone.text
