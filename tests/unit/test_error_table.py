"""The one error table (`api.errors`): answering an exception, and raising it again from the
answer, as the cluster's remote client will."""

from __future__ import annotations

import json

import httpx
import pytest
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from fredica import auth
from fredica.api import errors as table
from fredica.domain import errors

ROWS = [pytest.param(row, id=row.code) for row in table.TABLE]


def body(response: httpx.Response | JSONResponse) -> dict[str, str]:
    raw = response.content if isinstance(response, httpx.Response) else response.body
    return dict(json.loads(bytes(raw)))


@pytest.mark.parametrize("row", ROWS)
def test_an_exception_answers_its_row(row: table.Row) -> None:
    response = table.answer(row.error("what went wrong"))
    assert response.status_code == row.status
    assert body(response) == {
        "error": "what went wrong",
        "detail": "what went wrong",
        "code": row.code,
    }
    for name, value in row.headers.items():
        assert response.headers[name] == value


@pytest.mark.parametrize("row", ROWS)
def test_an_answer_raises_its_exception_again(row: table.Row) -> None:
    with pytest.raises(row.error) as raised:
        table.raise_for(row.status, row.code, "what went wrong")
    assert type(raised.value) is row.error
    assert raised.value.message == "what went wrong"


def test_no_row_is_shadowed_by_an_earlier_superclass() -> None:
    # the first matching row answers: a subclass listed after its base would never be reached
    for i, row in enumerate(table.TABLE):
        earlier = [r.error.__name__ for r in table.TABLE[:i] if issubclass(row.error, r.error)]
        assert earlier == [], f"{row.error.__name__} is answered by {earlier}"
    assert table.answer(errors.StoreBusy()).status_code == 503
    assert body(table.answer(errors.StoreBusy()))["code"] == "store_busy"
    assert "Retry-After" not in table.answer(errors.StoreError()).headers


def test_codes_are_unique_and_every_http_error_class_has_a_row() -> None:
    codes = [row.code for row in table.TABLE]
    assert len(codes) == len(set(codes))
    expected = {
        errors.StoreBusy: 503,
        errors.StoreFull: 507,
        errors.OwnerMoved: 503,
        errors.StoreError: 503,
        errors.BackendBusy: 503,
        errors.NotFound: 404,
        errors.IllegalTransition: 409,
        errors.StaleAttempt: 409,
        errors.Conflict: 409,
        errors.InvalidRequest: 422,
        auth.Unauthorized: 401,
        auth.Forbidden: 403,
        errors.ConfigError: 500,
    }
    assert {row.error: row.status for row in table.TABLE} == expected
    assert table.answer(auth.Unauthorized()).headers["WWW-Authenticate"] == "Bearer"


def test_unknown_codes_fall_back_by_status() -> None:
    # a newer node may send a code this one does not know: the status still decides
    assert table.error_class(404, "gone_fishing") is errors.NotFound
    assert table.error_class(409, "new_conflict") is errors.IllegalTransition
    assert table.error_class(400, table.MALFORMED) is errors.InvalidRequest
    assert table.error_class(418, "teapot") is errors.InvalidRequest
    assert table.error_class(502, "bad_gateway") is errors.FredicaError
    with pytest.raises(errors.StoreError, match="db down"):
        table.raise_for(503, "", "db down")


def test_an_exception_without_a_row_is_a_plain_500() -> None:
    response = table.answer(errors.TransientError("boom"))
    assert response.status_code == 500 and body(response)["code"] == "internal"


def test_validation_errors_name_the_field_or_the_bad_json() -> None:
    invalid = RequestValidationError(
        [
            {"type": "missing", "loc": ("body", "tasks", 0, "type"), "msg": "Field required"},
            {"type": "int_parsing", "loc": ("query", "limit"), "msg": "not an int"},
        ]
    )
    response = table.validation_answer(invalid)
    assert response.status_code == 422
    assert body(response)["error"] == "tasks[0].type: Field required; query.limit: not an int"
    assert body(response)["code"] == table.INVALID
    bad_json = RequestValidationError(
        [{"type": "json_invalid", "loc": ("body", 1), "msg": "x", "ctx": {"error": "eof"}}]
    )
    response = table.validation_answer(bad_json)
    assert (response.status_code, body(response)["error"]) == (400, "malformed JSON: eof")
    with pytest.raises(errors.InvalidRequest):
        table.raise_for(response.status_code, body(response)["code"], "malformed JSON: eof")


async def test_an_app_answers_through_the_table_and_a_client_raises_again() -> None:
    app = FastAPI()
    table.install(app)

    @app.get("/raise/{code}")
    async def raise_it(code: str) -> None:
        row = next(r for r in table.TABLE if r.code == code)
        raise row.error(f"raised {code}")

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        for row in table.TABLE:
            response = await client.get(f"/raise/{row.code}")
            data = body(response)
            assert (response.status_code, data["code"]) == (row.status, row.code)
            with pytest.raises(row.error, match=f"raised {row.code}"):
                table.raise_for(response.status_code, data["code"], data["error"])


async def test_starlettes_own_errors_answer_in_the_same_shape() -> None:
    app = FastAPI()
    table.install(app)

    @app.post("/echo")
    async def echo(body: dict[str, int]) -> dict[str, int]:
        return body

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        answers = [
            await client.get("/nowhere"),
            await client.get("/echo"),
            await client.post(
                "/echo", content=b"\xff\xfe", headers={"Content-Type": "application/json"}
            ),
        ]
    assert [(r.status_code, body(r)["code"]) for r in answers] == [
        (404, "not_found"),
        (405, "method_not_allowed"),
        (400, table.MALFORMED),
    ]
    assert all(set(body(r)) == {"error", "detail", "code"} for r in answers)
    assert answers[1].headers["Allow"] == "POST"


def test_the_schema_declares_each_status_with_its_codes_where_it_applies() -> None:
    app = FastAPI()

    @app.get("/api/thing/{thing_id}")
    async def thing(thing_id: str) -> dict[str, str]:
        return {"id": thing_id}

    @app.get("/api/health", responses={503: {"description": "not healthy, with the state"}})
    async def health() -> dict[str, str]:
        return {}

    @app.get("/open")
    async def open_route() -> dict[str, str]:
        return {}

    table.install_openapi(app, lambda path, status: path.startswith("/api/") and status != 401)
    doc = app.openapi()
    assert app.openapi() is doc  # built once
    answers = doc["paths"]["/api/thing/{thing_id}"]["get"]["responses"]
    expected = {"200", "400", "403", "404", "409", "413", "422", "500", "503", "507"}
    assert set(answers) == expected
    codes = {
        status: answer["content"]["application/json"]["schema"]["allOf"][1]["properties"]["code"]
        for status, answer in answers.items()
        if status != "200"
    }
    assert codes["409"]["enum"] == ["illegal_transition", "stale_attempt", "conflict"]
    assert codes["422"]["enum"] == [table.INVALID]  # not FastAPI's list of pydantic errors
    assert codes["503"]["enum"] == [
        "store_busy",
        "owner_moved",
        "store_unavailable",
        "backend_busy",
    ]
    assert codes["500"]["enum"] == ["config_invalid", "internal"]
    assert "Retry-After" in answers["503"]["headers"]
    # a status a route declares itself is its own; paths the app leaves out get nothing
    unhealthy = doc["paths"]["/api/health"]["get"]["responses"]["503"]
    assert unhealthy["description"] == "not healthy, with the state"
    assert set(doc["paths"]["/open"]["get"]["responses"]) == {"200"}
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert doc["components"]["schemas"]["ErrorAnswer"]["required"] == ["error", "detail", "code"]
