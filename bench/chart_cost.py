"""Chart cost at a million task events: does `GET /api/v1/stats/timeseries` stay fast?

    python -m bench.chart_cost [--events 1000000] [--rounds 3] [--samples 5]

A real SQLite data dir is filled by bulk SQL into the migrated schema: the task backlog of
`list_cost` (pipelines of 4-16 tasks created over 30 days, the older 70% finished, the newest
30% waiting), each task with the events the store writes for it (`created`; `claimed` and
`running` when it was claimed; its terminal status when it ended), until there are `events`
events. Then the charts' read is timed for the windows the charts page offers (1h, 24h, 7d):
`query_ms` is the store's `timeline_rows` (the read the endpoint runs), `endpoint_ms` the whole
use case the endpoint answers with (`Stats.timeseries`: the read and the series arithmetic),
each the median of `samples` calls after a warm-up. Rounds alternate without and with the
chart indexes (`schema.CHART_INDEXES`, dropped and created again on the same file, then
`ANALYZE`), so drift of the machine favours neither; each figure is the median over its rounds.
`plans` holds the `EXPLAIN QUERY PLAN` of each statement of the read, with and without.
Last, with the indexes, a real `fredica serve` on loopback serves the data dir and
`http_ms` is the median time of `GET /api/v1/stats/timeseries?window=...` (what the charts
page asks, answered over HTTP); the target (<= 200 ms at 1M events) is judged on it.
`python -m bench --only charts` runs it inside the bench report (the 1M default; the smoke
test a small store); `python -m bench.chart_cost` on its own writes
`bench/results/chart_cost.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import list_cost
from bench.util import log, rnd, served
from fredica.domain import timeseries
from fredica.node.service import DB_FILENAME
from fredica.node.stats import EVENT_LIMIT, Stats
from fredica.store.schema import CHART_INDEXES
from fredica.store.sqlite import SQLiteTaskStore, connect, migrate

WINDOWS = ("1h", "24h", "7d")
RESULTS = Path(__file__).parent / "results" / "chart_cost.json"
TARGET_MS = 200.0

_EVENTS_SQL = """
INSERT INTO task_event (task_id, task_ord, node_id, event_type, message, occurred_at)
SELECT id, ord, owner_id, kind, NULL, at FROM (
    SELECT id, ord, owner_id, 'created' AS kind, created_at AS at FROM task
    UNION ALL SELECT id, ord, owner_id, 'claimed', claimed_at FROM task
        WHERE claimed_at IS NOT NULL
    UNION ALL SELECT id, ord, owner_id, 'running', started_at FROM task
        WHERE started_at IS NOT NULL
    UNION ALL SELECT id, ord, owner_id, status, completed_at FROM task
        WHERE completed_at IS NOT NULL
) ORDER BY at
"""


def build(data_dir: Path, events: int) -> dict[str, Any]:
    """`list_cost`'s backlog, sized to give `events` events, and the events themselves."""
    # about 3 events a task: 4 for a finished one, 1 for a waiting one
    backlog = int(events / 3.0)
    info = list_cost.build(data_dir, backlog)
    path = data_dir / DB_FILENAME
    t0 = time.perf_counter()
    conn = connect(path)
    try:
        migrate(conn)
        conn.execute("PRAGMA cache_size = -1000000")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE task SET ord = rowid WHERE ord IS NULL")  # as the store numbers them
        conn.execute("DELETE FROM task_event")
        conn.execute(_EVENTS_SQL)
        extra = conn.execute("SELECT COUNT(*) FROM task_event").fetchone()[0] - events
        if extra > 0:  # the oldest events past the target
            conn.execute(
                "DELETE FROM task_event WHERE id IN "
                "(SELECT id FROM task_event ORDER BY occurred_at, id LIMIT ?)",
                (extra,),
            )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        n_events = conn.execute("SELECT COUNT(*) FROM task_event").fetchone()[0]
    finally:
        conn.close()
    return {**info, "events": n_events, "events_build_s": rnd(time.perf_counter() - t0, 1)}


def set_indexes(path: Path, present: bool) -> float:
    """Drop or create the chart indexes; returns the seconds it took."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for name, create in CHART_INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
            if present:
                conn.execute(create)
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - t0


async def _plans(store: SQLiteTaskStore, window: float) -> list[str]:
    """`EXPLAIN QUERY PLAN` of each statement `timeline_rows` runs (captured from the store's
    own connection: the bench keeps no copy of the SQL)."""
    conn: sqlite3.Connection = store._conn  # watched, never written through
    seen: list[str] = []
    end = await store.now()
    conn.set_trace_callback(seen.append)
    try:
        await store.timeline_rows(end - window, end, EVENT_LIMIT)
    finally:
        conn.set_trace_callback(None)
    plans = []
    for sql in seen:
        if not sql.lstrip().upper().startswith("SELECT"):
            continue
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        plans.append(" | ".join(str(r[3]) for r in rows))
    return plans


async def _measure(path: Path, samples: int) -> dict[str, Any]:
    store = SQLiteTaskStore(path, list_cost.NODE_ID)
    stats = Stats(store)
    out: dict[str, Any] = {}
    try:
        for name in WINDOWS:
            window = timeseries.parse_window(name)
            buckets = timeseries.bucket_count(window, None)
            end = await store.now()
            read = await store.timeline_rows(end - window, end, EVENT_LIMIT)  # warm-up
            query, endpoint = [], []
            for _ in range(samples):
                end = await store.now()
                t0 = time.perf_counter()
                await store.timeline_rows(end - window, end, EVENT_LIMIT)
                query.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                answer = await stats.timeseries(window, buckets)
                endpoint.append((time.perf_counter() - t0) * 1000)
            out[name] = {
                "query_ms": statistics.median(query),
                "endpoint_ms": statistics.median(endpoint),
                "events_in_window": len(read.events),
                "truncated": answer["truncated"],
                "plans": await _plans(store, window),
            }
    finally:
        await store.close()
    return out


def measure_http(data_dir: Path, samples: int) -> dict[str, float]:
    """Median ms of the charts' request for each window, over HTTP from a real node."""
    out: dict[str, float] = {}
    with (
        served(data_dir, list_cost.CONFIG, start_timeout=list_cost.START_TIMEOUT) as url,
        httpx.Client(base_url=url, timeout=list_cost.REQUEST_TIMEOUT, trust_env=False) as client,
    ):
        for w in WINDOWS:
            ms = list_cost.timed_get(client, "/api/v1/stats/timeseries", {"window": w}, samples)
            out[w] = round(ms, 1)
    return out


def run(
    work_dir: Path, events: int = 1_000_000, rounds: int = 3, samples: int = 5
) -> dict[str, Any]:
    data_dir = work_dir / "data"
    log(f"chart: building {events:,} events")
    info = build(data_dir, events)
    path = data_dir / DB_FILENAME
    log(f"chart: {info['tasks']:,} tasks, {info['events']:,} events")
    per_round: list[dict[str, Any]] = []
    order = [bool(i % 2) for i in range(2 * rounds)]  # without, with, without, with ...
    for i, present in enumerate(order):
        index_s = set_indexes(path, present)
        measured = asyncio.run(_measure(path, samples))
        per_round.append({"round": i + 1, "indexed": present, "index_s": rnd(index_s, 2),
                          **measured})  # fmt: skip
        log(
            f"chart: round {i + 1} {'with' if present else 'without'} index: "
            + ", ".join(f"{w} {measured[w]['endpoint_ms']:.1f} ms" for w in WINDOWS)
        )

    def median_of(present: bool, window: str, key: str) -> float | None:
        return rnd(
            statistics.median(r[window][key] for r in per_round if r["indexed"] is present), 1
        )

    summary = {
        window: {
            f"{key}_{label}": median_of(present, window, key)
            for key in ("query_ms", "endpoint_ms")
            for label, present in (("without", False), ("with", True))
        }
        | {"events_in_window": per_round[-1][window]["events_in_window"]}
        for window in WINDOWS
    }
    set_indexes(path, True)  # as a node's migration leaves them
    http = measure_http(data_dir, samples)
    log("chart: over HTTP " + ", ".join(f"{w} {http[w]:.1f} ms" for w in WINDOWS))
    for window in WINDOWS:
        summary[window]["http_ms"] = http[window]
    met = all(http[w] <= TARGET_MS for w in WINDOWS)
    plans = {
        label: {w: next(r for r in per_round if r["indexed"] is present)[w]["plans"]
                for w in WINDOWS}
        for label, present in (("without", False), ("with", True))
    }  # fmt: skip
    for r in per_round:
        for w in WINDOWS:
            r[w].pop("plans")
    return {
        "backlog": info,
        "indexes": [create for _, create in CHART_INDEXES],
        "target_ms": TARGET_MS,
        "config": (
            f"a SQLite data dir of {info['events']:,} task events ({info['tasks']:,} tasks) built "
            f"by bulk SQL; rounds alternate without and with the chart indexes; http_ms: fredica "
            f"serve on loopback, median of {samples} requests after one warm-up"
        ),
        "target_met": met,
        "summary": summary,
        "rounds": per_round,
        "plans": plans,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chart_cost", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds without and with")
    parser.add_argument("--samples", type=int, default=5, help="calls per window and round")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fredica-chart-") as work:
        result = run(Path(work), args.events, args.rounds, args.samples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
