"""Lists and counts: keyset pages in list order for every filter, stable while rows are
inserted, served by an index in list order (no sort), and status counts from the pipelines'
maintained counters that equal a full count."""

from __future__ import annotations

import base64
import itertools
import json
import re
import sqlite3
from collections import Counter
from typing import Any

import psycopg
import pytest

from fredica.domain import errors
from fredica.domain.models import ErrorType, NewTask, TaskStatus
from fredica.store import lists
from fredica.store.base import ClaimFilter, Failure, TaskStore
from fredica.store.postgres import DIALECT as PG_DIALECT
from fredica.store.sqlite import DIALECT as SQLITE_DIALECT

from .conftest import NODE, complete, make_pipeline, raw_execute

S = TaskStatus
BULK = 20_000
TYPES = ("T0", "T1", "T2")
STATUS_CYCLE = ("pending", "completed", "failed", "pending", "running", "cancelled", "completed")
PIPELINE_STATUSES = ("completed", "pending", "running")
BIG = "bulk-big"  # a tenth of the bulk tasks; other pipelines have about 9

# Every filter the API offers, alone and combined (`None`: not filtered).
FILTERS = [
    (pipeline, status, task_type)
    for pipeline in (None, "bulk-3")
    for status in (None, ["pending"], ["running", "stale"], ["failed", "completed", "pending"])
    for task_type in (None, "T1")
]


def bulk_insert(kind: str, target: str, count: int) -> None:
    """`count` tasks straight into the table (with their pipelines, whose counters are not
    kept: for lists only): 7 rows share each `created_at`, one in 50 has no pipeline, a
    tenth are in pipeline `BIG`, the others in pipelines of 9; statuses and types in cycles."""

    def pipeline_of(i: int) -> str | None:
        return None if i % 50 == 0 else BIG if i % 10 == 1 else f"bulk-{i // 10}"

    ids = sorted({p for i in range(count) if (p := pipeline_of(i))})
    pipelines = [
        (p, f"material-{p}", "custom", PIPELINE_STATUSES[n % 3], NODE, NODE, 1.0 + n, 1.0 + n)
        for n, p in enumerate(ids)
    ]
    rows = [
        (
            f"bulk-{i:06d}",
            TYPES[i % len(TYPES)],
            pipeline_of(i),
            STATUS_CYCLE[i % len(STATUS_CYCLE)],
            NODE,
            NODE,
            10.0 + (i // 7) * 0.25,
            10.0 + (i // 7) * 0.25,
        )
        for i in range(count)
    ]
    pipeline_sql = (
        "INSERT INTO pipeline_instance (id, material_id, template, status, created_by, "
        "owner_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    sql = (
        "INSERT INTO task (id, type, pipeline_id, status, created_by, owner_id, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    if kind == "sqlite":
        conn = sqlite3.connect(target, isolation_level=None)
        try:
            conn.execute("BEGIN")
            conn.executemany(pipeline_sql, pipelines)
            conn.executemany(sql, rows)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    with psycopg.connect(target, autocommit=True) as pg:
        with pg.cursor() as cur:
            cur.executemany(pipeline_sql.replace("?", "%s"), pipelines)  # type: ignore[arg-type]
            cur.executemany(sql.replace("?", "%s"), rows)  # type: ignore[arg-type]
        pg.execute("ANALYZE")  # what autovacuum does after a bulk load


async def all_pages(
    store: TaskStore,
    limit: int,
    pipeline: str | None = None,
    status: list[str] | None = None,
    task_type: str | None = None,
) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = await store.page_tasks(pipeline, status, task_type, limit, cursor)
        ids += [t.id for t in page.items]
        if page.next_cursor is None:
            return ids
        assert len(page.items) == limit, "only the last page is short"
        cursor = page.next_cursor


# --- order and pages -------------------------------------------------------------------------
async def test_cursor_pages_follow_the_list_order_for_every_filter(store, kind, target) -> None:
    bulk_insert(kind, target, 300)
    big = [(BIG, status, task_type) for _, status, task_type in FILTERS[: len(FILTERS) // 2]]
    listed = 0
    for pipeline, status, task_type in FILTERS + big:
        full = await store.list_tasks(pipeline, status, task_type, limit=10_000)
        expected = [t.id for t in full]
        listed += bool(expected)
        # the order itself: newest first, ties by insertion; a pipeline's tasks oldest first
        keys = [(t.created_at, int(t.id.split("-")[1])) for t in full]
        assert keys == sorted(keys, reverse=pipeline is None)
        assert all(
            (pipeline is None or t.pipeline_id == pipeline)
            and (status is None or t.status.value in status)
            and (task_type is None or t.type == task_type)
            for t in full
        )
        for limit in (7, max(1, len(expected)), max(1, len(expected) - 1)):
            assert await all_pages(store, limit, pipeline, status, task_type) == expected
        # offset still works, on its own and after a cursor
        assert [t.id for t in await store.list_tasks(pipeline, status, task_type, 5, 3)] == (
            expected[3:8]
        )
        first = await store.page_tasks(pipeline, status, task_type, 4)
        assert [t.id for t in first.items] == expected[:4]
        assert (first.next_cursor is None) == (len(expected) <= 4)
        if first.next_cursor is not None:
            after = await store.page_tasks(pipeline, status, task_type, 3, first.next_cursor, 2)
            assert [t.id for t in after.items] == expected[6:9]
    assert listed >= len(FILTERS + big) - 6, "most filters find rows"


async def test_a_page_ending_on_the_last_row_has_no_next_cursor(store) -> None:
    await make_pipeline(store, NewTask("T", id="a"), NewTask("T", id="b"))
    page = await store.page_tasks(limit=2)
    assert [t.id for t in page.items] == ["b", "a"] and page.next_cursor is None
    page = await store.page_tasks(limit=1)
    assert [t.id for t in page.items] == ["b"] and page.next_cursor is not None
    rest = await store.page_tasks(limit=1, cursor=page.next_cursor)
    assert [t.id for t in rest.items] == ["a"] and rest.next_cursor is None
    empty = await store.page_tasks(status=["failed"], limit=5)
    assert (empty.items, empty.next_cursor) == ([], None)
    a_pipeline = await store.page_tasks(pipeline_id=page.items[0].pipeline_id, limit=1)
    assert [t.id for t in a_pipeline.items] == ["a"], "a pipeline's tasks: oldest first"


async def test_paging_while_tasks_are_inserted_never_skips_or_repeats(
    store, kind, target, clock
) -> None:
    bulk_insert(kind, target, BULK)
    pid = await make_pipeline(store, NewTask("T1", id="p-0"), material="live")
    lists_paged = ((None, None), (None, ["pending", "completed"]), (BIG, None))
    for n, (pipeline, status) in enumerate(lists_paged):
        before = [t.id for t in await store.list_tasks(pipeline, status, None, limit=BULK + 10)]
        seen: list[str] = []
        cursor: str | None = None
        for step in itertools.count():
            page = await store.page_tasks(pipeline, status, None, 997, cursor)
            seen += [t.id for t in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
            # New rows meanwhile: at the newest time, tied with it, and (a clock stepped
            # back) among the rows still to come; some into the pipeline being listed.
            for j, at in enumerate((200.0 + step, 100.0, 10.0 + step * 30)):
                clock.set(at)
                target_pipeline = pipeline if j == 2 and pipeline is not None else pid
                await store.add_task(NewTask("T1", id=f"new-{n}-{step}-{j}"), None)
                await store.add_task(NewTask("T2", id=f"new-{n}-{step}-{j}-p"), target_pipeline)
        duplicates = [i for i, n in Counter(seen).items() if n > 1]
        assert duplicates == []
        existing = set(before)
        assert [i for i in seen if i in existing] == before, "a gap or a change of order"
        assert len(before) > 1000


async def test_pipeline_pages_follow_the_list_order(store, clock) -> None:
    ids = []
    for i in range(23):
        clock.set(100.0 + i // 4)  # four pipelines share each created_at: ties by id
        ids.append(await make_pipeline(store, NewTask("T"), material=f"m{i}"))
    await store.cancel_pipeline(ids[5])
    expected = [p.id for p in await store.list_pipelines(limit=1000)]
    assert sorted(expected) == sorted(ids)
    created = [(p.created_at, p.id) for p in await store.list_pipelines(limit=1000)]
    assert created == sorted(created, reverse=True)
    for status in (None, "pending"):
        full = [p.id for p in await store.list_pipelines(status, limit=1000)]
        got: list[str] = []
        cursor = None
        while True:
            page = await store.page_pipelines(status, 4, cursor)
            got += [p.id for p in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert got == full
    assert ids[5] not in full and len(full) == 22
    assert [p.id for p in await store.list_pipelines(None, 3, 2)] == expected[2:5]


def _cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


BAD_CURSORS = [
    "not a cursor!",
    "%%%",
    _cursor({"t": 1}),
    _cursor(["t", 1.0]),
    _cursor(["t", "1.0", 3]),
    _cursor(["t", 1.0, "3"]),
    _cursor(["t", 1.0, True]),
    _cursor(["x", 1.0, 3]),
    _cursor(["t", 1e400, 3]).replace("inf", "1"),
    base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    "A" * 10_000,
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
async def test_malformed_cursors_are_refused(store, cursor) -> None:
    with pytest.raises(errors.InvalidRequest, match=r"^cursor: "):
        await store.page_tasks(cursor=cursor)
    with pytest.raises(errors.InvalidRequest, match=r"^cursor: "):
        await store.page_pipelines(cursor=cursor)


async def test_a_cursor_of_the_other_list_is_refused(store, clock) -> None:
    for i in range(3):
        clock.set(100.0 + i)
        await make_pipeline(store, NewTask("T"), material=f"m{i}")
    tasks = await store.page_tasks(limit=1)
    pipelines = await store.page_pipelines(limit=1)
    assert tasks.next_cursor and pipelines.next_cursor
    with pytest.raises(errors.InvalidRequest, match="belongs to the task list"):
        await store.page_pipelines(cursor=tasks.next_cursor)
    with pytest.raises(errors.InvalidRequest, match="belongs to the pipeline list"):
        await store.page_tasks(cursor=pipelines.next_cursor)
    with pytest.raises(errors.InvalidRequest, match="limit"):
        await store.page_tasks(limit=0)


# --- counts ----------------------------------------------------------------------------------
def full_count(kind: str, target: str) -> dict[str, int]:
    counts = {s.value: 0 for s in S}
    for status, n in raw_execute(kind, target, "SELECT status, COUNT(*) FROM task GROUP BY status"):
        counts[status] = int(n)
    return counts


async def test_counts_come_from_the_counters_and_equal_a_full_count(
    store, kind, target, clock
) -> None:
    async def claim(task_type: str, start: bool = True) -> Any:
        [task] = await store.claim(ClaimFilter(types=frozenset({task_type}), start=start))
        return task

    checks: list[tuple[str, dict[str, int], dict[str, int]]] = []

    async def check(step: str) -> None:
        checks.append((step, await store.count_by_status(), full_count(kind, target)))

    await check("empty")
    p1 = await make_pipeline(
        store,
        NewTask("A", id="a"),
        NewTask("B", id="b", depends_on=("a",)),
        NewTask("C", id="c"),
        NewTask("D", id="d", max_retries=2),
        material="m1",
    )
    p2 = await make_pipeline(
        store, NewTask("E", id="e"), NewTask("F", id="f", depends_on=("e",)), material="m2"
    )
    await make_pipeline(store, NewTask("G", id="g"), NewTask("H", id="h"), material="m3")
    for i in (1, 2, 3):
        await store.add_task(NewTask(f"S{i}", id=f"solo-{i}"))
    await check("created")
    clock.set(101.0)
    await complete(store, await claim("A"))  # b becomes ready
    c = await claim("C")
    await store.fail(Failure(c.id, c.attempt, "broken", ErrorType.PERMANENT))
    d = await claim("D")
    await store.fail(Failure(d.id, d.attempt, "flaky", ErrorType.TRANSIENT))  # back to pending
    g = await claim("G", start=False)
    await check("claimed, completed, failed, retried")
    await store.release(g.id, g.attempt, "not now")
    await claim("G")  # left running
    e = await claim("E")
    await store.cancel_pipeline(p2)  # f cancelled at once, e asked to stop
    await check("cancelling")
    await store.fail(Failure(e.id, e.attempt, "stopped", ErrorType.CANCELLED))
    await complete(store, await claim("S1"))
    await store.skip_task("solo-2")
    await store.cancel_task("solo-3")
    await store.retry_task("c")
    await check("after cancel, skip, retry")
    assert [step for step, counted, full in checks if counted != full] == []
    final = checks[-1][1]
    assert final == {
        "pending": 4,  # b, c, d, h
        "claimed": 0,
        "running": 1,  # g
        "stale": 0,
        "reclaimed": 0,
        "completed": 2,  # a, solo-1
        "failed": 0,
        "cancelled": 3,  # e, f, solo-3
        "skipped": 1,  # solo-2
    }

    # The counts are read from the counters: damage one and the count follows it, until the
    # pipeline is recounted from its rows.
    raw_execute(kind, target, "UPDATE pipeline_instance SET n_skipped = 5 WHERE id = ?", [p1])
    assert (await store.count_by_status())["skipped"] == final["skipped"] + 5
    await store.recalculate(p1)
    assert await store.count_by_status() == full_count(kind, target) == final


# --- query plans -----------------------------------------------------------------------------
def _combos(after: lists.Position) -> list[tuple[Any, ...]]:
    return [(*f, a) for f in FILTERS for a in (None, after)]


@pytest.mark.parametrize("kind", ["sqlite"])
async def test_every_sqlite_list_walks_an_index_in_list_order(store, kind, target) -> None:
    bulk_insert(kind, target, BULK)
    conn = sqlite3.connect(target)
    try:
        after = lists.Position(*conn.execute("SELECT created_at, rowid FROM task").fetchone())
        for pipeline, status, task_type, position in _combos(after):
            sql, params = lists.task_query(
                SQLITE_DIALECT, pipeline, status, task_type, 101, 0, position
            )
            plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
            where = (pipeline, status, task_type, position, plan)
            assert not any("TEMP B-TREE" in line for line in plan), where
            walks = [line for line in plan if re.match(r"(SCAN|SEARCH) task\b", line)]
            expected = (
                "task_pipeline"
                if pipeline
                else "task_status"
                if status
                else "task_type"
                if task_type
                else "task_created"
            )
            assert len(walks) == (1 if pipeline or not status else len(status)), where
            assert all(f"USING INDEX {expected}" in line for line in walks), where
        for status in (None, "pending"):
            for position in (None, lists.Position(50.0, "m")):
                sql, params = lists.pipeline_query(status, 101, 0, position)
                plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
                assert not any("TEMP B-TREE" in line for line in plan), plan
                index = "pipeline_status" if status else "pipeline_created"
                assert any(f"USING INDEX {index}" in line for line in plan), plan
        plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {lists.COUNT_SQL}")]
        assert any("USING INDEX task_pipeline" in line for line in plan), plan
        assert not any(re.match(r"SCAN task\b", line) for line in plan), plan
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["postgres"])
async def test_every_postgres_list_walks_an_index_in_list_order(store, kind, target) -> None:
    """With the table analysed (as autovacuum does), no list sorts or scans the table: each
    walks an index in list order (several statuses: Merge Append of such walks). Only a
    pipeline's list may sort, and then only the rows its index found."""
    bulk_insert(kind, target, BULK)
    with psycopg.connect(target, autocommit=True) as pg:
        row = pg.execute("SELECT created_at, ord FROM task ORDER BY ord LIMIT 1").fetchone()
        assert row is not None
        for pipeline, status, task_type, position in _combos(lists.Position(*row)):
            sql, params = lists.task_query(
                PG_DIALECT, pipeline, status, task_type, 101, 0, position
            )
            nodes = _pg_plan(pg, sql, params)
            kinds = [n["Node Type"] for n in nodes]
            where = (pipeline, status, task_type, position, kinds)
            assert "Seq Scan" not in kinds, where
            indexes = {n.get("Index Name") for n in nodes} - {None}
            if pipeline and "Sort" in kinds:
                # a sort of the rows the pipeline's index found (with the status index:
                # BitmapAnd), never of a wider walk
                assert indexes <= {"task_pipeline", "task_status"}, where
                assert "task_pipeline" in indexes, where
                continue
            assert "Sort" not in kinds, where
            walks = [n for n in nodes if n["Node Type"] == "Index Scan"]
            direction = "Forward" if pipeline else "Backward"
            assert walks and all(n["Scan Direction"] == direction for n in walks), where
            assert len(walks) == (len(status) if status and not pipeline else 1), where
            if status and len(status) > 1 and not pipeline:
                assert "Merge Append" in kinds, where
        for status in (None, "pending"):
            sql, params = lists.pipeline_query(status, 101, 0, lists.Position(1500.0, "m"))
            kinds = [n["Node Type"] for n in _pg_plan(pg, sql, params)]
            assert "Seq Scan" not in kinds and "Sort" not in kinds, kinds
        count_plan = _pg_plan(pg, lists.COUNT_SQL, [])
        task_scans = [n for n in count_plan if n.get("Relation Name") == "task"]
        assert task_scans and all(n["Node Type"] != "Seq Scan" for n in task_scans), count_plan
        assert any(n.get("Index Name") == "task_pipeline" for n in count_plan), count_plan


def _pg_plan(pg: psycopg.Connection[Any], sql: str, params: list[Any]) -> list[dict[str, Any]]:
    """Every node of the plan PostgreSQL chooses for `sql`, depth first."""
    query = f"EXPLAIN (FORMAT JSON) {sql}".replace("?", "%s")
    row = pg.execute(query, params).fetchone()  # type: ignore[call-overload]
    assert row is not None
    plan = row[0][0]["Plan"]
    nodes, stack = [], [plan]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.get("Plans", []))
    return nodes
