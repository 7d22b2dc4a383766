"""One exception hierarchy for fredica.

Each exception's docstring is its default message. Backend and subprocess errors are classified
into `TaskError` subclasses at the seam, so the engine only ever sees the error classes of
seed 001 §7.6 (plus the special types of seed 000).
"""

from __future__ import annotations

from fredica.domain import models


class FredicaError(Exception):
    """An error occurred in fredica."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


# --- store / state machine -------------------------------------------------------------------


class NotFound(FredicaError):
    """The requested object does not exist."""


class IllegalTransition(FredicaError):
    """That transition is not allowed from the task's current state."""


class StaleAttempt(FredicaError):
    """The report belongs to an attempt that no longer owns the task (fenced off)."""


class InvalidRequest(FredicaError):
    """The request is invalid."""


class Conflict(FredicaError):
    """The request conflicts with active work."""


class BackendBusy(FredicaError):
    """Every backend that could run the task is at its max_concurrent; try again later."""


class StoreError(FredicaError):
    """The task store failed."""


class OwnerMoved(StoreError):
    """The task belongs to another node now: this node holds only a replica of it. Send
    reports to its new owner (this one keeps nothing of them)."""


class StoreBusy(StoreError):
    """The database stayed busy or locked; try again shortly."""


class StoreUnavailable(StoreError):
    """The database cannot be reached (restarting, refusing connections, failing over); the
    store reconnects by itself, try again shortly."""


class StoreFull(StoreError):
    """The disk holding the task store is full; free some space."""


class Unauthorized(FredicaError):
    """A valid token is required (Authorization: Bearer <token>)."""


class Forbidden(FredicaError):
    """The token does not allow this."""


class DataDirInUse(FredicaError):
    """Another fredica node is using this data dir."""


# --- configuration ---------------------------------------------------------------------------


class ConfigError(FredicaError):
    """The configuration is invalid."""


# --- task execution ----------------------------------------------------------------------------


class TaskError(FredicaError):
    """The task failed."""

    error_type: models.ErrorType = models.ErrorType.TRANSIENT

    def __init__(self, message: str | None = None, *, retry_after_sec: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_sec = retry_after_sec


class TransientError(TaskError):
    """A transient failure; retrying later may succeed."""

    error_type = models.ErrorType.TRANSIENT


class ResourceError(TaskError):
    """This node lacks the resources for the task (memory, disk, GPU); another node should try."""

    error_type = models.ErrorType.RESOURCE

    def __init__(self, message: str | None = None, *, hint: str = "OUT_OF_MEMORY") -> None:
        super().__init__(message)
        self.hint = hint


class PermanentError(TaskError):
    """The task cannot succeed; retrying is pointless."""

    error_type = models.ErrorType.PERMANENT


class PayloadError(TaskError):
    """The task payload is invalid."""

    error_type = models.ErrorType.PAYLOAD_ERROR


class RateLimitedError(TaskError):
    """The provider rate-limited the call; retry after its delay."""

    error_type = models.ErrorType.RATE_LIMITED

    def __init__(
        self, message: str | None = None, *, provider: str = "", retry_after_sec: float = 30.0
    ) -> None:
        super().__init__(message, retry_after_sec=retry_after_sec)
        self.provider = provider


class AwaitingCredentialError(TaskError):
    """The task needs credentials that are not configured; configure them and retry, or skip it."""

    error_type = models.ErrorType.AWAITING_CREDENTIAL


class TaskCancelled(TaskError):
    """The task was cancelled."""

    error_type = models.ErrorType.CANCELLED
