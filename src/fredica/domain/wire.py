"""Rows as JSON and back, for the cluster protocol (DESIGN §6): what one node sends another is
what `to_json` gives, and the receiver rebuilds the same typed row with `task_from_json` /
`pipeline_from_json`. Pure functions."""

from __future__ import annotations

from typing import Any

from fredica.domain.models import (
    JSON,
    Affinity,
    AffinityKind,
    CachePolicy,
    CloudPreference,
    Pipeline,
    PipelineStatus,
    Task,
    TaskEvent,
    TaskStatus,
)


def task_from_json(d: JSON) -> Task:
    """The task `Task.to_json` described (KeyError/ValueError for a malformed row)."""
    values: dict[str, Any] = {name: d[name] for name in Task.__slots__}
    values["status"] = TaskStatus(values["status"])
    values["cache_policy"] = CachePolicy(values["cache_policy"])
    values["cloud_preference"] = CloudPreference(values["cloud_preference"])
    affinity = values["affinity"]
    values["affinity"] = (
        Affinity(AffinityKind(affinity["kind"]), str(affinity["node_id"])) if affinity else None
    )
    return Task(**values)


def pipeline_from_json(d: JSON) -> Pipeline:
    """The pipeline `Pipeline.to_json` described."""
    values: dict[str, Any] = {
        name: d[name] for name in Pipeline.__slots__ if name != "owner_history"
    }
    values["status"] = PipelineStatus(values["status"])
    values["owner_history"] = tuple(d.get("owner_history") or ())
    return Pipeline(**values)


def event_from_json(d: JSON) -> TaskEvent:
    """The event `TaskEvent.to_json` described."""
    return TaskEvent(**{name: d[name] for name in TaskEvent.__slots__})
