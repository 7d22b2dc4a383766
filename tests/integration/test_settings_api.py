"""The settings page's API, uploads, media folders and the charts' endpoint on a real node
(real SQLite, the app over ASGI): every change keeps worker.yaml's comments, bad input is a
4xx naming what is wrong and changes nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica import auth
from fredica.config import schema as config
from fredica.domain.clock import ManualClock
from fredica.domain.models import ErrorType, NewPipeline, NewTask
from fredica.node import compose
from fredica.node import uploads as node_uploads
from fredica.node.service import Node
from fredica.store.base import ClaimFilter, CompletionItem, Failure
from fredica.web.app import create_app

from .test_engine import fast_settings

YAML = """\
# my node: keep this comment
node:
  max_workers: 2          # two at a time
  network_region: "UNKNOWN"
capabilities:
  download:
    youtube:
      enabled: true       # needs yt-dlp
  transcribe:
    api_key: "sk-secret-1"
storage:
  max_upload_mb: 1
api:
  max_body_bytes: 4096
"""
ADMIN, USER = "tok-admin-123", "tok-user-456"
TOKENS = f"""\
auth:
  mode: token
  access_tokens:
    - id: admin
      token_hash: "{auth.hash_token(ADMIN)}"
      permissions: {{admin: true}}
    - id: user
      token_hash: "{auth.hash_token(USER)}"
"""


@contextlib.asynccontextmanager
async def served(
    tmp_path: Path, text: str, clock: ManualClock | None = None, start: bool = True
) -> AsyncIterator[tuple[httpx.AsyncClient, Node, Path]]:
    path = tmp_path / "worker.yaml"
    path.write_text(text)
    cfg = config.load_config(path)
    settings = dataclasses.replace(
        fast_settings(tmp_path / "data"), config=cfg, config_path=path, max_body_bytes=4096
    )
    node = compose.build_node(settings, clock=clock)
    if start:
        await node.start()
    transport = httpx.ASGITransport(app=create_app(node, manage_lifecycle=False))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            yield client, node, path
    finally:
        if start:
            await node.stop(grace=1)
        else:
            await node.close()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Node, Path]]:
    async with served(tmp_path, YAML) as triple:
        yield triple


def by_key(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in view["settings"]}


# --- settings ---------------------------------------------------------------------------------


async def test_change_is_written_with_comments_and_says_it_needs_a_restart(api) -> None:
    client, node, path = api
    shown = by_key((await client.get("/api/v1/settings")).json())
    assert shown["node.max_workers"]["value"] == 2
    assert shown["capabilities.transcribe.api_key"]["value"] == config.MASK
    assert shown["auth.mode"]["restart"] is False
    r = await client.put(
        "/api/v1/settings",
        json={"changes": {"node.max_workers": 5, "auth.mode": "open", "media_folders": ["/srv"]}},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["changed"] == ["media_folders", "node.max_workers"]  # auth.mode was open already
    assert body["restart_required"] == ["node.max_workers"]
    text = path.read_text()
    assert "# my node: keep this comment" in text
    assert "max_workers: 5          # two at a time" in text
    assert "enabled: true       # needs yt-dlp" in text
    assert config.load_config(path).node.max_workers == 5
    shown = by_key((await client.get("/api/v1/settings")).json())
    assert shown["node.max_workers"] == {**shown["node.max_workers"], "value": 5}
    assert shown["node.max_workers"]["pending_restart"] is True
    assert shown["media_folders"]["pending_restart"] is False  # read live
    assert node.media_folders.list_roots()[0]["path"] == "/srv"


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"node.max_workers": 0}, "node.max_workers: must be >= 1, got 0"),
        ({"node.max_workers": "many"}, "node.max_workers: expected an integer"),
        ({"node.network_region": "MARS"}, "node.network_region: must be"),
        ({"node.max_workrs": 3}, "node.max_workrs: not an editable setting (did you mean"),
        ({"node.id": "x"}, "node.id: not an editable setting"),
        ({"media_folders": ["relative/dir"]}, "media_folders[0]: must be an absolute"),
        ({"cloud_policy.transcribe.max_cost_per_task_usd": -1}, "max_cost_per_task_usd"),
        ({"storage.results_retain_days": float("inf")}, "must be a finite number"),
        # a valid change next to a refused one: neither is written
        ({"node.bandwidth_mbps": 50, "auth.mode": "tokens"}, "auth.mode: must be"),
    ],
)
async def test_invalid_values_are_422_naming_the_key_and_change_nothing(
    api, changes: dict[str, Any], named: str
) -> None:
    client, _, path = api
    before = path.read_bytes()
    # plain json.dumps: it writes Infinity, which httpx's own encoder refuses to send
    r = await client.put(
        "/api/v1/settings",
        content=json.dumps({"changes": changes}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert named in r.json()["error"]
    assert path.read_bytes() == before


async def test_malformed_bodies_are_4xx(api) -> None:
    client, _, path = api
    before = path.read_bytes()
    for body in ({"node.max_workers": 3}, {"changes": [1]}, {"changes": {}, "x": 1}):
        r = await client.put("/api/v1/settings", json=body)
        assert r.status_code == 422, r.text
    r = await client.put(
        "/api/v1/settings", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    assert path.read_bytes() == before


async def test_secrets_stay_masked_and_sending_the_mask_back_keeps_them(api) -> None:
    client, _, path = api
    r = await client.put(
        "/api/v1/settings",
        json={
            "changes": {
                "capabilities.transcribe.api_key": config.MASK,
                "capabilities.download.youtube.proxy": "socks5://me:pw@127.0.0.1:7890",
            }
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["changed"] == ["capabilities.download.youtube.proxy"]
    assert "sk-secret-1" in path.read_text()
    shown = by_key(r.json())
    assert shown["capabilities.download.youtube.proxy"]["value"] == (
        f"socks5://me:{config.MASK}@127.0.0.1:7890"
    )
    assert "sk-secret-1" not in r.text and ":pw@" not in r.text
    # the masked proxy sent back is unchanged too; a new key replaces the old one
    r = await client.put(
        "/api/v1/settings",
        json={
            "changes": {
                "capabilities.download.youtube.proxy": f"socks5://me:{config.MASK}@127.0.0.1:7890",
                "capabilities.transcribe.api_key": "sk-new-2",
            }
        },
    )
    assert r.json()["changed"] == ["capabilities.transcribe.api_key"]
    cfg = config.load_config(path)
    assert cfg.capabilities.transcribe.api_key == "sk-new-2"
    assert cfg.capabilities.download.youtube.proxy == "socks5://me:pw@127.0.0.1:7890"


async def test_token_mode_lets_only_admin_tokens_at_the_settings(tmp_path: Path) -> None:
    async with served(tmp_path, YAML + TOKENS) as (client, _, path):
        before = path.read_bytes()
        user = {"Authorization": f"Bearer {USER}"}
        admin = {"Authorization": f"Bearer {ADMIN}"}
        assert (await client.get("/api/v1/settings")).status_code == 401
        r = await client.get("/api/v1/settings", headers=user)
        assert r.status_code == 403 and "admin permission" in r.json()["error"]
        change = {"changes": {"node.max_workers": 3}}
        assert (await client.put("/api/v1/settings", json=change, headers=user)).status_code == 403
        assert path.read_bytes() == before
        r = await client.put("/api/v1/settings", json=change, headers=admin)
        assert r.status_code == 200, r.text
        assert config.load_config(path).node.max_workers == 3
        # switching token mode off applies at once (no restart): open needs no token
        r = await client.put(
            "/api/v1/settings", json={"changes": {"auth.mode": "open"}}, headers=admin
        )
        assert r.json()["restart_required"] == []
        assert (await client.get("/api/v1/settings")).status_code == 200


# --- uploads ----------------------------------------------------------------------------------


def upload_files(node: Node) -> list[str]:
    folder = node.settings.data_dir / "uploads"
    return sorted(os.listdir(folder)) if folder.exists() else []


async def test_upload_streams_into_the_data_dir_with_a_safe_unique_name(api) -> None:
    client, node, _ = api
    data = os.urandom(300_000)  # over api.max_body_bytes (4096), under max_upload_mb (1 MiB)

    async def chunks():
        for i in range(0, len(data), 65536):
            yield data[i : i + 65536]

    r = await client.post(
        "/api/v1/uploads", params={"name": "../../etc/my talk?.mp4"}, content=chunks()
    )
    assert r.status_code == 201, r.text
    info = r.json()
    assert info["name"] == "my talk_.mp4" and info["size"] == len(data)
    assert Path(info["path"]) == (node.settings.data_dir / "uploads" / "my talk_.mp4").resolve()
    assert Path(info["path"]).read_bytes() == data
    again = await client.post("/api/v1/uploads", params={"name": "my talk?.mp4"}, content=b"x")
    assert again.json()["name"] == "my talk_ (1).mp4"
    chinese = await client.post("/api/v1/uploads", params={"name": "讲座 1.wav"}, content=b"y")
    assert chinese.json()["name"] == "讲座 1.wav"
    assert upload_files(node) == ["my talk_ (1).mp4", "my talk_.mp4", "讲座 1.wav"]


@pytest.mark.parametrize("name", ["..", "/", " . ", "\x00", "...."])
async def test_an_unusable_name_is_422(api, name: str) -> None:
    client, node, _ = api
    r = await client.post("/api/v1/uploads", params={"name": name}, content=b"x")
    assert r.status_code == 422 and "name" in r.json()["error"]
    assert upload_files(node) == []


async def test_over_the_limit_is_413_and_leaves_nothing(api) -> None:
    client, node, _ = api
    big = b"z" * (1 << 20) + b"!"
    # announced: refused before reading
    r = await client.post("/api/v1/uploads", params={"name": "big.bin"}, content=big)
    assert r.status_code == 413 and "storage.max_upload_mb" in r.json()["error"]

    async def streamed():  # not announced (chunked): refused when it passes the limit
        for i in range(0, len(big), 100_000):
            yield big[i : i + 100_000]

    r = await client.post("/api/v1/uploads", params={"name": "big.bin"}, content=streamed())
    assert r.status_code == 413
    assert upload_files(node) == []


async def test_an_aborted_upload_leaves_no_partial_file(api) -> None:
    client, node, _ = api

    async def broken():
        yield b"a" * 200_000
        raise ConnectionResetError("the browser went away")

    # the use case itself (over ASGI the error comes back wrapped by the middleware); the
    # browser test cuts a real connection
    with pytest.raises(ConnectionResetError):
        await node.uploads.receive("half.mp4", broken(), None)
    assert upload_files(node) == []


async def test_an_upload_that_does_not_fit_on_the_disk_is_507_and_leaves_nothing(
    api, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, node, _ = api
    # announced: refused before reading when the disk has less room
    usage = shutil.disk_usage(node.settings.data_dir)
    monkeypatch.setattr(node_uploads.shutil, "disk_usage", lambda _: usage._replace(free=1000))
    r = await client.post("/api/v1/uploads", params={"name": "a.mp4"}, content=b"x" * 5000)
    assert r.status_code == 507 and "does not fit" in r.json()["error"]
    monkeypatch.undo()

    # found while writing: the disk fills up under the upload
    def full(fh: Any, rest: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(node_uploads, "_finish", full)
    r = await client.post("/api/v1/uploads", params={"name": "b.mp4"}, content=b"x" * 5000)
    assert r.status_code == 507 and "filled up" in r.json()["error"]
    assert upload_files(node) == []


# --- media folders ----------------------------------------------------------------------------


@pytest.fixture
async def folders(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Path, Node]]:
    root = tmp_path / "media"
    (root / "talks" / "2024").mkdir(parents=True)
    (root / "talks" / "a.mp4").write_bytes(b"1234")
    (root / "b.wav").write_bytes(b"1")
    (root / ".hidden").write_bytes(b"1")
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key.txt").write_text("no")
    (root / "escape").symlink_to(outside)
    (root / "talks" / "inside").symlink_to(root / "talks" / "2024")
    text = YAML + f"media_folders: [{str(root)!r}]\n"
    async with served(tmp_path, text, start=False) as (client, node, _):
        yield client, root, node


async def raw_get(node: Node, raw_path: str) -> tuple[int, str]:
    """GET `raw_path` exactly as written (an HTTP client would resolve '..' first), decoded
    the way uvicorn decodes a request line."""
    path, _, query = raw_path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": urllib.parse.unquote(path),
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(b"host", b"node")],
        "client": ("127.0.0.1", 1),
        "server": ("node", 80),
        "root_path": "",
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await create_app(node, manage_lifecycle=False)(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body.decode()


async def test_media_folders_list_inside_the_root_only(folders) -> None:
    client, root, _ = folders
    roots = (await client.get("/api/v1/media-folders")).json()["folders"]
    assert roots == [{"id": 0, "path": str(root), "name": "media", "exists": True}]
    top = (await client.get("/api/v1/media-folders/0")).json()
    assert [(e["name"], e["kind"]) for e in top["entries"]] == [("talks", "dir"), ("b.wav", "file")]
    talks = (await client.get("/api/v1/media-folders/0/talks")).json()
    assert [(e["name"], e["kind"]) for e in talks["entries"]] == [
        ("2024", "dir"),
        ("inside", "dir"),
        ("a.mp4", "file"),
    ]
    a = talks["entries"][2]
    assert (a["path"], a["size"], a["source"]) == ("talks/a.mp4", 4, str(root / "talks" / "a.mp4"))


@pytest.mark.parametrize(
    ("raw_path", "status"),
    [
        ("/api/v1/media-folders/0/..", 422),
        ("/api/v1/media-folders/0/../secret", 422),
        ("/api/v1/media-folders/0/talks/../../secret", 422),
        ("/api/v1/media-folders/0/%2e%2e/secret", 422),
        ("/api/v1/media-folders/0/%2E%2E%2Fsecret", 422),
        ("/api/v1/media-folders/0//etc", 404),  # the leading '/' is dropped: no 'etc' in root
        ("/api/v1/media-folders/0/talks%00", 422),
        ("/api/v1/media-folders/0/..%5C..%5Csecret", 422),
        ("/api/v1/media-folders/0/escape", 404),  # a link leading out of the root
        ("/api/v1/media-folders/0/escape/key.txt", 404),
        ("/api/v1/media-folders/0/b.wav", 422),  # a file, not a folder
        ("/api/v1/media-folders/1", 404),
        ("/api/v1/media-folders/-1", 404),
        ("/api/v1/media-folders/x", 422),
    ],
)
async def test_traversal_corpus_is_refused(folders, raw_path: str, status: int) -> None:
    _, _, node = folders
    code, text = await raw_get(node, raw_path)
    assert code == status, (raw_path, text)
    assert '"entries"' not in text  # nothing was listed


# --- charts -----------------------------------------------------------------------------------


async def test_timeseries_endpoint_counts_known_events(tmp_path: Path) -> None:
    clock = ManualClock(1_000.0)
    async with served(tmp_path, YAML, clock=clock, start=False) as (client, node, _):
        store = node._store  # the test drives the store by hand with a manual clock
        await store.create_pipeline(
            NewPipeline("custom", "m", tuple(NewTask("T", id=f"t{i}") for i in range(3)))
        )
        for i, at in enumerate((1_070.0, 1_190.0)):
            clock.set(at)
            (task,) = await store.claim(ClaimFilter(limit=1, start=True))
            clock.set(at + 30)
            await store.complete_and_claim(
                [CompletionItem(task.id, task.attempt, {"i": i})], node_id=task.claimed_by
            )
        clock.set(1_300.0)
        r = await client.get("/api/v1/stats/timeseries", params={"window": "5m", "buckets": 5})
        assert r.status_code == 200, r.text
        out = r.json()
        assert (out["start"], out["end"], out["step_sec"]) == (1_000.0, 1_300.0, 60.0)
        assert out["completed"] == [0, 1, 0, 1, 0]
        assert out["throughput_per_min"] == [0.0, 1.0, 0.0, 1.0, 0.0]
        assert out["queue_depth"] == [3, 2, 2, 1, 1]
        assert out["running"] == [0, 0, 0, 0, 0]
        assert out["durations_sec"] == {"T": [None, 30.0, None, 30.0, None]}
        for bad in ("1w", "0m", "99999d"):
            r = await client.get("/api/v1/stats/timeseries", params={"window": bad})
            assert r.status_code == 422 and "window" in r.json()["error"]
        r = await client.get("/api/v1/stats/timeseries", params={"buckets": 0})
        assert r.status_code == 422


# --- materials --------------------------------------------------------------------------------


async def _run(store, task_id: str, result: dict[str, Any]) -> None:
    (task,) = await store.claim(ClaimFilter(limit=1, start=True))
    assert task.id == task_id
    await store.complete_and_claim(
        [CompletionItem(task.id, task.attempt, result)], node_id=task.claimed_by
    )


async def test_materials_have_title_duration_thumbnail_and_one_badge(tmp_path: Path) -> None:
    clock = ManualClock(1_000.0)
    async with served(tmp_path, YAML, clock=clock, start=False) as (client, node, _):
        store = node._store  # the test drives the store by hand
        cover = node.settings.data_dir / "thumbnails" / "m-talk" / "cover.jpg"
        cover.parent.mkdir(parents=True)
        cover.write_bytes(b"\xff\xd8jpeg")
        talk = {"source": "/media/My Talk.mp4"}
        await store.create_pipeline(
            NewPipeline(
                "overview",
                "m-talk",
                (NewTask("EXTRACT_AUDIO", id="a"), NewTask("GENERATE_THUMBNAIL", id="th")),
                params=talk,
            )
        )
        await _run(store, "a", {"duration_sec": 151.5})
        clock.set(1_010.0)
        await _run(store, "th", {"cover_path": "thumbnails/m-talk/cover.jpg"})
        # a later pipeline of the same material that failed, and a URL material still waiting
        clock.set(1_020.0)
        await store.create_pipeline(
            NewPipeline("again", "m-talk", (NewTask("TEST_FAIL", id="f"),), params=talk)
        )
        (task,) = await store.claim(ClaimFilter(limit=1, start=True))
        await store.fail(Failure(task.id, task.attempt, "boom", ErrorType.PERMANENT))
        clock.set(1_030.0)
        await store.create_pipeline(
            NewPipeline(
                "dl",
                "m-url",
                (NewTask("TEST_SLEEP", id="s"),),
                params={"source": "https://www.youtube.com/watch?v=abc"},
            )
        )
        r = await client.get("/api/v1/materials")
        assert r.status_code == 200, r.text
        url, talk_row = r.json()["materials"]
        assert (url["title"], url["status"], url["duration_sec"]) == (
            "www.youtube.com · abc",
            "pending",
            None,
        )
        assert talk_row["title"] == "My Talk.mp4"
        assert talk_row["duration_sec"] == 151.5
        assert talk_row["status"] == "failed"  # the newest of its pipelines failed
        assert [p["template"] for p in talk_row["pipelines"]] == ["again", "overview"]
        thumb = talk_row["thumbnail_url"]
        assert thumb == "/files/outputs/th?path=thumbnails%2Fm-talk%2Fcover.jpg"
        image = await client.get(thumb)
        assert image.status_code == 200 and image.content == b"\xff\xd8jpeg"
        assert url["thumbnail_url"] is None
        assert len((await client.get("/api/v1/materials?limit=1")).json()["materials"]) == 1
        assert (await client.get("/api/v1/materials?limit=0")).status_code == 422


def test_token_create_admin_writes_the_permission_and_keeps_comments(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fredica.cli.main import app

    path = tmp_path / "worker.yaml"
    path.write_text(YAML)
    args = ["token", "create", "--name", "ops", "--config", str(path), "--admin"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (token,) = config.load_config(path).auth.access_tokens
    assert token.name == "ops" and token.permissions.admin is True
    assert "# my node: keep this comment" in path.read_text()
    assert "max_workers: 2          # two at a time" in path.read_text()
