"""The crash-recovery dialog's endpoints (seed 001 §7.5); the logic is the node service's
(`node.recovery`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from fredica.api import deps
from fredica.node import recovery

router = APIRouter(tags=["web"])


class RecoveryAnswer(BaseModel):
    """Body of `POST /api/v1/recovery` (the dialog's buttons)."""

    model_config = ConfigDict(extra="forbid")

    action: recovery.Action


@router.get("/api/v1/recovery")
async def get_recovery(node: deps.NodeDep) -> dict[str, Any]:
    """Whether the crash-recovery question is open, with the counts the dialog shows."""
    return await node.recovery_state()


@router.post("/api/v1/recovery")
async def answer_recovery(body: RecoveryAnswer, node: deps.NodeDep) -> dict[str, Any]:
    """Answer the crash-recovery question once per run: continue, cancel the pending tasks,
    or cancel every active pipeline."""
    return await node.answer_recovery(body.action)
