"""The list SQL of the two dialects and the cursor format (store/lists.py); the lists
themselves are tested on real stores in tests/contract/test_lists.py."""

from __future__ import annotations

import pytest

from fredica.domain import errors
from fredica.store import lists
from fredica.store.postgres import DIALECT as PG_DIALECT
from fredica.store.sqlite import DIALECT as SQLITE_DIALECT


def test_sqlite_and_postgres_lists_differ_only_where_the_dialects_do() -> None:
    sqlite_sql, sqlite_params = lists.task_query(SQLITE_DIALECT, None, ["a", "b"], "T", 10)
    pg_sql, pg_params = lists.task_query(PG_DIALECT, None, ["a", "b"], "T", 10)
    assert sqlite_sql.count("UNION ALL") == pg_sql.count("UNION ALL") == 1
    assert sqlite_sql.count("INDEXED BY task_status") == 2 and "INDEXED BY" not in pg_sql
    # PostgreSQL merges only arms that are ordered and bounded themselves
    assert pg_sql.count("LIMIT ?") == 3 and sqlite_sql.count("LIMIT ?") == 1
    assert pg_params == ["a", "T", 10, "b", "T", 10, 10, 0]
    assert sqlite_params == ["a", "T", "b", "T", 10, 0]
    assert "rowid AS list_key" in sqlite_sql and "ord AS list_key" in pg_sql


def test_each_filter_picks_the_index_it_walks() -> None:
    def walked(*args: object) -> str:
        sql, _ = lists.task_query(SQLITE_DIALECT, *args, 10)  # type: ignore[arg-type]
        return sql

    assert "INDEXED BY task_pipeline" in walked("p", ["a", "b"], "T")
    assert "UNION" not in walked("p", ["a", "b"], "T"), "a pipeline's rows: one walk"
    assert "ORDER BY created_at ASC" in walked("p", None, None)
    assert "INDEXED BY task_status" in walked(None, ["a"], "T")
    assert "UNION ALL" not in walked(None, ["a", "a"], None), "a status named twice"
    assert "INDEXED BY task_type" in walked(None, None, "T")
    assert "INDEXED BY task_created" in walked(None, None, None)
    assert "INDEXED BY task_created" in walked(None, [], None), "no status: no filter"


def test_cursors_round_trip_and_name_their_list() -> None:
    at = 1712345678.123456
    cursor = lists.encode_cursor(lists.TASK_CURSOR, lists.Position(at, 2**40))
    assert "=" not in cursor and cursor.isascii()
    assert lists.decode_cursor(lists.TASK_CURSOR, cursor) == lists.Position(at, 2**40)
    pipeline = lists.encode_cursor(lists.PIPELINE_CURSOR, lists.Position(at, "abc-é"))
    assert lists.decode_cursor(lists.PIPELINE_CURSOR, pipeline).key == "abc-é"
    with pytest.raises(errors.InvalidRequest, match="belongs to the task list"):
        lists.decode_cursor(lists.PIPELINE_CURSOR, cursor)
