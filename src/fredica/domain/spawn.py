"""Spawning and routing at the owner (DESIGN §4.3, seed 001 §2.6).

A pipeline template's post-completion hook receives the completed task, its pipeline and its
siblings, and returns a `SpawnPlan`. The store applies the plan inside the same transaction that
accepts the completion, so a crash can never leave a parent completed without its children.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fredica.domain.models import Affinity, NewTask, Pipeline, Task


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
class Placement:
    """A task's affinity and the node holding its input files."""

    affinity: Affinity | None
    file_node_id: str | None

    @classmethod
    def follow(cls, node_id: str | None, hard: bool = False) -> Placement | None:
        """Run where `node_id` holds the inputs: there only (`hard`), or there first."""
        if not node_id:
            return None
        return cls(Affinity.hard(node_id) if hard else Affinity.soft(node_id), node_id)


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
    #: where existing, not yet started tasks run: their inputs are on the node that ran the
    #: completed task (seed 001 §2.6: HARD when only that node can read them, else SOFT)
    place: dict[str, Placement] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.new_tasks
            or self.patch_payloads
            or self.add_dependencies
            or self.skip
            or self.pipeline_updates
            or self.place
        )


SpawnHook = Callable[[SpawnInput], SpawnPlan | None]
