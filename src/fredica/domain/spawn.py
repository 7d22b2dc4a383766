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


class SpawnInput:
    """What a hook sees: the completed task, its pipeline, and (read on first use, inside the
    same transaction) every task of the pipeline. Loading siblings only when a hook asks keeps
    completions of large fan-outs linear instead of quadratic."""

    __slots__ = ("_load", "_siblings", "pipeline", "task")

    def __init__(
        self,
        task: Task,
        pipeline: Pipeline,
        siblings: tuple[Task, ...] | Callable[[], tuple[Task, ...]],
    ) -> None:
        self.task = task  # the task just completed (status completed, result set)
        self.pipeline = pipeline
        if callable(siblings):
            self._load, self._siblings = siblings, None
        else:  # already known (pure tests)
            self._load, self._siblings = tuple, tuple(siblings)

    @property
    def siblings(self) -> tuple[Task, ...]:
        if self._siblings is None:
            self._siblings = self._load()
        return self._siblings


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
