"""The CLI against a real node process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from .conftest import ServedNode


def test_pipeline_and_task_commands(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    tasks = tmp_path / "tasks.json"
    tasks.write_text(
        json.dumps(
            {
                "tasks": [
                    {"ref": "slow", "type": "TEST_SLEEP", "payload": {"seconds": 20}},
                    {"ref": "next", "type": "TEST_SLEEP", "depends_on": ["slow"]},
                ]
            }
        )
    )
    out = served.cli("pipeline", "create", "custom", "--tasks", str(tasks)).stdout
    pipeline_id = out.split()[1]
    data = json.loads(served.cli("pipeline", "show", pipeline_id, "--json").stdout)
    slow = next(t for t in data["tasks"] if t["type"] == "TEST_SLEEP" and not t["depends_on"])
    for _ in range(200):
        if json.loads(served.cli("task", "show", slow["id"]).stdout)["status"] == "running":
            break
        time.sleep(0.05)
    assert "(paused)" in served.cli("task", "pause", slow["id"]).stdout
    assert "running" in served.cli("task", "resume", slow["id"]).stdout
    listing = served.cli("pipeline", "list").stdout
    assert pipeline_id in listing
    status = served.cli("status").stdout
    assert "TEST_SLEEP" in status and "running 1" in status
    refused = served.cli("task", "retry", slow["id"], check=False)
    assert refused.returncode == 1 and "409" in refused.stderr
    served.cli("pipeline", "cancel", pipeline_id)
    follow = served.cli("pipeline", "show", pipeline_id, "--follow", check=False)
    assert follow.returncode == 1 and "cancelled" in follow.stdout


def test_create_with_follow_shows_live_progress(served: ServedNode) -> None:
    served.start()
    tasks = served.data_dir.parent / "t.json"
    tasks.write_text(json.dumps([{"ref": "a", "type": "TEST_SLEEP", "payload": {"seconds": 0.3}}]))
    result = served.cli("pipeline", "create", "custom", "--tasks", str(tasks), "--follow")
    assert "completed" in result.stdout and "100%" in result.stdout


def test_cli_reports_an_unreachable_node() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fredica", "status", "--node", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "cannot reach a node" in result.stderr


def test_cli_rejects_bad_template_with_reason(served: ServedNode) -> None:
    served.start()
    result = served.cli("pipeline", "create", "nope", check=False)
    assert result.returncode == 1 and "unknown template 'nope'" in result.stderr


def test_network_test_command(served: ServedNode) -> None:
    from fredica.cli.demo import local_http_server

    served.start()
    with local_http_server() as base:
        result = served.cli("network-test", f"{base}/", "--timeout-ms", "2000")
    assert f"{base}/" in result.stdout and " ms" in result.stdout and "ok" in result.stdout
