"""The executor interface (DESIGN §5, seed 000 "TaskExecutor 接口")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from fredica.domain import models

if TYPE_CHECKING:
    from fredica.executors.context import TaskContext


@dataclass(frozen=True, slots=True)
class ExecuteResult:
    """What an execution produced. `error is None` means success (seed 000)."""

    result_json: dict[str, Any] | None = None
    error: str | None = None
    error_type: models.ErrorType | None = None
    retry_after: float | None = None  # seconds from now (RATE_LIMITED)

    @property
    def ok(self) -> bool:
        return self.error is None


class TaskExecutor(ABC):
    """Runs one task type.

    Subclasses set `task_type`, optionally `capability` (the CapabilityFunction the node needs,
    None = runs anywhere) and `pausable`, and implement `execute`. Raising a `TaskError`
    subclass is the idiomatic way to fail; any other exception is a TRANSIENT failure.
    Executors never touch the store: they act only through the `TaskContext`.
    """

    task_type: ClassVar[str]
    capability: ClassVar[str | None] = None
    pausable: ClassVar[bool] = False
    #: True: the engine starts `can_skip`/`execute` at once, on its own asyncio task, and makes
    #: a task of their own only when they first wait (quick work that often never waits, such
    #: as an in-memory merge, then costs no task at all). Set it only if the executor enters no
    #: task-bound scope (`asyncio.timeout`, a `TaskGroup`, an httpx or anyio client) before its
    #: first `await` that suspends: such a scope would bind to the engine's task.
    starts_inline: ClassVar[bool] = False

    @abstractmethod
    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        """Do the work of `task` and return its result."""

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        """CHECK_EXISTING: return the result of an earlier identical run whose outputs still
        exist (the task is then completed without running), or None to run it."""
        return None

    async def on_task_failed(self, task: models.Task, result: ExecuteResult) -> None:
        """Called once when the task fails permanently or is cancelled (side effects only)."""
        return None
