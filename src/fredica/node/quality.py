"""The quality trade-off question of seed 001 §2.7.2: which task types a request would create,
and whose `quality` default (worker.yaml `scheduling.quality_defaults`) it would lower. The web
UI asks before it creates such a pipeline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from fredica.capabilities import scoring
from fredica.config import schema as config
from fredica.domain import errors
from fredica.engine.registry import Registry
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext

# Task types created at run time by a completion hook (DESIGN §4.3), so absent from the DAG a
# template builds: they still count for the question.
SPAWNED_BY: dict[str, tuple[str, ...]] = {
    "SPLIT_AUDIO": ("TRANSCRIBE_CHUNK",),
    "DIARIZE_AUDIO": ("TRANSCRIBE_CHUNK",),
    "EXTRACT_FRAMES": ("OCR_FRAME_BATCH", "DETECT_FRAME_BATCH"),
}


def quality_defaults(cfg: config.WorkerConfig | None) -> dict[str, str]:
    """The node's own `scheduling.quality_defaults`, else the seed's defaults."""
    if cfg is not None:
        return {k: str(v) for k, v in cfg.scheduling.quality_defaults.items()}
    return dict(config.DEFAULT_QUALITY_DEFAULTS)


def declared_task_types(registry: Registry, name: str) -> list[str]:
    """Every task type template `name` says it can create (spawned ones included), if it says."""
    declared = getattr(registry.template(name), "task_types", ())
    return sorted(str(t) for t in declared)


def request_task_types(
    registry: Registry, request: PipelineRequest, ctx: BuildContext
) -> list[str]:
    """Task types the request would create: its tasks, or what the template builds (blocking:
    a template may probe the request; call in a thread)."""
    if request.tasks:
        types = [t.type for t in request.tasks]
    else:
        types = declared_task_types(registry, request.template)
        if not types:
            # Building is pure (nothing is written); a request it refuses will be refused
            # again, with the reason, when the dialog creates the pipeline.
            template = registry.template(request.template)
            with contextlib.suppress(Exception):
                types = [t.type for t in template.build(request, ctx).tasks]
    for task_type in list(types):
        types.extend(SPAWNED_BY.get(task_type, ()))
    return types


def lowered_defaults(
    types: list[str], request: PipelineRequest, defaults: Mapping[str, str]
) -> list[dict[str, Any]]:
    """`[{task_type, default}]` for each task type whose `quality` default the request lowers
    (its pipeline `quality_mode` or a per-type `overrides.<type>.quality_mode`)."""
    overrides = _overrides(request)
    modes = {k: scoring.QualityMode(v) for k, v in defaults.items()}
    pipeline_mode = scoring.QualityMode(request.quality_mode) if request.quality_mode else None
    lowered = scoring.tradeoff_confirmation_needed(
        [*types, *overrides], pipeline_mode, overrides, modes
    )
    return [{"task_type": t, "default": modes[t].value} for t in lowered if t in modes]


def _overrides(request: PipelineRequest) -> dict[str, scoring.QualityMode]:
    overrides: dict[str, scoring.QualityMode] = {}
    for task_type, override in request.overrides.items():
        mode = override.get("quality_mode")
        if mode is None:
            continue
        try:
            overrides[task_type] = scoring.QualityMode(mode)
        except ValueError:
            raise errors.InvalidRequest(
                f"overrides.{task_type}.quality_mode: must be quality, balanced or speed"
            ) from None
    return overrides
