"""Retry and delete of a whole pipeline, and task logs, through the HTTP API against a real
node (real SQLite, real engine, real child processes)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from .test_api import wait_pipeline

PRINT = "TEST_PRINT"


async def _create(client: httpx.AsyncClient, *tasks: dict[str, Any], material: str) -> dict:
    r = await client.post(
        "/api/v1/pipelines",
        json={"template": "custom", "material_id": material, "tasks": list(tasks)},
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def _wait(condition: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await condition()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_retry_a_failed_pipeline_runs_its_failed_and_cancelled_tasks_again(api) -> None:
    client, _ = api
    # Given a pipeline whose first task fails for good and whose second was cancelled for it
    created = await _create(
        client,
        {
            "ref": "flaky",
            "type": "TEST_FAIL",
            "payload": {"error_type": "PERMANENT", "succeed_on_attempt": 2},
        },
        {
            "ref": "after",
            "type": "TEST_SLEEP",
            "depends_on": ["flaky"],
            "payload": {"seconds": 0.02},
        },
        {"ref": "fine", "type": "TEST_SLEEP", "payload": {"seconds": 0.02}},
        material="retry-me",
    )
    pid, refs = created["pipeline_id"], created["tasks"]
    failed = await wait_pipeline(client, pid)
    assert failed["status"] == "partial_failed"
    statuses = {t["id"]: t["status"] for t in failed["tasks"]}
    assert statuses == {
        refs["flaky"]: "failed",
        refs["after"]: "cancelled",
        refs["fine"]: "completed",
    }
    # When the pipeline is retried
    r = await client.post(f"/api/v1/pipelines/{pid}/retry")
    # Then both come back at once and the pipeline completes
    assert r.status_code == 200, r.text
    assert sorted(r.json()["retried"]) == sorted([refs["flaky"], refs["after"]])
    assert r.json()["status"] in ("running", "completed")
    done = await wait_pipeline(client, pid)
    assert done["status"] == "completed"
    assert {t["id"]: t["attempt"] for t in done["tasks"]}[refs["flaky"]] == 2
    # nothing left to retry, or no such pipeline: refused with the reason
    again = await client.post(f"/api/v1/pipelines/{pid}/retry")
    assert again.status_code == 409 and "no failed or cancelled tasks" in again.json()["error"]
    missing = await client.post("/api/v1/pipelines/nope/retry")
    assert missing.status_code == 404 and "pipeline nope" in missing.json()["error"]


async def test_delete_refuses_active_work_then_removes_rows_results_and_logs(api) -> None:
    client, node = api
    data_dir: Path = node.settings.data_dir
    # Given a finished pipeline that left results and logs, and a running one
    done = await _create(client, {"ref": "p", "type": PRINT}, material="to-delete")
    kept = await _create(client, {"ref": "p", "type": PRINT}, material="to-keep")
    for created in (done, kept):
        assert (await wait_pipeline(client, created["pipeline_id"]))["status"] == "completed"
    task_id, kept_task = done["tasks"]["p"], kept["tasks"]["p"]
    for tid in (task_id, kept_task):
        assert (data_dir / "results" / tid / "printed.txt").is_file()
        assert (data_dir / "logs" / "tasks" / tid / "1.log").is_file()
    running = await _create(
        client,
        {"ref": "s", "type": "TEST_SLEEP", "payload": {"seconds": 30}},
        {"ref": "w", "type": "TEST_SLEEP", "depends_on": ["s"]},
        material="busy",
    )
    rid = running["pipeline_id"]
    await _wait(lambda: _status(client, running["tasks"]["s"], "running"))
    # When the running one is deleted: 409 naming how many tasks are active; nothing changes
    refused = await client.delete(f"/api/v1/pipelines/{rid}")
    assert refused.status_code == 409
    assert f"pipeline {rid} has 2 active tasks" in refused.json()["error"]
    assert (await client.get(f"/api/v1/pipelines/{rid}")).status_code == 200
    # cancel (the old DELETE meaning) is its own action now; once it ended, delete works
    assert (await client.post(f"/api/v1/pipelines/{rid}/cancel")).status_code == 202
    assert (await wait_pipeline(client, rid))["status"] == "cancelled"
    assert (await client.delete(f"/api/v1/pipelines/{rid}")).json()["deleted_tasks"] == 2
    # When the finished one is deleted
    r = await client.delete(f"/api/v1/pipelines/{done['pipeline_id']}")
    assert r.status_code == 200, r.text
    assert r.json() == {"pipeline_id": done["pipeline_id"], "deleted": True, "deleted_tasks": 1}
    # Then its rows, results and logs are gone; the other pipeline keeps all of its own
    assert (await client.get(f"/api/v1/pipelines/{done['pipeline_id']}")).status_code == 404
    assert (await client.get(f"/api/v1/tasks/{task_id}")).status_code == 404
    assert not (data_dir / "results" / task_id).exists()
    assert not (data_dir / "logs" / "tasks" / task_id).exists()
    assert (data_dir / "results" / kept_task / "printed.txt").is_file()
    assert (await client.get(f"/api/v1/tasks/{kept_task}/log")).status_code == 200
    listed = (await client.get("/api/v1/pipelines")).json()["pipelines"]
    assert [p["id"] for p in listed] == [kept["pipeline_id"]]
    counts = (await client.get("/api/v1/status")).json()["task_counts"]
    assert counts["completed"] == 1 and counts["cancelled"] == 0
    again = await client.delete(f"/api/v1/pipelines/{done['pipeline_id']}")
    assert again.status_code == 404


async def _status(client: httpx.AsyncClient, task_id: str, status: str) -> bool:
    return bool((await client.get(f"/api/v1/tasks/{task_id}")).json()["status"] == status)


async def test_task_log_holds_each_attempts_programs_children_and_records(api) -> None:
    client, _ = api
    # Given a task whose first attempt fails and whose retry succeeds
    created = await _create(
        client,
        {"ref": "p", "type": PRINT, "payload": {"succeed_on": 2, "lines": 2}},
        material="logs",
    )
    pid, tid = created["pipeline_id"], created["tasks"]["p"]
    assert (await wait_pipeline(client, pid))["status"] == "failed"
    assert (await client.post(f"/api/v1/tasks/{tid}/retry")).status_code == 200
    assert (await wait_pipeline(client, pid))["status"] == "completed"
    # Then the latest attempt's log is the default, and every attempt is listed
    r = await client.get(f"/api/v1/tasks/{tid}/log")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert (r.headers["X-Log-Attempt"], r.headers["X-Log-Attempts"]) == ("2", "1,2")
    text = r.text
    assert "$ " in text and " -c " in text  # the command line it ran
    for expected in (
        "program out 0",
        "program err 1",  # the program's stdout (not read as data) and stderr
        "child out 0",
        "child err 1",  # a child Python process's output
        "child logged 2 lines",  # and its logging records
        "warning fredica.testplugin: attempt 2 printed",  # the executor's own record
        "exit code 0",
    ):
        assert expected in text, (expected, text)
    first = await client.get(f"/api/v1/tasks/{tid}/log", params={"attempt": 1})
    assert "attempt 1 printed" in first.text and "attempt 2" not in first.text
    # reading on from the end gives nothing new; from 5 bytes before, the last 5 bytes
    end = int(r.headers["X-Log-End"])
    tail = await client.get(f"/api/v1/tasks/{tid}/log", params={"attempt": 2, "offset": end})
    assert tail.text == "" and tail.headers["X-Log-End"] == str(end)
    tail = await client.get(f"/api/v1/tasks/{tid}/log", params={"attempt": 2, "offset": end - 5})
    assert tail.text == text[-5:]
    # what is missing is named
    missing = await client.get(f"/api/v1/tasks/{tid}/log", params={"attempt": 3})
    assert missing.status_code == 404
    assert missing.json()["error"] == f"task {tid} has no log of attempt 3 (logged: 1, 2)"
    unknown = await client.get("/api/v1/tasks/nope/log")
    assert unknown.status_code == 404 and unknown.json()["error"] == "task nope not found"
    bad = await client.get(f"/api/v1/tasks/{tid}/log", params={"attempt": 0})
    assert bad.status_code == 422


async def test_a_running_tasks_log_can_be_followed(api, tmp_path: Path) -> None:
    client, _ = api
    release = tmp_path / "release"
    created = await _create(
        client,
        {"ref": "p", "type": PRINT, "payload": {"hold": 30, "release": str(release)}},
        material="follow",
    )
    tid = created["tasks"]["p"]
    early = await client.get(f"/api/v1/tasks/{tid}/log")
    # not started yet: the answer says there is no log yet
    assert early.status_code == 200 or "has no log yet" in early.json()["error"]

    async def ticks(n: int) -> httpx.Response | None:
        r = await client.get(f"/api/v1/tasks/{tid}/log")
        return r if r.status_code == 200 and f"tick {n}" in r.text else None

    first = await _wait(lambda: ticks(0))
    assert await _status(client, tid, "running")
    end = int(first.headers["X-Log-End"])
    later = await _wait(lambda: ticks(first.text.count("tick ") + 1))
    new = await client.get(f"/api/v1/tasks/{tid}/log", params={"attempt": 1, "offset": end})
    assert new.headers["X-Log-Start"] == str(end)
    assert first.text + new.text[: len(later.text) - len(first.text)] == later.text
    release.touch()
    assert (await wait_pipeline(client, created["pipeline_id"]))["status"] == "completed"
