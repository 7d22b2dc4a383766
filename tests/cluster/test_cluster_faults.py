"""The network between an owner and its executor fails, through a fault-injecting TCP proxy in
front of the owner (the executor reaches it only through the proxy): a short cut costs nothing,
a long one hands the task to a new attempt and the zombie's late result is discarded; requests
repeated by the network change nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.support import (
    Cluster,
    b_runs_a_task_of_a,
    effects,
    get,
    make_cluster,
    pipeline_done,
    replicas_agree,
)
from tests.e2e.conftest import wait_until
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.slow

STALE_AFTER = 1.5  # the cluster's timings (tests/cluster/support.py CONFIG)
RECLAIM_AFTER = 3.0


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Cluster, FaultProxy]]:
    """a and b; b reaches a only through a fault proxy (a reaches b directly)."""
    proxies: list[FaultProxy] = []

    def seed_of_a(port: int) -> str:
        proxies.append(FaultProxy(port).start())
        return proxies[-1].address

    with make_cluster(tmp_path, "ab", seed_of_a) as cluster:
        yield cluster, proxies[0]
    for proxy in proxies:
        proxy.stop()


def events_of(cluster: Cluster, pid: str) -> tuple[dict, list[str]]:
    a = cluster.nodes["a"]
    row = get(a, "/api/v1/tasks", pipeline_id=pid)["tasks"][0]
    return row, [e["event_type"] for e in get(a, f"/api/v1/tasks/{row['id']}")["events"]]


def test_a_cut_shorter_than_stale_after_reclaims_nothing(proxied, tmp_path: Path) -> None:
    cluster, proxy = proxied
    a, _, log, pid = b_runs_a_task_of_a(cluster, tmp_path, seconds=3)

    with proxy.cut_for():
        time.sleep(STALE_AFTER * 0.6)  # the length of the cut is the point of the test

    done = wait_until(lambda: pipeline_done(a, pid), 30, "the pipeline")
    assert done["status"] == "completed", cluster.logs()
    row, kinds = events_of(cluster, pid)
    assert row["attempt"] == 1 and row["retry_count"] == 0
    assert "stale" not in kinds and "reclaimed" not in kinds
    assert [(e["attempt"], e["phase"]) for e in effects(log)] == [(1, "start"), (1, "end")]


def test_a_cut_longer_than_reclaim_after_hands_the_task_to_a_new_attempt(
    proxied, tmp_path: Path
) -> None:
    cluster, proxy = proxied
    a, _, log, pid = b_runs_a_task_of_a(cluster, tmp_path, seconds=6)

    # When b cannot reach a for longer than reclaim_after
    with proxy.cut_for():
        wait_until(
            lambda: "reclaimed" in events_of(cluster, pid)[1], RECLAIM_AFTER * 4, "the reclaim"
        )

    # Then after healing, attempt 1 learns from the heartbeat feedback that it lost the task
    # and stops; attempt 2 runs and is the one recorded; attempt 1 never ends
    done = wait_until(lambda: pipeline_done(a, pid), 40, "the pipeline")
    assert done["status"] == "completed", cluster.logs()
    row, kinds = events_of(cluster, pid)
    assert row["attempt"] == 2 and row["retry_count"] == 1, (row, kinds, cluster.logs())
    assert row["result"]["attempt"] == 2
    assert "stale" in kinds and "reclaimed" in kinds
    phases = [(e["attempt"], e["phase"]) for e in effects(log)]
    assert (1, "end") not in phases and phases.count((2, "end")) == 1, phases
    # and once healed, b's replica of a's rows hashes like a's own
    wait_until(lambda: replicas_agree(cluster, cluster.ids["a"]), 10, "the replicas to agree")


def test_requests_the_network_repeats_change_nothing(proxied, tmp_path: Path) -> None:
    cluster, proxy = proxied
    proxy.duplicate_requests(True)  # every request from b to a reaches a twice
    a, _, log, pid = b_runs_a_task_of_a(cluster, tmp_path, seconds=1)

    done = wait_until(lambda: pipeline_done(a, pid), 30, "the pipeline")
    assert done["status"] == "completed", cluster.logs()
    row, kinds = events_of(cluster, pid)
    assert row["attempt"] == 1 and kinds.count("completed") == 1
    assert [(e["attempt"], e["phase"]) for e in effects(log)] == [(1, "start"), (1, "end")]


def test_a_slow_network_delays_reports_but_loses_nothing(proxied, tmp_path: Path) -> None:
    cluster, proxy = proxied
    proxy.delay(0.15)  # every chunk between b and a held 150 ms (well under stale_after)
    a, _, log, pid = b_runs_a_task_of_a(cluster, tmp_path, seconds=2)

    done = wait_until(lambda: pipeline_done(a, pid), 30, "the pipeline")
    assert done["status"] == "completed", cluster.logs()
    row, kinds = events_of(cluster, pid)
    assert row["attempt"] == 1 and "stale" not in kinds and "reclaimed" not in kinds
    assert [(e["attempt"], e["phase"]) for e in effects(log)] == [(1, "start"), (1, "end")]
