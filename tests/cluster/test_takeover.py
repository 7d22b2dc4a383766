"""Real `fredica serve` processes on loopback: the owner of a pipeline is suspended (SIGSTOP, as
a laptop's sleep) mid-pipeline; after `cluster.originator_wait_sec` one peer takes the pipeline
over and the cluster finishes it, every task run once; the owner, resumed, holds a replica of
the successor's rows and runs nothing of it (docs/ownership.md)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support import (
    Cluster,
    effects,
    get,
    make_cluster,
    pipeline_done,
    post,
    replicas_agree,
)
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.slow

WAIT = 4.0  # cluster.originator_wait_sec


def _takeover_on(name: str, text: str) -> str:
    return text.replace(
        "cluster:\n",
        f"cluster:\n  takeover: true\n  originator_wait_sec: {WAIT}\n",
        1,
    )


def _effect_tasks(log: Path, count: int, seconds: float) -> list[dict[str, Any]]:
    return [
        {
            "ref": f"t{i}",
            "type": "TEST_EFFECT_AI",
            "payload": {"effect_log": str(log), "seconds": seconds},
        }
        for i in range(count)
    ]


def _owner(node: Any, pid: str) -> tuple[str, int]:
    shown = get(node, f"/api/v1/pipelines/{pid}")
    return str(shown["owner_id"]), int(shown["owner_epoch"])


def _each_once(log: Path, count: int) -> None:
    rows = effects(log)
    starts = Counter(e["task"] for e in rows if e["phase"] == "start")
    ends = Counter(e["task"] for e in rows if e["phase"] == "end")
    assert len(ends) == count, ends
    assert set(starts.values()) == {1} and set(ends.values()) == {1}, (starts, ends)


def test_a_suspended_owners_pipeline_is_taken_over_and_every_task_runs_once(
    tmp_path: Path,
) -> None:
    with make_cluster(tmp_path, configure=_takeover_on) as cluster:
        _suspend_and_take_over(cluster, tmp_path)


def _suspend_and_take_over(cluster: Cluster, tmp_path: Path) -> None:
    # Given three nodes with takeover on; a (the owner) cannot run TEST_EFFECT_AI
    cluster.start_all()
    a, b, c = (cluster.nodes[n] for n in "abc")
    log = tmp_path / "effects.jsonl"
    log.touch()
    count = 40
    body = {"template": "custom", "tasks": _effect_tasks(log, count, 0.25)}
    pid = post(a, "/api/v1/pipelines", body)["pipeline_id"]
    # When a is suspended once a tenth of the tasks have run, for longer than the wait
    wait_until(
        lambda: sum(1 for e in effects(log) if e["phase"] == "end") >= count // 10,
        30,
        "a tenth of the tasks to run",
    )
    assert a.proc is not None
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        # Then b or c takes the pipeline over and the cluster finishes it
        def taken() -> str | None:
            for node in (b, c):
                owner, epoch = _owner(node, pid)
                if owner != cluster.ids["a"] and epoch == 1:
                    return owner
            return None

        successor = wait_until(taken, 40, "a peer to take the pipeline over")
        assert successor in (cluster.ids["b"], cluster.ids["c"])
        new_owner = cluster.nodes[cluster.name_of(successor)]
        done = wait_until(lambda: pipeline_done(new_owner, pid), 60, "the pipeline to finish")
        assert done["status"] == "completed", cluster.logs()
        assert done["owner_history"][-1]["how"] == "takeover"
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    # and every task ran exactly once
    _each_once(log, count)
    # When a is back: it holds the pipeline as a replica of the successor's rows
    wait_until(lambda: _owner(a, pid) == (successor, 1), 30, "a to learn the new owner")
    shown = get(a, f"/api/v1/pipelines/{pid}")
    assert shown["replica"] is not None and shown["status"] == "completed"
    wait_until(lambda: replicas_agree(cluster, successor), 20, "the replicas to agree")
    # and nothing ran again meanwhile
    _each_once(log, count)
