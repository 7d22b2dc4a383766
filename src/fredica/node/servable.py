"""Work that no known node can ever run, found when its pipeline is created.

A task whose capability no node of the cluster declares would stay pending forever (a YouTube
download on a node where `capabilities.download.youtube.enabled` is false, an analysis where
`ai_analyze` is disabled). The owner refuses such a pipeline at once, naming the task types, the
capabilities they need and why this node does not declare them. "Known" is every row of the
node registry, offline ones included (a sleeping desktop comes back), so a pipeline waits for a
known node but never for one that does not exist. Pure: the caller reads the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fredica.capabilities import catalog, task_types
from fredica.domain import errors, models
from fredica.store.base import NodeRecord

F = catalog.CapabilityFunction


@dataclass(frozen=True, slots=True)
class NodeView:
    """What one node can run: the capability functions it declares and, if it reports them,
    the task types it has executors for (None: not reported, the standard ones assumed)."""

    node_id: str
    functions: frozenset[F]
    task_types: frozenset[str] | None
    # the functions it declares with a cloud backend (a `local_only` task needs one of the
    # others, a `cloud_only` task one of these)
    cloud_functions: frozenset[F] = frozenset()
    local_functions: frozenset[F] | None = None  # None: every declared function

    @classmethod
    def of(cls, record: NodeRecord) -> NodeView:
        local: set[F] = set()
        cloud: set[F] = set()
        for row in record.capabilities:
            try:
                function = F(str(row.get("function")))
            except ValueError:  # a function this version does not know
                continue
            (cloud if row.get("accelerator") == "CloudAPI" else local).add(function)
        reported = record.info.get("task_types")
        types = frozenset(map(str, reported)) if isinstance(reported, list) else None
        return cls(record.id, frozenset(local | cloud), types, frozenset(cloud), frozenset(local))

    def can_run(
        self,
        task_type: str,
        needed: frozenset[F],
        preference: models.CloudPreference | None = None,
        function: F | None = None,
    ) -> bool:
        """Whether the node can run the type (and, given the task's cloud `preference` and the
        `function` whose backend it chooses, honour that preference)."""
        if self.task_types is not None:
            able = task_type in self.task_types and needed <= self.functions
        elif not task_types.is_known_task_type(task_type):
            able = True  # a plugin's type on a node that does not say: it may have it
        else:
            able = needed <= self.functions
        if not able or function is None:
            return able
        if preference is models.CloudPreference.LOCAL_ONLY:
            local = self.functions if self.local_functions is None else self.local_functions
            return function in local
        if preference is models.CloudPreference.CLOUD_ONLY:
            return function in self.cloud_functions
        return True


@dataclass(frozen=True, slots=True)
class Unservable:
    """A task type no known node can run: what it needs, and which of that nobody declares."""

    task_type: str
    needed: tuple[F, ...]
    missing: tuple[F, ...]
    # set when nodes have the function but none with the backend kind the task insists on
    only: models.CloudPreference | None = None
    function: F | None = None


def needed_functions(
    task_type: str, payload: Mapping[str, object], extra: Mapping[str, F | None]
) -> frozenset[F] | None:
    """Every function one node must declare to run the task (None: the payload is unusable,
    which the task itself reports when it runs)."""
    try:
        function = task_types.required_function(task_type, payload, extra)
    except errors.PayloadError:
        return None
    if function is None:
        return frozenset()
    return frozenset({function, *task_types.co_required_functions(task_type)})


def unservable(
    tasks: Sequence[models.NewTask], nodes: Sequence[NodeView], extra: Mapping[str, F | None]
) -> list[Unservable]:
    """The tasks of a new pipeline that none of `nodes` can run, one entry per type and need."""
    declared = frozenset().union(*(n.functions for n in nodes))
    found: dict[tuple[str, frozenset[F], models.CloudPreference | None], Unservable] = {}
    strict = (models.CloudPreference.LOCAL_ONLY, models.CloudPreference.CLOUD_ONLY)
    for spec in tasks:
        needed = needed_functions(spec.type, spec.payload, extra)
        if needed is None:
            continue
        only = spec.cloud_preference if spec.cloud_preference in strict else None
        function = _chosen_function(spec, extra) if only is not None else None
        if any(n.can_run(spec.type, needed, only, function) for n in nodes):
            continue
        if function is not None and any(n.can_run(spec.type, needed) for n in nodes):
            item = Unservable(spec.type, _sorted(needed), (), only, function)
        else:
            item = Unservable(spec.type, _sorted(needed), _sorted(needed - declared))
        found.setdefault((spec.type, needed, item.only), item)
    return list(found.values())


def _chosen_function(spec: models.NewTask, extra: Mapping[str, F | None]) -> F | None:
    """The function whose backend the task's cloud preference applies to."""
    try:
        return task_types.required_function(spec.type, spec.payload, extra)
    except errors.PayloadError:
        return None


def describe(found: Iterable[Unservable], why_not_here: Callable[[F], str]) -> str:
    """One message for the user: each type, what it needs, and why this node lacks it."""
    parts = []
    for item in found:
        if item.only is not None and item.function is not None:
            kind = "local" if item.only is models.CloudPreference.LOCAL_ONLY else "cloud"
            parts.append(
                f"{item.task_type} is {item.only.value}, and no known node has a {kind} "
                f"backend for {item.function.value}"
            )
        elif item.missing:
            names = " and ".join(f.value for f in item.missing)
            reasons = "; ".join(f"{f.value}: {why_not_here(f)}" for f in item.missing)
            parts.append(
                f"{item.task_type} needs {names}, which no known node declares "
                f"(on this node {reasons})"
            )
        elif item.needed:
            names = " and ".join(f.value for f in item.needed)
            parts.append(f"{item.task_type} needs {names} on one node; no known node has all")
        else:
            parts.append(f"no known node has an executor for {item.task_type}")
    return (
        "no known node can run this pipeline: "
        + "; ".join(parts)
        + ". Enable the capability in a node's worker.yaml (`fredica capabilities` explains "
        "each one), or start a node that has it"
    )


def _sorted(functions: Iterable[F]) -> tuple[F, ...]:
    return tuple(sorted(functions, key=lambda f: f.value))
