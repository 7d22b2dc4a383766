"""Placement by the score gate (seed 001 §6.3) on three real nodes whose scores differ: a task
made on the weakest node goes to the best node that is free, every time, and the starvation
guard (a deferred task claimed anyway once it has been ready for the window) runs per task."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cluster.support import Cluster, effects, get, make_cluster, pipeline_done, post
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow

TYPES = ("TEST_EFFECT_FFMPEG", "TEST_EFFECT_ASR", "TEST_EFFECT_AI")
# a best, b middle, c weakest: every CPU-scored backend follows the CPU score
CPU_SCORES = {"a": 90, "b": 60, "c": 20}


def scored(window_polls: int) -> Callable[[str, str], str]:
    """worker.yaml of node `name`: its CPU score, AI work enabled (a too), the guard's window."""

    def configure(name: str, text: str) -> str:
        text = text.replace("enabled: false", "enabled: true")
        text = text.replace("scheduling:\n", f"scheduling:\n  defer_window_polls: {window_polls}\n")
        return text + f"hardware:\n  cpu_score_override: {CPU_SCORES[name]}\n"

    return configure


def scores_seen(cluster: Cluster, viewer: str) -> dict[str, dict[str, float]]:
    """The scores per type each node advertises, as `viewer` last heard them."""
    rows = get(cluster.nodes[viewer], "/api/v1/nodes")["nodes"]
    names = {v: k for k, v in cluster.ids.items()}
    return {
        names[r["id"]]: {t: float(r["info"].get("scores", {}).get(t, 0)) for t in TYPES}
        for r in rows
        if r["id"] in names and r["status"] == "online"
    }


def ordered(cluster: Cluster) -> bool:
    """Every node has heard every node's scores, a > b > c for every type."""
    for viewer in "abc":
        seen = scores_seen(cluster, viewer)
        if set(seen) < {"a", "b", "c"} - {viewer}:
            return False
        own = get(cluster.nodes[viewer], "/cluster/info", secret=True)["scores"]
        seen[viewer] = {t: float(own.get(t, 0)) for t in TYPES}
        if not all(seen["a"][t] > seen["b"][t] > seen["c"][t] for t in TYPES):
            return False
    return True


def test_work_made_on_the_weakest_node_runs_on_the_best_free_node(tmp_path: Path) -> None:
    # Given three nodes whose scores differ for three task types, and the starvation window
    # at the default's length in seconds (3 polls of the default 1 s; these nodes poll every
    # 0.1 s): with 0.3 s, a best node slowed by a loaded machine (a wake, a diff and a claim
    # over HTTP) was sometimes beaten by the guard, which is then right to let others run it
    with make_cluster(tmp_path, configure=scored(window_polls=30)) as cluster:
        cluster.start_all()
        wait_until(lambda: ordered(cluster), 20, "every node to hear the scores a > b > c")
        c = cluster.nodes["c"]
        log = tmp_path / "effects.jsonl"
        # When 30 single-task pipelines of the three types are made on c, one after another
        for i in range(30):
            task = {"ref": "t", "type": TYPES[i % 3], "payload": {"effect_log": str(log)}}
            body = {"template": "custom", "tasks": [task]}
            pid = post(c, "/api/v1/pipelines", body)["pipeline_id"]
            done = wait_until(lambda pid=pid: pipeline_done(c, pid), 30, f"pipeline {i}")
            assert done["status"] == "completed", cluster.logs()

        # Then the best node, free each time, ran at least 29 of them
        ran_on = Counter(cluster.name_of(e["node"]) for e in effects(log) if e["phase"] == "end")
        assert sum(ran_on.values()) == 30
        assert ran_on["a"] >= 29, f"{dict(ran_on)}\n{cluster.logs()}"
