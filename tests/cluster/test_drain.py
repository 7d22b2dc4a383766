"""Real `fredica serve` processes on loopback: two nodes with no seeds find each other over mDNS
(`cluster.mode: auto`), and a drained node claims nothing while its peer does all the work
(including the work the drained node owns), then claims again once undrained. The CLI's
`fredica node drain / list / undrain` drive and show it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.cli.demo import free_port
from tests.e2e.conftest import ServedNode, wait_until

pytestmark = pytest.mark.slow

CONFIG = """\
node:
  max_workers: 2
  shutdown_grace_sec: 2
cluster:
  mode: auto
  cluster_secret: "{secret}"
  heartbeat_interval_sec: 0.2
  stale_after_sec: 1.5
  reclaim_after_sec: 3
scheduling:
  poll_interval_sec: 0.1
  idle_poll_interval_sec: 0.3
plugins:
  - fredica_testplugin
"""


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ServedNode, ServedNode]]:
    """a and b, no seeds; a secret of their own, so that nodes of other test runs announcing
    on this machine's loopback never join them."""
    secret = f"drain-test-{uuid.uuid4().hex}"
    nodes = []
    for name in "ab":
        config = tmp_path / f"{name}.yaml"
        config.write_text(CONFIG.format(secret=secret))
        nodes.append(
            ServedNode(tmp_path / f"data-{name}", config, free_port(), tmp_path / f"{name}.log")
        )
    yield nodes[0], nodes[1]
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()


def get(node: ServedNode, path: str) -> Any:
    with node.client() as client:
        response = client.get(path)
        assert response.status_code == 200, response.text
        return response.json()


def post(node: ServedNode, path: str, body: dict[str, Any]) -> Any:
    with node.client() as client:
        response = client.post(path, json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()


def states(node: ServedNode) -> dict[str, str]:
    return {n["id"]: n["status"] for n in get(node, "/api/v1/nodes")["nodes"]}


def effects(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_nodes_find_each_other_over_mdns_and_a_drained_node_claims_nothing(
    pair: tuple[ServedNode, ServedNode], tmp_path: Path
) -> None:
    a, b = pair
    # Given two nodes that list no seeds: they find each other on mDNS
    a.start()
    b.start()
    a_id, b_id = get(a, "/api/v1/status")["node_id"], get(b, "/api/v1/status")["node_id"]
    logs = lambda: a.log.read_text()[-3000:] + b.log.read_text()[-3000:]  # noqa: E731
    wait_until(lambda: states(a).get(b_id) == "online", 20, f"a to find b\n{logs()}")
    wait_until(lambda: states(b).get(a_id) == "online", 20, f"b to find a\n{logs()}")
    # (one of them found the other on mDNS; the other may have learned it from its introduction)
    assert f"found {b_id}" in a.log.read_text() or f"found {a_id}" in b.log.read_text()

    # When a is drained (from the CLI) and work is created on a
    out = a.cli("node", "drain").stdout
    assert f"node {a_id} draining" in out
    wait_until(lambda: states(b).get(a_id) == "draining", 10, "b to see a draining")
    log = tmp_path / "effects.jsonl"
    tasks = [
        {"ref": f"t{i}", "type": "TEST_EFFECT", "payload": {"effect_log": str(log)}}
        for i in range(8)
    ]
    pid = post(a, "/api/v1/pipelines", {"template": "custom", "tasks": tasks})["pipeline_id"]

    # Then b runs every task (a owns them and hands them out), a runs none
    done = wait_until(
        lambda: (p := get(a, f"/api/v1/pipelines/{pid}"))["status"] == "completed" and p,
        30,
        f"the pipeline to complete\n{logs()}",
    )
    assert {t["claimed_by"] for t in done["tasks"]} == {b_id}
    ran = [e for e in effects(log) if e["phase"] == "end"]
    assert len(ran) == 8 and {e["node"] for e in ran} == {b_id}

    # and `fredica node list` shows both, a draining
    table = b.cli("node", "list").stdout
    row_a = next(line for line in table.splitlines() if a_id in line)
    assert "draining" in row_a and a.url.removeprefix("http://") in row_a
    assert "(this node)" in next(line for line in table.splitlines() if b_id in line)

    # When a is undrained and b drained, the next work runs on a
    assert "claiming work again" in a.cli("node", "undrain").stdout
    b.cli("node", "drain")
    wait_until(lambda: states(a).get(b_id) == "draining", 10, "a to see b draining")
    pid = post(a, "/api/v1/pipelines", {"template": "custom", "tasks": tasks[:3]})["pipeline_id"]
    done = wait_until(
        lambda: (p := get(a, f"/api/v1/pipelines/{pid}"))["status"] == "completed" and p,
        30,
        "the second pipeline to complete",
    )
    assert {t["claimed_by"] for t in done["tasks"]} == {a_id}


def test_cluster_info_reports_the_state_to_peers(pair: tuple[ServedNode, ServedNode]) -> None:
    a, _ = pair
    a.start()
    secret = a.config.read_text().split('cluster_secret: "')[1].split('"')[0]
    with httpx.Client(
        base_url=a.url, timeout=10, trust_env=False, headers={"X-Cluster-Secret": secret}
    ) as client:
        assert client.get("/cluster/info").json()["status"] == "online"
        a.cli("node", "drain")
        assert client.get("/cluster/info").json()["status"] == "draining"
        a.cli("node", "undrain")
        assert client.get("/cluster/info").json()["status"] == "online"
