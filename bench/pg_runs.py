"""The PostgreSQL store under load: no-op throughput of 1, 2 and 3 real node processes sharing
one database, and the claim cost at growing backlogs.

Each node is its own process (`python -m bench.pg_runs node ...`) running a real `Node` with
the PostgreSQL store, as `fredica serve` would, without HTTP. The parent creates the work
through a store of its own and reads the times back from the rows, stamped by the database's
clock: first create -> last `completed_at`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import noop_plugin
from bench.backlog import PostgresCloner
from bench.pgserver import PgServer
from bench.util import log, throughput_result
from fredica.domain.models import NewPipeline, NewTask
from fredica.engine.worker import EngineSettings
from fredica.node import compose
from fredica.node.service import NodeSettings
from fredica.store.postgres import PostgresTaskStore

PLUGIN = "bench.noop_plugin"
READY_TIMEOUT = 60.0  # seconds for a node process to start


def _node_settings(url: str, node_id: str, data_dir: Path, max_workers: int) -> NodeSettings:
    engine = EngineSettings(node_id=node_id, data_dir=data_dir, max_workers=max_workers)
    return NodeSettings(
        node_id=node_id, data_dir=data_dir, engine=engine, plugins=(PLUGIN,), store_url=url
    )


async def _serve(url: str, node_id: str, data_dir: Path, max_workers: int, ready: Path) -> None:
    node = compose.build_node(_node_settings(url, node_id, data_dir, max_workers))
    await node.start()
    ready.write_text("ready")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await node.stop(grace=5)


def _start_nodes(
    url: str, work: Path, count: int, max_workers: int
) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(count):
        ready = work / f"node{i}.ready"
        argv = [
            sys.executable,
            "-m",
            "bench.pg_runs",
            "node",
            url,
            f"pg-node-{i}",
            str(work / f"node{i}"),
            str(max_workers),
            str(ready),
        ]
        procs.append(subprocess.Popen(argv, env=dict(os.environ)))
    deadline = time.monotonic() + READY_TIMEOUT
    while not all((work / f"node{i}.ready").exists() for i in range(count)):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            _stop_nodes(procs)
            raise RuntimeError("a PostgreSQL bench node did not start")
        time.sleep(0.05)
    return procs


def _stop_nodes(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


async def _noop(url: str, n_tasks: int, pipeline_size: int, deadline_s: float) -> dict[str, Any]:
    store = PostgresTaskStore(url, "bench-creator")
    try:
        t0 = await store.now()
        for start in range(0, n_tasks, pipeline_size):
            count = min(pipeline_size, n_tasks - start)
            tasks = tuple(NewTask(type=noop_plugin.NOOP) for _ in range(count))
            await store.create_pipeline(NewPipeline("custom", f"bench-pg:{start}", tasks))
        t_created = await store.now()
        finished = False
        while await store.now() < t0 + deadline_s:
            counts = await store.count_by_status()
            if counts["completed"] >= n_tasks:
                finished = True
                break
            await asyncio.sleep(0.05)
    finally:
        await store.close()
    # the stored rows, read directly (the contract has no reason to aggregate them)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT COUNT(*), MAX(completed_at) FROM task WHERE status = 'completed' AND type = %s",
            (noop_plugin.NOOP,),
        ).fetchone()
    completed, last = (int(row[0]), row[1]) if row else (0, None)
    return throughput_result(n_tasks, completed, finished, t0, t_created, last)


def noop_on(
    server: PgServer,
    work: Path,
    nodes: int,
    n_tasks: int,
    pipeline_size: int,
    max_workers: int,
    deadline_s: float,
) -> dict[str, Any]:
    """`nodes` node processes on a fresh database of a running durable PostgreSQL server (the
    rounds of the harness share one server); the database is dropped after the run."""
    work.mkdir(parents=True, exist_ok=True)
    url = server.create_database()
    try:
        # migrate before the nodes race to it
        asyncio.run(PostgresTaskStore(url, "bench-migrate").close())
        procs = _start_nodes(url, work, nodes, max_workers)
        try:
            result = asyncio.run(_noop(url, n_tasks, pipeline_size, deadline_s))
        finally:
            _stop_nodes(procs)
    finally:
        server.drop_database(url)
    result["config"] = (
        f"{nodes} node process(es), max_workers {max_workers} each, PostgreSQL store "
        "(Debian's server on loopback, fsync on, synchronous_commit on), custom pipelines of "
        f"{pipeline_size} independent tasks created through a store while the nodes run"
    )
    return result


def claim_cost(work: Path, sizes: list[int], claims: int) -> dict[str, Any]:
    """`bench.claim_cost` on the PostgreSQL store: one fresh database per backlog size."""
    from bench import claim_cost as cc

    server = PgServer(durable=True)
    server.start()
    try:

        def open_store(size: int) -> tuple[PostgresTaskStore, PostgresCloner]:
            url = server.create_database()
            return PostgresTaskStore(url, cc.NODE_ID), PostgresCloner(url)

        return cc.run_on(open_store, sizes, claims)
    finally:
        server.stop()


def main(argv: list[str]) -> None:
    if argv[:1] == ["node"]:
        url, node_id, data_dir, workers, ready = argv[1:6]
        asyncio.run(_serve(url, node_id, Path(data_dir), int(workers), Path(ready)))
        return
    log("usage: python -m bench.pg_runs node URL NODE_ID DATA_DIR WORKERS READY_FILE")
    raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
