"""Watch folders through the API of a real node (SQLite, engine, the test plugin's
`test_read_source` template): settle, identity, gone, moved, process again, restart. The
settle time runs on a ManualClock; scans are asked for (`POST .../rescan`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.domain import errors
from fredica.domain.clock import ManualClock
from fredica.node.service import Node

from .conftest import node_client
from .test_api import wait_pipeline
from .test_engine import wait_for

SETTLE = 5.0


def library_config(folder: Path, **extra: Any) -> dict[str, Any]:
    lib = {
        "name": "inbox",
        "folder": str(folder),
        "template": "test_read_source",
        "include": ["*.bin"],
        "exclude": ["skip-*"],
        "scan_interval_sec": 3600,  # the test scans; the loop's first scan finds nothing
        "settle_sec": SETTLE,
        "inotify": False,
        **extra,
    }
    return {"libraries": [lib]}


async def rescan(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.post("/api/v1/libraries/inbox/rescan")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def files(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    response = await client.get("/api/v1/libraries/inbox/files")
    assert response.status_code == 200, response.text
    return {f["path"]: f for f in response.json()["files"]}


def manual(node: Node) -> ManualClock:
    clock = ManualClock(1_000_000.0)
    node.libraries.clock = clock
    return clock


async def settle(client: httpx.AsyncClient, clock: ManualClock) -> dict[str, Any]:
    """One scan that sees the files, then one after the settle time."""
    await rescan(client)
    clock.advance(SETTLE + 0.1)
    return await rescan(client)


async def pipelines(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    return list((await client.get("/api/v1/pipelines")).json()["pipelines"])


async def test_a_new_file_becomes_one_pipeline_after_it_settles(tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    async with node_client(tmp_path / "data", config=library_config(folder)) as (client, node):
        clock = manual(node)
        # Given a file copied in, and one the patterns leave out
        (folder / "a.bin").write_bytes(b"x" * 1000)
        (folder / "skip-me.bin").write_bytes(b"no")
        (folder / "notes.txt").write_text("no")
        # When scanned before the settle time: it settles, no pipeline
        first = await rescan(client)
        assert (first["found"], first["taken"], first["settling"]) == (1, 0, 1)
        assert (await files(client))["a.bin"]["status"] == "settling"
        clock.advance(SETTLE - 1)
        with (folder / "a.bin").open("ab") as fh:  # still being written
            fh.write(b"y" * 1000)
        assert (await rescan(client))["taken"] == 0
        clock.advance(SETTLE - 1)
        assert (await rescan(client))["taken"] == 0  # unchanged, but not for SETTLE yet
        assert await pipelines(client) == []
        # Then after the settle time it is taken, once
        clock.advance(1.1)
        assert (await rescan(client))["taken"] == 1
        row = (await files(client))["a.bin"]
        assert row["status"] == "queued" and row["pipeline_id"]
        content = b"x" * 1000 + b"y" * 1000
        assert row["sha256"] == hashlib.sha256(content).hexdigest()
        done = await wait_pipeline(client, row["pipeline_id"])
        assert done["status"] == "completed"
        assert done["material_id"] == "lib-" + row["sha256"][:32]
        result = done["tasks"][0]["result"]
        assert (result["size"], result["sha256"]) == (2000, row["sha256"])
        clock.advance(SETTLE * 3)
        assert (await rescan(client))["taken"] == 0
        assert len(await pipelines(client)) == 1
        listed = (await client.get("/api/v1/libraries")).json()["libraries"][0]
        assert listed["watcher"] == node.node_id and listed["counts"] == {"queued": 1}


async def test_touch_change_move_delete_and_process_again(tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    (folder / "sub").mkdir(parents=True)
    async with node_client(tmp_path / "data", config=library_config(folder)) as (client, node):
        clock = manual(node)
        (folder / "sub" / "a.bin").write_bytes(b"one")
        (folder / "copy.bin").write_bytes(b"one")  # the same content twice: one material
        assert (await settle(client, clock))["taken"] == 2
        rows = await files(client)
        first = rows["sub/a.bin"]["pipeline_id"]
        assert rows["copy.bin"]["pipeline_id"] == first
        assert len(await pipelines(client)) == 1
        await wait_pipeline(client, first)

        # touched (same bytes, new mtime): the same pipeline
        os.utime(folder / "sub" / "a.bin", (1, 1))
        assert (await settle(client, clock))["taken"] == 1
        row = (await files(client))["sub/a.bin"]
        assert row["pipeline_id"] == first
        assert row["history"][-1]["event"] == "touched"

        # changed bytes: a new pipeline
        (folder / "copy.bin").write_bytes(b"two")
        await settle(client, clock)
        changed = (await files(client))["copy.bin"]
        assert changed["pipeline_id"] != first
        assert changed["history"][-1]["event"] == "changed"
        assert len(await pipelines(client)) == 2

        # moved inside the library: gone here, the same pipeline there, no new one
        (folder / "sub" / "a.bin").rename(folder / "moved.bin")
        await settle(client, clock)
        rows = await files(client)
        assert rows["sub/a.bin"]["status"] == "gone"
        assert rows["sub/a.bin"]["note"] == "moved to moved.bin"
        assert rows["moved.bin"]["pipeline_id"] == first
        assert rows["moved.bin"]["history"][-1] == {
            **rows["moved.bin"]["history"][-1],
            "event": "moved_here",
            "from_path": "sub/a.bin",
        }
        assert len(await pipelines(client)) == 2

        # deleted: shown as gone; it cannot be processed again
        (folder / "copy.bin").unlink()
        assert (await rescan(client))["gone"] == 1
        gone = (await files(client))["copy.bin"]
        assert gone["status"] == "gone" and gone["history"][-1]["event"] == "gone"
        refused = await client.post(f"/api/v1/libraries/inbox/files/{gone['id']}/reprocess")
        assert refused.status_code == 409, refused.text
        assert "gone" in refused.json()["error"]

        # process again: a new pipeline of the same material
        moved = rows["moved.bin"]
        again = await client.post(f"/api/v1/libraries/inbox/files/{moved['id']}/reprocess")
        assert again.status_code == 200, again.text
        body = again.json()
        assert body["pipeline_id"] != first and body["deduplicated"] is False
        assert (await files(client))["moved.bin"]["history"][-1]["event"] == "reprocess"
        assert len(await pipelines(client)) == 3


async def test_a_restart_does_not_process_a_file_again(tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"abc")
    config = library_config(folder)
    async with node_client(tmp_path / "data", config=config) as (client, node):
        clock = manual(node)
        assert (await settle(client, clock))["taken"] == 1
        pid = (await files(client))["a.bin"]["pipeline_id"]
        await wait_pipeline(client, pid)
    async with node_client(tmp_path / "data", config=config) as (client, node):
        clock = manual(node)
        await settle(client, clock)
        assert (await files(client))["a.bin"]["pipeline_id"] == pid
        assert [p["id"] for p in await pipelines(client)] == [pid]


async def test_a_missing_folder_is_an_error_and_marks_nothing_gone(tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"abc")
    async with node_client(tmp_path / "data", config=library_config(folder)) as (client, node):
        clock = manual(node)
        await settle(client, clock)
        folder.rename(tmp_path / "unmounted")
        scan = await rescan(client)
        assert "does not exist" in scan["error"]
        assert (await files(client))["a.bin"]["status"] == "queued"
        listed = (await client.get("/api/v1/libraries")).json()["libraries"][0]
        assert "does not exist" in listed["error"]


async def test_bad_requests_name_what_is_wrong(tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    async with node_client(tmp_path / "data", config=library_config(folder)) as (client, _):
        for method, path in (
            ("GET", "/api/v1/libraries/nope/files"),
            ("POST", "/api/v1/libraries/nope/rescan"),
            ("POST", "/api/v1/libraries/nope/files/x/reprocess"),
        ):
            response = await client.request(method, path)
            assert response.status_code == 404, response.text
            assert "nope" in response.json()["error"]
        response = await client.post("/api/v1/libraries/inbox/files/nofile/reprocess")
        assert response.status_code == 404
        assert "nofile" in response.json()["error"]


async def test_an_unknown_template_stops_the_node_naming_the_key(tmp_path: Path) -> None:
    folder = tmp_path / "inbox"
    folder.mkdir()
    with pytest.raises(errors.ConfigError, match=r"libraries\[0\]\.template: unknown template"):
        async with node_client(
            tmp_path / "data", config=library_config(folder, template="no_such")
        ):
            pass


async def test_inotify_wakes_a_scan_long_before_the_interval(tmp_path: Path) -> None:
    # Given a library scanned once an hour, with inotify, and a short settle time
    folder = tmp_path / "inbox"
    (folder / "deep").mkdir(parents=True)
    config = library_config(folder, inotify=True, settle_sec=0.2)
    async with node_client(tmp_path / "data", config=config) as (client, _):
        listed = (await client.get("/api/v1/libraries")).json()["libraries"][0]
        assert listed["inotify"] is True
        first_scan = listed["last_scan_at"]
        assert first_scan is not None
        # When a file lands in a subfolder, then it becomes a pipeline without any rescan asked
        (folder / "deep" / "new.bin").write_bytes(b"fresh")

        async def taken() -> bool:
            row = (await files(client)).get("deep/new.bin")
            return bool(row and row["pipeline_id"])

        await wait_for(taken, timeout=10)
        assert len(await pipelines(client)) == 1
