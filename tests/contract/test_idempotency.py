"""Deduplication both ways: an active task by idempotency key, an active pipeline by
(material, template); never across pipelines."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from fredica.domain.models import NewPipeline, NewTask, TaskStatus

from .conftest import claim_one, complete, raw_execute


async def test_idempotency_dedupes_active_tasks_only(store, clock, kind, target) -> None:
    first = await store.add_task(NewTask("T", idempotency_key="k1"))
    clock.set(100.1)
    dup = await store.add_task(NewTask("T", idempotency_key="k1"))
    assert dup.id == first.id
    task = await claim_one(store)
    await complete(store, task)
    clock.set(103.0)
    again = await store.add_task(NewTask("T", idempotency_key="k1"))
    assert again.id != first.id and again.status is TaskStatus.PENDING
    # the partial unique index itself enforces it, whoever writes the row
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        raw_execute(
            kind,
            target,
            "INSERT INTO task (id, type, idempotency_key, created_by, owner_id, created_at, "
            "updated_at) VALUES ('x', 'T', 'k1', 'n', 'n', 1, 1)",
        )


async def test_a_new_pipeline_never_adopts_another_pipelines_active_task(store, clock) -> None:
    # seed 001 §4.4: the work of an active task is not done twice by accident; but a second
    # pipeline over the same material (a dub while a transcription runs) gets its own tasks,
    # its dependencies on them intact, instead of a refusal about an internal id
    first, _ = await store.create_pipeline(
        NewPipeline("a", "mat", (NewTask("T", idempotency_key="k"),))
    )
    clock.set(100.5)
    second, dedup = await store.create_pipeline(
        NewPipeline(
            "b",
            "mat",
            (NewTask("T", id="own", idempotency_key="k"), NewTask("U", depends_on=("own",))),
        )
    )
    assert not dedup and second.id != first.id
    own = await store.get_task("own")
    assert own.pipeline_id == second.id and own.idempotency_key is None
    (child,) = [t for t in await store.list_tasks(second.id) if t.type == "U"]
    assert child.depends_on == ["own"]
    (original,) = await store.list_tasks(first.id)
    assert original.idempotency_key == "k"  # it keeps the key while active
    # an add outside a pipeline still reuses the active task
    again = await store.add_task(NewTask("T", idempotency_key="k"))
    assert again.id == original.id


async def test_active_pipeline_dedupe_by_material_and_template(store, clock) -> None:
    a, dedup_a = await store.create_pipeline(NewPipeline("custom", "mat", (NewTask("T"),)))
    clock.set(100.1)
    b, dedup_b = await store.create_pipeline(NewPipeline("custom", "mat", (NewTask("T"),)))
    assert (dedup_a, dedup_b, b.id) == (False, True, a.id)
    assert len(await store.list_tasks(a.id)) == 1  # the duplicate wrote nothing
    clock.set(100.2)
    other, dedup = await store.create_pipeline(NewPipeline("other", "mat", (NewTask("T"),)))
    assert not dedup and other.id != a.id
    clock.set(101.0)
    await store.cancel_pipeline(a.id)
    clock.set(102.0)
    c, dedup_c = await store.create_pipeline(NewPipeline("custom", "mat", (NewTask("T"),)))
    assert not dedup_c and c.id != a.id
