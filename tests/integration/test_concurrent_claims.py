"""Many claimers on one SQLite file never claim a task twice (threads and processes)."""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections import Counter
from pathlib import Path

from fredica.domain.models import NewPipeline, NewTask
from fredica.store.base import ClaimFilter, CompletionItem
from fredica.store.sqlite import SQLiteTaskStore


def claimer(db: str, node: str, out: str) -> None:
    """Claim and complete until nothing is left; record every claim."""
    store = SQLiteTaskStore(db, node)
    claimed: list[list[object]] = []
    idle = 0
    while idle < 20:
        batch = store.claim(node, ClaimFilter(limit=3, start=True), 1000.0)
        if not batch:
            idle += 1
            continue
        idle = 0
        for task in batch:
            claimed.append([task.id, task.attempt])
        store.complete_many(
            [CompletionItem(t.id, t.attempt, {"by": node}) for t in batch],
            node,
            1001.0,
            lambda template: None,
        )
    Path(out).write_text(json.dumps(claimed))
    store.close()


def seed(db: Path, n: int) -> list[str]:
    store = SQLiteTaskStore(db, "owner")
    tasks = []
    # chains of 3 so that readiness changes while the claimers run
    for i in range(n // 3):
        a, b, c = f"t{i}a", f"t{i}b", f"t{i}c"
        tasks += [
            NewTask("T", id=a),
            NewTask("T", id=b, depends_on=(a,)),
            NewTask("T", id=c, depends_on=(b,)),
        ]
    pipeline, _ = store.create_pipeline(NewPipeline("custom", "m", tuple(tasks)), 999.0)
    store.close()
    return [t.id for t in tasks if t.id]


def check(db: Path, ids: list[str], outs: list[Path]) -> None:
    claims: list[str] = []
    for out in outs:
        claims += [tid for tid, _ in json.loads(out.read_text())]
    counts = Counter(claims)
    assert not [t for t, c in counts.items() if c > 1], "a task was claimed twice"
    assert sorted(counts) == sorted(ids)
    store = SQLiteTaskStore(db, "owner")
    assert store.count_by_status()["completed"] == len(ids)
    pipeline = store.list_pipelines()[0]
    assert (pipeline.status.value, pipeline.done_tasks) == ("completed", len(ids))
    # the claimers really shared the work
    assert sum(1 for out in outs if json.loads(out.read_text())) >= 2
    store.close()


def test_processes_never_double_claim(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    ids = seed(db, 600)
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"claims-{i}.json" for i in range(4)]
    procs = [
        ctx.Process(target=claimer, args=(str(db), f"node-{i}", str(out)))
        for i, out in enumerate(outs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    check(db, ids, outs)


def test_threads_never_double_claim(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    ids = seed(db, 300)
    outs = [tmp_path / f"claims-{i}.json" for i in range(6)]
    threads = [
        threading.Thread(target=claimer, args=(str(db), f"node-{i}", str(out)))
        for i, out in enumerate(outs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(db, ids, outs)
