"""Retry policy per error class (seed 001 §7.6, seed 000, DESIGN §4.5). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fredica.domain.models import ErrorType, TaskStatus

#: Error types that never retry automatically.
NO_AUTO_RETRY = frozenset(
    {
        ErrorType.PERMANENT,
        ErrorType.PAYLOAD_ERROR,
        ErrorType.AWAITING_CREDENTIAL,
        ErrorType.CANCELLED,
        ErrorType.UPSTREAM_FAILED,
    }
)
DEFAULT_TRANSIENT_DELAY = 0.0  # seconds; a transient retry is claimable at once by default
DEFAULT_RATE_LIMIT_DELAY = 30.0  # seconds, when the provider gave no Retry-After


@dataclass(frozen=True, slots=True)
class RetryDecision:
    status: TaskStatus
    retry_count: int
    retry_after: float | None
    excluded_nodes: list[str]
    stored_error_type: str


def stranded(excluded_nodes: Sequence[str], runnable_on: Iterable[str]) -> bool:
    """Whether a pending task can run nowhere any more: every online node that could run its
    type is in its `excluded_nodes` (RESOURCE failures), or no online node can run it at all
    after it failed somewhere. Such a task fails with the reason instead of waiting forever."""
    return bool(excluded_nodes) and set(runnable_on) <= set(excluded_nodes)


def stranded_reason(excluded_nodes: Sequence[str], error: str | None) -> str:
    """The error a stranded task fails with (what the UI and CLI show)."""
    last = f"; last error: {error}" if error else ""
    return (
        "no online node may run it any more: excluded after RESOURCE failures on "
        f"{', '.join(excluded_nodes)}{last} (`fredica task retry` runs it again)"
    )


def decide(
    *,
    error_type: ErrorType,
    retry_count: int,
    max_retries: int,
    excluded_nodes: list[str],
    node_id: str,
    now: float,
    retry_after_sec: float | None = None,
) -> RetryDecision:
    """What a failure of `error_type` does to the task.

    Retryable classes go back to `pending` with `retry_count + 1` while `retry_count <
    max_retries`; RATE_LIMITED also sets `retry_after`; RESOURCE adds this node to
    `excluded_nodes` so another node picks the retry. PAYLOAD_ERROR is stored as PERMANENT.
    """
    stored = ErrorType.PERMANENT if error_type is ErrorType.PAYLOAD_ERROR else error_type
    excluded = list(excluded_nodes)
    if error_type is ErrorType.RESOURCE and node_id not in excluded:
        excluded.append(node_id)
    if error_type in NO_AUTO_RETRY or retry_count >= max_retries:
        return RetryDecision(TaskStatus.FAILED, retry_count, None, excluded, stored.value)
    delay: float | None = None
    if error_type is ErrorType.RATE_LIMITED:
        delay = retry_after_sec if retry_after_sec is not None else DEFAULT_RATE_LIMIT_DELAY
    elif retry_after_sec is not None:
        delay = retry_after_sec
    retry_after = now + delay if delay else None
    return RetryDecision(TaskStatus.PENDING, retry_count + 1, retry_after, excluded, stored.value)
