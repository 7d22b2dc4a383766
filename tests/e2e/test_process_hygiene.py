"""Process hygiene of a real `fredica serve` (DESIGN §4.15): a task's processes do not outlive
the node that ran them, nothing is left stopped, one node per data dir, and a node that was
suspended (a sleeping laptop) does not burn its tasks' retries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from fredica.cli.demo import free_port

from .conftest import FAST_CONFIG, ServedNode, alive, proc_stat, wait_until

pytestmark = pytest.mark.slow


def stopped(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is not None and fields[0] == "T"


def create(node: ServedNode, tasks: list[dict[str, Any]]) -> dict[str, str]:
    with node.client() as client:
        r = client.post("/api/v1/pipelines", json={"template": "custom", "tasks": tasks})
        assert r.status_code == 201, r.text
        return dict(r.json()["tasks"])


def task(node: ServedNode, task_id: str) -> dict[str, Any]:
    with node.client() as client:
        return dict(client.get(f"/api/v1/tasks/{task_id}").json())


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_a_killed_nodes_processes_do_not_outlive_it(
    served: ServedNode, tmp_path: Path, paused: bool
) -> None:
    # Given a task whose shell started a background child, running (or paused) on the node
    served.start()
    pidfile = tmp_path / "child.pid"
    refs = create(served, [{"ref": "t", "type": "TEST_TREE", "payload": {"pidfile": str(pidfile)}}])
    child = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 20, "pid"))
    assert alive(child)
    # the node has written the group down (it does so as soon as the program has started; a
    # kill before that instant cannot be reaped by the next start, only by the death signal)
    wait_until(lambda: list((served.data_dir / "run").glob("*.json")), 10, "the ledger record")
    if paused:
        with served.client() as client:
            assert client.post(f"/api/v1/tasks/{refs['t']}/pause").status_code == 200
        wait_until(lambda: stopped(child), 5, "the child to be stopped")

    # When the node is killed with SIGKILL, the grandchild survives it for now ...
    served.kill9()
    time.sleep(0.3)
    assert alive(child), "the shell's background child was expected to outlive the shell"

    # ... and the restarted node kills it before anything runs again: nothing left, none stopped
    served.start()
    wait_until(lambda: not alive(child), 10, "the leftover process to be reaped")
    assert not stopped(child)
    after = wait_until(lambda: (t := task(served, refs["t"]))["attempt"] >= 2 and t, 20, "retry")
    assert after["status"] in ("running", "pending", "claimed")


def test_a_second_node_on_the_same_data_dir_refuses_to_start(
    served: ServedNode, tmp_path: Path
) -> None:
    served.start()
    second = ServedNode(served.data_dir, served.config, free_port(), tmp_path / "second.log")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fredica",
            "serve",
            "--config",
            str(served.config),
            "--data-dir",
            str(served.data_dir),
            "--port",
            str(second.port),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=second.env(),
    )
    assert result.returncode != 0
    message = " ".join((result.stdout + result.stderr).split())
    assert "in use by another fredica node" in message and str(served.proc.pid) in message
    assert "Traceback" not in message
    # the first node is unharmed
    with served.client() as client:
        assert client.get("/healthz").json()["ok"] is True


SLEEPY_CONFIG = FAST_CONFIG.replace("stale_after_sec: 3", "stale_after_sec: 0.45").replace(
    "reclaim_after_sec: 10", "reclaim_after_sec: 1"
)


def test_a_suspended_node_keeps_its_tasks_and_their_retries(tmp_path: Path) -> None:
    # Given a node (heartbeat 0.2 s, reclaim after 1 s) running tasks of 1.5 s, one retry each
    config = tmp_path / "worker.yaml"
    config.write_text(SLEEPY_CONFIG.format(grace=2))
    node = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log").start()
    log = tmp_path / "effects.jsonl"
    try:
        tasks = [
            {
                "ref": f"t{i}",
                "type": "TEST_EFFECT",
                "max_retries": 1,
                "payload": {"effect_log": str(log), "seconds": 1.5},
            }
            for i in range(16)
        ]
        refs = create(node, tasks)
        assert node.proc is not None
        # When it is suspended for 2x reclaim_after, ten times in a row, while it runs them
        for _ in range(10):
            time.sleep(0.7)
            os.kill(node.proc.pid, signal.SIGSTOP)
            time.sleep(2.0)
            os.kill(node.proc.pid, signal.SIGCONT)

        # Then every task completes; none ran out of retries
        def all_done() -> bool:
            return all(task(node, t)["status"] in ("completed", "failed") for t in refs.values())

        wait_until(all_done, 60, "every task to end")
        final = {ref: task(node, t) for ref, t in refs.items()}
    finally:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()
    assert {t["status"] for t in final.values()} == {"completed"}, final
    # the node's own liveness check saw that it had been suspended, not its tasks: no attempt
    # was reclaimed, so no retry was spent and no two attempts of a task ever ran together
    assert {t["attempt"] for t in final.values()} == {1}
    starts: dict[str, int] = defaultdict(int)
    for line in log.read_text().splitlines():
        e = json.loads(line)
        starts[e["task"]] += e["phase"] == "start"
    assert set(starts.values()) == {1}
