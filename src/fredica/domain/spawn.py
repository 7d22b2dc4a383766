"""Spawning and routing at the owner (DESIGN §4.3, seed 001 §2.6).

A pipeline template's post-completion hook receives the completed task, its pipeline and its
siblings, and returns a `SpawnPlan`. The store applies the plan inside the same transaction that
accepts the completion, so a crash can never leave a parent completed without its children.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fredica.domain.models import NewTask, Pipeline, Task


@dataclass(frozen=True, slots=True)
class SpawnInput:
    task: Task  # the task just completed (status completed, result set)
    pipeline: Pipeline
    siblings: tuple[Task, ...]  # every task of the pipeline, as of this transaction


@dataclass(frozen=True, slots=True)
class SpawnPlan:
    """What a completion adds to or changes in its pipeline."""

    new_tasks: tuple[NewTask, ...] = ()
    #: payload keys merged into existing, not yet started tasks (e.g. detected language)
    patch_payloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: extra parents for existing pending tasks (e.g. MERGE waits for every spawned chunk)
    add_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: tasks the routing decided are not needed (-> skipped)
    skip: tuple[str, ...] = ()
    skip_reason: str = "not needed (conditional routing)"
    #: pipeline columns to set (only `detected_language` today)
    pipeline_updates: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.new_tasks
            or self.patch_payloads
            or self.add_dependencies
            or self.skip
            or self.pipeline_updates
        )


SpawnHook = Callable[[SpawnInput], SpawnPlan | None]
