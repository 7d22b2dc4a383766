from __future__ import annotations

import pytest

from fredica.domain import retry
from fredica.domain.models import ErrorType, TaskStatus


def decide(error_type: ErrorType, retry_count: int = 0, max_retries: int = 3, **kw):
    return retry.decide(
        error_type=error_type,
        retry_count=retry_count,
        max_retries=max_retries,
        excluded_nodes=kw.pop("excluded", []),
        node_id="n1",
        now=1000.0,
        **kw,
    )


def test_transient_retries_with_count() -> None:
    d = decide(ErrorType.TRANSIENT, retry_count=1)
    assert (d.status, d.retry_count, d.retry_after, d.excluded_nodes) == (
        TaskStatus.PENDING,
        2,
        None,
        [],
    )


def test_exhausted_retries_fail() -> None:
    d = decide(ErrorType.TRANSIENT, retry_count=3, max_retries=3)
    assert (d.status, d.retry_count) == (TaskStatus.FAILED, 3)


def test_seed_000_default_of_no_retries() -> None:
    assert decide(ErrorType.TRANSIENT, max_retries=0).status is TaskStatus.FAILED


def test_resource_excludes_node_once() -> None:
    d = decide(ErrorType.RESOURCE, excluded=["n0", "n1"])
    assert d.excluded_nodes == ["n0", "n1"] and d.status is TaskStatus.PENDING
    assert decide(ErrorType.RESOURCE).excluded_nodes == ["n1"]


def test_rate_limited_sets_retry_after() -> None:
    assert decide(ErrorType.RATE_LIMITED, retry_after_sec=12).retry_after == 1012.0
    assert decide(ErrorType.RATE_LIMITED).retry_after == 1000.0 + retry.DEFAULT_RATE_LIMIT_DELAY


@pytest.mark.parametrize(
    ("error_type", "stored"),
    [
        (ErrorType.PERMANENT, "PERMANENT"),
        (ErrorType.PAYLOAD_ERROR, "PERMANENT"),
        (ErrorType.AWAITING_CREDENTIAL, "AWAITING_CREDENTIAL"),
        (ErrorType.CANCELLED, "CANCELLED"),
    ],
)
def test_no_auto_retry_classes(error_type: ErrorType, stored: str) -> None:
    d = decide(error_type, retry_count=0, max_retries=5)
    assert (d.status, d.retry_count, d.stored_error_type) == (TaskStatus.FAILED, 0, stored)
