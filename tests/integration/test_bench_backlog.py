"""The benchmark backlog (bench/backlog.py): the bulk copies of a template pipeline are the rows
the store API writes for the same pipelines, on SQLite and on PostgreSQL.

Each side builds three pipelines of the claim benchmark's shape (a gate running on another
node, 50 ready tasks, 50 tasks blocked on the gate): once through the API for all three, once
as one template plus two bulk copies. The rows are compared column by column, with ids replaced
by their place (pipeline by material, task by insertion order) and times by whether they are
set; the change sequence is the one column that differs by design (copies carry the template's)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from bench import backlog
from bench.pgserver import PgServer

from fredica.store.base import ClaimFilter, TaskStore
from fredica.store.postgres import PostgresTaskStore
from fredica.store.sqlite import SQLiteTaskStore

NODE = "bench-node"
PIPELINES = 3
Query = Callable[[str], tuple[list[str], list[tuple[Any, ...]]]]


async def build_through_api(store: TaskStore) -> None:
    for index in range(PIPELINES):
        await backlog.create_pipeline(store, index)
    await backlog.claim_gates(store, PIPELINES)


def sqlite_query(path: Path) -> Query:
    def query(sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        conn = sqlite3.connect(str(path))
        try:
            cur = conn.execute(sql.replace("{order}", "rowid"))
            return [d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()]
        finally:
            conn.close()

    return query


def pg_query(url: str) -> Query:
    def query(sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        with psycopg.connect(url) as conn:
            cur = conn.execute(sql.replace("{order}", "ord"))  # type: ignore[arg-type]
            assert cur.description is not None
            return [d.name for d in cur.description], [tuple(r) for r in cur.fetchall()]

    return query


def snapshot(query: Query) -> dict[str, Any]:
    """Every backlog row, with ids as places and times as set / unset."""
    pcols, prows = query("SELECT * FROM pipeline_instance")
    pipelines = [dict(zip(pcols, r, strict=True)) for r in prows]
    label = {p["id"]: f"P{p['material_id'].rsplit(':', 1)[1]}" for p in pipelines}
    tcols, trows = query("SELECT * FROM task ORDER BY {order}")
    tasks = [dict(zip(tcols, r, strict=True)) for r in trows]
    seen: dict[str, int] = {}
    for task in tasks:
        owner = label[task["pipeline_id"]]
        label[task["id"]] = f"{owner}.T{seen.get(owner, 0)}"
        seen[owner] = seen.get(owner, 0) + 1
    ord_of = {t["id"]: t.get("ord") for t in tasks}
    ecols, erows = query("SELECT * FROM task_event ORDER BY id")
    events: dict[str, list[dict[str, Any]]] = {}
    for e in (dict(zip(ecols, r, strict=True)) for r in erows):
        # an event points at its task's insertion order (numbered per database)
        e["task_ord"] = e["task_ord"] == ord_of[e["task_id"]]
        events.setdefault(label[e["task_id"]], []).append(normal(e, label))
    _, drows = query("SELECT parent_id, task_id FROM task_dep")
    return {
        "pipelines": sorted((normal(p, label) for p in pipelines), key=lambda p: p["id"]),
        "tasks": sorted((normal(t, label) for t in tasks), key=lambda t: t["id"]),
        "events": events,
        "deps": sorted((label[a], label[b]) for a, b in drows),
    }


def normal(row: dict[str, Any], label: dict[str, str]) -> dict[str, Any]:
    out = {}
    for name, value in row.items():
        if name in ("change_seq", "ord") or (name == "id" and isinstance(value, int)):
            continue  # by design / numbered by the database
        if name.endswith("_at") or name == "ready_since":
            out[name] = value is not None
        elif name == "depends_on":
            out[name] = [label[p] for p in json.loads(value)]
        elif isinstance(value, str) and value in label:
            out[name] = label[value]
        else:
            out[name] = value
    return out


async def check_copies(
    open_store: Callable[[str], tuple[TaskStore, backlog.Cloner, Query]],
) -> None:
    # Given three pipelines through the API, and a template plus two bulk copies
    api_store, _, api_query = open_store("api")
    try:
        await build_through_api(api_store)
    finally:
        await api_store.close()
    bulk_store, cloner, bulk_query = open_store("bulk")
    try:
        await backlog.build(bulk_store, cloner, PIPELINES * backlog.PIPELINE_PENDING)
        bulk = snapshot(bulk_query)
        # the copies are claimable like the API's rows: the oldest ready task comes first
        [task] = await bulk_store.claim(ClaimFilter(limit=1, types=frozenset({"BENCH_NOOP"})), NODE)
        pipeline = await bulk_store.get_pipeline(task.pipeline_id or "")
        counts = await bulk_store.count_by_status()
    finally:
        await bulk_store.close()
    api = snapshot(api_query)

    # Then the rows are the same, place by place
    assert bulk == api
    assert len(api["tasks"]) == PIPELINES * 101
    assert len(api["deps"]) == PIPELINES * 50
    # 101 created + the gate claimed and started (one event)
    assert sum(len(v) for v in api["events"].values()) == PIPELINES * 102
    assert {(p["n_pending"], p["n_running"], p["total_tasks"]) for p in api["pipelines"]} == {
        (100, 1, 101)
    }
    # the copies are older than the template, in creation order (material 1, then 2)
    _, rows = bulk_query("SELECT material_id FROM pipeline_instance ORDER BY created_at")
    assert [r[0] for r in rows] == ["bench-backlog:1", "bench-backlog:2", "bench-backlog:0"]
    assert pipeline.material_id == "bench-backlog:1"
    assert (counts["pending"], counts["claimed"], counts["running"]) == (
        PIPELINES * 100 - 1,
        1,
        PIPELINES,
    )


async def test_sqlite_copies_are_the_rows_the_api_writes(tmp_path: Path) -> None:
    def open_store(name: str) -> tuple[TaskStore, backlog.Cloner, Query]:
        path = tmp_path / name / "fredica.db"
        return SQLiteTaskStore(path, NODE), backlog.SQLiteCloner(path), sqlite_query(path)

    await check_copies(open_store)


async def test_postgres_copies_are_the_rows_the_api_writes(pg_server: PgServer) -> None:
    def open_store(name: str) -> tuple[TaskStore, backlog.Cloner, Query]:
        url = pg_server.create_database()
        return PostgresTaskStore(url, NODE), backlog.PostgresCloner(url), pg_query(url)

    await check_copies(open_store)


def test_a_template_with_idempotency_keys_is_refused() -> None:
    task = backlog.Table("task", ["id", "idempotency_key"], [("a", "key-1")])
    with pytest.raises(ValueError, match="idempotency"):
        backlog._check([task])
