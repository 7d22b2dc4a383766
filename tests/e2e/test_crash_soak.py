"""Crash soak (issue 12): a node killed with SIGKILL every couple of seconds while 300 tasks run
in child processes, restarted each time. Nothing is lost, no two attempts of a task run at the
same moment (each child logs its start and end; a child that outlived its node would log an end
after the next attempt started), and the database stays intact."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

import pytest

from fredica.cli.demo import free_port

from .conftest import FAST_CONFIG, ServedNode
from .test_crash_batch import effects

pytestmark = pytest.mark.slow

TASKS = 300
CONFIG = FAST_CONFIG.format(grace=2).replace("max_workers: 2", "max_workers: 4")


def completed(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        return int(
            conn.execute("SELECT COUNT(*) FROM task WHERE status = 'completed'").fetchone()[0]
        )


def test_kill_9_every_few_seconds_loses_nothing_and_never_overlaps_attempts(
    tmp_path: Path,
) -> None:
    config = tmp_path / "worker.yaml"
    config.write_text(CONFIG)
    node = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log")
    log = tmp_path / "effects.jsonl"
    db = node.data_dir / "fredica.db"
    rng = random.Random(12)
    node.start()
    kills = 0
    try:
        tasks = [
            {
                "ref": f"t{i}",
                "type": "TEST_CHILD_EFFECT",
                "payload": {"effect_log": str(log), "seconds": 0.2},
                "max_retries": 50,
            }
            for i in range(TASKS)
        ]
        with node.client() as client:
            r = client.post("/api/v1/pipelines", json={"template": "custom", "tasks": tasks})
            assert r.status_code == 201, r.text
        # When the node is killed every 1.5-3 s and restarted at once, until the work is done
        deadline = time.monotonic() + 240
        while completed(db) < TASKS:
            assert time.monotonic() < deadline, f"{completed(db)} of {TASKS} after {kills} kills"
            time.sleep(rng.uniform(1.5, 3.0))  # the kill's moment is the point of the test
            if completed(db) >= TASKS:
                break
            node.kill9()
            kills += 1
            node.start()
        with node.client() as client:
            counts = client.get("/api/v1/status").json()["task_counts"]
    finally:
        if node.proc is not None and node.proc.poll() is None:
            node.terminate()

    # Then every task completed: none lost, none failed for lack of retries
    assert kills >= 3, f"only {kills} kills: the work finished too fast to test anything"
    assert counts["completed"] == TASKS and counts["failed"] == 0, counts
    # No attempt ran while another attempt of the same task ran: once a newer attempt of a task
    # started, no older attempt's child logged anything (its child died with its node)
    by_task = effects(log)
    assert len(by_task) == TASKS
    for task_id, entries in by_task.items():
        entries.sort(key=lambda e: e["t"])
        newest = 0
        for entry in entries:
            assert entry["attempt"] >= newest, (task_id, entries)
            newest = entry["attempt"]
        assert any(e["phase"] == "end" for e in entries), (task_id, entries)
    # and the database is intact
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
