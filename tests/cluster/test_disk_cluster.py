"""Two real nodes, one without disk room (seed 001 §7.7): the download a creates is left to b,
which has room; a says why in its status, and b sees a's held types and free space in a's
heartbeat."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.support import Cluster, get, make_cluster, pipeline_done, post
from tests.e2e.conftest import wait_until
from tests.media_support import serve_files

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with make_cluster(tmp_path, names="ab") as made:
        for name, minimum in (("a", 100_000), ("b", 0)):
            config = made.nodes[name].config
            room = f"capabilities:\n  download:\n    disk_min_free_gb: {minimum}\n"
            config.write_text(config.read_text().replace("capabilities:\n", room, 1))
        made.start_all()
        yield made


def test_the_node_with_room_gets_the_download(cluster: Cluster, tmp_path: Path) -> None:
    www = tmp_path / "www"
    www.mkdir()
    (www / "clip.mp4").write_bytes(b"\0\1" * 50_000)
    a, b = cluster.nodes["a"], cluster.nodes["b"]
    with serve_files(www) as server:
        task = {
            "ref": "dl",
            "type": "DOWNLOAD_VIDEO",
            "payload": {"source_url": f"{server.url}/clip.mp4"},
        }
        pid = post(a, "/api/v1/pipelines", {"template": "custom", "tasks": [task]})["pipeline_id"]
        done = wait_until(lambda: pipeline_done(a, pid), 60, "the download")
    (dl,) = done["tasks"]
    assert dl["status"] == "completed", cluster.logs()
    # b ran it, at the first attempt: a never claimed it
    assert (dl["claimed_by"], dl["attempt"], dl["retry_count"]) == (cluster.ids["b"], 1, 0)
    events = get(a, f"/api/v1/tasks/{dl['id']}")["events"]
    assert not [e for e in events if e["event_type"] == "released"], events
    assert b.path(dl["result"]["video_path"]).stat().st_size == 100_000
    # a says why it left it
    disk = get(a, "/api/v1/status")["disk"]
    assert disk["low"] is True and "disk_min_free_gb" in disk["held_types"]["DOWNLOAD_VIDEO"]
    shown = a.cli("status").stdout
    assert "keeps 100000 GiB free" in shown and "DOWNLOAD_VIDEO" in shown, shown
    # and b knows a's disk from a's heartbeats: its free space and what it holds back
    seen = {n["id"]: n for n in get(b, "/api/v1/nodes")["nodes"]}
    info = seen[cluster.ids["a"]]["info"]
    assert info["disk_free"] > 0 and "DOWNLOAD_VIDEO" in info["disk_held"]
    assert "DOWNLOAD_VIDEO" not in info["task_types"] and "TEST_SLEEP" in info["task_types"]
    assert seen[cluster.ids["a"]]["status"] == "online"
