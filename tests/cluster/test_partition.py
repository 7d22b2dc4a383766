"""A partition, not a sleep: the owner of a pipeline is cut off from its two peers (a network
namespace of its own whose link goes down, tests/netns.py) for longer than
`cluster.originator_wait_sec`, while every process keeps running. The two peers take the
pipeline over and finish it and go on with new work; the cut-off owner fences itself (it acts
on none of its pipelines while it cannot know whether they moved) but keeps answering and
accepting work. When the link comes back there is one owner per pipeline, every node's copy
of an owner's rows hashes alike (`/cluster/digest`), and no task ran twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.support import (
    Cluster,
    effect_tasks,
    effects,
    get,
    make_cluster,
    owner_of,
    owners,
    pipeline_done,
    post,
    ran_once,
    replicas_agree,
    replicated,
    takeover_on,
)
from tests.e2e.conftest import wait_until
from tests.netns import HOST, ISOLATED, Partition

pytestmark = pytest.mark.slow


@pytest.fixture
def partition() -> Iterator[Partition]:
    with Partition() as net:
        yield net


def test_an_isolated_owner_loses_its_pipeline_to_one_successor_and_no_task_runs_twice(
    tmp_path: Path, partition: Partition
) -> None:
    def place(name: str) -> tuple[str, list[str]]:
        return (ISOLATED, partition.prefix) if name == "a" else (HOST, [])

    with make_cluster(tmp_path, configure=takeover_on, place=place) as cluster:
        _partition_and_heal(cluster, partition, tmp_path)


def _partition_and_heal(cluster: Cluster, partition: Partition, tmp_path: Path) -> None:
    # Given three nodes with takeover on, and a 40-task pipeline of a's (a cannot run its
    # type: b and c run it, claiming from a) a tenth done
    cluster.start_all()
    a, b, c = (cluster.nodes[n] for n in "abc")
    log = tmp_path / "effects.jsonl"
    log.touch()
    count = 40
    body = {"template": "custom", "tasks": effect_tasks(log, count, 0.25, "p")}
    pid = str(post(a, "/api/v1/pipelines", body)["pipeline_id"])
    wait_until(lambda: len(ran_once(log)) >= count // 10, 30, "a tenth of the tasks to run")
    replicated(cluster, pid, "bc")

    # When a's link goes down for longer than the wait
    partition.cut()
    try:
        # Then b or c (one of them) takes the pipeline over and they finish it
        def taken() -> str | None:
            owners = {owner_of(node, pid) for node in (b, c)}
            moved = {o for o, epoch in owners if o != cluster.ids["a"] and epoch == 1}
            return moved.pop() if len(owners) == 1 and moved else None

        successor = wait_until(taken, 40, "a peer to take the pipeline over")
        new_owner = cluster.nodes[cluster.name_of(successor)]
        done = wait_until(lambda: pipeline_done(new_owner, pid), 60, "the pipeline to finish")
        assert done["status"] == "completed", cluster.logs()
        assert done["owner_history"][-1]["how"] == "takeover"
        # and their side goes on with new work
        other_log = tmp_path / "b-side.jsonl"
        other_log.touch()
        fresh = {"template": "custom", "tasks": effect_tasks(other_log, 4, 0.05, "q")}
        qid = str(post(b, "/api/v1/pipelines", fresh)["pipeline_id"])
        q_done = wait_until(lambda: pipeline_done(b, qid), 30, "b's new pipeline")
        assert q_done["status"] == "completed", cluster.logs()
        # while a, cut off, still answers (from inside its namespace), still thinks it owns
        # the pipeline, runs none of it and accepts new work, which waits for the link
        seen = partition.request("GET", f"{a.url}/api/v1/pipelines/{pid}")
        assert (seen["owner_id"], seen["owner_epoch"]) == (cluster.ids["a"], 0)
        a_log = tmp_path / "a-side.jsonl"
        a_log.touch()
        held = {"template": "custom", "tasks": effect_tasks(a_log, 3, 0.05, "r")}
        rid = str(partition.request("POST", f"{a.url}/api/v1/pipelines", held)["pipeline_id"])
        assert effects(a_log) == []
    finally:
        partition.heal()

    # When the link is back: one owner, the successor, on every node; a keeps a replica
    wait_until(lambda: owners(cluster, pid) == {(successor, 1)}, 30, "one owner everywhere")
    assert get(a, f"/api/v1/pipelines/{pid}")["replica"] is not None
    # a's pipeline created in the partition runs now, claimed from a by b and c
    r_done = wait_until(lambda: pipeline_done(a, rid), 30, "a's pipeline of the partition")
    assert r_done["status"] == "completed", cluster.logs()
    assert r_done["owner_id"] == cluster.ids["a"]
    # every node's copy of each owner's rows hashes alike
    for owner in {successor, cluster.ids["a"]}:
        wait_until(lambda owner=owner: replicas_agree(cluster, owner), 30, "the replicas to agree")
    # and no task started or ended twice, anywhere
    assert len(ran_once(log)) == count
    assert len(ran_once(other_log)) == 4 and len(ran_once(a_log)) == 3
