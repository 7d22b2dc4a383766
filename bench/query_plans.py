"""`EXPLAIN QUERY PLAN` of every statement the hot path really runs (SQLite store).

The statements are not copied here: a real store runs a claim-ahead claim, a group commit of
completions and the list pages on a small database while SQLite's trace callback records the
SQL it executes (parameters expanded); each distinct statement is then explained on a second
connection. A plan line that scans the whole `task` table (`SCAN task` without an index) or
sorts a list in a temporary B-tree is reported under `full_scans`, so the benchmark report
shows at a glance that every hot statement is served by an index.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

from fredica.domain.models import NewPipeline, NewTask
from fredica.store.base import ClaimFilter, CompletionItem, StartItem
from fredica.store.sqlite import SQLiteTaskStore

NODE = "bench-node"
TYPE = "BENCH_NOOP"
_SKIP = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|PRAGMA)", re.IGNORECASE)


def _label(sql: str) -> str:
    """A statement with its literal values taken out (one entry per shape)."""
    text = re.sub(r"'(?:[^']|'')*'", "?", sql)
    text = re.sub(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b", "?", text)
    text = re.sub(r"\?(?:\s*,\s*\?)+", "?, …", text)
    return re.sub(r"\s+", " ", text).strip()


async def _exercise(path: Path, statements: list[str]) -> None:
    store = SQLiteTaskStore(path, NODE)
    try:
        for p in range(4):
            tasks = [NewTask(type=TYPE, id=f"p{p}-t{i}") for i in range(500)]
            tasks.append(NewTask(type=TYPE, id=f"p{p}-merge", depends_on=(f"p{p}-t0",)))
            await store.create_pipeline(
                NewPipeline(template="custom", material_id=f"plans:{p}", tasks=tuple(tasks))
            )
        conn: sqlite3.Connection = store._conn  # the bench reads what the store itself runs
        conn.set_trace_callback(statements.append)
        flt = ClaimFilter(
            limit=2, types=frozenset({TYPE}), start=True, ahead=62, ahead_types=frozenset({TYPE})
        )
        claimed = await store.claim(flt)
        started = [t for t in claimed if t.status.value == "claimed"][:2]
        items = [CompletionItem(t.id, t.attempt, {}) for t in claimed[2:]]
        await store.complete_and_claim(
            items, flt, starts=[StartItem(t.id, t.attempt, t.claimed_at or 0.0) for t in started]
        )
        await store.list_tasks(status=["pending"], limit=100)
        await store.list_tasks(pipeline_id=claimed[0].pipeline_id, limit=100)
        await store.list_pipelines(limit=50)
        await store.task_events(claimed[0].id)
        conn.set_trace_callback(None)
    finally:
        await store.close()


def run(work_dir: Path) -> dict[str, Any]:
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "plans.db"
    statements: list[str] = []
    asyncio.run(_exercise(path, statements))
    plans: dict[str, list[str]] = {}
    full_scans: list[str] = []
    conn = sqlite3.connect(str(path))
    try:
        for sql in dict.fromkeys(statements):
            if _SKIP.match(sql):
                continue
            label = _label(sql)
            if label in plans:
                continue
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
            lines = [str(r[-1]) for r in rows]
            plans[label] = lines
            for line in lines:
                whole_table = re.fullmatch(r"SCAN (task|task_event|pipeline_instance)", line)
                if whole_table or "TEMP B-TREE" in line:
                    full_scans.append(f"{label}: {line}")
    finally:
        conn.close()
    return {"plans": plans, "full_scans": full_scans, "statements": len(plans)}
