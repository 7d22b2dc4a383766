"""Node quarantine across a real home cluster (issue 12): b's ffmpeg is broken (a PATH shim that
answers the capability probes and fails every real run as a missing shared library does). b owns
a pipeline of EXTRACT_AUDIO tasks and grabs them first; each fails RESOURCE on b, and after
three b quarantines itself (its peers see it so) while a, whose ffmpeg works, runs every task."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cluster.support import get, make_cluster, pipeline_done, post
from tests.e2e.conftest import wait_until
from tests.integration.test_broken_ffmpeg import broken_ffmpeg, tone

pytestmark = pytest.mark.slow

TASKS = 8


def _configure(name: str, text: str) -> str:
    text = text.replace(
        "scheduling:\n",
        "scheduling:\n  claim_ahead: 0\n  quarantine_after_failures: 3\n"
        "  quarantine_cooldown_sec: 600\n",
        1,
    )
    if name == "a":  # one task at a time: b, the owner, gets to fail several first
        text = text.replace("  max_workers: 2\n", "  max_workers: 1\n", 1)
    return text


def test_a_node_with_a_broken_ffmpeg_quarantines_itself_and_the_other_finishes(
    tmp_path: Path,
) -> None:
    shim = broken_ffmpeg(tmp_path / "broken-bin")
    source = tone(tmp_path / "tone.wav")
    with make_cluster(tmp_path, "ab", configure=_configure) as cluster:
        b_node = cluster.nodes["b"]
        b_node.extra_env = {"PATH": f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        cluster.start_some("ab")
        a, b = cluster.nodes["a"], b_node
        ids = cluster.ids
        tasks = [
            {"ref": f"x{i}", "type": "EXTRACT_AUDIO", "payload": {"video_path": str(source)}}
            for i in range(TASKS)
        ]
        pid = post(b, "/api/v1/pipelines", {"template": "custom", "tasks": tasks})["pipeline_id"]
        done = wait_until(lambda: pipeline_done(b, pid), 120, "the pipeline")
        data = get(b, f"/api/v1/pipelines/{pid}")
        assert done["status"] == "completed", (
            [(t["claimed_by"], t["error"]) for t in data["tasks"]],
            cluster.logs(),
        )
        # every task ran on a; b's attempts failed RESOURCE, naming its broken ffmpeg
        assert {t["claimed_by"] for t in data["tasks"]} == {ids["a"]}
        failed_on_b = [t for t in data["tasks"] if ids["b"] in t["excluded_nodes"]]
        assert len(failed_on_b) >= 3, [(t["retry_count"], t["error"]) for t in data["tasks"]]
        for t in failed_on_b:
            events = get(b, f"/api/v1/tasks/{t['id']}")["events"]
            on_b = [e for e in events if e["node_id"] == ids["b"]]
            assert any("libavfilter.so.9" in (e["message"] or "") for e in on_b), on_b
        # and b quarantined itself after three: it says so, and a sees it so
        status = get(b, "/api/v1/status")
        assert status["state"] == "quarantined" and status["quarantine"]["active"], status
        assert "3 tasks in a row failed" in status["quarantine"]["reason"]
        wait_until(
            lambda: (
                {n["id"]: n["status"] for n in get(a, "/api/v1/nodes")["nodes"]}.get(ids["b"])
                == "quarantined"
            ),
            20,
            "a to see b quarantined",
        )
