"""Crash during a batch (DESIGN §4.13): a node killed with SIGKILL while a hundred or more of its
tasks are claimed ahead or waiting for the group commit loses none of them, and runs none twice
at the same time, after it restarts."""

from __future__ import annotations

import json
import sqlite3
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from fredica.cli.demo import free_port

from .conftest import FAST_CONFIG, ServedNode

pytestmark = pytest.mark.slow

TASKS = 4000
PIPELINE_SIZE = 1000
IN_FLIGHT = 100  # claimed ahead or awaiting the group commit when the node is killed
CONFIG = FAST_CONFIG.format(grace=2).replace(
    "scheduling:\n", "scheduling:\n  claim_ahead: 512\n  claim_ahead_window_sec: 5\n"
)


def in_flight(db: Path) -> tuple[int, int]:
    """(claimed, running) rows of the node's database, read by a second connection."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = dict(
            conn.execute(
                "SELECT status, COUNT(*) FROM task WHERE status IN ('claimed', 'running') "
                "GROUP BY status"
            ).fetchall()
        )
    except sqlite3.OperationalError:  # the database is being created
        return 0, 0
    finally:
        conn.close()
    return rows.get("claimed", 0), rows.get("running", 0)


def effects(log: Path) -> dict[str, list[dict[str, Any]]]:
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        by_task[entry["task"]].append(entry)
    return by_task


def test_kill_9_during_a_batch_loses_nothing_and_runs_nothing_twice_at_once(
    tmp_path: Path,
) -> None:
    config = tmp_path / "worker.yaml"
    config.write_text(CONFIG)
    node = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log")
    log = tmp_path / "effects.jsonl"
    db = node.data_dir / "fredica.db"
    node.start()
    try:
        # Given thousands of short tasks flowing through the node in claim-ahead batches
        with node.client() as client:
            for start in range(0, TASKS, PIPELINE_SIZE):
                tasks = [
                    {
                        "ref": f"t{i}",
                        "type": "TEST_EFFECT",
                        "payload": {"effect_log": str(log), "seconds": 0},
                    }
                    for i in range(start, start + PIPELINE_SIZE)
                ]
                r = client.post("/api/v1/pipelines", json={"template": "custom", "tasks": tasks})
                assert r.status_code == 201, r.text
        # When the node is killed while at least IN_FLIGHT tasks are claimed or running on it
        deadline = time.monotonic() + 60
        seen = (0, 0)
        while time.monotonic() < deadline:
            seen = in_flight(db)
            if sum(seen) >= IN_FLIGHT:
                break
            time.sleep(0.002)
        assert sum(seen) >= IN_FLIGHT, f"never saw {IN_FLIGHT} tasks in flight (last {seen})"
        node.kill9()
        killed_at = time.time()
        killed_pid = node.proc.pid if node.proc else -1
        left = in_flight(db)
        assert sum(left) >= 1, "the kill came after the batch was committed"

        # Then, after a restart, every task completes ...
        node.start()
        with node.client() as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                counts = client.get("/api/v1/status").json()["task_counts"]
                if counts.get("completed", 0) == TASKS:
                    break
                time.sleep(0.2)
            assert counts.get("completed", 0) == TASKS, counts
            restart_log = client.get("/api/v1/restart-log", params={"limit": 1000}).json()
    finally:
        if node.proc is not None and node.proc.poll() is None:
            node.terminate()

    by_task = effects(log)
    assert len(by_task) == TASKS
    for task_id, entries in by_task.items():
        entries.sort(key=lambda e: e["t"])
        # ... each attempt ran start -> end without another attempt starting in between,
        # except the attempt the kill cut short, which ended with its process
        open_attempt: dict[str, Any] | None = None
        for entry in entries:
            if entry["phase"] == "start":
                if open_attempt is not None:
                    assert open_attempt["pid"] == killed_pid and entry["t"] > killed_at, (
                        task_id,
                        entries,
                    )
                open_attempt = entry
            else:
                assert open_attempt is not None and open_attempt["attempt"] == entry["attempt"]
                open_attempt = None
        assert open_attempt is None, (task_id, entries)

    # and the restart put back what the dead node held: never-started claims without
    # spending an attempt, interrupted runs through the retry rules
    actions = defaultdict(int)
    for entry in restart_log["entries"]:
        actions[entry["action"]] += 1
    assert sum(actions.values()) == sum(left), (actions, left)
    assert actions["requeued"] == left[0]
    assert actions["interrupted"] == left[1]
