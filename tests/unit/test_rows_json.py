"""Rows as JSON: every slot, enums as their values, an affinity as its object."""

from __future__ import annotations

import enum
import json

from fredica.domain import models
from fredica.domain.models import Affinity, CachePolicy, CloudPreference, TaskStatus


def _naive(obj: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in obj.__slots__:  # type: ignore[attr-defined]
        value = getattr(obj, name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, Affinity):
            value = value.to_json()
        out[name] = value
    return out


def _task(**over: object) -> models.Task:
    values: dict[str, object] = {name: None for name in models.Task.__slots__}
    values.update(
        id="t1",
        type="X",
        status=TaskStatus.RUNNING,
        priority=5,
        depends_on=["a"],
        payload={"k": [1, 2]},
        result={"ok": True},
        cache_policy=CachePolicy.CHECK_EXISTING,
        cloud_preference=CloudPreference.AUTO,
        excluded_nodes=[],
        retry_count=0,
        max_retries=3,
        created_by="n",
        owner_id="n",
        owner_epoch=0,
        progress=10,
        is_paused=False,
        is_pausable=True,
        attempt=2,
        cancel_requested=False,
        change_seq=7,
        created_at=1.0,
        updated_at=2.0,
    )
    values.update(over)
    return models.Task(**values)  # type: ignore[arg-type]


def test_a_task_as_json_has_every_slot_with_enums_and_affinity_converted() -> None:
    for task in (_task(), _task(affinity=Affinity.hard("node-b"), status=TaskStatus.PENDING)):
        data = task.to_json()
        assert data == _naive(task)
        assert list(data) == list(models.Task.__slots__)
        json.dumps(data)  # plain JSON values only
    assert _task(affinity=Affinity(models.AffinityKind.SOFT, "x")).to_json()["affinity"] == {
        "kind": "SOFT",
        "node_id": "x",
    }
    assert _task().to_json()["status"] == "running"


def test_a_task_built_from_its_columns_has_each_column_in_its_own_field() -> None:
    """`task_from_values` sets the slots in field order: a field out of place would put one
    column's value under another column's name."""
    from fredica.store.rows import TASK_FIELDS, task_from_values

    converted = {
        "status": "running",
        "depends_on": '["p"]',
        "payload": '{"k": 1}',
        "result": None,
        "excluded_nodes": '["n9"]',
        "cache_policy": CachePolicy.PREFER_ORIGINAL.value,
        "cloud_preference": CloudPreference.LOCAL_ONLY.value,
        "affinity_kind": "HARD",
        "affinity_node_id": "n7",
        "is_paused": 1,
        "is_pausable": 0,
        "cancel_requested": 1,
    }
    values = [converted.get(c, f"<{c}>") for c in TASK_FIELDS]
    task = task_from_values(values)
    for column in TASK_FIELDS:
        if column not in converted and column != "ord":
            assert getattr(task, column) == f"<{column}>", column
    assert task.status is TaskStatus.RUNNING
    assert (task.depends_on, task.payload, task.excluded_nodes) == (["p"], {"k": 1}, ["n9"])
    assert task.cache_policy is CachePolicy.PREFER_ORIGINAL
    assert task.cloud_preference is CloudPreference.LOCAL_ONLY
    assert task.affinity == Affinity.from_columns("HARD", "n7")
    assert (task.is_paused, task.is_pausable, task.cancel_requested) == (True, False, True)
    assert task == models.Task(*(getattr(task, name) for name in models.Task.__slots__))
