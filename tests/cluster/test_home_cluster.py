"""Three real `fredica serve` processes on loopback, each with its own SQLite store, form a home
cluster with no server: they find each other from seeds and peer exchange, claim each other's
tasks from the owner over HTTP (the owner's compare-and-set), report back to the owner, and
survive a node killed with SIGKILL."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.cli.demo import free_port
from tests.e2e.conftest import ServedNode, wait_until

pytestmark = pytest.mark.slow

SECRET = "home-cluster-test-secret"

CONFIG = """\
node:
  max_workers: 2
  shutdown_grace_sec: 2
cluster:
  mode: manual  # seeds and peer exchange only (mDNS would also find other runs' nodes)
  cluster_secret: "{secret}"
  seeds: [{seeds}]
  heartbeat_interval_sec: 0.2
  stale_after_sec: 1.5
  reclaim_after_sec: 3
scheduling:
  poll_interval_sec: 0.1
  idle_poll_interval_sec: 0.3
plugins:
  - fredica_testplugin
capabilities:
  ai_analyze:
    enabled: {analyze}
"""


class Cluster:
    def __init__(self, nodes: dict[str, ServedNode]) -> None:
        self.nodes = nodes
        self.ids: dict[str, str] = {}

    def start(self, name: str) -> None:
        node = self.nodes[name].start()
        self.ids[name] = get(node, "/api/v1/status")["node_id"]

    def start_all(self) -> None:
        """Start every node; wait until each sees the other two online."""
        for name in self.nodes:
            self.start(name)
        for name, node in self.nodes.items():
            others = set(self.ids.values()) - {self.ids[name]}
            wait_until(
                lambda node=node, others=others: others <= online(node),
                20,
                f"{name} to see its peers",
            )

    def name_of(self, node_id: str) -> str:
        return next(n for n, i in self.ids.items() if i == node_id)

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{s.log.read_text()[-4000:]}" for n, s in self.nodes.items())


def get(node: ServedNode, path: str, **params: Any) -> Any:
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False) as client:
        response = client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


def online(node: ServedNode) -> set[str]:
    return {n["id"] for n in get(node, "/api/v1/nodes")["nodes"] if n["status"] == "online"}


def post(node: ServedNode, path: str, body: dict[str, Any]) -> Any:
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False) as client:
        response = client.post(path, json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """a: owner, cannot run TEST_EFFECT_AI; b and c can. b and c know only a (seeds): they
    learn each other through peer exchange."""
    ports = {name: free_port() for name in "abc"}
    nodes = {}
    for name in "abc":
        seeds = "" if name == "a" else f'"127.0.0.1:{ports["a"]}"'
        config = tmp_path / f"{name}.yaml"
        config.write_text(
            CONFIG.format(secret=SECRET, seeds=seeds, analyze="false" if name == "a" else "true")
        )
        nodes[name] = ServedNode(
            tmp_path / f"data-{name}", config, ports[name], tmp_path / f"{name}.log"
        )
    c = Cluster(nodes)
    yield c
    for node in nodes.values():
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()


def effects(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def pipeline_done(node: ServedNode, pid: str) -> dict[str, Any] | None:
    data: dict[str, Any] = get(node, f"/api/v1/pipelines/{pid}")
    return data if data["status"] in ("completed", "failed", "partial_failed") else None


def test_work_created_on_one_node_runs_where_it_can_and_only_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given three nodes; a cannot run TEST_EFFECT_AI (no AI_ANALYZE), c is pinned by affinity
    cluster.start_all()
    a = cluster.nodes["a"]
    log = tmp_path / "effects.jsonl"
    tasks: list[dict[str, Any]] = [
        {"ref": f"ai{i}", "type": "TEST_EFFECT_AI", "payload": {"effect_log": str(log)}}
        for i in range(6)
    ]
    tasks.append(
        {
            "ref": "pinned",
            "type": "TEST_EFFECT",
            "payload": {"effect_log": str(log)},
            "depends_on": ["ai0"],
            "affinity": {"kind": "HARD", "node_id": cluster.ids["c"]},
        }
    )
    # When a pipeline is created on a
    created = post(a, "/api/v1/pipelines", {"template": "custom", "tasks": tasks})
    pid = created["pipeline_id"]

    # Then it completes, every task executed exactly once, each where it may run
    done = wait_until(lambda: pipeline_done(a, pid), 60, "the pipeline to finish")
    assert done["status"] == "completed", cluster.logs()
    rows = get(a, "/api/v1/tasks", pipeline_id=pid, limit=100)["tasks"]
    starts = Counter(e["task"] for e in effects(log) if e["phase"] == "start")
    assert sorted(starts.values()) == [1] * len(rows), starts
    runners = {e["task"]: e["node"] for e in effects(log) if e["phase"] == "end"}
    for task in rows:
        ran_on = runners[task["id"]]
        assert task["claimed_by"] == ran_on
        if task["type"] == "TEST_EFFECT_AI":
            assert ran_on in (cluster.ids["b"], cluster.ids["c"])
        else:
            assert ran_on == cluster.ids["c"]
    assert {cluster.ids["b"], cluster.ids["c"]} <= set(runners.values())
    # the owner's events say who ran what
    pinned = next(t for t in rows if t["type"] == "TEST_EFFECT")
    events = get(a, f"/api/v1/tasks/{pinned['id']}")["events"]
    claimed = [e for e in events if e["event_type"] == "claimed"]
    assert claimed and claimed[0]["node_id"] == cluster.ids["c"]


def test_a_killed_executor_loses_its_task_to_another_node_and_does_not_run_it_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start_all()
    a = cluster.nodes["a"]
    log = tmp_path / "effects.jsonl"
    body = {
        "template": "custom",
        "tasks": [
            {
                "ref": "long",
                "type": "TEST_EFFECT_AI",
                "payload": {"effect_log": str(log), "seconds": 4},
            }
        ],
    }
    pid = post(a, "/api/v1/pipelines", body)["pipeline_id"]
    first = wait_until(
        lambda: [e for e in effects(log) if e["phase"] == "start"], 20, "the task to start"
    )[0]
    victim = cluster.name_of(first["node"])
    survivor = "c" if victim == "b" else "b"

    # When the executor is killed mid-task
    cluster.nodes[victim].kill9()

    # Then the owner reclaims it and the other node completes it, as attempt 2
    done = wait_until(lambda: pipeline_done(a, pid), 40, "the task to be reclaimed and run")
    assert done["status"] == "completed", cluster.logs()
    ends = [e for e in effects(log) if e["phase"] == "end"]
    assert [(e["node"], e["attempt"]) for e in ends] == [(cluster.ids[survivor], 2)]
    task = get(a, "/api/v1/tasks", pipeline_id=pid)["tasks"][0]
    assert task["retry_count"] == 1 and task["claimed_by"] == cluster.ids[survivor]
    kinds = [e["event_type"] for e in get(a, f"/api/v1/tasks/{task['id']}")["events"]]
    assert "stale" in kinds and "reclaimed" in kinds

    # And the killed node restarts without running it again
    cluster.nodes[victim].start()
    time.sleep(2)  # give a wrongly resumed attempt time to show up in the effect log
    assert len([e for e in effects(log) if e["phase"] == "start"]) == 2
    assert get(a, f"/api/v1/pipelines/{pid}")["status"] == "completed"
