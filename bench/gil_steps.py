"""What a busy event loop costs the store's thread: `python -m bench.gil_steps`.

Python's sqlite3 releases the interpreter lock (GIL) around every step of a statement, and
takes it back when the step returns. While another thread runs Python, taking it back waits
for that thread to give it up (up to the switch interval, 5 ms by default). A statement done
in one step (an `UPDATE` without `RETURNING`, a read aggregated into one JSON value) pays that
once; an `UPDATE … RETURNING` pays it for every returned row.

The script claims 500 rows of a table shaped like fredica's `task` (an id, 20 text and 8 real
columns) two ways, with and without a second thread running Python the whole time:
- `returning`: one `UPDATE … RETURNING` (one step per row), as `store/work.py` claims;
- `one step`: the `UPDATE`, then the rows read back as one JSON array (floats printed with
  `printf('%!.17g')`, which round-trips them exactly).
Each figure is the median of 10 claims, ms per 500 rows. This is the measurement behind the note
in docs/benchmarks.md on why no-op work used one core; it needs nothing but Python.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

TEXTS, REALS = 20, 8
BATCH = 500


def _table(path: Path, rows: int) -> tuple[sqlite3.Connection, list[str]]:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    texts = [f"c{i}" for i in range(TEXTS)]
    reals = [f"f{i}" for i in range(REALS)]
    columns = ", ".join([f"{c} TEXT" for c in texts] + [f"{c} REAL" for c in reals])
    conn.execute(f"CREATE TABLE t (id TEXT PRIMARY KEY, st TEXT, n INTEGER, {columns})")
    ids = [str(uuid.uuid4()) for _ in range(rows)]
    marks = ", ".join("?" for _ in range(TEXTS + REALS))
    conn.execute("BEGIN")
    conn.executemany(
        f"INSERT INTO t (id, st, n, {', '.join(texts + reals)}) VALUES (?, 'p', 0, {marks})",
        [
            (i, *[f"value {k}" for k in range(TEXTS)], *[1.7e9 + k / 3 for k in range(REALS)])
            for i in ids
        ],
    )
    conn.execute("COMMIT")
    return conn, ids


def _claims(conn: sqlite3.Connection) -> dict[str, Callable[[list[str]], int]]:
    texts = [f"c{i}" for i in range(TEXTS)]
    reals = [f"f{i}" for i in range(REALS)]
    plain = ", ".join(["id", "st", "n", *texts, *reals])
    exact = ", ".join(["id", "st", "n", *texts, *(f"printf('%!.17g', {c})" for c in reals)])

    def returning(ids: list[str]) -> int:
        marks = ",".join("?" for _ in ids)
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(
            f"UPDATE t SET st = 'c', n = n + 1 WHERE id IN ({marks}) RETURNING {plain}", ids
        ).fetchall()
        conn.execute("COMMIT")
        return len(rows)

    def one_step(ids: list[str]) -> int:
        marks = ",".join("?" for _ in ids)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"UPDATE t SET st = 'c', n = n + 1 WHERE id IN ({marks})", ids)
        text = conn.execute(
            f"SELECT json_group_array(json_array({exact})) FROM t WHERE id IN ({marks})", ids
        ).fetchone()[0]
        rows = [(*r[: 3 + TEXTS], *map(float, r[3 + TEXTS :])) for r in json.loads(text)]
        conn.execute("COMMIT")
        return len(rows)

    return {"returning": returning, "one step": one_step}


def _median_ms(claim: Callable[[list[str]], int], ids: list[str], busy: bool) -> float:
    stop = threading.Event()

    def spin() -> None:  # a thread that runs Python all the time, as a busy event loop does
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i

    spinner = threading.Thread(target=spin, daemon=True)
    if busy:
        spinner.start()
    times = []
    try:
        for k in range(10):
            batch = ids[k * BATCH : (k + 1) * BATCH]
            t0 = time.perf_counter()
            if claim(batch) != len(batch):
                raise RuntimeError("a claim did not return every row")
            times.append(time.perf_counter() - t0)
    finally:
        stop.set()
        if busy:
            spinner.join()
    return statistics.median(times) * 1000


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        conn, ids = _table(Path(tmp) / "steps.db", 40 * BATCH)
        claims = _claims(conn)
        print(f"ms per claim of {BATCH} rows (median of 10), switch interval 5 ms")
        print(f"{'':10s} {'quiet':>10s} {'busy loop':>10s}")
        offset = 0
        for name, claim in claims.items():
            quiet = _median_ms(claim, ids[offset : offset + 10 * BATCH], busy=False)
            busy = _median_ms(claim, ids[offset + 10 * BATCH : offset + 20 * BATCH], busy=True)
            offset += 20 * BATCH
            print(f"{name:10s} {quiet:10.2f} {busy:10.2f}")
        conn.close()


if __name__ == "__main__":
    main()
