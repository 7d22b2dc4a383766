"""The `library_file` table (watch folders): one transaction per function, on the store's
threads (see `SQLStore`). Rows are scoped to the node that watches (`tx.node_id`)."""

from __future__ import annotations

import json
from typing import Any

from fredica.domain.library import FileStatus, LibraryFile
from fredica.store.rows import Conn
from fredica.store.tx import Tx

COLUMNS = (
    "id, library, path, size, mtime, sha256, status, pipeline_id, note, first_seen_at, "
    "updated_at, history"
)


def _row(row: Any) -> LibraryFile:
    return LibraryFile(
        id=str(row["id"]),
        library=str(row["library"]),
        path=str(row["path"]),
        size=int(row["size"]),
        mtime=float(row["mtime"]),
        sha256=row["sha256"],
        status=FileStatus(row["status"]),
        pipeline_id=row["pipeline_id"],
        note=str(row["note"]),
        first_seen_at=float(row["first_seen_at"]),
        updated_at=float(row["updated_at"]),
        history=tuple(json.loads(row["history"] or "[]")),
    )


def files(conn: Conn, node_id: str, library: str) -> list[LibraryFile]:
    """Every recorded file of `library`, by path."""
    rows = conn.execute(
        f"SELECT {COLUMNS} FROM library_file WHERE node_id = ? AND library = ? ORDER BY path",
        (node_id, library),
    ).fetchall()
    return [_row(r) for r in rows]


def get(conn: Conn, node_id: str, file_id: str) -> LibraryFile | None:
    row = conn.execute(
        f"SELECT {COLUMNS} FROM library_file WHERE node_id = ? AND id = ?", (node_id, file_id)
    ).fetchone()
    return None if row is None else _row(row)


def save(tx: Tx, item: LibraryFile) -> None:
    """Insert or replace the row of (library, path)."""
    tx.q(
        "INSERT INTO library_file (id, node_id, library, path, size, mtime, sha256, status, "
        "pipeline_id, note, first_seen_at, updated_at, history) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (node_id, library, path) DO UPDATE SET size = excluded.size, "
        "mtime = excluded.mtime, sha256 = excluded.sha256, status = excluded.status, "
        "pipeline_id = excluded.pipeline_id, note = excluded.note, "
        "updated_at = excluded.updated_at, history = excluded.history",
        (
            item.id,
            tx.node_id,
            item.library,
            item.path,
            item.size,
            item.mtime,
            item.sha256,
            item.status.value,
            item.pipeline_id,
            item.note,
            item.first_seen_at,
            item.updated_at,
            json.dumps(list(item.history)),
        ),
    )
