"""A data dir of the previous release migrates on open, its rows and settings intact."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fredica.domain.models import Affinity, NewTask, TaskStatus
from fredica.store import schema
from fredica.store.base import ClaimFilter
from fredica.store.sqlite import SQLiteTaskStore, connect, migrate


def previous_release_db(path: Path) -> None:
    """Schema version 1 (the first release) with a pipeline, affine tasks and settings."""
    conn = connect(path)
    migrate(conn, target=1)
    conn.execute(
        "INSERT INTO pipeline_instance (id, material_id, template, created_by, owner_id, "
        "n_pending, total_tasks, created_at, updated_at) "
        "VALUES ('p1', 'm1', 'custom', 'node-a', 'node-a', 3, 3, 1, 1)"
    )
    for task_id, affinity in (("hard", "HARD:node-a"), ("soft", "SOFT:node-b"), ("free", None)):
        conn.execute(
            "INSERT INTO task (id, type, pipeline_id, status, created_by, owner_id, "
            "node_affinity, created_at, updated_at) "
            "VALUES (?, 'T', 'p1', 'pending', 'node-a', 'node-a', ?, 1, 1)",
            (task_id, affinity),
        )
    conn.execute(
        "INSERT INTO app_config (key, value, updated_at) VALUES ('last_shutdown_type', 'CLEAN', 1)"
    )
    conn.close()


async def test_version_1_database_migrates_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "fredica.db"
    previous_release_db(path)
    store = SQLiteTaskStore(path, "node-a")
    try:
        assert (await store.get_task("hard")).affinity == Affinity.hard("node-a")
        assert (await store.get_task("soft")).affinity == Affinity.soft("node-b")
        assert (await store.get_task("free")).affinity is None
        # the settings of the single-node release now belong to this node
        assert await store.get_config("last_shutdown_type") == "CLEAN"
        pipeline = await store.get_pipeline("p1")
        assert (pipeline.total_tasks, pipeline.pending_tasks) == (3, 3)
        # HARD affinity still holds after the migration: node-b cannot take "hard"
        claimed = await store.claim(ClaimFilter(limit=10), "node-b")
        assert {t.id for t in claimed} == {"soft", "free"}
        assert all(t.status is TaskStatus.CLAIMED for t in claimed)
    finally:
        await store.close()
    with sqlite3.connect(path) as raw:
        version = raw.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        columns = {r[1] for r in raw.execute("PRAGMA table_info(task)")}
    assert version == schema.SCHEMA_VERSION
    assert {"affinity_kind", "affinity_node_id"} <= columns and "node_affinity" not in columns


async def test_opening_twice_does_not_migrate_again(tmp_path: Path) -> None:
    path = tmp_path / "fredica.db"
    for _ in range(2):
        store = SQLiteTaskStore(path, "node-a")
        await store.set_config("k", "v")
        await store.close()
    with sqlite3.connect(path) as raw:
        versions = [r[0] for r in raw.execute("SELECT version FROM schema_version")]
    assert versions == list(range(1, schema.SCHEMA_VERSION + 1))


async def test_version_2_events_keep_their_order_under_integer_keys(tmp_path: Path) -> None:
    path = tmp_path / "fredica.db"
    conn = connect(path)
    migrate(conn, target=2)
    conn.execute(
        "INSERT INTO task (id, type, status, created_by, owner_id, created_at, updated_at) "
        "VALUES ('t1', 'T', 'completed', 'node-a', 'node-a', 1, 1)"
    )
    # text keys whose sort order is not the order the events happened in
    for key, kind, at in (("zz", "created", 1.0), ("aa", "claimed", 2.0), ("mm", "running", 2.0)):
        conn.execute(
            "INSERT INTO task_event (id, task_id, node_id, event_type, occurred_at) "
            "VALUES (?, 't1', 'node-a', ?, ?)",
            (key, kind, at),
        )
    conn.close()
    store = SQLiteTaskStore(path, "node-a")
    try:
        events = await store.task_events("t1")
        new = await store.add_task(NewTask(type="T"))
        later = await store.task_events(new.id)
    finally:
        await store.close()
    assert [e.event_type for e in events] == ["created", "claimed", "running"]
    assert all(e.id.isdigit() for e in events)
    assert int(later[0].id) > max(int(e.id) for e in events)
    with sqlite3.connect(path) as raw:
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "task_claimer" not in indexes
    assert {
        "task_status",
        "task_pipeline",
        "task_created",
        "pipeline_status",
        "task_ord",
    } <= indexes
    with sqlite3.connect(path) as raw:
        # events point at their task's insertion order (the index that keeps a batch local)
        ords = raw.execute(
            "SELECT DISTINCT e.task_ord = t.ord FROM task_event e JOIN task t ON t.id = e.task_id"
        ).fetchall()
    assert ords == [(1,)]
