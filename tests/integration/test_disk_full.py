"""A full disk under the data dir: writes answer 507 with one line, nothing is half written, the
node reports `disk_full`, and it is healthy again by itself once space is freed.

As root (CI) the data dir is a real 4 MB tmpfs filled by a file; elsewhere the store's writes
get the error SQLite gives on a full disk, injected where its transactions start."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.api.app import create_app
from fredica.engine.worker import EngineSettings
from fredica.node import compose
from fredica.node.service import NodeSettings
from fredica.store.sqlite import SQLiteTaskStore

PIPELINE = {"template": "custom", "tasks": [{"ref": "a", "type": "TEST_SLEEP"}]}


@contextlib.contextmanager
def small_disk(root: Path) -> Iterator[Path]:
    root.mkdir()
    if os.geteuid() == 0:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(root)], check=True)
        try:
            yield root
        finally:
            subprocess.run(["umount", "-l", str(root)], check=True)
    else:
        yield root


class DiskFiller:
    """Fills the tmpfs with a file (root), or else makes the store's writes fail with the
    error SQLite gives on a full disk (injected at the store's transaction start)."""

    def __init__(self, disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.disk = disk
        self.filler = disk / "filler"
        self.full = False
        if os.geteuid() != 0:
            original = SQLiteTaskStore._begin

            def begin(store: SQLiteTaskStore, conn: Any) -> None:
                if self.full:
                    raise sqlite3.OperationalError("database or disk is full")
                original(store, conn)

            monkeypatch.setattr(SQLiteTaskStore, "_begin", begin)

    def fill(self) -> None:
        self.full = True
        if os.geteuid() == 0:
            # unbuffered, and the suppress outside the file: a close that flushes a partly
            # written buffer on a full disk raises ENOSPC too
            with contextlib.suppress(OSError), self.filler.open("wb", buffering=0) as out:
                while True:
                    out.write(b"\0" * 65536)

    def free(self) -> None:
        self.full = False
        self.filler.unlink(missing_ok=True)


@pytest.fixture
async def api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[httpx.AsyncClient, DiskFiller]]:
    with small_disk(tmp_path / "disk") as disk:
        filler = DiskFiller(disk, monkeypatch)
        data = disk / "data"
        engine = EngineSettings(
            node_id="node-full",
            data_dir=data,
            poll_interval=0.05,
            heartbeat_interval=0.2,
            stale_after=3,
            reclaim_after=10,
        )
        node = compose.build_node(
            NodeSettings(
                node_id="node-full", data_dir=data, engine=engine, plugins=("fredica_testplugin",)
            )
        )
        await node.start()
        transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
                yield client, filler
        finally:
            filler.free()
            await node.stop(grace=1)


async def test_a_full_disk_is_a_clear_507_and_heals_by_itself(api) -> None:
    client, disk = api
    assert (await client.post("/api/v1/pipelines", json=PIPELINE)).status_code == 201
    before = len((await client.get("/api/v1/pipelines")).json()["pipelines"])

    # When the disk is full
    disk.fill()
    answers = [
        await client.post("/api/v1/pipelines", json={**PIPELINE, "material_id": f"m{i}"})
        for i in range(5)
    ]

    # Then every write is refused with 507 and one line naming the cause, nothing half written
    assert {r.status_code for r in answers} == {507}
    assert all("full" in r.json()["error"] and "\n" not in r.json()["error"] for r in answers)
    assert len((await client.get("/api/v1/pipelines")).json()["pipelines"]) == before
    health = await client.get("/healthz")
    assert health.status_code == 503 and health.json()["state"] == "disk_full"

    # When space is freed, the node is healthy again without a restart
    disk.free()
    r = await client.post("/api/v1/pipelines", json={**PIPELINE, "material_id": "after"})
    assert r.status_code == 201, r.text
    health = await client.get("/healthz")
    assert health.status_code == 200 and health.json()["state"] == "ok"
