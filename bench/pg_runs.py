"""The PostgreSQL store under load: no-op throughput of 1, 2 and 3 real node processes sharing
one database, and the claim cost at growing backlogs.

Each node is its own process (`python -m bench.pg_runs node ...`) running a real `Node` with
the PostgreSQL store, as `fredica serve` would, without HTTP. The parent creates the work
through a store of its own and reads the times back from the rows, stamped by the database's
clock: first create -> last `completed_at`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from bench import noop_plugin, pg_peer_claims
from bench.backlog import PostgresCloner
from bench.pgserver import PgServer
from bench.util import log, rnd, throughput_result
from fredica.domain.models import NewPipeline, NewTask
from fredica.engine.worker import EngineSettings
from fredica.node import compose
from fredica.node.service import NodeSettings
from fredica.store.postgres import PostgresTaskStore, _convert, _PgConn

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
    """`bench.claim_cost` on the PostgreSQL store: one fresh database per backlog size, then
    the hot path's per-statement costs and plans on the largest backlog (`hot_path`), then the
    same claim and completion of procrastinate and pgqueuer on the same server (`peers`)."""
    from bench import claim_cost as cc

    server = PgServer(durable=True, stats=True)
    server.start()
    try:
        urls: list[str] = []

        def open_store(size: int) -> tuple[PostgresTaskStore, PostgresCloner]:
            url = server.create_database()
            urls.append(url)
            return PostgresTaskStore(url, cc.NODE_ID), PostgresCloner(url)

        result = cc.run_on(open_store, sizes, claims)
        largest = max(sizes)
        # run_on measured a quarter of the backlog at most; a second batch of the same size
        # still finds ready tasks (half of the backlog is ready)
        batch = min(claims, max(1, largest // 4))
        log(f"  claim cost: pg_stat_statements and EXPLAIN on {largest} pending; {batch} claims")
        result["hot_path"] = asyncio.run(hot_path(urls[sizes.index(largest)], batch))
        result["hot_path"]["backlog"] = cc.label(largest)
        for url in urls:
            server.drop_database(url)  # the peers' backlogs need the room
        log(f"  claim cost of procrastinate and pgqueuer: sizes {sizes}")
        result["peers"] = pg_peer_claims.claim_costs(server, sizes, claims)
        return result
    finally:
        server.stop()


# --- the hot path's statements: pg_stat_statements and EXPLAIN (ANALYZE, BUFFERS) --------------
TOP_STATEMENTS = 12
_EXPLAINABLE = re.compile(r"^\s*(SELECT|UPDATE|INSERT|DELETE|WITH)\b", re.IGNORECASE)
# statements that read no table (the clock, the transaction id, an advisory lock)
_NO_TABLE = re.compile(r"^\s*SELECT\s+(pg_|EXTRACT\s*\(|clock_timestamp)", re.IGNORECASE)
_SAVEPOINT = "fredica_bench_explain"


def _one_line(sql: str) -> str:
    return " ".join(sql.split())


class _Explainer:
    """While installed, every table statement a store runs through `_PgConn` is first run as
    `EXPLAIN (ANALYZE, BUFFERS)` with its real parameters, on the same connection and in the
    same transaction, inside a savepoint rolled back at once (EXPLAIN ANALYZE executes the
    statement), then for real. The store's SQL is never copied into the bench: the plans are
    those of the statements it runs, on the rows they find at that moment."""

    def __init__(self) -> None:
        self.plans: dict[str, dict[str, Any]] = {}  # one-line SQL -> {"plan", "params"}
        self._saved: dict[str, Any] = {}

    def _explain(self, pg: _PgConn, sql: str, params: Sequence[Any]) -> None:
        label = _one_line(sql)
        if label in self.plans or not _EXPLAINABLE.match(sql) or _NO_TABLE.match(sql):
            return
        conn: psycopg.Connection[Any] = pg._conn  # the bench reads, and rolls back
        pg._read_answers()  # a write transaction's pipeline: its BEGIN answered
        in_tx = conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.execute(f"SAVEPOINT {_SAVEPOINT}" if in_tx else "BEGIN")
        try:
            query = "EXPLAIN (ANALYZE, BUFFERS) " + _convert(sql)
            with conn.cursor(row_factory=tuple_row) as cur:
                cur.execute(query, list(params))  # type: ignore[arg-type]
                plan = [str(row[0]) for row in cur.fetchall()]
        finally:
            conn.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}" if in_tx else "ROLLBACK")
            if in_tx:
                conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        self.plans[label] = {"plan": plan, "params": [repr(p)[:80] for p in params]}

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        execute, tuples, executemany = _PgConn.execute, _PgConn.tuples, _PgConn.executemany
        explainer = self

        def exec_(self: _PgConn, sql: str, params: Sequence[Any] = ()) -> Any:
            if params:
                explainer._explain(self, sql, params)
            return execute(self, sql, params)

        def tuples_(self: _PgConn, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            explainer._explain(self, sql, params)
            return tuples(self, sql, params)

        def many_(self: _PgConn, sql: str, params: Sequence[Sequence[Any]]) -> None:
            if params:
                explainer._explain(self, sql, params[0])
            executemany(self, sql, params)

        _PgConn.execute, _PgConn.tuples, _PgConn.executemany = exec_, tuples_, many_  # type: ignore[method-assign]
        try:
            yield
        finally:
            _PgConn.execute, _PgConn.tuples, _PgConn.executemany = execute, tuples, executemany  # type: ignore[method-assign]


def _top_statements(url: str) -> list[dict[str, Any]]:
    """The statements run on `url`'s database since the last reset, by total execution time."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls, total_exec_time, mean_exec_time, rows, shared_blks_hit,"
            " shared_blks_read, shared_blks_dirtied, wal_bytes FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND query NOT LIKE '%%pg_stat_statements%%'"
            " ORDER BY total_exec_time DESC LIMIT %s",
            (TOP_STATEMENTS,),
        ).fetchall()
    return [
        {
            "query": _one_line(str(r[0])),
            "calls": int(r[1]),
            "total_ms": rnd(float(r[2]), 3),
            "mean_ms": rnd(float(r[3]), 4),
            "rows": int(r[4]),
            "shared_blks_hit": int(r[5]),
            "shared_blks_read": int(r[6]),
            "shared_blks_dirtied": int(r[7]),
            "wal_bytes": int(r[8]),
        }
        for r in rows
    ]


def _is_claim(sql: str) -> bool:
    return "SKIP LOCKED" in sql.upper()


def _is_completion(sql: str) -> bool:
    text = sql.upper()
    return "UPDATE TASK SET STATUS = 'COMPLETED'" in text


async def hot_path(url: str, batch: int) -> dict[str, Any]:
    """On the database `url` (a backlog `claim_cost` built and measured): pg_stat_statements
    reset, `batch` claims + completions as `bench.claim_cost.measure` runs them, the top
    statements read back; then one more claim + completion under `_Explainer`, whose plans
    are EXPLAIN (ANALYZE, BUFFERS) of every table statement they ran."""
    from bench import claim_cost as cc

    store = PostgresTaskStore(url, cc.NODE_ID)
    store.set_hooks(cc._registry().spawn_hook)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
        timing = await cc.measure(store, batch)
        top = _top_statements(url)
        explainer = _Explainer()
        with explainer.installed():
            await cc.measure(store, 1)
    finally:
        await store.close()
    plans = explainer.plans
    seq_scans = [
        f"{sql[:120]}: {line.strip()}"
        for sql, entry in plans.items()
        for line in entry["plan"]
        if "Seq Scan on task" in line
    ]
    return {
        "batch": timing,
        "statements": top,
        "plans": plans,
        "claim_sql": next((sql for sql in plans if _is_claim(sql)), None),
        "completion_sql": next((sql for sql in plans if _is_completion(sql)), None),
        "seq_scans": seq_scans,
    }


def main(argv: list[str]) -> None:
    if argv[:1] == ["node"]:
        url, node_id, data_dir, workers, ready = argv[1:6]
        asyncio.run(_serve(url, node_id, Path(data_dir), int(workers), Path(ready)))
        return
    log("usage: python -m bench.pg_runs node URL NODE_ID DATA_DIR WORKERS READY_FILE")
    raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
