"""Disk space on a real node (seed 001 §7.7): the claim gate (download work waits while the data
dir is short of room, other work runs, the status says why, and no retry is spent), and the
clean-up (a real media pipeline leaves its transcript but not its download, audio and chunks;
results go after the retention unless the owner has not acknowledged them)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.executors import outputs
from fredica.node.service import Node
from tests.media_support import make_media, serve_files

from .conftest import node_client
from .test_engine import wait_for

DAY = 86400.0


async def pipeline(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    created = await client.post("/api/v1/pipelines", json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["pipeline_id"])


async def tasks_by_type(client: httpx.AsyncClient, pid: str) -> dict[str, dict[str, Any]]:
    data = (await client.get(f"/api/v1/pipelines/{pid}")).json()
    return {t["type"]: t for t in data["tasks"]}


def download_task(source: Path, **payload: Any) -> dict[str, Any]:
    return {
        "ref": "dl",
        "type": "DOWNLOAD_VIDEO",
        "payload": {
            "source_url": f"file://{source}",
            "source_platform": "direct",
            "output_dir": "downloads/x",
            **payload,
        },
    }


async def test_a_node_without_room_leaves_downloads_pending_and_says_why(tmp_path: Path) -> None:
    source = tmp_path / "video.mp4"
    source.write_bytes(b"v" * 4096)
    config = {"capabilities": {"download": {"disk_min_free_gb": 100_000}}}
    async with node_client(tmp_path / "data", config=config) as (client, node):
        # Given a download and a sleep, both ready at once
        body = {
            "template": "custom",
            "tasks": [download_task(source), {"ref": "s", "type": "TEST_SLEEP"}],
        }
        pid = await pipeline(client, body)

        async def slept() -> bool:
            return (await tasks_by_type(client, pid))["TEST_SLEEP"]["status"] == "completed"

        await wait_for(slept)
        # Then the sleep ran; the download was never claimed (no attempt, no retry spent)
        dl = (await tasks_by_type(client, pid))["DOWNLOAD_VIDEO"]
        assert (dl["status"], dl["attempt"], dl["retry_count"]) == ("pending", 0, 0)
        # and the status says why
        status = (await client.get("/api/v1/status")).json()
        held = status["disk"]["held_types"]
        assert status["disk"]["low"] is True
        assert {"DOWNLOAD_VIDEO", "EXTRACT_AUDIO", "TRANSCODE"} <= set(held)
        assert "disk_min_free_gb" in held["DOWNLOAD_VIDEO"]
        assert status["disk"]["min_free_bytes"] == 100_000 * 2**30
        assert status["disk"]["free_bytes"] > 0
        assert "DOWNLOAD_VIDEO" not in status["task_types"]
        assert "TEST_SLEEP" in status["task_types"]
        # so does the node's row for the cluster (what peers and the UI read)
        nodes = (await client.get("/api/v1/nodes")).json()["nodes"]
        me = next(n for n in nodes if n["id"] == node.node_id)
        assert "DOWNLOAD_VIDEO" in me["info"]["disk_held"]
        assert me["status"] == "online"
        # When there is room again (here: a smaller minimum), the download runs at once
        node.disk.min_free = 0

        async def downloaded() -> bool:
            return (await tasks_by_type(client, pid))["DOWNLOAD_VIDEO"]["status"] == "completed"

        await wait_for(downloaded)
        assert (tmp_path / "data" / "downloads" / "x" / "video.mp4").stat().st_size == 4096


async def test_a_task_whose_estimate_does_not_fit_goes_back_without_a_retry(
    tmp_path: Path,
) -> None:
    source = tmp_path / "video.mp4"
    source.write_bytes(b"v" * 4096)
    config = {"capabilities": {"download": {"disk_min_free_gb": 0}}}
    async with node_client(tmp_path / "data", config=config) as (client, node):
        # Given a download that says it will write an exabyte
        body = {"template": "custom", "tasks": [download_task(source, estimatedOutputBytes=10**18)]}
        pid = await pipeline(client, body)

        async def went_back() -> Any:
            dl = (await tasks_by_type(client, pid))["DOWNLOAD_VIDEO"]
            return dl if dl["status"] == "pending" and dl["attempt"] == 1 else None

        # (the node counts and holds a hand-back before the store has put the task back)
        dl = await wait_for(went_back)
        status = (await client.get("/api/v1/status")).json()
        assert status["disk"]["handed_back"] == 1
        # Then it was claimed, found too big before anything was written, and went back
        assert (dl["status"], dl["retry_count"], dl["excluded_nodes"]) == ("pending", 0, [])
        events = (await client.get(f"/api/v1/tasks/{dl['id']}")).json()["events"]
        released = [e for e in events if e["event_type"] == "released"]
        assert len(released) == 1
        assert "payload.estimatedOutputBytes" in released[0]["message"]
        assert not (tmp_path / "data" / "downloads" / "x").exists()
        # and this node leaves downloads to others until the space frees (not claimed again)
        held = status["disk"]["held_types"]
        assert "needs" in held["DOWNLOAD_VIDEO"]
        assert "DOWNLOAD_VIDEO" not in status["task_types"]
        assert node.engine.stats["claimed"] == 1


def _gone(*paths: Path) -> bool:
    return not any(p.exists() for p in paths)


@pytest.mark.slow
async def test_a_media_pipeline_leaves_its_transcript_and_not_its_intermediate_files(
    tmp_path: Path,
) -> None:
    _, video = make_media(tmp_path / "media")
    config = {
        "capabilities": {"download": {"disk_min_free_gb": 0}},
        "storage": {"cleanup_interval_sec": 0.2},
    }
    data = tmp_path / "data"
    with serve_files(video.parent) as server:
        async with node_client(data, config=config) as (client, node):
            body = {
                "template": "transcribe_long",
                "source": f"{server.url}/{video.name}",
                "language": "en",
                "params": {"chunk_duration_sec": 5, "analyze": False},
            }
            pid = await pipeline(client, body)

            async def done() -> Any:
                p = (await client.get(f"/api/v1/pipelines/{pid}")).json()
                return p if p["status"] in ("completed", "failed", "partial_failed") else None

            result = await wait_for(done, 180)
            assert result["status"] == "completed", [
                (t["type"], t["error"]) for t in result["tasks"]
            ]
            tasks = await tasks_by_type(client, pid)
            mdir = outputs.safe_name(result["material_id"])
            intermediate = [data / kind / mdir for kind in ("downloads", "audio", "chunks")]
            # the download, the audio and the chunks existed (the tasks name them) ...
            assert tasks["SPLIT_AUDIO"]["result"]["chunks"]
            # ... and are gone once the pipeline completed
            await wait_for(lambda: _gone(*intermediate), 20)
            # the transcript stays
            merge = tasks["MERGE_TRANSCRIPTION"]
            transcript = data / "results" / merge["id"] / "transcript.json"
            assert transcript.stat().st_size > 0
            # every removal is said, in the node's status and in the log of the task that wrote it
            status = (await client.get("/api/v1/status")).json()["disk"]["cleanup"]
            assert status["removed_total"] >= 3 and status["freed_bytes_total"] > 0
            removed = {r["path"] for r in status["recent"]}
            assert {f"{kind}/{mdir}" for kind in ("downloads", "audio", "chunks")} <= removed
            for kind, task_type in (("chunks", "SPLIT_AUDIO"), ("downloads", "DOWNLOAD_VIDEO")):
                log = (await client.get(f"/api/v1/tasks/{tasks[task_type]['id']}/log")).text
                assert f"fredica clean-up: removed {kind}/{mdir}" in log, log


async def test_results_go_after_the_retention_unless_their_owner_has_not_got_them(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    config = {"storage": {"results_retain_days": 1, "cleanup_interval_sec": 0.2}}
    async with node_client(data, config=config) as (client, node):
        # Given a finished task with its result and log
        done_pid = await pipeline(
            client, {"template": "custom", "tasks": [{"ref": "p", "type": "TEST_PRINT"}]}
        )

        async def printed() -> Any:
            t = (await tasks_by_type(client, done_pid))["TEST_PRINT"]
            return t if t["status"] == "completed" else None

        done = await wait_for(printed)
        result_dir = data / "results" / done["id"]
        log_dir = data / "logs" / "tasks" / done["id"]
        assert (result_dir / "printed.txt").exists() and log_dir.exists()
        # a task still running, a result waiting for its owner, a task nobody knows
        release = tmp_path / "release"
        running_pid = await pipeline(
            client,
            {
                "template": "custom",
                "tasks": [
                    {
                        "ref": "p",
                        "type": "TEST_PRINT",
                        "payload": {"hold": 60, "release": str(release)},
                    }
                ],
            },
        )
        running_log = await _running_log(client, running_pid, data)
        outboxed = _result(data, "t-outbox")
        await _outbox(node, "t-outbox")
        unknown = _result(data, "t-unknown")
        # When all of them are two days old
        for path in (result_dir, log_dir, running_log, outboxed, unknown):
            past = time.time() - 2 * DAY
            os.utime(path, (past, past))
        # Then the sweep removes the finished task's files and the unknown one only
        await wait_for(lambda: _gone(result_dir, log_dir, unknown), 20)
        assert running_log.exists() and outboxed.exists()
        recent = (await client.get("/api/v1/status")).json()["disk"]["cleanup"]["recent"]
        reasons = {r["path"]: r["reason"] for r in recent}
        assert "beyond results_retain_days (1 day(s))" in reasons[f"results/{done['id']}"]
        assert "no task t-unknown is known here" in reasons["results/t-unknown"]
        release.touch()


async def _running_log(client: httpx.AsyncClient, pid: str, data: Path) -> Path:
    async def log_dir() -> Path | None:
        t = (await tasks_by_type(client, pid))["TEST_PRINT"]
        path = data / "logs" / "tasks" / t["id"]
        return path if t["status"] == "running" and path.exists() else None

    return await wait_for(log_dir)


def _result(data: Path, task_id: str) -> Path:
    directory = data / "results" / task_id
    directory.mkdir(parents=True)
    (directory / "out.json").write_text("{}")
    return directory


async def _outbox(node: Node, task_id: str) -> None:
    """A completion computed here for another owner that has not acknowledged it (as the
    router leaves it when the owner cannot be reached)."""
    body = {"result": {"path": f"results/{task_id}/out.json"}}
    await node._store.outbox_put("node-elsewhere", task_id, 1, "complete", body)
