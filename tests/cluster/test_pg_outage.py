"""Three real `fredica serve` processes on one PostgreSQL survive their database going away:
a fast restart, a crash restart (`-m immediate`), every session ended with
`pg_terminate_backend`, and a server that refuses connections for a while. Meanwhile each node
says so in its log and its status, and an API call that needs the store answers 503
`store_unavailable` (never a 5xx traceback); afterwards the nodes go on by themselves, every
task completes and each task's effect happened exactly once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from bench.pgserver import PgServer

from tests.cluster.support import effect_pipeline, effects, pg_nodes
from tests.e2e.conftest import ServedNode, wait_until
from tests.pgserver import start_server

pytestmark = pytest.mark.slow

CONFIG = """\
node:
  max_workers: 3
  shutdown_grace_sec: 2
cluster:
  heartbeat_interval_sec: 0.2
  stale_after_sec: 5
  reclaim_after_sec: 20
scheduling:
  poll_interval_sec: 0.2
  idle_poll_interval_sec: 0.5
plugins:
  - fredica_testplugin
store:
  url: "{url}"
"""

TASKS = 400


@pytest.fixture
def server() -> Iterator[PgServer]:
    """A server of this test's own: it is restarted and crashed under the nodes (a crash keeps
    what it acknowledged, as a production server does)."""
    pg = start_server(crash_safe=True)
    yield pg
    pg.stop()


@pytest.fixture
def cluster(tmp_path: Path, server: PgServer) -> Iterator[list[ServedNode]]:
    with pg_nodes(tmp_path, CONFIG, server.create_database()) as nodes:
        yield nodes


def status(node: ServedNode) -> dict[str, Any]:
    with httpx.Client(base_url=node.url, timeout=15, trust_env=False) as client:
        response = client.get("/api/v1/status")
        assert response.status_code == 200, response.text  # it answers while the store is down
        return dict(response.json())


def completed(node: ServedNode) -> int:
    counts = status(node)["task_counts"]
    return -1 if counts is None else int(counts["completed"])


def listeners(server: PgServer, url: str) -> int:
    """Sessions on `server` whose last statement was the nodes' `LISTEN fredica`."""
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server.url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query = %s",
            (name, "LISTEN fredica"),
        ).fetchone()
    return int(row[0]) if row else 0


def expect_store_unavailable(nodes: list[ServedNode], asked: ServedNode, pipeline_id: str) -> None:
    """Every node reports the store unavailable; `asked` answers a call that needs the store
    with 503 `store_unavailable` (a reason, no traceback), and so does its /healthz."""
    for node in nodes:
        wait_until(
            lambda node=node: status(node)["health"] == "store_unavailable",
            30,
            "the node to report the store unavailable",
        )
    down = status(asked)
    assert down["task_counts"] is None and down["store_error"], down
    # ... and why: the last connection attempt's own error, not only that the pool waited
    wait_until(
        lambda: "the last connection attempt: connection failed" in status(asked)["store_error"],
        30,
        "the node to say why the store cannot be reached",
    )
    with httpx.Client(base_url=asked.url, timeout=15, trust_env=False) as client:
        r = client.get(f"/api/v1/pipelines/{pipeline_id}")
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "store_unavailable", r.text
        assert "database cannot be reached" in r.json()["error"]
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["state"] == "store_unavailable"


def test_three_nodes_survive_restarts_killed_sessions_and_a_refusing_server(
    cluster: list[ServedNode], server: PgServer, tmp_path: Path
) -> None:
    # Given three nodes on one database, and TASKS effect-logged tasks created on A
    for node in cluster:
        node.start()
    a, b, c = cluster
    log = tmp_path / "effects.jsonl"
    pipeline_id = effect_pipeline(a, log, TASKS, 0.05)
    database = str(psycopg.conninfo.conninfo_to_dict(store_url(a))["dbname"])

    def past(n: int) -> None:
        wait_until(lambda: completed(a) >= n, 120, f"{n} tasks completed")

    # When the server restarts (fast), crashes and restarts, and ends every session
    past(40)
    server.stop_server("fast")
    server.start_server()
    past(120)
    server.stop_server("immediate")
    server.start_server()
    past(200)
    # every node back on the restarted server (its LISTEN connection reconnects within ~1 s)
    wait_until(lambda: listeners(server, store_url(a)) >= 3, 30, "every node listening again")
    assert server.terminate_backends(database) >= 3  # every node had sessions

    # ... and then refuses connections for a while (stopped: its port is closed)
    past(260)
    server.stop_server("fast")
    try:
        # Then every node says the store is unavailable, and calls that need it answer 503
        expect_store_unavailable(cluster, b, pipeline_id)
    finally:
        server.start_server()

    # ... and once it is back they finish everything by themselves
    wait_until(lambda: completed(a) == TASKS, 180, "all tasks completed")
    for node in cluster:
        wait_until(lambda node=node: status(node)["health"] == "ok", 30, "the node healthy again")
        text = node.log.read_text()
        assert "store unavailable" in text and "store available again" in text
        assert "Traceback" not in text, text[-4000:]
    with c.client() as client:
        pipeline = client.get(f"/api/v1/pipelines/{pipeline_id}").json()
    assert pipeline["status"] == "completed" and pipeline["done_tasks"] == TASKS
    # each task's effect ran to its end exactly once, by the attempt and node that completed it
    by_id = {t["id"]: t for t in pipeline["tasks"]}
    expect_each_effect_once(by_id, log)
    # the work was shared: every node completed some
    assert len({t["claimed_by"] for t in by_id.values()}) == 3


def store_url(node: ServedNode) -> str:
    """The `store.url` of the node's worker.yaml."""
    return node.config.read_text().split('url: "', 1)[1].split('"', 1)[0]


def expect_each_effect_once(by_id: dict[str, dict[str, Any]], log: Path) -> None:
    """Each task's effect started and ended exactly once (never started twice, not even once
    cut short), the end by the attempt and node the database recorded as completing it."""
    entries = effects(log)
    for phase in ("start", "end"):
        runs = Counter(e["task"] for e in entries if e["phase"] == phase)
        assert set(runs) == set(by_id), phase
        twice = [t for t, n in runs.items() if n != 1]
        assert twice == [], [_history(entries, t) for t in twice[:5]]
    for e in entries:
        if e["phase"] == "end":
            task = by_id[e["task"]]
            assert (e["attempt"], e["node"]) == (task["attempt"], task["claimed_by"]), e


def _history(entries: list[dict[str, Any]], task_id: str) -> list[tuple[Any, ...]]:
    """A task's effect entries (phase, attempt, node, seconds since the first entry)."""
    t0 = entries[0]["t"]
    return [
        (e["phase"], e["attempt"], e["node"], round(e["t"] - t0, 2))
        for e in entries
        if e["task"] == task_id
    ]


def test_a_store_opened_before_its_database_is_up_waits_for_it(server: PgServer) -> None:
    """A node and its database started together: the store waits (up to its connect timeout)
    for a server that answers only seconds later, longer than one round of the pool's
    reconnect attempts, instead of failing its start."""
    import threading
    import time

    from fredica.store.postgres import CONNECT_TIMEOUT_SEC, RECONNECT_ROUND_SEC, PostgresTaskStore

    url = server.create_database()
    server.stop_server()
    later = RECONNECT_ROUND_SEC + 2.0
    assert later < CONNECT_TIMEOUT_SEC - 2.0
    starter = threading.Timer(later, server.start_server)
    began = time.monotonic()
    starter.start()
    try:
        store = PostgresTaskStore(url, "node-late")
    finally:
        starter.join()
    try:
        assert time.monotonic() - began >= later
        with psycopg.connect(url) as conn:  # migrated: the store's tables are there
            row = conn.execute("SELECT to_regclass('task') IS NOT NULL").fetchone()
        assert row is not None and row[0]
    finally:
        import asyncio

        asyncio.run(store.close())
