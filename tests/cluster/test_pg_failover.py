"""Three real `fredica serve` processes survive a failover of their PostgreSQL to a promoted
standby: a streaming replica (`pg_basebackup`), synchronous, the nodes' `store.url` naming both
servers with `target_session_attrs=read-write`. In the middle of the run the standby falls
behind and the primary crashes (`pg_ctl stop -m immediate`) with commits waiting for it (never
acknowledged, so nothing a node was told is lost). Until the standby is promoted every node
says the store is unavailable (its log, `/api/v1/status`, 503 `store_unavailable` from the
API, never a 5xx traceback); after `pg_ctl promote` the nodes find the new primary by
themselves (their pools and their LISTEN connections), every task completes and each task's
effect happened exactly once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from bench.pgserver import PgServer

from tests.cluster.support import effect_pipeline, pg_nodes
from tests.cluster.test_pg_outage import (
    CONFIG,
    completed,
    expect_each_effect_once,
    expect_store_unavailable,
    listeners,
    status,
)
from tests.e2e.conftest import ServedNode, wait_until
from tests.pgserver import start_server

pytestmark = pytest.mark.slow

# as many as the three-node run of test_pg_cluster.py: the tasks themselves take ~15 s on a
# 2-core machine; the run is ~1 min (the OUTAGE_SEC below), or ~2 min when a claim the nodes
# never heard back about reached the standby anyway (the 60 s claim timeout hands it back)
TASKS = 1000
FAILOVER_AT = 300  # completed tasks when the primary crashes
# the standby is promoted this long after the crash (a failover manager's or an operator's
# delay), and then every node uses it within RESUME_SEC: a node's reconnect attempts must not
# grow further apart the longer the outage lasts (psycopg_pool's backoff alone, doubling, had
# its next attempt anywhere up to ~30 s after the promotion)
OUTAGE_SEC = 40.0
RESUME_SEC = 5.0


@pytest.fixture
def servers() -> Iterator[tuple[PgServer, PgServer]]:
    """(primary, its synchronous streaming standby). The primary keeps what it acknowledged
    when it crashes, and with the standby synchronous so does the standby."""
    primary = start_server(crash_safe=True)
    try:
        standby = primary.start_standby(synchronous=True)
    except BaseException:
        primary.stop()
        raise
    yield primary, standby
    standby.stop()
    primary.stop()


def failover_url(primary: PgServer, standby: PgServer, database_url: str) -> str:
    """A multi-host URL of the database: the primary, then the standby; only a server that
    accepts writes will do (`target_session_attrs=read-write`)."""
    name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    return f"postgresql://postgres@{hosts}/{name}?target_session_attrs=read-write"


@pytest.fixture
def cluster(
    tmp_path: Path, servers: tuple[PgServer, PgServer]
) -> Iterator[tuple[list[ServedNode], str]]:
    primary, standby = servers
    url = failover_url(primary, standby, primary.create_database())
    with pg_nodes(tmp_path, CONFIG, url) as nodes:
        yield nodes, url


def sync_waiters(primary: PgServer) -> int:
    """Sessions whose commit waits for the synchronous standby."""
    with psycopg.connect(primary.url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        ).fetchone()
    return int(row[0]) if row else 0


def test_three_nodes_survive_a_failover_to_a_promoted_standby(
    cluster: tuple[list[ServedNode], str], servers: tuple[PgServer, PgServer], tmp_path: Path
) -> None:
    # Given three nodes on a primary with a synchronous standby, TASKS effect-logged tasks
    nodes, url = cluster
    primary, standby = servers
    for node in nodes:
        node.start()
    a, b, c = nodes
    log = tmp_path / "effects.jsonl"
    pipeline_id = effect_pipeline(a, log, TASKS, 0.05)
    wait_until(lambda: listeners(primary, url) == 3, 30, "every node to LISTEN on the primary")
    assert standby.in_recovery() and standby.replication_state(primary) == ("streaming", "sync")

    # When, in the middle of the run, the standby falls behind (its walreceiver frozen, then
    # killed: what it had not read is gone) and the primary crashes with commits the standby
    # never gets: synchronous, the primary has not acknowledged them (they wait for the
    # standby); asynchronous, it would have, and they would be lost
    wait_until(lambda: completed(a) >= FAILOVER_AT, 120, f"{FAILOVER_AT} tasks completed")
    receiver = standby.walreceiver_pid()
    os.kill(receiver, signal.SIGSTOP)
    try:
        wait_until(lambda: sync_waiters(primary) > 0, 30, "a commit waiting for the standby")
        primary.stop_server("immediate")
    finally:
        os.kill(receiver, signal.SIGKILL)  # the standby restarts (in recovery) without it
    crashed = time.monotonic()
    try:
        # Then, the standby not promoted yet (it refuses writes), every node says the store is
        # unavailable, and calls that need it answer 503
        expect_store_unavailable(nodes, b, pipeline_id)
        # ... and go on saying so until the standby is promoted
        while time.monotonic() < crashed + OUTAGE_SEC:
            for node in nodes:
                assert status(node)["health"] == "store_unavailable"
        assert standby.in_recovery()  # nothing wrote to it: it still is a read-only standby
    finally:
        # ... and once the standby is promoted
        standby.promote()

    # they find it by themselves (soon), their LISTEN connections too, and finish everything
    assert not standby.in_recovery()
    wait_until(
        lambda: all(status(node)["health"] == "ok" for node in nodes),
        RESUME_SEC,
        "every node to use the promoted standby",
    )
    wait_until(lambda: completed(a) == TASKS, 180, "all tasks completed")
    wait_until(lambda: listeners(standby, url) == 3, 30, "every node to LISTEN on the standby")
    for node in nodes:
        wait_until(lambda node=node: status(node)["health"] == "ok", 30, "the node healthy again")
        text = node.log.read_text()
        assert "store unavailable" in text and "store available again" in text
        assert "lost the notification connection" in text
        assert "Traceback" not in text, text[-4000:]
    with c.client() as client:
        pipeline = client.get(f"/api/v1/pipelines/{pipeline_id}").json()
    assert pipeline["status"] == "completed" and pipeline["done_tasks"] == TASKS
    # no task lost, and each task's effect ran to its end exactly once, by the attempt and node
    # that completed it (a commit acknowledged by the primary and missing on the standby would
    # show here: a claim lost runs a task twice, a completion lost leaves it unfinished)
    by_id = {t["id"]: t for t in pipeline["tasks"]}
    assert len(by_id) == TASKS
    expect_each_effect_once(by_id, log)
    # the work was shared, before and after the failover
    assert len({t["claimed_by"] for t in by_id.values()}) == 3
