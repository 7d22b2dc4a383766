"""Two real `fredica serve` processes: a task created on a, pinned to b, reads a file that a
holds. b finds a's address in its node registry (kept by membership), fetches the file through
a's `/files/serve` with the cluster secret, verifies it, and runs on the copy."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest

from tests.cluster import test_home_cluster as home
from tests.cluster.test_home_cluster import Cluster, get, pipeline_done, post
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow
cluster = home.cluster  # the fixture, here with two nodes (indirect parametrization)

REL = "chunks/m1/chunk_002.wav"


def read_task(ref: str, path: str, holder: str, runner: str) -> dict[str, Any]:
    return {
        "ref": ref,
        "type": "TEST_READ_INPUT",
        "payload": {"path": path, "holder": holder},
        "affinity": {"kind": "HARD", "node_id": runner},
        "max_retries": 0,
    }


@pytest.mark.parametrize("cluster", ["ab"], indirect=True)
def test_a_task_on_another_node_reads_the_holder_s_file(cluster: Cluster) -> None:
    # Given a file on a, and b that may run the task only
    content = os.urandom(3 * 1024 * 1024 + 17)
    held = cluster.nodes["a"].data_dir / REL
    held.parent.mkdir(parents=True)
    held.write_bytes(content)
    cluster.start_all()
    a, b = cluster.ids["a"], cluster.ids["b"]

    # When a pipeline on a reads it on b (and one task names a file a does not have)
    tasks = [read_task("read", REL, a, b), read_task("gone", "chunks/m1/gone.wav", a, b)]
    pid = post(cluster.nodes["a"], "/api/v1/pipelines", {"template": "custom", "tasks": tasks})[
        "pipeline_id"
    ]
    done = wait_until(lambda: pipeline_done(cluster.nodes["a"], pid), 60, "the pipeline to end")

    # Then b ran on a verified copy in its cache, and the missing file is a RESOURCE error
    rows = {t["payload"]["path"]: t for t in done["tasks"]}
    read = rows[REL]
    assert read["status"] == "completed", cluster.logs()
    assert read["result"]["node"] == b and read["claimed_by"] == b
    assert read["result"]["sha256"] == hashlib.sha256(content).hexdigest()
    copy = cluster.nodes["b"].data_dir / "cache" / "peers" / a / REL
    # (the result names the copy relative to b's data dir: a file of b's)
    read_from = cluster.nodes["b"].path(read["result"]["read_from"])
    assert read_from.resolve() == copy.resolve()
    assert copy.read_bytes() == content
    gone = rows["chunks/m1/gone.wav"]
    assert gone["status"] == "failed" and gone["error_type"] == "RESOURCE", gone
    assert a in gone["error"] and "gone.wav" in gone["error"]
    events = get(cluster.nodes["a"], f"/api/v1/tasks/{read['id']}")["events"]
    assert any(e["event_type"] == "input" and a in (e["message"] or "") for e in events)
