"""`/files/serve` and `/files/serve/stat` through the ASGI app (the guard of what a peer may read,
ranges, hashes), and `TaskContext.input_path` fetching a file another node holds with
`PeerFiles` (against that node's app)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from fredica import auth
from fredica.cluster import files
from fredica.config import schema as config
from fredica.domain import errors, models
from fredica.executors.context import TaskContext
from fredica.executors.control import TaskControl
from fredica.node import compose
from fredica.node.service import Node
from fredica.store.sqlite import SQLiteTaskStore
from fredica.web.app import create_app

from .test_engine import fast_settings

SECRET = "s3cret-cluster"
TOKEN = "tok-publisher-1"
GOOD = {files.SECRET_HEADER: SECRET}
DATA = os.urandom(300_000)
OUTSIDE = b"outside the data dir"


def node_config(secret: str = SECRET) -> config.WorkerConfig:
    return config.parse_config(
        {
            "cluster": {"cluster_secret": secret},
            "auth": {
                "mode": "token",
                "access_tokens": [
                    {"id": "t1", "name": "Alice", "token_hash": auth.hash_token(TOKEN)}
                ],
            },
        },
        "test",
    )


def populate(data: Path) -> None:
    """Served files, private files and every way out of the data dir."""
    (data / "results" / "t1").mkdir(parents=True)
    (data / "chunks" / "m1").mkdir(parents=True)
    (data / "run").mkdir(exist_ok=True)
    (data / "results" / "t1" / "audio.wav").write_bytes(DATA)
    (data / "chunks" / "m1" / "chunk 1.wav").write_bytes(DATA[:1000])
    (data / "worker.yaml").write_text("cluster: {cluster_secret: s3cret-cluster}\n")
    (data / "run" / "ledger.json").write_text("{}")
    (data / "results" / "t1" / ".audio.wav.1234.part").write_bytes(b"half")
    (data.parent / "outside.txt").write_bytes(OUTSIDE)
    (data / "results" / "t1" / "escape").symlink_to(data.parent / "outside.txt")
    (data / "results" / "t1" / "to_db").symlink_to(data / "fredica.db")
    (data / "results" / "t1" / "to_chunk").symlink_to(data / "chunks" / "m1" / "chunk 1.wav")
    (data / "results" / "t1" / "loop").symlink_to(data / "results" / "t1" / "loop")
    os.mkfifo(data / "results" / "t1" / "fifo")


async def started(data: Path, node_id: str, secret: str = SECRET) -> Node:
    settings = fast_settings(data)
    assert settings.engine is not None
    settings = dataclasses.replace(
        settings,
        node_id=node_id,
        engine=dataclasses.replace(settings.engine, node_id=node_id),
        config=node_config(secret),
    )
    node = compose.build_node(settings)
    await node.start()
    return node


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node]]:
    data = tmp_path / "data"
    data.mkdir()
    node = await started(data, "node-a")
    populate(data)
    transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://node-a") as client:
            yield client, node
    finally:
        await node.stop(grace=1)


def serve(client: httpx.AsyncClient, path: str, **headers: str) -> object:
    return client.get("/files/serve", params={"path": path}, headers={**GOOD, **headers})


# --- the cluster secret ------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["/files/serve", "/files/serve/stat"])
async def test_only_the_cluster_secret_opens_file_serving(served, endpoint: str) -> None:
    client, _ = served
    params = {"path": "results/t1/audio.wav"}
    refused = [
        await client.get(endpoint, params=params),  # no secret
        await client.get(endpoint, params=params, headers={files.SECRET_HEADER: "wrong"}),
        await client.get(endpoint, params=params, headers={"Authorization": f"Bearer {TOKEN}"}),
        await client.get(endpoint, params={**params, "token": TOKEN}),
        await client.get(endpoint, params=params, headers={files.SECRET_HEADER: SECRET[:-1]}),
    ]
    for r in refused:
        assert r.status_code == 401, r.text
        assert "X-Cluster-Secret" in r.json()["error"]
        assert DATA[:100] not in r.content
    # the publisher token still opens the user API, and the secret opens the files
    assert (
        await client.get("/api/v1/tasks", headers={"Authorization": f"Bearer {TOKEN}"})
    ).is_success
    assert (await client.get(endpoint, params=params, headers=GOOD)).status_code == 200


async def test_a_node_without_a_secret_serves_no_files(tmp_path: Path) -> None:
    node = await started(tmp_path, "node-x", secret="")
    try:
        (tmp_path / "results").mkdir()
        (tmp_path / "results" / "f.bin").write_bytes(b"x")
        transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            for secret in ("", "anything"):
                r = await client.get(
                    "/files/serve",
                    params={"path": "results/f.bin"},
                    headers={files.SECRET_HEADER: secret},
                )
                assert r.status_code == 401 and "cluster_secret" in r.json()["error"]
        assert node.engine.peer_files is None  # and it fetches nothing from peers
    finally:
        await node.stop(grace=1)


# --- what is served ----------------------------------------------------------------------------


async def test_a_whole_file_comes_with_its_length_and_sha256(served) -> None:
    client, node = served
    r = await serve(client, "results/t1/audio.wav")
    digest = hashlib.sha256(DATA).hexdigest()
    assert r.status_code == 200 and r.content == DATA
    assert r.headers["content-length"] == str(len(DATA))
    assert r.headers["x-content-sha256"] == digest
    assert r.headers["etag"] == f'"{digest}"'
    assert r.headers["accept-ranges"] == "bytes"
    # a symlink that stays inside the data dir is followed; names may hold spaces
    r = await serve(client, "results/t1/to_chunk")
    assert r.status_code == 200 and r.content == DATA[:1000]
    assert (await serve(client, "chunks/m1/chunk 1.wav")).content == DATA[:1000]
    stat = await client.get(
        "/files/serve/stat", params={"path": "results/t1/audio.wav"}, headers=GOOD
    )
    mtime = (node.settings.data_dir / "results" / "t1" / "audio.wav").stat().st_mtime
    assert stat.json() == {
        "path": "results/t1/audio.wav",
        "size": len(DATA),
        "sha256": digest,
        "mtime": mtime,
    }


async def test_ranges_resume_a_download(served) -> None:
    client, _ = served
    r = await serve(client, "results/t1/audio.wav", Range="bytes=1000-1999")
    assert r.status_code == 206 and r.content == DATA[1000:2000]
    assert r.headers["content-range"] == f"bytes 1000-1999/{len(DATA)}"
    assert r.headers["content-length"] == "1000"
    r = await serve(client, "results/t1/audio.wav", Range=f"bytes={len(DATA) - 10}-")
    assert r.status_code == 206 and r.content == DATA[-10:]
    r = await serve(client, "results/t1/audio.wav", Range="bytes=-7")
    assert r.status_code == 206 and r.content == DATA[-7:]
    # past the end: 416 naming the size
    r = await serve(client, "results/t1/audio.wav", Range=f"bytes={len(DATA)}-")
    assert r.status_code == 416 and r.headers["content-range"] == f"bytes */{len(DATA)}"
    # If-Range with the file's hash: the range; with a stale hash: the whole (changed) file
    etag = (await serve(client, "results/t1/audio.wav")).headers["etag"]
    r = await serve(client, "results/t1/audio.wav", Range="bytes=5-", **{"If-Range": etag})
    assert r.status_code == 206 and r.content == DATA[5:]
    r = await serve(client, "results/t1/audio.wav", Range="bytes=5-", **{"If-Range": '"old"'})
    assert r.status_code == 200 and r.content == DATA


async def test_the_hash_follows_a_rewritten_file(served) -> None:
    client, node = served
    path = node.settings.data_dir / "results" / "t1" / "audio.wav"
    first = (await serve(client, "results/t1/audio.wav")).headers["x-content-sha256"]
    changed = bytes(reversed(DATA))  # same size
    path.write_bytes(changed)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    r = await serve(client, "results/t1/audio.wav")
    assert r.content == changed
    assert r.headers["x-content-sha256"] == hashlib.sha256(changed).hexdigest() != first


TRAVERSAL_400 = [
    "../outside.txt",
    "results/../../outside.txt",
    "results/t1/../../../outside.txt",
    "/etc/passwd",
    "./results/t1/audio.wav",
    "results//t1/audio.wav",
    "results\\..\\..\\outside.txt",
    "results/t1/audio.wav\x00.png",
    "",
    "results",  # a directory
    "results/t1/",  # an empty segment
    "chunks/m1",  # a directory
    "results/t1/fifo",  # not a regular file
]

NOT_SERVED_404 = [
    "results/t1/escape",  # symlink out of the data dir
    "results/t1/loop",  # symlink loop
    "results/t1/missing.wav",
    "fredica.db",  # the node's database
    "worker.yaml",  # its configuration with the API keys
    "results/t1/to_db",  # a symlink to the database
    "run/ledger.json",  # its process ledger
    "results/t1/.audio.wav.1234.part",  # a temporary output
    "%2e%2e/outside.txt",  # double-encoded: a literal name, not a way out
]


@pytest.mark.parametrize(
    ("path", "status"),
    [(p, 400) for p in TRAVERSAL_400] + [(p, 404) for p in NOT_SERVED_404],
)
async def test_nothing_outside_the_data_dir_or_private_is_served(
    served, path: str, status: int
) -> None:
    client, _ = served
    for endpoint in ("/files/serve", "/files/serve/stat"):
        r = await client.get(endpoint, params={"path": path}, headers=GOOD)
        assert r.status_code == status, (path, r.text)
        assert r.json()["code"] == ("malformed_request" if status == 400 else "not_found")
        assert repr(path) in r.json()["error"]  # it names what it refused
        assert OUTSIDE not in r.content and b"s3cret" not in r.content


async def test_an_absolute_path_inside_the_data_dir_is_still_a_400(served) -> None:
    client, node = served
    absolute = str(node.settings.data_dir / "results" / "t1" / "audio.wav")
    r = await serve(client, absolute)
    assert r.status_code == 400 and "relative" in r.json()["error"]


async def test_percent_encoded_dots_are_decoded_and_refused(served) -> None:
    client, _ = served
    for query in (
        "path=%2e%2e%2foutside.txt",
        "path=%2E%2E/outside.txt",
        "path=results%2f..%2f..%2foutside.txt",
    ):
        r = await client.get(f"/files/serve?{query}", headers=GOOD)
        assert r.status_code == 400, (query, r.text)
        assert OUTSIDE not in r.content
    r = await client.get("/files/serve", headers=GOOD)  # no path at all
    assert r.status_code == 422 and "path" in r.json()["error"]


async def test_result_files_for_the_ui_share_the_guard(served) -> None:
    client, _ = served
    auth_header = {"Authorization": f"Bearer {TOKEN}"}
    r = await client.get("/files/results/t1/audio.wav", headers=auth_header)
    assert r.status_code == 200 and r.content == DATA
    assert (await client.get("/files/results/t1/escape", headers=auth_header)).status_code == 404
    r = await client.get("/files/results/t1/%2e%2e/%2e%2e/outside.txt", headers=auth_header)
    assert r.status_code in (400, 404) and OUTSIDE not in r.content


# --- fetching from a peer through TaskContext.input_path --------------------------------------


@dataclasses.dataclass
class Directory:
    addresses: dict[str, str]

    async def address(self, node_id: str) -> str | None:
        return self.addresses.get(node_id)


def peer_files(fetcher_dir: Path, holder: Node) -> files.PeerFiles:
    transport = httpx.ASGITransport(app=create_app(holder, manage_lifecycle=False))
    return files.PeerFiles(
        fetcher_dir, SECRET, Directory({"node-a": "http://node-a"}), transport=transport
    )


async def context(
    data_dir: Path, fetcher: files.PeerFiles | None, file_node_id: str | None
) -> TaskContext:
    """A context on node-b for a real task row whose input is held by `file_node_id`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    store = SQLiteTaskStore(data_dir.parent / "ctx.db", "node-b")
    try:
        task = await store.add_task(models.NewTask(type="TEST_READ", file_node_id=file_node_id))
    finally:
        await store.close()
    return TaskContext(
        task=task, control=TaskControl(task.id), node_id="node-b", data_dir=data_dir,
        peer_files=fetcher,
    )  # fmt: skip


async def test_input_path_fetches_a_file_held_by_another_node(served, tmp_path: Path) -> None:
    _, holder = served
    mine = tmp_path / "b"
    (mine / "results" / "t1").mkdir(parents=True)
    (mine / "results" / "t1" / "audio.wav").write_bytes(b"my own, different file")
    ctx = await context(mine, peer_files(mine, holder), "node-a")

    copy = await ctx.input_path("results/t1/audio.wav", "node-a")
    assert copy == mine / "cache" / "peers" / "node-a" / "results" / "t1" / "audio.wav"
    assert copy.read_bytes() == DATA
    # this node's own files are read where they are
    local = await ctx.input_path("results/t1/audio.wav")
    assert local.read_bytes() == b"my own, different file"
    assert await ctx.input_path("results/t1/audio.wav", "node-b") == local
    with pytest.raises(errors.PermanentError, match="not found"):
        await ctx.input_path("results/t1/missing.wav", None)
    # the payload helper uses the task's file_node_id
    assert await ctx.payload_input({"audio_path": "results/t1/audio.wav"}, "audio_path") == copy


async def test_input_path_names_what_it_cannot_fetch(served, tmp_path: Path) -> None:
    _, holder = served
    mine = tmp_path / "b"
    ctx = await context(mine, peer_files(mine, holder), "node-a")
    with pytest.raises(errors.ResourceError, match=r"node node-a .*no file 'results/t1/gone\.wav'"):
        await ctx.input_path("results/t1/gone.wav", "node-a")
    with pytest.raises(errors.TransientError, match="node node-z is unknown"):
        await ctx.input_path("results/t1/audio.wav", "node-z")
    with pytest.raises(errors.ResourceError, match="absolute path") as exc:
        await ctx.input_path("/elsewhere/audio.wav", "node-a")
    assert exc.value.hint == "FILE_REMOTE"
    with pytest.raises(errors.PermanentError, match=r"'\.\.' segments"):
        await ctx.input_path("results/../../x", "node-a")
    without = await context(mine, None, "node-a")
    with pytest.raises(errors.ResourceError, match=r"no cluster\.cluster_secret"):
        await without.input_path("results/t1/audio.wav", "node-a")


async def test_a_cancel_stops_the_fetch(served, tmp_path: Path) -> None:
    _, holder = served
    mine = tmp_path / "b"
    ctx = await context(mine, peer_files(mine, holder), "node-a")
    ctx.control.cancel("stop")
    with pytest.raises(errors.TaskCancelled):
        await ctx.input_path("results/t1/audio.wav", "node-a")
    assert not (mine / "cache" / "peers" / "node-a" / "results" / "t1" / "audio.wav").exists()


async def test_the_engine_gives_its_tasks_the_node_s_fetcher(served, tmp_path: Path) -> None:
    _, holder = served
    data = tmp_path / "b"
    data.mkdir()
    settings = fast_settings(data)
    assert settings.engine is not None
    node = compose.build_node(
        dataclasses.replace(
            settings,
            node_id="node-b",
            engine=dataclasses.replace(settings.engine, node_id="node-b"),
            config=node_config(),
        )
    )
    await node.start()
    try:
        assert node.engine.peer_files is node.peer_files  # a secret: the node fetches
        # its registry knows itself; the membership code adds the peers
        assert await node.peer_files.directory.address("node-b") == node.address
        assert await node.peer_files.directory.address("node-q") is None
        node.engine.peer_files = peer_files(data, holder)  # node-a reached in-process
        body = {
            "template": "custom",
            "tasks": [
                {
                    "ref": "r",
                    "type": "TEST_READ_INPUT",
                    "payload": {"path": "results/t1/audio.wav", "holder": "node-a"},
                    "max_retries": 0,
                }
            ],
        }
        transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://node-b") as client:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            created = await client.post("/api/v1/pipelines", json=body, headers=headers)
            assert created.status_code == 201, created.text
            pid = created.json()["pipeline_id"]
            for _ in range(200):
                pipeline = (await client.get(f"/api/v1/pipelines/{pid}", headers=headers)).json()
                if pipeline["status"] in ("completed", "failed"):
                    break
                await asyncio.sleep(0.05)  # polling the node's state, bounded
        (task,) = pipeline["tasks"]
        assert task["status"] == "completed", task
        assert task["result"]["sha256"] == hashlib.sha256(DATA).hexdigest()
        # the copy, named relative to this node's data dir (a file of this node's)
        assert task["result"]["read_from"].startswith("cache/peers/node-a/")
        assert (data / task["result"]["read_from"]).is_file()
    finally:
        await node.stop(grace=1)
