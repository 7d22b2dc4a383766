"""`fredica serve` as a real process: the seed's NetworkTestRoute, crash recovery, clean stop."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

import httpx

from fredica.cli.demo import free_port, local_http_server

from .conftest import ServedNode


def wait_task(client: httpx.Client, task_id: str, pred, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = client.get(f"/api/v1/tasks/{task_id}").json()
        if pred(task):
            return task
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} never matched: {task}")


def test_network_test_route_with_curl(served: ServedNode) -> None:
    served.start()
    closed = free_port()
    with local_http_server() as base:
        body = json.dumps({"urls": [f"{base}/", f"http://127.0.0.1:{closed}/"], "timeout_ms": 2000})
        curl = shutil.which("curl")
        assert curl, "curl is required (installed by .ci/run)"
        out = subprocess.run(
            [
                curl,
                "-s",
                "-X",
                "POST",
                f"{served.url}/api/v1/NetworkTestRoute",
                "-H",
                "Content-Type: application/json",
                "-d",
                body,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        ids = json.loads(out.stdout)
        with served.client() as client:
            task = wait_task(client, ids["task_id"], lambda t: t["status"] == "completed")
            listed = client.get(
                "/api/v1/WorkerTaskListRoute", params={"pipeline_id": ids["pipeline_id"]}
            ).json()["tasks"]
    ok, refused = task["result"]["results"]
    assert ok["status"] == "ok" and 0 <= ok["latency_ms"] < 2000
    assert refused["status"] == "error" and refused["latency_ms"] is None
    assert [t["id"] for t in listed] == [ids["task_id"]]
    # claimed and started in one write; the completion names the backend that ran
    events = [e["event_type"] for e in task["events"]]
    assert events == ["created", "claimed", "completed"]
    assert task["events"][-1]["message"].startswith("backend builtin score=")
    assert task["backend"] == "builtin"  # NETWORK_TEST needs no capability


def test_kill_9_mid_task_then_restart_recovers(served: ServedNode) -> None:
    served.start()
    with served.client() as client:
        created = client.post(
            "/api/v1/pipelines",
            json={
                "template": "custom",
                "tasks": [
                    {
                        "ref": "again",
                        "type": "TEST_SLEEP",
                        "max_retries": 1,
                        "payload": {"seconds": 1.5},
                    },
                    {
                        "ref": "once",
                        "type": "TEST_SLEEP",
                        "max_retries": 0,
                        "payload": {"seconds": 30},
                    },
                    {"ref": "after", "type": "TEST_SLEEP", "depends_on": ["again"]},
                ],
            },
        ).json()
        refs = created["tasks"]
        for ref in ("again", "once"):
            wait_task(client, refs[ref], lambda t: t["status"] == "running")
    served.kill9()

    served.start()
    with served.client() as client:
        status = client.get("/api/v1/status").json()
        assert status["previous_shutdown_type"] == "CRASH"
        assert status["startup_recovery"]["interrupted"] == 2
        log = {e["task_id"]: e for e in client.get("/api/v1/restart-log").json()["entries"]}
        assert log[refs["again"]]["action"] == "interrupted"
        assert log[refs["again"]]["new_status"] == "pending"
        assert log[refs["once"]]["new_status"] == "failed"
        once = client.get(f"/api/v1/tasks/{refs['once']}").json()
        assert (once["status"], once["error"]) == ("failed", "interrupted by restart")
        again = wait_task(client, refs["again"], lambda t: t["status"] == "completed")
        assert (again["attempt"], again["retry_count"]) == (2, 1)
        wait_task(client, refs["after"], lambda t: t["status"] == "completed")
        pipeline = client.get(f"/api/v1/pipelines/{created['pipeline_id']}").json()
        assert pipeline["status"] == "partial_failed"


def test_sigterm_is_a_clean_stop_that_releases_work(served: ServedNode) -> None:
    served.start()
    with served.client() as client:
        created = client.post(
            "/api/v1/pipelines",
            json={
                "template": "custom",
                "tasks": [
                    {
                        "ref": "long",
                        "type": "TEST_SLEEP",
                        "max_retries": 0,
                        "payload": {"seconds": 60},
                    }
                ],
            },
        ).json()
        wait_task(client, created["tasks"]["long"], lambda t: t["status"] == "running")
    started = time.monotonic()
    assert served.terminate() == 0
    assert time.monotonic() - started < 20  # grace 2 s, then released
    served.start()
    with served.client() as client:
        status = client.get("/api/v1/status").json()
        assert status["previous_shutdown_type"] == "CLEAN"
        task = client.get(f"/api/v1/tasks/{created['tasks']['long']}").json()
        # released, not failed: a clean stop does not spend the task's retries
        assert task["retry_count"] == 0 and task["status"] in ("pending", "running")
        assert "released" in [e["event_type"] for e in task["events"]]
        client.post(f"/api/v1/pipelines/{created['pipeline_id']}/cancel")


def test_invalid_worker_yaml_refuses_to_start(served: ServedNode) -> None:
    served.config.write_text("node:\n  max_workers: lots\n")
    result = subprocess.run(
        [
            *served.cli("--help", check=False).args[:3],
            "serve",
            "--config",
            str(served.config),
            "--data-dir",
            str(served.data_dir),
            "--port",
            str(served.port),
        ],
        capture_output=True,
        text=True,
        env=served.env(),
        timeout=60,
    )
    assert result.returncode != 0
    assert "node.max_workers" in result.stderr and "worker.yaml" in result.stderr


def test_first_start_writes_identity_and_hardware_cache_keeping_comments(
    served: ServedNode,
) -> None:
    served.config.write_text("# my node\n" + served.config.read_text())
    served.start()
    served.terminate()
    text = served.config.read_text()
    from fredica.config import schema as config

    cfg = config.load_config(served.config)
    assert cfg.node.id.startswith("node-") and cfg.node.hostname
    assert cfg.runtime.cpu_score_cached is not None  # seed 001 §2.7.1 cache
    assert "# test node: short timings" in text and text.startswith("# my node")
