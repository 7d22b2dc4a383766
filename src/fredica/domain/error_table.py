"""The error table both ways: which HTTP status and stable code answers each exception class,
and which class an answer of another node stands for (see `api.errors`, which answers with it,
and the cluster's remote owner, which raises again what an owner refused). Pure data."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple, NoReturn

from fredica.domain import errors

MALFORMED = "malformed_request"
INVALID = "invalid_request"
TOO_LARGE = "too_large"  # a request body over `api.max_body_bytes` (413)
INTERNAL = "internal"  # a FredicaError no row answers (500)
STORE_BUSY_RETRY_SEC = 1  # seconds; the store already retried for its busy timeout
BACKEND_BUSY_RETRY_SEC = 5  # seconds; a backend slot frees when one of its tasks ends


NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class Row(NamedTuple):
    error: type[errors.FredicaError]
    status: int
    code: str
    headers: Mapping[str, str] = NO_HEADERS


TABLE: tuple[Row, ...] = (
    Row(errors.StoreBusy, 503, "store_busy", {"Retry-After": str(STORE_BUSY_RETRY_SEC)}),
    Row(errors.StoreFull, 507, "disk_full"),
    Row(errors.OwnerMoved, 503, "owner_moved"),
    Row(errors.StoreError, 503, "store_unavailable"),
    Row(errors.BackendBusy, 503, "backend_busy", {"Retry-After": str(BACKEND_BUSY_RETRY_SEC)}),
    Row(errors.NotFound, 404, "not_found"),
    Row(errors.IllegalTransition, 409, "illegal_transition"),
    Row(errors.StaleAttempt, 409, "stale_attempt"),
    Row(errors.Conflict, 409, "conflict"),
    Row(errors.InvalidRequest, 422, INVALID),
    Row(errors.Unauthorized, 401, "unauthorized", {"WWW-Authenticate": "Bearer"}),
    Row(errors.Forbidden, 403, "forbidden"),
    Row(errors.ConfigError, 500, "config_invalid"),
)


#: answers that no exception class of the table gives: malformed JSON or a path a peer may not
#: read (400), a body over the limit (413), a FredicaError without a row (500)
EXTRA_CODES: tuple[tuple[int, str], ...] = ((400, MALFORMED), (413, TOO_LARGE), (500, INTERNAL))


def codes_by_status() -> dict[int, list[str]]:
    """Every status the error answers use, with the codes each may carry (table order)."""
    by_status: dict[int, list[str]] = {}
    for status, code in (*((row.status, row.code) for row in TABLE), *EXTRA_CODES):
        codes = by_status.setdefault(status, [])
        if code not in codes:
            codes.append(code)
    return dict(sorted(by_status.items()))


def row_for(exc: errors.FredicaError) -> Row | None:
    """The table row answering `exc` (None: not an HTTP error, a plain 500)."""
    return next((row for row in TABLE if isinstance(exc, row.error)), None)


def error_class(status: int, code: str) -> type[errors.FredicaError]:
    """The exception class an answer of `status` with `code` stands for.

    An unknown code (a newer node) falls back to the first row of the same status, then to
    `InvalidRequest` for any other 4xx and `FredicaError` for the rest.
    """
    for row in TABLE:
        if row.code == code:
            return row.error
    if code == MALFORMED:
        return errors.InvalidRequest
    for row in TABLE:
        if row.status == status:
            return row.error
    return errors.InvalidRequest if 400 <= status < 500 else errors.FredicaError


def raise_for(status: int, code: str, message: str) -> NoReturn:
    """Raise again what another node answered (the remote client's side of the table)."""
    raise error_class(status, code)(message)
