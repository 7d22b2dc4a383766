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
        self.start_some("".join(self.nodes))

    def start_some(self, names: str) -> None:
        """Start the nodes named; wait until each sees the others online."""
        for name in names:
            self.start(name)
        for name in names:
            node = self.nodes[name]
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
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """a: owner, cannot run TEST_EFFECT_AI; b and c can. b and c know only a (seeds): they
    learn each other through peer exchange. (Parametrized indirectly: other node names.)"""
    names = getattr(request, "param", "abc")
    ports = {name: free_port() for name in names}
    nodes = {}
    for name in names:
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


def test_five_hundred_tasks_owned_by_three_nodes_claimed_by_all_run_once_each(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given three nodes, each the owner of a third of 500 tasks (TEST_EFFECT: any node may run it)
    cluster.start_all()
    log = tmp_path / "effects.jsonl"
    pipelines: dict[str, list[str]] = {}
    for i, name in enumerate("abc"):
        count = 167 if i < 2 else 166
        tasks = [
            {"ref": f"t{j}", "type": "TEST_EFFECT", "payload": {"effect_log": str(log)}}
            for j in range(count)
        ]
        body = {"template": "custom", "tasks": tasks}
        pipelines.setdefault(name, []).append(
            post(cluster.nodes[name], "/api/v1/pipelines", body)["pipeline_id"]
        )

    # When every node claims from every owner at once
    for name, pids in pipelines.items():
        for pid in pids:
            done = wait_until(
                lambda n=cluster.nodes[name], p=pid: pipeline_done(n, p), 120, "the pipelines"
            )
            assert done["status"] == "completed", cluster.logs()

    # Then none was lost, none ran twice, and the work was shared
    starts = Counter(e["task"] for e in effects(log) if e["phase"] == "start")
    assert len(starts) == 500
    assert set(starts.values()) == {1}
    ran_by = Counter(e["node"] for e in effects(log) if e["phase"] == "end")
    assert set(ran_by) == set(cluster.ids.values()), ran_by
    owners_ran = Counter(
        (t["owner_id"], t["claimed_by"])
        for name, pids in pipelines.items()
        for pid in pids
        for t in get(cluster.nodes[name], "/api/v1/tasks", pipeline_id=pid, limit=500)["tasks"]
    )
    assert any(owner != claimer for owner, claimer in owners_ran), owners_ran


def b_runs_a_task_of_a(
    cluster: Cluster, tmp_path: Path, seconds: float
) -> tuple[ServedNode, ServedNode, Path, str]:
    """a and b only (b is then the one node that can run TEST_EFFECT_AI): a task of a's of
    `seconds` that b has started. Returns (a, b, the effect log, the pipeline id)."""
    cluster.start_some("ab")
    a, b = cluster.nodes["a"], cluster.nodes["b"]
    log = tmp_path / "effects.jsonl"
    task = {
        "ref": "t",
        "type": "TEST_EFFECT_AI",
        "payload": {"effect_log": str(log), "seconds": seconds},
    }
    pid = post(a, "/api/v1/pipelines", {"template": "custom", "tasks": [task]})["pipeline_id"]
    wait_until(lambda: effects(log), 20, "b to start the task")
    return a, b, log, pid


def test_a_restarted_executor_settles_its_claims_with_the_owner_before_claiming_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given b runs a long task of a's (c is not started: b is the only node that can run it)
    a, b, log, pid = b_runs_a_task_of_a(cluster, tmp_path, seconds=3)

    # When b is killed and restarts at once (well within reclaim_after)
    b.kill9()
    b.start()

    # Then a requeues attempt 1 when b verifies (not after reclaim_after), and attempt 2 runs
    done = wait_until(lambda: pipeline_done(a, pid), 30, "the pipeline")
    assert done["status"] == "completed", cluster.logs()
    row = get(a, "/api/v1/tasks", pipeline_id=pid)["tasks"][0]
    events = get(a, f"/api/v1/tasks/{row['id']}")["events"]
    assert "interrupted by restart" in " ".join(str(e["message"]) for e in events)
    assert "reclaimed" not in [e["event_type"] for e in events]
    ends = [(e["attempt"], e["phase"]) for e in effects(log)]
    assert ends == [(1, "start"), (2, "start"), (2, "end")]


def test_a_result_for_an_owner_that_is_down_waits_in_the_outbox_until_acknowledged(
    cluster: Cluster, tmp_path: Path
) -> None:
    a, b, log, pid = b_runs_a_task_of_a(cluster, tmp_path, seconds=2)

    # When the owner goes down while b finishes
    a.kill9()
    wait_until(lambda: len(effects(log)) == 2, 20, "b to finish")
    assert wait_until(lambda: get(b, "/api/v1/status")["outbox"] == 1, 10, "the outbox entry")

    # Then the result reaches the owner once it is back, and only then leaves b's outbox
    a.start()
    done = wait_until(lambda: pipeline_done(a, pid), 30, "the result to be delivered")
    assert done["status"] == "completed", cluster.logs()
    row = get(a, "/api/v1/tasks", pipeline_id=pid)["tasks"][0]
    assert row["attempt"] == 1 and row["retry_count"] == 0
    assert row["result"]["node"] == cluster.ids["b"]
    wait_until(lambda: get(b, "/api/v1/status")["outbox"] == 0, 10, "the outbox to empty")
    assert [e["phase"] for e in effects(log)] == ["start", "end"]
