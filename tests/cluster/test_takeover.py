"""Real `fredica serve` processes on loopback: the owner of a pipeline is suspended (SIGSTOP, as
a laptop's sleep) mid-pipeline; after `cluster.originator_wait_sec` one peer takes the pipeline
over and the cluster finishes it, every task run once; the owner, resumed, holds a replica of
the successor's rows and runs nothing of it (docs/ownership.md)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

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

pytestmark = pytest.mark.slow


def _each_once(log: Path, count: int) -> None:
    ends = ran_once(log)
    assert len(ends) == count, ends


def test_a_suspended_owners_pipeline_is_taken_over_and_every_task_runs_once(
    tmp_path: Path,
) -> None:
    with make_cluster(tmp_path, configure=takeover_on) as cluster:
        _suspend_and_take_over(cluster, tmp_path)


def _suspend_and_take_over(cluster: Cluster, tmp_path: Path) -> None:
    # Given three nodes with takeover on; a (the owner) cannot run TEST_EFFECT_AI
    cluster.start_all()
    a, b, c = (cluster.nodes[n] for n in "abc")
    log = tmp_path / "effects.jsonl"
    log.touch()
    count = 40
    body = {"template": "custom", "tasks": effect_tasks(log, count, 0.25)}
    pid = post(a, "/api/v1/pipelines", body)["pipeline_id"]
    # When a is suspended once a tenth of the tasks have run, for longer than the wait
    wait_until(
        lambda: sum(1 for e in effects(log) if e["phase"] == "end") >= count // 10,
        30,
        "a tenth of the tasks to run",
    )
    replicated(cluster, pid, "bc")
    assert a.proc is not None
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        # Then b or c takes the pipeline over and the cluster finishes it
        def taken() -> str | None:
            for node in (b, c):
                owner, epoch = owner_of(node, pid)
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
    wait_until(lambda: owner_of(a, pid) == (successor, 1), 30, "a to learn the new owner")
    shown = get(a, f"/api/v1/pipelines/{pid}")
    assert shown["replica"] is not None and shown["status"] == "completed"
    wait_until(lambda: replicas_agree(cluster, successor), 20, "the replicas to agree")
    # and nothing ran again meanwhile
    _each_once(log, count)


def _start_pipeline(cluster: Cluster, tmp_path: Path, count: int = 40) -> tuple[str, Path]:
    """Three nodes started; a 40-task pipeline of a's running on b and c, a tenth done."""
    cluster.start_all()
    log = tmp_path / "effects.jsonl"
    log.touch()
    body = {"template": "custom", "tasks": effect_tasks(log, count, 0.25)}
    pid = str(post(cluster.nodes["a"], "/api/v1/pipelines", body)["pipeline_id"])
    wait_until(
        lambda: sum(1 for e in effects(log) if e["phase"] == "end") >= count // 10,
        30,
        "a tenth of the tasks to run",
    )
    replicated(cluster, pid, "bc")
    return pid, log


def test_an_owner_killed_and_restarted_after_the_takeover_keeps_a_replica(
    tmp_path: Path,
) -> None:
    with make_cluster(tmp_path, configure=takeover_on) as cluster:
        # Given a pipeline of a's mid-way; When a is killed (kill -9)
        pid, log = _start_pipeline(cluster, tmp_path)
        a = cluster.nodes["a"]
        a.kill9()

        # Then a peer takes it over and the cluster finishes it
        def taken() -> str | None:
            for name in "bc":
                owner, epoch = owner_of(cluster.nodes[name], pid)
                if owner != cluster.ids["a"] and epoch == 1:
                    return owner
            return None

        successor = wait_until(taken, 40, "a peer to take the pipeline over")
        new_owner = cluster.nodes[cluster.name_of(successor)]
        done = wait_until(lambda: pipeline_done(new_owner, pid), 60, "the pipeline to finish")
        assert done["status"] == "completed", cluster.logs()
        # When a starts again: it learns the new owner, keeps a replica, runs nothing
        a.start()
        wait_until(lambda: owner_of(a, pid) == (successor, 1), 30, "a to learn the new owner")
        assert get(a, f"/api/v1/pipelines/{pid}")["replica"] is not None
        assert owners(cluster, pid) == {(successor, 1)}
        _each_once(log, 40)


def test_a_hand_off_mid_pipeline_moves_it_at_once_and_runs_every_task_once(
    tmp_path: Path,
) -> None:
    # the default originator_wait_sec (30 min): only the hand-off can move the pipeline
    with make_cluster(tmp_path) as cluster:
        pid, log = _start_pipeline(cluster, tmp_path)
        a = cluster.nodes["a"]
        moved = post(a, "/api/v1/node/handoff", {})
        assert moved["handed_off"] == [pid]
        target = str(moved["target"])
        assert target in (cluster.ids["b"], cluster.ids["c"])
        # the old owner holds a replica at once; the new owner finishes the pipeline
        assert owner_of(a, pid) == (target, 1)
        assert get(a, f"/api/v1/pipelines/{pid}")["replica"] is not None
        new_owner = cluster.nodes[cluster.name_of(target)]
        done = wait_until(lambda: pipeline_done(new_owner, pid), 60, "the pipeline to finish")
        assert done["status"] == "completed", cluster.logs()
        assert done["owner_history"][-1]["how"] == "handoff"
        _each_once(log, 40)
        wait_until(lambda: owners(cluster, pid) == {(target, 1)}, 20, "one owner everywhere")


@pytest.mark.parametrize(
    "step", ["handoff_frozen", "handoff_marked", "handoff_adopted", "handoff_demoted"]
)
def test_a_hand_off_killed_at_any_step_leaves_one_owner_and_loses_no_task(
    tmp_path: Path, step: str
) -> None:
    with make_cluster(tmp_path) as cluster:
        a = cluster.nodes["a"]
        a.extra_env["FREDICA_CRASH_AT"] = step
        pid, log = _start_pipeline(cluster, tmp_path)
        # When a is killed at `step` of the hand-off, then started again
        with pytest.raises(Exception):  # noqa: B017 - the process dies mid-request
            post(a, "/api/v1/node/handoff", {})
        assert a.proc is not None
        a.proc.wait(10)
        a.extra_env.pop("FREDICA_CRASH_AT")
        a.start()

        # Then the pipeline has one owner (a, or the target once a learnt it adopted it),
        # it completes, and every task ran once
        def finished() -> dict[str, Any] | None:
            shown = owners(cluster, pid)
            if len(shown) != 1:
                return None
            ((owner, _),) = shown
            return pipeline_done(cluster.nodes[cluster.name_of(owner)], pid)

        done = wait_until(finished, 60, "the pipeline to finish with one owner")
        assert done["status"] == "completed", cluster.logs()
        _each_once(log, 40)
        if step in ("handoff_adopted", "handoff_demoted"):
            assert done["owner_id"] != cluster.ids["a"]  # the target had adopted it


def _handoff_on_stop(name: str, text: str) -> str:
    return text.replace("cluster:\n", "cluster:\n  handoff_on_stop: true\n", 1)


def test_a_drain_of_the_owner_hands_its_pipeline_off_and_every_task_runs_once(
    tmp_path: Path,
) -> None:
    with make_cluster(tmp_path, configure=_handoff_on_stop) as cluster:
        pid, log = _start_pipeline(cluster, tmp_path)
        a = cluster.nodes["a"]
        # When a (the owner) is drained mid-pipeline
        answer = post(a, "/api/v1/node/drain", {})
        moved = answer["handoff"]
        assert moved["handed_off"] == [pid], answer
        target = str(moved["target"])
        # Then the pipeline is the target's at once and the others finish it, each task once
        assert owner_of(a, pid) == (target, 1)
        new_owner = cluster.nodes[cluster.name_of(target)]
        done = wait_until(lambda: pipeline_done(new_owner, pid), 60, "the pipeline to finish")
        assert done["status"] == "completed", cluster.logs()
        assert done["owner_history"][-1]["how"] == "handoff"
        _each_once(log, 40)


def test_a_clean_stop_of_the_owner_hands_its_pipeline_off_and_every_task_runs_once(
    tmp_path: Path,
) -> None:
    with make_cluster(tmp_path, configure=_handoff_on_stop) as cluster:
        pid, log = _start_pipeline(cluster, tmp_path)
        a = cluster.nodes["a"]
        # When a (the owner) stops cleanly (SIGTERM) mid-pipeline
        assert a.terminate() == 0

        # Then a peer owns the pipeline and the cluster finishes it without a, each task once
        def finished() -> dict[str, Any] | None:
            for name in "bc":
                owner, epoch = owner_of(cluster.nodes[name], pid)
                if owner != cluster.ids["a"] and epoch == 1:
                    return pipeline_done(cluster.nodes[cluster.name_of(owner)], pid)
            return None

        done = wait_until(finished, 60, "a peer to finish the pipeline")
        assert done["status"] == "completed", cluster.logs()
        assert done["owner_history"][-1]["how"] == "handoff"
        _each_once(log, 40)


def test_with_two_nodes_the_one_left_keeps_working_and_takes_the_sleepers_pipeline(
    tmp_path: Path,
) -> None:
    # Given a desktop (a, the owner) and a NAS (b) with takeover on, a's pipeline running on b
    with make_cluster(tmp_path, names="ab", configure=takeover_on) as cluster:
        cluster.start_all()
        a, b = cluster.nodes["a"], cluster.nodes["b"]
        log = tmp_path / "effects.jsonl"
        log.touch()
        body = {"template": "custom", "tasks": effect_tasks(log, 20, 0.25)}
        pid = post(a, "/api/v1/pipelines", body)["pipeline_id"]
        wait_until(
            lambda: sum(1 for e in effects(log) if e["phase"] == "end") >= 2,
            30,
            "a tenth of the tasks to run",
        )
        replicated(cluster, pid, "b")
        assert a.proc is not None
        # When the desktop sleeps for longer than the wait
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            # Then the NAS, alone, takes its pipeline over and finishes it
            wait_until(lambda: owner_of(b, pid) == (cluster.ids["b"], 1), 40, "b to take it over")
            done = wait_until(lambda: pipeline_done(b, pid), 60, "the pipeline to finish")
            assert done["status"] == "completed", cluster.logs()
            # and its own new work runs too: alone it is half of the cluster, never fenced
            own = {"template": "custom", "tasks": effect_tasks(log, 6, 0.1, ref="own")}
            mine = post(b, "/api/v1/pipelines", own)["pipeline_id"]
            finished = wait_until(lambda: pipeline_done(b, mine), 30, "b's own pipeline")
            assert finished["status"] == "completed", cluster.logs()
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        # and when the desktop is back it keeps a replica and runs nothing again
        wait_until(lambda: owner_of(a, pid) == (cluster.ids["b"], 1), 30, "a to learn")
        _each_once(log, 26)
