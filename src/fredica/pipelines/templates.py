"""Pipeline templates: turn a request into a DAG of tasks, and route on completions.

A template's `build` validates the request and returns the pipeline to create (nothing is
written if it raises); `on_task_completed` is the post-completion hook that the store runs in the
transaction accepting a completion (DESIGN §4.3).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from fredica.domain import errors
from fredica.domain.ids import uuid4_strings
from fredica.domain.models import Affinity, NewPipeline, NewTask
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.executors import network_test
from fredica.executors.base import TaskExecutor
from fredica.pipelines.request import PipelineRequest, TaskSpecIn


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What a template may know while building."""

    known_task_types: frozenset[str]
    node_id: str
    publisher_id: str | None = None


class Template(ABC):
    name: str
    description: str = ""

    @abstractmethod
    def build(self, request: PipelineRequest, ctx: BuildContext) -> NewPipeline:
        """Validate `request` and return the pipeline with its initial tasks."""

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        """Post-completion hook: tasks to spawn, payloads to patch, tasks to skip."""
        return None


def _affinity(spec: TaskSpecIn) -> Affinity | None:
    return Affinity(spec.affinity.kind, spec.affinity.node_id) if spec.affinity else None


def toposort_refs(specs: list[TaskSpecIn]) -> list[str]:
    """Refs in dependency order; InvalidRequest naming duplicates, unknown refs or a cycle."""
    refs = [s.ref for s in specs]
    seen: set[str] = set()
    for ref in refs:
        if ref in seen:
            raise errors.InvalidRequest(f"tasks: duplicate ref {ref!r}")
        seen.add(ref)
    children: dict[str, list[str]] = {r: [] for r in refs}
    indegree = {r: 0 for r in refs}
    for i, spec in enumerate(specs):
        for parent in spec.depends_on:
            if parent not in seen:
                raise errors.InvalidRequest(
                    f"tasks[{i}] ({spec.ref}): depends_on names unknown ref {parent!r}"
                )
            if parent == spec.ref:
                raise errors.InvalidRequest(f"tasks[{i}] ({spec.ref}): depends on itself")
            children[parent].append(spec.ref)
            indegree[spec.ref] += 1
    queue = deque(r for r in refs if indegree[r] == 0)
    order: list[str] = []
    while queue:
        ref = queue.popleft()
        order.append(ref)
        for child in children[ref]:
            indegree[child] -= 1
            if indegree[child] == 0:
                queue.append(child)
    if len(order) != len(refs):
        cyclic = sorted(r for r in refs if indegree[r] > 0)
        raise errors.InvalidRequest(f"tasks: depends_on has a cycle among {', '.join(cyclic)}")
    return order


class CustomTemplate(Template):
    """Any DAG the request lists: `{ref, type, payload, depends_on, priority, max_retries,
    cache_policy}` per task."""

    name = "custom"
    description = "A DAG of tasks given in the request."

    def build(self, request: PipelineRequest, ctx: BuildContext) -> NewPipeline:
        if not request.tasks:
            raise errors.InvalidRequest("tasks: a custom pipeline needs at least one task")
        for i, spec in enumerate(request.tasks):
            if spec.type not in ctx.known_task_types:
                known = ", ".join(sorted(ctx.known_task_types))
                raise errors.InvalidRequest(
                    f"tasks[{i}] ({spec.ref}): unknown task type {spec.type!r}; known: {known}"
                )
        order = toposort_refs(request.tasks)
        ids = dict(zip(order, uuid4_strings(len(order)), strict=True))
        by_ref = {s.ref: s for s in request.tasks}
        tasks = tuple(
            NewTask(
                id=ids[ref],
                type=spec.type,
                payload=spec.payload,
                depends_on=tuple(ids[p] for p in spec.depends_on),
                priority=spec.priority if request.priority is None else request.priority,
                max_retries=spec.max_retries,
                cache_policy=spec.cache_policy,
                cloud_preference=spec.cloud_preference or request.cloud_preference,
                idempotency_key=spec.idempotency_key,
                publisher_id=ctx.publisher_id,
                affinity=_affinity(spec),
            )
            for ref, spec in ((r, by_ref[r]) for r in order)
        )
        params = dict(request.params)
        params["refs"] = ids
        return NewPipeline(
            template=self.name,
            material_id=request.material_id or f"custom:{uuid.uuid4()}",
            tasks=tasks,
            params=params,
            publisher_id=ctx.publisher_id,
        )


class NetworkTestTemplate(Template):
    """One NETWORK_TEST task (seed 001 Appendix A); params `{urls, timeout_ms}`."""

    name = "network_test"
    description = "HTTP latency to a list of URLs."

    def build(self, request: PipelineRequest, ctx: BuildContext) -> NewPipeline:
        unknown = set(request.params) - {"urls", "timeout_ms"}
        if unknown:
            raise errors.InvalidRequest(f"params: unknown key(s) {', '.join(sorted(unknown))}")
        payload = dict(request.params)
        try:
            network_test.validate_payload(payload)
        except errors.TaskError as exc:
            raise errors.InvalidRequest(f"params: {exc.message}") from exc
        task = NewTask(
            id=str(uuid.uuid4()),
            type=network_test.TASK_TYPE,
            payload=payload,
            priority=request.priority if request.priority is not None else 5,
            max_retries=0,
            is_pausable=True,
            publisher_id=ctx.publisher_id,
        )
        return NewPipeline(
            template=self.name,
            material_id=request.material_id or f"network_test:{uuid.uuid4()}",
            tasks=(task,),
            params=payload,
            publisher_id=ctx.publisher_id,
        )


class Registrar(Protocol):
    """Where pipeline modules add their executors and templates (`engine.registry.Registry`
    implements it; pipelines sit below the engine and never import it)."""

    def add_executor(self, executor: TaskExecutor) -> None:
        """Run tasks of `executor.task_type` with `executor`."""

    def add_template(self, template: Template) -> None:
        """Offer `template` under `template.name`."""


def register_builtin(registry: Registrar) -> None:
    registry.add_template(CustomTemplate())
    registry.add_template(NetworkTestTemplate())
