"""The crash-recovery question (seed 001 §7.5): after a crash, the UI asks once per run whether
to continue, cancel the pending tasks, or cancel every active pipeline this node owns.

The answer is kept in the store's settings with the run it was given in (`started_at`), so a
later crash asks again. Cancelling returns the store's outcomes: tasks still running here must
be signalled by the node's engine (`Node.answer_recovery` does it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Literal, get_args

from fredica.domain import errors, models
from fredica.domain.clock import Clock
from fredica.domain.models import ShutdownType, TaskStatus
from fredica.store.base import CancelOutcome, TaskStore

logger = logging.getLogger(__name__)

ACK_KEY = "web_recovery_acknowledged"
RUNNING_STATUSES = frozenset({TaskStatus.CLAIMED, TaskStatus.RUNNING, TaskStatus.STALE})
WAITING_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.RECLAIMED})
ACTIVE_PIPELINE_STATUSES = ("pending", "running")
PAGE = 1000  # pipelines per list query while collecting the active ones
ALL_TASKS = 1_000_000  # the list limit that means "every active task"

Action = Literal["continue", "cancel_pending", "cancel_all"]
ACTIONS: tuple[str, ...] = get_args(Action)


@dataclass(frozen=True)
class Run:
    """The node's current run, as the question needs it."""

    started_at: float | None
    previous_shutdown: ShutdownType
    startup_recovery: dict[str, int] | None


@dataclass
class _Cancelled:
    tasks: int = 0
    pipelines: int = 0


class CrashRecovery:
    """Asks and answers the question for the rows that one node owns."""

    def __init__(self, store: TaskStore, node_id: str, clock: Clock) -> None:
        self._store = store
        self._node_id = node_id
        self._clock = clock
        # two tabs answering at once: one wins, the other gets 409
        self._lock = asyncio.Lock()

    async def state(self, run: Run) -> dict[str, Any]:
        """Whether the question is open, with the counts the dialog shows (by task type)."""
        ack = await self._acknowledged(run)
        groups: dict[str, dict[str, int]] = {"running_here": {}, "running_elsewhere": {}}
        groups["pending"] = {}
        for task in await self._own_active_tasks():
            key = self._group(task)
            if key is not None:
                groups[key][task.type] = groups[key].get(task.type, 0) + 1
        return {
            "previous_shutdown_type": run.previous_shutdown.value,
            "needed": run.previous_shutdown is ShutdownType.CRASH and ack is None,
            "acknowledged": ack,
            "startup_recovery": run.startup_recovery,
            **{key: sum(by_type.values()) for key, by_type in groups.items()},
            "by_type": groups,
        }

    async def answer(self, run: Run, action: str) -> tuple[dict[str, Any], list[CancelOutcome]]:
        """Answer once per run; returns the answer and the outcomes of what was cancelled.

        Raises `IllegalTransition` when there was no crash or the question was answered."""
        if action not in ACTIONS:
            raise errors.InvalidRequest(f"action: must be one of {', '.join(ACTIONS)}")
        async with self._lock:
            await self._check_open(run)
            outcomes: list[CancelOutcome] = []
            if action == "cancel_pending":
                cancelled = await self._cancel_pending(outcomes)
            elif action == "cancel_all":
                cancelled = await self._cancel_all(outcomes)
            else:
                cancelled = _Cancelled()
            now = self._clock.now()
            answer = {"run": run.started_at, "action": action, "at": now}
            await self._store.set_config(ACK_KEY, json.dumps(answer))
        logger.info(
            "crash recovery answered: %s (%d tasks, %d pipelines cancelled)",
            action,
            cancelled.tasks,
            cancelled.pipelines,
            extra={"action": "recovery_answer"},
        )
        result = {
            "action": action,
            "cancelled_tasks": cancelled.tasks,
            "cancelled_pipelines": cancelled.pipelines,
            "acknowledged_at": now,
        }
        return result, outcomes

    async def _check_open(self, run: Run) -> None:
        if run.previous_shutdown is not ShutdownType.CRASH:
            raise errors.IllegalTransition(
                f"the previous shutdown was {run.previous_shutdown.value}; "
                "there is nothing to recover"
            )
        ack = await self._acknowledged(run)
        if ack is not None:
            raise errors.IllegalTransition(
                f"the recovery was already answered ({ack.get('action')})"
            )

    async def _acknowledged(self, run: Run) -> dict[str, Any] | None:
        raw = await self._store.get_config(ACK_KEY)
        if not raw:
            return None
        with contextlib.suppress(ValueError):
            ack = json.loads(raw)
            # An answer belongs to the run it was given in: a later crash asks again.
            if isinstance(ack, dict) and ack.get("run") == run.started_at:
                return ack
        return None

    def _group(self, task: models.Task) -> str | None:
        if task.status in RUNNING_STATUSES:
            return "running_here" if task.claimed_by == self._node_id else "running_elsewhere"
        return "pending" if task.status in WAITING_STATUSES else None

    async def _own_active_tasks(self) -> list[models.Task]:
        statuses = [s.value for s in models.ACTIVE_STATUSES]
        rows = await self._store.list_tasks(None, statuses, None, ALL_TASKS)
        return [t for t in rows if t.owner_id == self._node_id]

    async def _own_active_pipelines(self) -> list[str]:
        ids: list[str] = []
        for status in ACTIVE_PIPELINE_STATUSES:
            cursor: str | None = None
            while True:
                page = await self._store.page_pipelines(status, PAGE, cursor)
                ids.extend(p.id for p in page.items if p.owner_id == self._node_id)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
        return ids

    async def _cancel_pending(self, outcomes: list[CancelOutcome]) -> _Cancelled:
        waiting = [t.id for t in await self._own_active_tasks() if t.status in WAITING_STATUSES]
        for task_id in waiting:
            # One cancel may cascade to waiting dependents: those are simply done.
            await self._try_cancel_task(task_id, outcomes)
        still_active = {t.id for t in await self._own_active_tasks()}
        return _Cancelled(tasks=sum(1 for t in waiting if t not in still_active))

    async def _cancel_all(self, outcomes: list[CancelOutcome]) -> _Cancelled:
        cancelled = _Cancelled()
        for pipeline_id in await self._own_active_pipelines():
            with contextlib.suppress(errors.IllegalTransition, errors.NotFound):
                outcomes.extend(await self._store.cancel_pipeline(pipeline_id))
                cancelled.pipelines += 1
        for task in await self._own_active_tasks():
            # Tasks outside any pipeline are not reached by the pipeline cancel.
            if task.pipeline_id is None and await self._try_cancel_task(task.id, outcomes):
                cancelled.tasks += 1
        return cancelled

    async def _try_cancel_task(self, task_id: str, outcomes: list[CancelOutcome]) -> bool:
        """Cancel one task; False when it moved on meanwhile (claimed, finished, cascaded)."""
        try:
            outcomes.append(await self._store.cancel_task(task_id))
        except (errors.IllegalTransition, errors.NotFound):
            return False
        return True
