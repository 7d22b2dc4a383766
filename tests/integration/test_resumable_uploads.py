"""Resumable uploads (`/api/v1/uploads/resumable`): a part cut off keeps what arrived, the
client asks the offset and sends the rest, the file completes with the same sha256; bad
ranges answer 4xx naming the problem and change nothing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx

from .conftest import node_client

BASE = "/api/v1/uploads/resumable"


async def _start(client: httpx.AsyncClient, name: str, size: int) -> str:
    r = await client.post(BASE, params={"name": name, "size": size})
    assert r.status_code == 201, r.text
    assert r.json()["offset"] == 0
    return str(r.json()["upload_id"])


async def _offset(client: httpx.AsyncClient, upload_id: str) -> int:
    r = await client.get(f"{BASE}/{upload_id}")
    assert r.status_code == 200, r.text
    return int(r.json()["offset"])


async def test_an_upload_cut_at_half_resumes_with_the_same_sha256(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 12345)
    half = len(data) // 2
    async with node_client(tmp_path) as (client, _):
        upload_id = await _start(client, "Ask Not Speech.flac", len(data))
        # the whole file announced, half of it sent: the connection "dropped" at 50 %
        cut = await client.put(
            f"{BASE}/{upload_id}",
            content=data[:half],
            headers={"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"},
        )
        assert cut.status_code == 422 and f"stands at {half}" in cut.json()["error"]
        assert await _offset(client, upload_id) == half
        assert not (tmp_path / "uploads" / "Ask Not Speech.flac").exists()

        # a part not starting at the offset: 409 naming where to go on
        wrong = await client.put(
            f"{BASE}/{upload_id}",
            content=data[:10],
            headers={"Content-Range": f"bytes 0-9/{len(data)}"},
        )
        assert wrong.status_code == 409 and f"send from byte {half}" in wrong.json()["error"]

        done = await client.put(
            f"{BASE}/{upload_id}",
            content=data[half:],
            headers={"Content-Range": f"bytes {half}-{len(data) - 1}/{len(data)}"},
        )
        assert done.status_code == 201, done.text
        answer = done.json()
        assert answer["complete"] and answer["size"] == len(data)
        assert answer["sha256"] == hashlib.sha256(data).hexdigest()
        kept = Path(answer["path"])
        assert kept.name == "Ask_Not_Speech.flac" or kept.name == "Ask Not Speech.flac"
        assert hashlib.sha256(kept.read_bytes()).hexdigest() == answer["sha256"]
        assert (await client.get(f"{BASE}/{upload_id}")).status_code == 404  # finished

        # the pipeline made of it carries the file's name as its title
        task = {"ref": "t", "type": "TEST_SLEEP", "payload": {"seconds": 0.01}}
        body = {"template": "custom", "material_id": "m", "params": {"source": str(kept)}}
        body["tasks"] = [task]
        created = (await client.post("/api/v1/pipelines", json=body)).json()
        detail = (await client.get(f"/api/v1/pipelines/{created['pipeline_id']}")).json()
        assert detail["title"] == kept.name


async def test_bad_ranges_are_refused_naming_the_problem(tmp_path: Path) -> None:
    async with node_client(tmp_path) as (client, _):
        upload_id = await _start(client, "a.bin", 100)
        cases = {
            None: "Content-Range: required",
            "bytes=0-9": "expected 'bytes START-END/SIZE'",
            "bytes 0-9/200": "total 200 is not the upload's 100",
            "bytes 9-0/100": "not a range inside 0-99",
            "bytes 90-100/100": "not a range inside 0-99",
        }
        for header, message in cases.items():
            headers = {"Content-Range": header} if header else {}
            r = await client.put(f"{BASE}/{upload_id}", content=b"x" * 10, headers=headers)
            assert r.status_code == 422 and message in r.json()["error"], (header, r.text)
        long = await client.put(
            f"{BASE}/{upload_id}", content=b"x" * 20, headers={"Content-Range": "bytes 0-9/100"}
        )
        assert long.status_code == 422 and "body longer than Content-Range" in long.text
        assert await _offset(client, upload_id) <= 10
        assert (await client.get(f"{BASE}/nope")).status_code == 404
        assert (await client.get(f"{BASE}/{'0' * 32}")).status_code == 404
        big = await client.post(BASE, params={"name": "big.bin", "size": 10**13})
        assert big.status_code == 413
        assert (await client.post(BASE, params={"name": "x.bin", "size": 0})).status_code == 422
