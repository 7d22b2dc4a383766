"""A large pending backlog, built fast and with the rows the store itself writes.

One template pipeline goes through the store API (`create_pipeline`, then another node claims
its gate task), so every row, default and counter in it is the store's own. The template is then
copied with bulk inserts on a second connection: every column of every row of the pipeline, its
tasks, their dependency edges and their events, with fresh UUIDs, a material id of its own (as
the API requires for an active pipeline) and its times shifted so the copies are older than the
template and in creation order. Nothing about the row layout is copied into this module: a new
column or a changed default is copied as the store wrote it in the template. The one value that
differs from rows made one pipeline at a time is the change sequence: the copies carry the
template's, as if the template's transactions had written them all (claims do not read it).

A million pending tasks take about a minute this way on two cores, on SQLite and on
PostgreSQL; through the API, at the rates the 100k backlog was built with (~6,400 and ~2,000
tasks/s), they would take about 3 and 8 minutes. The benchmarks measure a backlog, not how long
it took to make.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench import noop_plugin
from fredica.domain.models import NewPipeline, NewTask
from fredica.store.base import ClaimFilter, TaskStore

OTHER_NODE = "bench-other-node"
GATE = "BENCH_GATE"
HALF = 50  # ready tasks per pipeline; as many again are blocked on the gate
PIPELINE_PENDING = 2 * HALF
MATERIAL = "bench-backlog:{}"
#: seconds between two copies' times (about the pace of creating pipelines through the API)
STEP_S = 0.01
#: pipelines per bulk insert (and per SQLite transaction)
CHUNK = 500
TABLES = ("pipeline_instance", "task", "task_dep", "task_event")
ID_COLUMNS = frozenset({"id", "task_id", "parent_id", "pipeline_id"})


class Cloner(Protocol):
    """Copies a template pipeline's rows `copies` times (see the module docstring)."""

    def clone(self, pipeline_id: str, copies: int) -> None: ...


async def build(store: TaskStore, cloner: Cloner, pending: int) -> None:
    """`pending` pending no-op tasks, half blocked on a running parent: pipelines of 100 pending
    tasks, 50 of them depending on a gate task that another node has claimed and is running."""
    pipelines = max(1, pending // PIPELINE_PENDING)
    template = await create_pipeline(store, 0)
    await claim_gates(store, 1)
    if pipelines > 1:
        await asyncio.to_thread(cloner.clone, template, pipelines - 1)


async def create_pipeline(store: TaskStore, index: int) -> str:
    """One backlog pipeline through the store API (one transaction); returns its id."""
    gate_id = str(uuid.uuid4())
    gate = NewTask(type=GATE, id=gate_id)
    ready = tuple(NewTask(type=noop_plugin.NOOP) for _ in range(HALF))
    blocked = tuple(NewTask(type=noop_plugin.NOOP, depends_on=(gate_id,)) for _ in range(HALF))
    tasks = (gate, *ready, *blocked)
    pipeline, _ = await store.create_pipeline(NewPipeline("custom", MATERIAL.format(index), tasks))
    return pipeline.id


async def claim_gates(store: TaskStore, count: int) -> None:
    """The gates run on another node: their children stay blocked for the whole benchmark."""
    await store.claim(ClaimFilter(limit=count, types=frozenset({GATE}), start=True), OTHER_NODE)


# --- copying rows -------------------------------------------------------------------------------
@dataclass
class Table:
    name: str
    columns: list[str]
    rows: list[tuple[Any, ...]]


def copies_of(
    tables: Sequence[Table], pipeline_id: str, material: str, copies: int
) -> Iterator[dict[str, list[tuple[Any, ...]]]]:
    """The rows of `copies` copies of the template, CHUNK pipelines at a time, by table."""
    ids = {row[t.columns.index("id")] for t in tables if t.name == "task" for row in t.rows}
    ids.add(pipeline_id)
    # insertion order (`task.ord`, copied where the database does not number it): each copy
    # gets its own range, and its events point at their task's
    ords = [
        row[t.columns.index("ord")] or 0
        for t in tables
        if t.name == "task" and "ord" in t.columns
        for row in t.rows
    ]
    span = max(ords, default=0) + 1
    plans = {t.name: _plan(t.columns) for t in tables}
    chunk: dict[str, list[tuple[Any, ...]]] = {t.name: [] for t in tables}
    for k in range(1, copies + 1):
        mapping = {old: str(uuid.uuid4()) for old in ids}
        shift = -(copies + 1 - k) * STEP_S  # older than the template, in creation order
        new_material = MATERIAL.format(k)
        for table in tables:
            out = chunk[table.name]
            for row in table.rows:
                out.append(
                    _copy(row, plans[table.name], mapping, shift, material, new_material, k * span)
                )
        if k % CHUNK == 0 or k == copies:
            yield chunk
            chunk = {t.name: [] for t in tables}


Plan = list[tuple[int, str]]


def _plan(columns: Sequence[str]) -> Plan:
    """Which columns a copy changes, and how."""
    plan: Plan = []
    for i, name in enumerate(columns):
        if name in ID_COLUMNS:
            plan.append((i, "id"))
        elif name == "material_id":
            plan.append((i, "material"))
        elif name == "depends_on":
            plan.append((i, "depends_on"))
        elif name.endswith("_at") or name == "ready_since":
            plan.append((i, "time"))
        elif name in ("ord", "task_ord"):
            plan.append((i, "ord"))
    return plan


def _copy(
    row: tuple[Any, ...],
    plan: Plan,
    mapping: dict[str, str],
    shift: float,
    material: str,
    new_material: str,
    ord_shift: int = 0,
) -> tuple[Any, ...]:
    out = list(row)
    for i, kind in plan:
        value = out[i]
        if value is None:
            continue
        if kind == "id":
            out[i] = mapping.get(value, value)
        elif kind == "time":
            out[i] = value + shift
        elif kind == "ord":
            out[i] = value + ord_shift if value else value
        elif kind == "material":
            out[i] = new_material if value == material else value
        else:  # depends_on: the same JSON text with the copy's ids
            for parent in json.loads(value) if value != "[]" else ():
                value = value.replace(parent, mapping.get(parent, parent))
            out[i] = value
    return tuple(out)


def _template_sql(table: str, columns: Sequence[str], mark: str, task_order: str) -> str:
    cols = ", ".join(columns)
    where = {
        "pipeline_instance": f"id = {mark}",
        "task": f"pipeline_id = {mark}",
        "task_dep": f"task_id IN (SELECT id FROM task WHERE pipeline_id = {mark})",
        "task_event": f"task_id IN (SELECT id FROM task WHERE pipeline_id = {mark})",
    }[table]
    # insertion order, so the copies' rows come in the template's order
    order = {"task": f" ORDER BY {task_order}", "task_event": " ORDER BY id"}.get(table, "")
    return f"SELECT {cols} FROM {table} WHERE {where}{order}"


def _check(tables: Sequence[Table]) -> None:
    task = next(t for t in tables if t.name == "task")
    if "idempotency_key" in task.columns:
        i = task.columns.index("idempotency_key")
        if any(row[i] is not None for row in task.rows):
            raise ValueError("a template with idempotency keys cannot be copied")


def _read(
    columns_of: Callable[[str], list[str]],
    fetch: Callable[[str, str], list[tuple[Any, ...]]],
    mark: str,
    task_order: str,
    pipeline_id: str,
) -> tuple[list[Table], str]:
    tables = []
    for name in TABLES:
        columns = columns_of(name)
        sql = _template_sql(name, columns, mark, task_order)
        tables.append(Table(name, columns, fetch(sql, pipeline_id)))
    _check(tables)
    pipeline = tables[0]
    material = str(pipeline.rows[0][pipeline.columns.index("material_id")])
    return tables, material


class SQLiteCloner:
    """Bulk copies into a SQLite store's file, through a connection of its own."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def clone(self, pipeline_id: str, copies: int) -> None:
        conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=30)
        try:
            conn.execute("PRAGMA synchronous = NORMAL")
            # the indexes of a million random UUIDs: keep them in memory while loading, and
            # checkpoint as seldom as the store does (store/sqlite.py)
            conn.execute("PRAGMA cache_size = -262144")
            conn.execute("PRAGMA wal_autocheckpoint = 8000")

            def columns_of(table: str) -> list[str]:
                info = conn.execute(f"PRAGMA table_info({table})").fetchall()
                pks = [r for r in info if r[5]]
                # an INTEGER PRIMARY KEY is the rowid: the database numbers the copies
                rowid = {r[1] for r in pks if len(pks) == 1 and str(r[2]).upper() == "INTEGER"}
                return [str(r[1]) for r in info if r[1] not in rowid]

            def fetch(sql: str, pid: str) -> list[tuple[Any, ...]]:
                return [tuple(r) for r in conn.execute(sql, [pid] * sql.count("?"))]

            tables, material = _read(columns_of, fetch, "?", "rowid", pipeline_id)
            inserts = {
                t.name: f"INSERT INTO {t.name} ({', '.join(t.columns)}) "
                f"VALUES ({', '.join('?' for _ in t.columns)})"
                for t in tables
            }
            for chunk in copies_of(tables, pipeline_id, material, copies):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for name, rows in chunk.items():
                        conn.executemany(inserts[name], rows)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            # write the load back now, not during the claims measured next (a backlog built
            # over minutes through the API has had its checkpoints)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()


class PostgresCloner:
    """Bulk copies into a PostgreSQL store's database with COPY, on a connection of its own."""

    def __init__(self, url: str) -> None:
        self.url = url

    def clone(self, pipeline_id: str, copies: int) -> None:
        import psycopg

        with psycopg.connect(self.url) as conn:

            def columns_of(table: str) -> list[str]:
                rows = conn.execute(
                    "SELECT column_name, is_identity, is_generated FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s "
                    "ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
                # identity columns are numbered by the database, as for the store's inserts
                return [str(r[0]) for r in rows if r[1] != "YES" and r[2] != "ALWAYS"]

            def fetch(sql: str, pid: str) -> list[tuple[Any, ...]]:
                return [tuple(r) for r in conn.execute(sql, [pid] * sql.count("%s")).fetchall()]

            tables, material = _read(columns_of, fetch, "%s", "ord", pipeline_id)
            for chunk in copies_of(tables, pipeline_id, material, copies):
                with conn.cursor() as cur:
                    for table in tables:
                        sql = f"COPY {table.name} ({', '.join(table.columns)}) FROM STDIN"
                        with cur.copy(sql) as copy:
                            for row in chunk[table.name]:
                                copy.write_row(row)
                conn.commit()
            # the state autovacuum reaches a minute after such a load (a backlog built over
            # minutes through the API has been analysed and checkpointed as it grew): statistics
            # for the planner, and the load written back now rather than during the claims
            # the database numbered the copies' tasks (identity `ord`): their events follow
            conn.execute(
                "UPDATE task_event e SET task_ord = t.ord FROM task t "
                "WHERE t.id = e.task_id AND e.task_ord <> t.ord"
            )
            conn.commit()
            conn.autocommit = True
            conn.execute(f"ANALYZE {', '.join(TABLES)}")
            conn.execute("CHECKPOINT")
