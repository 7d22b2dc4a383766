"""Three real `fredica serve` processes on one PostgreSQL database through a transaction-mode
PgBouncer (Debian's package) that gives them fewer server connections than they hold: they
migrate the schema together through it, hear each other's commits on their direct `LISTEN`
connections (`store.listen_url`), run with prepared statements off
(`store.prepared_statements: false`, PgBouncer 1.18 loses them between transactions), and run
every task's effect exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from bench.pgserver import PGBOUNCER_SETUP, PgBouncer, PgServer, pgbouncer_binary

from tests.cluster.support import effect_pipeline, effects, pg_nodes
from tests.cluster.test_pg_outage import expect_each_effect_once
from tests.e2e.conftest import ServedNode, wait_until

pytestmark = pytest.mark.slow

# idle_poll_interval_sec 30: an idle node finds new work within the test's few seconds only
# by hearing the commit that created it
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
  idle_poll_interval_sec: 30
plugins:
  - fredica_testplugin
store:
  url: "{url}"
  listen_url: "{listen}"
  prepared_statements: false
"""

TASKS = 600
SERVER_CONNECTIONS = 3  # PgBouncer's default_pool_size: 3 nodes share 3 server connections
WAKE_SEC = 5.0  # every idle node starts work this soon after it was created elsewhere


@pytest.fixture
def bouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    if pgbouncer_binary() is None:
        pytest.fail(f"PgBouncer is not installed: {PGBOUNCER_SETUP}")
    bouncer = PgBouncer(pg_server, pool_size=SERVER_CONNECTIONS)
    bouncer.start()
    yield bouncer
    bouncer.stop()


def status(node: ServedNode) -> dict[str, Any]:
    with httpx.Client(base_url=node.url, timeout=10, trust_env=False) as client:
        return dict(client.get("/api/v1/status").json())


def test_three_nodes_through_a_transaction_mode_pgbouncer_run_each_task_once(
    tmp_path: Path, pg_server: PgServer, bouncer: PgBouncer
) -> None:
    # Given three nodes whose pools go through PgBouncer, started together on a new database
    direct = pg_server.create_database()
    dbname = str(psycopg.conninfo.conninfo_to_dict(direct)["dbname"])
    config = CONFIG.replace("{listen}", direct)
    with pg_nodes(tmp_path, config, bouncer.via(direct)) as nodes:
        for node in nodes:
            node.start()
        a = nodes[0]
        assert all(status(n)["health"] == "ok" for n in nodes)
        with psycopg.connect(direct) as conn:  # migrated once, through the pooler
            versions = conn.execute("SELECT count(*), count(DISTINCT version) FROM schema_version")
            total, distinct = versions.fetchone() or (0, 0)
        assert total == distinct > 0

        # When TASKS effect-logged tasks are created on A while every node is idle
        time.sleep(1.0)  # past the look each listener takes when it connects
        log = tmp_path / "effects.jsonl"
        created = time.time()
        pipeline_id = effect_pipeline(a, log, TASKS, 0.02)

        # ... the nodes' connections outnumber the server connections PgBouncer lends them
        peak_clients = peak_servers = 0

        def finished() -> bool:
            nonlocal peak_clients, peak_servers
            clients, servers = bouncer.connections(dbname)
            peak_clients, peak_servers = max(peak_clients, clients), max(peak_servers, servers)
            return bool(status(a)["task_counts"]["completed"] == TASKS)

        wait_until(finished, 180, "all tasks completed")

        # Then every node woke at once on the commit (heard on its direct LISTEN connection)
        entries = effects(log)
        first = {}
        for e in entries:
            first.setdefault(e["node"], e["t"])
        assert len(first) == 3, first
        late = {node: round(t - created, 2) for node, t in first.items() if t - created > WAKE_SEC}
        assert late == {}, late
        assert 0 < peak_servers <= SERVER_CONNECTIONS < peak_clients, (peak_clients, peak_servers)

        # ... and each task's effect ran exactly once, by the node that completed it
        with a.client() as client:
            pipeline = client.get(f"/api/v1/pipelines/{pipeline_id}").json()
        assert pipeline["status"] == "completed" and pipeline["done_tasks"] == TASKS
        expect_each_effect_once({t["id"]: t for t in pipeline["tasks"]}, log)
        for node in nodes:
            text = node.log.read_text()
            assert "Traceback" not in text, text[-4000:]
            assert "prepared statement" not in text, text[-4000:]
