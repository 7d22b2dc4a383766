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
| StoreError        | 503    | store_unavailable  | the store failed or is closing, or its    |
|                   |        |                    | database cannot be reached now (it        |
|                   |        |                    | restarts, fails over: `StoreUnavailable`) |
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
both raise `InvalidRequest` again. Starlette's own errors (a route that does not exist, a method
it does not take) answer in the same shape. Any other exception stays a plain 500.

The OpenAPI schema declares these answers once, here (`install_openapi`): every operation of the
API gets the statuses of the table (and 400, 413), each with the `ErrorAnswer` body and the
codes that status may carry, so a client (or schemathesis) knows every status it can get.
"""

from __future__ import annotations

import copy
import http
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from fredica.domain import errors
from fredica.domain.error_table import (
    BACKEND_BUSY_RETRY_SEC,
    INVALID,
    MALFORMED,
    NO_HEADERS,
    STORE_BUSY_RETRY_SEC,
    TABLE,
    TOO_LARGE,
    Row,
    codes_by_status,
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
    "TOO_LARGE",
    "ErrorAnswer",
    "Row",
    "answer",
    "declare",
    "error_class",
    "install",
    "install_openapi",
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


def http_answer(exc: HTTPException) -> JSONResponse:
    """Starlette's own errors (no such route, a method the route does not take, a body that is
    not text) in the same shape, with the code the table's answers use for that status."""
    codes = codes_by_status().get(exc.status_code)
    if codes:
        code = codes[0]
    else:
        phrase = http.HTTPStatus(exc.status_code).phrase if exc.status_code in _STATUSES else ""
        code = phrase.lower().replace(" ", "_").replace("-", "_") or "error"
    return respond(exc.status_code, code, str(exc.detail), exc.headers or NO_HEADERS)


_STATUSES = frozenset(s.value for s in http.HTTPStatus)


async def _on_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.FredicaError)
    return answer(exc)


async def _on_validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_answer(exc)


async def _on_http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return http_answer(exc)


def install(app: FastAPI) -> None:
    """Answer every class of the table (and invalid bodies) through the table."""
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(HTTPException, _on_http)
    for row in TABLE:
        app.add_exception_handler(row.error, _on_error)


# --- the OpenAPI schema -------------------------------------------------------------------------


class ErrorAnswer(pydantic.BaseModel):
    """The body of every error answer."""

    error: str = pydantic.Field(description="What is wrong, for people (the web UI shows it).")
    detail: str = pydantic.Field(description="The same message (FastAPI's key).")
    code: str = pydantic.Field(description="Stable, for programs (the error table's code).")


#: which statuses an operation at `path` may answer (every status of the table, 400 and 413 are
#: offered to it): the app decides by the path's guards (`api.app.declared_error`)
Applies = Callable[[str, int], bool]

_ERROR_REF = {"$ref": "#/components/schemas/ErrorAnswer"}
_FASTAPI_VALIDATION = "#/components/schemas/HTTPValidationError"


def _error_response(status: int, codes: list[str]) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    for row in TABLE:
        for name in row.headers if row.status == status else ():
            headers[name] = {
                "description": f"sent with `{row.code}`",
                "schema": {"type": "string"},
            }
    response: dict[str, Any] = {
        "description": f"{http.HTTPStatus(status).phrase}: `code` is one of "
        + ", ".join(f"`{c}`" for c in codes),
        "content": {
            "application/json": {
                "schema": {"allOf": [_ERROR_REF, {"properties": {"code": {"enum": codes}}}]}
            }
        },
    }
    if headers:
        response["headers"] = headers
    return response


def _is_fastapi_default(response: Mapping[str, Any]) -> bool:
    """FastAPI's own 422 (a list of pydantic errors), which this node never answers."""
    return _FASTAPI_VALIDATION in str(response.get("content", ""))


def declare(schema: dict[str, Any], applies: Applies) -> dict[str, Any]:
    """`schema` (an OpenAPI document) with the error answers of every operation declared: each
    status that `applies` to its path, unless the route declared that status itself."""
    schema = copy.deepcopy(schema)
    responses = {
        status: _error_response(status, codes) for status, codes in codes_by_status().items()
    }
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            declared = operation.setdefault("responses", {})
            for status, response in responses.items():
                key = str(status)
                if applies(path, status) and (
                    key not in declared or _is_fastapi_default(declared[key])
                ):
                    declared[key] = copy.deepcopy(response)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorAnswer"] = ErrorAnswer.model_json_schema()
    if _FASTAPI_VALIDATION not in str(schema.get("paths")):
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
    return schema


def install_openapi(app: FastAPI, applies: Applies) -> None:
    """Serve `app`'s OpenAPI schema with the error answers declared (see `declare`)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if getattr(app.state, "openapi_declared", None) is None:
            app.state.openapi_declared = declare(generate(), applies)
        schema: dict[str, Any] = app.state.openapi_declared
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
