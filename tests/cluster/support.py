"""Real `fredica serve` nodes forming a home cluster on loopback, for the cluster tests."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from fredica.cli.demo import free_port
from tests.e2e.conftest import ServedNode, wait_until

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


def get(node: ServedNode, path: str, secret: bool = False, **params: Any) -> Any:
    headers = {"X-Cluster-Secret": SECRET} if secret else {}
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False, headers=headers) as client:
        response = client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


def online(node: ServedNode) -> set[str]:
    return {n["id"] for n in get(node, "/api/v1/nodes")["nodes"] if n["status"] == "online"}


def post(node: ServedNode, path: str, body: dict[str, Any]) -> Any:
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False) as client:
        response = client.post(path, json=body)
        assert response.status_code in (200, 201, 202), response.text
        return response.json()


@contextlib.contextmanager
def make_cluster(
    tmp_path: Path,
    names: str = "abc",
    seed_of_a: Callable[[int], str] | None = None,
    configure: Callable[[str, str], str] | None = None,
    place: Callable[[str], tuple[str, list[str]]] | None = None,
) -> Iterator[Cluster]:
    """a: owner, cannot run TEST_EFFECT_AI; the others can. They know only a (seeds: a's
    address, or `seed_of_a(a's port)`, e.g. a fault proxy in front of it) and learn each other
    through peer exchange. `configure(name, yaml)` may change a node's worker.yaml;
    `place(name)` gives a node's listen address and command prefix (tests/netns.py). Every node
    still running at the end is killed."""
    ports = {name: free_port() for name in names}
    placed = {name: place(name) if place else ("127.0.0.1", []) for name in names}
    nodes = {}
    for name in names:
        if name == "a":
            seeds = ""
        else:
            seed = seed_of_a(ports["a"]) if seed_of_a else f"{placed['a'][0]}:{ports['a']}"
            seeds = f'"{seed}"'
        config = tmp_path / f"{name}.yaml"
        text = CONFIG.format(secret=SECRET, seeds=seeds, analyze="false" if name == "a" else "true")
        config.write_text(configure(name, text) if configure else text)
        nodes[name] = ServedNode(
            tmp_path / f"data-{name}",
            config,
            ports[name],
            tmp_path / f"{name}.log",
            host=placed[name][0],
            prefix=placed[name][1],
        )
    try:
        yield Cluster(nodes)
    finally:
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


def digest(node: ServedNode, owner: str) -> str:
    """The node's digest of `owner`'s rows (its own, or its replica of them)."""
    with httpx.Client(
        base_url=node.url, timeout=10, trust_env=False, headers={"X-Cluster-Secret": SECRET}
    ) as client:
        response = client.get("/cluster/digest", params={"owner": owner})
        assert response.status_code == 200, response.text
        return str(response.json()["digest"])


def replicas_agree(cluster: Cluster, owner: str) -> bool:
    """Every started node's copy of `owner`'s rows hashes like the owner's own."""
    started = [n for n in cluster.nodes.values() if n.proc is not None and n.proc.poll() is None]
    return len({digest(node, owner) for node in started}) == 1


@contextlib.contextmanager
def pg_nodes(tmp_path: Path, config: str, url: str) -> Iterator[list[ServedNode]]:
    """Nodes a, b, c (not started) whose worker.yaml is `config` with `{url}` = the store URL
    of one PostgreSQL database. Every node still running at the end is killed."""
    nodes = []
    for name in "abc":
        path = tmp_path / f"{name}.yaml"
        path.write_text(config.format(url=url))
        nodes.append(
            ServedNode(tmp_path / f"data-{name}", path, free_port(), tmp_path / f"{name}.log")
        )
    try:
        yield nodes
    finally:
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()


def effect_pipeline(node: ServedNode, log: Path, count: int, seconds: float) -> str:
    """Create on `node` one pipeline of `count` TEST_EFFECT tasks of `seconds` each, which log
    their effects to `log` (created empty); returns its id."""
    log.touch()
    tasks = [
        {
            "ref": f"t{i}",
            "type": "TEST_EFFECT",
            "payload": {"effect_log": str(log), "seconds": seconds},
        }
        for i in range(count)
    ]
    return str(
        post(node, "/api/v1/pipelines", {"template": "custom", "tasks": tasks})["pipeline_id"]
    )


# --- ownership that moves (test_takeover.py, test_partition.py) ------------------------------
TAKEOVER_WAIT = 4.0  # cluster.originator_wait_sec of the takeover tests


def takeover_on(name: str, text: str) -> str:
    """`make_cluster`'s configure: takeover on, after `TAKEOVER_WAIT` seconds of silence."""
    return text.replace(
        "cluster:\n",
        f"cluster:\n  takeover: true\n  originator_wait_sec: {TAKEOVER_WAIT}\n",
        1,
    )


def effect_tasks(log: Path, count: int, seconds: float, ref: str = "t") -> list[dict[str, Any]]:
    """`count` TEST_EFFECT_AI tasks logging their (task, attempt, phase) to `log`."""
    return [
        {
            "ref": f"{ref}{i}",
            "type": "TEST_EFFECT_AI",
            "payload": {"effect_log": str(log), "seconds": seconds},
        }
        for i in range(count)
    ]


def owner_of(node: ServedNode, pid: str) -> tuple[str, int]:
    """(owner id, owner epoch) of the pipeline as `node` shows it."""
    shown = get(node, f"/api/v1/pipelines/{pid}")
    return str(shown["owner_id"]), int(shown["owner_epoch"])


def shows(node: ServedNode, pid: str) -> bool:
    """Whether `node` can show the pipeline (its own, or its replica of the owner's rows)."""
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False) as client:
        response = client.get(f"/api/v1/pipelines/{pid}")
    assert response.status_code in (200, 404), response.text
    return response.status_code == 200


def replicated(cluster: Cluster, pid: str, names: str) -> None:
    """Wait until each node named holds the pipeline: the owner's rows reach a peer's replica
    on its next pull, and a node still without them can neither show the owner nor take the
    pipeline over (on a loaded machine that pull can lag the first tasks it ran)."""
    for name in names:
        node = cluster.nodes[name]
        wait_until(lambda node=node: shows(node, pid), 20, f"{name} to hold a replica of {pid}")


def owners(cluster: Cluster, pid: str) -> set[tuple[str, int]]:
    """The (owner, epoch) every running node shows for the pipeline."""
    return {
        owner_of(node, pid)
        for node in cluster.nodes.values()
        if node.proc is not None and node.proc.poll() is None
    }


def ran_once(log: Path) -> Counter[str]:
    """Per task that ended, how often (asserting no task started or ended twice)."""
    rows = effects(log)
    starts = Counter(e["task"] for e in rows if e["phase"] == "start")
    ends = Counter(e["task"] for e in rows if e["phase"] == "end")
    assert set(starts.values()) <= {1} and set(ends.values()) <= {1}, (starts, ends)
    return ends
