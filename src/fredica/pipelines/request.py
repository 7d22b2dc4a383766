"""The pipeline creation request (seed 001 §7.2 parameters), validated at the edge."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fredica.domain.models import AffinityKind, CachePolicy, CloudPreference


class AffinityIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: AffinityKind
    node_id: str = Field(min_length=1, max_length=200)


class TaskSpecIn(BaseModel):
    """One task of a `custom` pipeline; `depends_on` lists refs of tasks in the same request."""

    model_config = ConfigDict(extra="forbid")

    ref: str = Field(min_length=1, max_length=100)
    type: str = Field(min_length=1, max_length=100)
    payload: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    priority: int = Field(default=5, ge=0, le=10)
    max_retries: int = Field(default=3, ge=0, le=100)
    cache_policy: CachePolicy = CachePolicy.NONE
    cloud_preference: CloudPreference | None = None
    idempotency_key: str | None = Field(default=None, max_length=200)
    #: where the task may run: HARD = only on `node_id`; SOFT = there first (seed 001 §2.6)
    affinity: AffinityIn | None = None


class PipelineRequest(BaseModel):
    """Body of `POST /api/v1/pipelines`."""

    model_config = ConfigDict(extra="forbid")

    template: str = Field(min_length=1, max_length=100)
    material_id: str | None = Field(default=None, min_length=1, max_length=200)
    source: str | None = Field(default=None, max_length=4000)
    tasks: list[TaskSpecIn] | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    priority: int | None = Field(default=None, ge=0, le=10)
    cloud_preference: CloudPreference = CloudPreference.AUTO
    language: str = Field(default="auto", max_length=20)
    quality_mode: Literal["speed", "quality", "balanced"] | None = None
    storage_preference: Literal["any", "nas"] = "any"
    overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)
    quality_tradeoff_acknowledged: bool = False


class NetworkTestRequest(BaseModel):
    """Body of `POST /api/v1/NetworkTestRoute` (seed 001 A.5)."""

    model_config = ConfigDict(extra="forbid")

    urls: list[str] | None = None
    timeout_ms: int = Field(default=5000, gt=0, le=600_000)
