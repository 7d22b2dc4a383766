"""One table from exception classes to HTTP answers, and back.

The node answers every error the same way: `{"error": message, "detail": message, "code": code}`
(`error` is what the web UI reads, `detail` is FastAPI's own key, `code` is stable for
programs). A client of another node (the cluster's remote store) reads `code` and raises the
same exception class again with `raise_for(status, code, message)`.

| exception         | status | code               | why                                       |
|-------------------|--------|--------------------|-------------------------------------------|
| StoreBusy         | 503    | store_busy         | still busy after the store's own retries: |
|                   |        |                    | `Retry-After: 1`, the client tries again  |
| StoreFull         | 507    | disk_full          | the disk holding the store is full        |
| StoreError        | 503    | store_unavailable  | the store failed or is closing            |
| BackendBusy       | 503    | backend_busy       | every backend is at max_concurrent;       |
|                   |        |                    | `Retry-After: 5`                          |
| NotFound          | 404    | not_found          |                                           |
| IllegalTransition | 409    | illegal_transition | the row's state refuses it (state wins)   |
| StaleAttempt      | 409    | stale_attempt      | a report from a fenced-off attempt        |
| Conflict          | 409    | conflict           | conflicts with active work                |
| InvalidRequest    | 422    | invalid_request    | the request is wrong; fix it and resend   |
| auth.Unauthorized | 401    | unauthorized       | `WWW-Authenticate: Bearer`                |
| auth.Forbidden    | 403    | forbidden          | the token may not do this                 |
| ConfigError       | 500    | config_invalid     | the node's own worker.yaml or plugins are |
|                   |        |                    | wrong: the caller cannot fix it           |

Subclasses first: the first row whose class the exception is an instance of answers. Malformed
JSON and invalid bodies (pydantic) answer 400 `malformed_request` and 422 `invalid_request`;
both raise `InvalidRequest` again. Any other exception stays a plain 500.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from fredica.domain import errors
from fredica.domain.error_table import (
    BACKEND_BUSY_RETRY_SEC,
    INVALID,
    MALFORMED,
    NO_HEADERS,
    STORE_BUSY_RETRY_SEC,
    TABLE,
    Row,
    error_class,
    raise_for,
    row_for,
)

__all__ = [
    "BACKEND_BUSY_RETRY_SEC",
    "INVALID",
    "MALFORMED",
    "NO_HEADERS",
    "STORE_BUSY_RETRY_SEC",
    "TABLE",
    "Row",
    "answer",
    "error_class",
    "install",
    "raise_for",
    "respond",
    "row_for",
    "validation_answer",
]

logger = logging.getLogger(__name__)


def respond(
    status: int, code: str, message: str, headers: Mapping[str, str] = NO_HEADERS
) -> JSONResponse:
    """The JSON answer of every error."""
    return JSONResponse(
        status_code=status,
        content={"error": message, "detail": message, "code": code},
        headers=dict(headers) or None,
    )


def answer(exc: errors.FredicaError) -> JSONResponse:
    """The answer to `exc` per the table (a 500 for an exception that has no row)."""
    row = row_for(exc)
    if row is None:
        return respond(500, "internal", exc.message)
    if row.status >= 500 and row.status != 503:
        logger.error("%s: %s", row.code, exc.message, extra={"action": "http_error"})
    return respond(row.status, row.code, exc.message, row.headers)


def validation_answer(exc: RequestValidationError) -> JSONResponse:
    """400 for malformed JSON, else 422 naming every invalid field (`tasks[0].type: ...`)."""
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            reason = err.get("ctx", {}).get("error", err.get("msg"))
            return respond(400, MALFORMED, f"malformed JSON: {reason}")
        parts.append(f"{_location(err.get('loc', ()))}: {err.get('msg')}")
    return respond(422, INVALID, "; ".join(parts) or "invalid request")


def _location(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in (str(p) for p in loc if p != "body"):
        path += f"[{part}]" if part.isdigit() else (f".{part}" if path else part)
    return path or "body"


async def _on_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.FredicaError)
    return answer(exc)


async def _on_validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_answer(exc)


def install(app: FastAPI) -> None:
    """Answer every class of the table (and invalid bodies) through the table."""
    app.add_exception_handler(RequestValidationError, _on_validation)
    for row in TABLE:
        app.add_exception_handler(row.error, _on_error)
