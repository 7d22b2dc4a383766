"""Which tasks this node may claim and which backend runs each (seed 001 §2.7, §3.15).

The node's declared capabilities (worker.yaml + auto-detection) and its hardware profile are
computed once at start-up. The engine asks `claimable_types` for its claim filter, and `choose`
for every claimed task: the best backend by effective score given the live per-backend load, so
`max_concurrent` is respected locally. A task that no local backend can serve fails with a
RESOURCE error, which excludes this node so another node takes it.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fredica.capabilities import catalog, probes, scoring, task_types
from fredica.config import schema as config
from fredica.domain import errors, models
from fredica.engine import declare
from fredica.engine.cloudlimits import CloudLimits
from fredica.executors import usage

logger = logging.getLogger(__name__)

F = catalog.CapabilityFunction


@dataclass(frozen=True)
class BackendChoice:
    backend: str
    score: int
    model: str | None
    config: Mapping[str, Any]
    breakdown: str
    #: how the choice is recorded with the outcome ("backend score=N (breakdown)")
    note: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "note", f"{self.backend} score={self.score} ({self.breakdown})")


@functools.cache
def _probe(binaries: tuple[tuple[str, str], ...]) -> probes.ProbeReport:
    # The machine does not change while the process runs: probe once per process.
    return probes.run_probes(binary_paths=dict(binaries))


@dataclass
class BackendSelector:
    capabilities: tuple[catalog.Capability, ...]
    profile: scoring.NodeProfile
    plugin_functions: dict[str, F | None] = field(default_factory=dict)
    backend_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    hardware: declare.HardwareScores | None = None
    #: every backend considered at start-up, declared or not, with the reason
    declarations: tuple[declare.Declaration, ...] = ()
    #: cloud API ceilings and the daily budget (seed 001 §7.8); None: max_concurrent only
    limits: CloudLimits | None = None
    _gates: dict[
        tuple[frozenset[str], frozenset[str]], tuple[frozenset[str] | None, frozenset[str] | None]
    ] = field(default_factory=dict, repr=False, compare=False)
    #: choices by everything they depend on (type, preference, payload, load): scoring is a
    #: pure function of these and of this selector's fixed capabilities and profile
    _choices: dict[tuple[Any, ...], BackendChoice] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def _pending_cap(self) -> int:
        """Queue depths at or past this score the same (the load modifier of §2.7.2 is
        `min(1, pending / max_workers)`): the choice cache keys on the depth clamped to it, so
        a node with work claimed ahead does not miss the cache on every depth it passes."""
        return max(1, self.profile.max_workers)

    @classmethod
    def from_config(
        cls, cfg: config.WorkerConfig, plugin_functions: Mapping[str, F | None]
    ) -> BackendSelector:
        """Probe this machine (bounded, cached) and declare what the config allows."""
        report = _probe(tuple(sorted(declare.binary_paths(cfg).items())))
        declarations = declare.declare(cfg, report, declare.RUNNABLE)
        hardware = declare.resolve_hardware(cfg, report)
        return cls(
            declare.declared_capabilities(declarations),
            declare.node_profile(cfg, hardware),
            dict(plugin_functions),
            _backend_configs(cfg),
            hardware,
            tuple(declarations),
        )

    def why_not(self, function: F) -> str:
        """Why this node does not declare `function` ("" if it does): the reasons its
        backends were not declared, e.g. the worker.yaml key that disables them."""
        if any(c.function is function for c in self.capabilities):
            return ""
        reasons = dict.fromkeys(
            f"{d.backend}: {d.reason}" if d.backend else d.reason
            for d in self.declarations
            if d.function is function and not d.declared
        )
        return "; ".join(reasons) or f"no backend for {function.value} is known here"

    def runtime_cache_updates(self, cfg: config.WorkerConfig) -> dict[str, object]:
        """`_runtime` values that differ from the file's (seed 001 §2.7.1 score cache)."""
        if self.hardware is None:
            return {}
        current = cfg.runtime.model_dump()
        return {k: v for k, v in self.hardware.runtime_updates().items() if current.get(k) != v}

    def function_of(self, task_type: str, payload: Mapping[str, Any]) -> F | None:
        return task_types.required_function(task_type, payload, self.plugin_functions)

    def type_scores(
        self,
        task_types: Iterable[str],
        active_by_backend: Mapping[str, int],
        pending: int,
    ) -> dict[str, float]:
        """This node's effective score per task type now (its best backend for a task of that
        type with no particular payload, at this load): what it advertises to its peers and
        compares with theirs before claiming (seed 001 §6.3)."""
        scores: dict[str, float] = {}
        load = scoring.LoadInfo(
            pending_tasks=pending,
            active_by_backend=dict(active_by_backend),
            ceilings=self._ceilings(None),
        )
        for task_type in sorted(task_types):
            demand = scoring.TaskDemand(
                task_type=task_type,
                payload={},
                cloud_preference=scoring.CloudPreference.AUTO,
                quality=scoring.QualityContext(),
                storage_preference="any",
            )
            try:
                best = scoring.evaluate(
                    self.capabilities, demand, self.profile, load, self.plugin_functions
                ).best
            except errors.PayloadError:
                continue  # the type needs a payload to pick its function (DOWNLOAD_VIDEO)
            if best is not None:
                scores[task_type] = round(best.breakdown.effective, 2)
        return scores

    def saturated_functions(self, active_by_backend: Mapping[str, int]) -> frozenset[F]:
        """Functions whose every declared backend is at its max_concurrent right now."""
        full = self._full_backends(active_by_backend)
        free = {c.function for c in self.capabilities if c.backend not in full}
        return frozenset({c.function for c in self.capabilities} - free)

    def _full_backends(self, active_by_backend: Mapping[str, int]) -> frozenset[str]:
        """Backends at their max_concurrent right now (or at their lower ceiling: halved
        after a 429, the cluster's room, the daily cloud budget spent)."""
        full = set()
        ceilings = self._ceilings(None)
        for cap in self.capabilities:
            limit = cap.metadata.get("max_concurrent", "")
            active = active_by_backend.get(cap.backend, 0)
            if limit.isdigit() and active >= int(limit):
                full.add(cap.backend)
            ceiling = ceilings.get(cap.backend)
            if ceiling is not None and active >= ceiling[0]:
                full.add(cap.backend)
        return frozenset(full)

    def _ceilings(self, publisher: str | None) -> dict[str, tuple[int, str]]:
        return self.limits.ceilings(publisher) if self.limits is not None else {}

    def claimable_types(
        self, executor_types: frozenset[str], busy: frozenset[F] = frozenset()
    ) -> frozenset[str]:
        """Types with an executor here whose capability function this node declares (and,
        given `busy`, has a backend with a free slot)."""
        return self._types_for({c.function for c in self.capabilities} - busy, executor_types)

    def preference_gates(
        self, executor_types: frozenset[str], active_by_backend: Mapping[str, int] | None = None
    ) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        """(types runnable here with a cloud backend, with a local one), for the claim: a
        `cloud_only` / `local_only` task of another type is left to a node that can honour it
        (scoring would refuse it here), and, given `active_by_backend`, waits while those
        backends are all at their max_concurrent (a node whose local ASR is busy does not
        claim a local_only chunk just because its cloud ASR is free). None where every type
        qualifies (no filter needed)."""
        full = self._full_backends(active_by_backend or {})
        key = (executor_types, full)
        cached = self._gates.get(key)
        if cached is not None:
            return cached
        everything = self._types_for({c.function for c in self.capabilities}, executor_types)
        gates: list[frozenset[str] | None] = []
        for cloud in (True, False):
            functions = {
                c.function
                for c in self.capabilities
                if c.is_cloud == cloud and c.backend not in full
            }
            types = self._types_for(functions, executor_types)
            gates.append(None if types >= everything else types)
        if len(self._gates) >= CHOICE_CACHE_SIZE:
            self._gates.clear()
        self._gates[key] = (gates[0], gates[1])
        return gates[0], gates[1]

    def _types_for(self, functions: set[F], executor_types: frozenset[str]) -> frozenset[str]:
        servable = task_types.servable_task_types(functions)
        out = set()
        for task_type in executor_types:
            if task_type in self.plugin_functions:
                needed = self.plugin_functions[task_type]
                if needed is None or needed in functions:
                    out.add(task_type)
            elif task_type in servable:
                out.add(task_type)
        return frozenset(out)

    def choose(
        self, task: models.Task, active_by_backend: Mapping[str, int], pending: int
    ) -> BackendChoice:
        """The best backend for `task` now; ResourceError (with the reasons) if none fits.

        A cloud choice binds the call meter of its backend to the calling asyncio task (the
        one that runs the attempt): its 429s and costs reach this node's `limits`."""
        ceilings = self._ceilings(task.publisher_id)
        key = _choice_key(task, active_by_backend, min(pending, self._pending_cap))
        if key is not None and ceilings:
            key = (*key, tuple(sorted(ceilings.items())))
        cached = self._choices.get(key) if key is not None else None
        if cached is not None:
            choice = cached
        else:
            choice = self._choose(task, active_by_backend, pending, ceilings)
            if key is not None:
                if len(self._choices) >= CHOICE_CACHE_SIZE:
                    self._choices.clear()
                self._choices[key] = choice
        if self.limits is not None and self.limits.is_cloud(choice.backend):
            usage.bind(self.limits.meter(choice.backend, task.publisher_id))
        return choice

    def _choose(
        self,
        task: models.Task,
        active_by_backend: Mapping[str, int],
        pending: int,
        ceilings: Mapping[str, tuple[int, str]],
    ) -> BackendChoice:
        payload = task.payload
        demand = scoring.TaskDemand(
            task_type=task.type,
            payload=payload,
            cloud_preference=scoring.CloudPreference(task.cloud_preference.value),
            quality=scoring.QualityContext(
                task_override=_quality(payload.get("quality_mode")),
                pipeline_mode=_quality(payload.get("pipeline_quality_mode")),
                acknowledged=bool(payload.get("quality_tradeoff_acknowledged", False)),
            ),
            storage_preference=str(payload.get("storage_preference", "any")),
        )
        load = scoring.LoadInfo(
            pending_tasks=pending, active_by_backend=dict(active_by_backend), ceilings=ceilings
        )
        evaluation = scoring.evaluate(
            _model_pinned(self.capabilities, payload),
            demand,
            self.profile,
            load,
            self.plugin_functions,
        )
        best = evaluation.best
        if best is None:
            reasons = "; ".join(r.reason for r in evaluation.rejected) or "no capability declared"
            self._check_publisher_budget(task, reasons)
            if _only_busy(evaluation.rejected):
                raise errors.BackendBusy(f"{task.type}: {reasons}")
            raise errors.ResourceError(
                f"no backend on this node can serve {task.type}: {reasons}", hint="NO_BACKEND"
            )
        b = best.breakdown
        breakdown = (
            f"base {b.base:g} hardware {b.hardware:+g} cloud {b.cloud:+g} "
            f"language {b.language:+g} network {b.network:+g} load {b.load:+g}"
        )
        config = dict(self.backend_configs.get(best.backend, {}))
        kind = best.capability.accelerator.kind.value if best.capability is not None else ""
        limit = best.capability.metadata.get("max_concurrent") if best.capability else None
        if limit:
            # the executor sizes its share of the machine by it (CPU threads per job)
            config["max_concurrent"] = int(limit)
        if kind:
            # the executor runs on the accelerator that was scored (GPU row -> CUDA)
            config["accelerator"] = kind
        if best.model:
            # the event recording this choice names the model and device that will run
            breakdown = f"model {best.model} on {kind or 'cpu'}; {breakdown}"
        return BackendChoice(best.backend, best.score, best.model, config, breakdown)

    def _check_publisher_budget(self, task: models.Task, reasons: str) -> None:
        """A task left without a backend because its publisher token spent its daily cloud
        budget waits for the next day (RATE_LIMITED with that delay): the claim cannot filter
        by token, and handing it back at once would have it claimed again at once."""
        if self.limits is None or not task.publisher_id:
            return
        refusal = self.limits.refusal(task.publisher_id)
        if refusal and task.cloud_preference is models.CloudPreference.CLOUD_ONLY:
            raise errors.PermanentError(f"{task.type}: cloud_only, but {refusal}")
        spent = self.limits.budget_reached(task.publisher_id)
        if spent and spent != self.limits.budget_reached(None) and spent in reasons:
            raise errors.RateLimitedError(
                f"{task.type}: {reasons}; its cloud backends wait for the next UTC day",
                retry_after_sec=self.limits.seconds_to_next_day(),
            )


def _only_busy(rejected: tuple[scoring.Rejection, ...]) -> bool:
    """Whether the task waits for a slot rather than for another node: some backend is at its
    max_concurrent, and the others are only the ones the task's cloud_preference rules out
    (a local_only task on a node with a cloud backend waits for its local one)."""
    busy = ["max_concurrent" in r.reason for r in rejected]
    cloud = [r.reason.startswith("excluded by cloud rules") for r in rejected]
    return any(busy) and all(b or c for b, c in zip(busy, cloud, strict=True))


CHOICE_CACHE_SIZE = 512
_SMALL_PAYLOAD = 16  # keys; larger payloads (unique per task anyway) are not cached


def _choice_key(
    task: models.Task, active_by_backend: Mapping[str, int], pending: int
) -> tuple[Any, ...] | None:
    payload = task.payload
    shape: Any = ()
    if not active_by_backend and not payload:  # the common case, without building anything
        return (task.type, task.cloud_preference, shape, (), pending)
    if payload:
        if len(payload) > _SMALL_PAYLOAD:
            return None
        try:
            shape = tuple(sorted(payload.items()))
            hash(shape)
        except TypeError:  # nested values: their JSON is the key
            try:
                shape = json.dumps(payload, sort_keys=True, separators=(",", ":"))
            except (TypeError, ValueError):
                return None
    load = (
        tuple(sorted((k, v) for k, v in active_by_backend.items() if v))
        if active_by_backend
        else ()
    )
    return (task.type, task.cloud_preference, shape, load, pending)


def _model_pinned(
    capabilities: tuple[catalog.Capability, ...], payload: Mapping[str, Any]
) -> tuple[catalog.Capability, ...]:
    """Capabilities left when a task names its Whisper model (`model_name`): local Whisper
    rows of other models are dropped, so the choice recorded is the model that runs (a node
    without that model gets a NO_BACKEND error and another node takes the task)."""
    wanted = payload.get("model_name")
    if not isinstance(wanted, str) or not wanted:
        return capabilities
    return tuple(
        c
        for c in capabilities
        if c.function is not F.TRANSCRIBE or c.is_cloud or not c.models or wanted in c.models
    )


def _quality(value: object) -> scoring.QualityMode | None:
    if value is None:
        return None
    try:
        return scoring.QualityMode(str(value))
    except ValueError:
        return None


def _backend_configs(cfg: config.WorkerConfig) -> dict[str, dict[str, Any]]:
    """Each configured backend's settings (API keys included), for the executor that runs it.

    Keys live only in this node's config: they are handed to the local executor through its
    context and never written into a task or shared with peers (seed 001 §12.3)."""
    out: dict[str, dict[str, Any]] = {}
    caps = cfg.capabilities.model_dump()
    for section in caps.values():
        if not isinstance(section, dict):
            continue
        entries: list[Any] = list(section.get("providers") or [])
        entries += [v for v in section.values() if isinstance(v, dict) and "backend" in v]
        if "backend" in section:
            entries.append(section)
        for entry in entries:
            if isinstance(entry, dict) and entry.get("backend"):
                out.setdefault(str(entry["backend"]), {}).update(
                    {k: v for k, v in entry.items() if v not in (None, "", [])}
                )
    # every FFMPEG backend (auto-detected ones too) gets the section's path and scene threshold
    ff = cfg.capabilities.ffmpeg
    for name in ("ffmpeg-nvenc", "ffmpeg-videotoolbox", "ffmpeg-vaapi", "ffmpeg-cpu"):
        entry = out.setdefault(name, {})
        entry.setdefault("scene_threshold", ff.scene_detect.threshold)
        entry.setdefault("scene_detect_backend", ff.scene_detect.backend)
        if ff.ffmpeg_path:
            entry.setdefault("ffmpeg_path", ff.ffmpeg_path)
    return out
