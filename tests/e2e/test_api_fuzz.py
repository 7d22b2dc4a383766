"""schemathesis against a real `fredica serve` (token mode, with a cluster secret): every
operation of `/openapi.json` under `/api/v1` (with a valid Bearer token) and `/cluster`,
`/files/serve` (with `X-Cluster-Secret`) gets generated valid and invalid requests, and every
answer must be no server error, a status the schema declares, with a declared content type and
a body that matches the declared schema.

Bounded for CI (about two minutes on two cores): `FUZZ_MAX_EXAMPLES` valid and as many invalid
requests per operation (schemathesis' Hypothesis strategies, `APIOperation.as_strategy`; its
pytest loader `from_fixture` does not run under pytest 9). The seed is fixed so a run is
reproducible; set `FREDICA_FUZZ_SEED` (and `FREDICA_FUZZ_EXAMPLES`) to explore further.

The node is drained, so the pipelines the fuzzer creates are stored but never run (no download
of a generated URL, no model loaded); generated peer addresses are pointed at a closed loopback
port, so nothing leaves the machine. `GET /api/v1/events` is left out: it is an endless event
stream (tested in tests/e2e/test_web.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fredica.cli.demo import free_port

from .conftest import FAST_CONFIG, ServedNode, create_token

pytestmark = pytest.mark.slow

SECRET = "fuzz-cluster-secret"
FUZZ_MAX_EXAMPLES = int(os.environ.get("FREDICA_FUZZ_EXAMPLES", "120"))  # per operation and mode
SEED = int(os.environ.get("FREDICA_FUZZ_SEED", "20240512"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
PEER_PATHS = ("/cluster/", "/files/serve")
CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback
LONG_POLL_SEC = 0.2  # `/api/v1/changes?timeout=` waits at most this long here


class Target:
    """The node under test and the headers each part of its API needs."""

    def __init__(self, node: ServedNode, token: str) -> None:
        self.node = node
        self.user = {"Authorization": f"Bearer {token}"}
        self.peer = {"X-Cluster-Secret": SECRET}

    def headers_for(self, path: str) -> dict[str, str]:
        return self.peer if path.startswith(PEER_PATHS) else self.user

    def drain(self) -> None:
        with self.node.client() as client:
            r = client.post("/api/v1/node/drain", headers=self.user)
            assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("fuzz")
    config = tmp / "worker.yaml"
    config.write_text(
        FAST_CONFIG.format(grace=2).replace(
            "cluster:\n", f'cluster:\n  mode: manual\n  cluster_secret: "{SECRET}"\n'
        )
        + "auth:\n  mode: token\n"
    )
    node = ServedNode(tmp / "data", config, free_port(), tmp / "node.log")
    token = create_token(node, "--name", "fuzzer", "--cloud")
    node.start()
    target = Target(node, token)
    target.drain()
    try:
        yield target
    finally:
        if node.proc is not None and node.proc.poll() is None:
            node.terminate()


def _tame(value: Any) -> Any:
    """Generated peer addresses point at a closed loopback port (a node contacts the peers it
    is told about); everything else is left as generated."""
    if isinstance(value, dict):
        return {
            k: CLOSED_PORT
            if k == "address" and isinstance(v, str) and v.startswith(("http://", "https://"))
            else _tame(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_tame(v) for v in value]
    return value


def _send(case: Any, target: Target) -> None:
    """One generated request, checked; `/api/v1/changes` waits briefly, peer addresses stay on
    loopback, and the node is drained again after an undrain."""
    if case.path == "/api/v1/changes":
        query = case.query if isinstance(case.query, dict) else {}
        timeout = query.get("timeout", LONG_POLL_SEC)
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            case.query = {**query, "timeout": min(timeout, LONG_POLL_SEC)}
    if case.body is not None and not isinstance(case.body, str | bytes):
        case.body = _tame(case.body)
    case.call_and_validate(headers=target.headers_for(case.path), checks=CHECKS, timeout=15)
    if case.path == "/api/v1/node/undrain":
        target.drain()


def _fuzz(operation: Any, mode: GenerationMode, target: Target) -> str | None:
    """Run `operation` with `FUZZ_MAX_EXAMPLES` generated requests of `mode`; the failure
    (shrunk by Hypothesis to its smallest request) as text, or None. An operation without
    parameters has no invalid request: nothing to run in negative mode."""

    @hypothesis.seed(SEED)
    @hypothesis.settings(
        max_examples=FUZZ_MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        verbosity=hypothesis.Verbosity.quiet,
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        _send(case, target)

    try:
        run()
    except hypothesis.errors.Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE, operation.label
    except (Exception, FailureGroup) as exc:  # every operation's failure is reported together
        return f"{operation.label} ({mode.value}): {exc}"
    return None


@pytest.mark.timeout(600)
def test_every_answer_is_declared_and_none_is_a_server_error(target: Target) -> None:
    schema = schemathesis.openapi.from_url(f"{target.node.url}/openapi.json")
    schema = schema.include(path_regex=r"^/(api/v1/|cluster/|files/serve)").exclude(
        path="/api/v1/events"
    )
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 35, [op.label for op in operations]  # the whole API, not a part
    failures = [
        failure
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if (failure := _fuzz(operation, mode, target)) is not None
    ]
    assert not failures, "\n\n".join(failures)


def test_the_schema_declares_the_error_answers(target: Target) -> None:
    """The error table is in the schema: every API operation names the statuses it may answer
    with the one error body, and FastAPI's list-of-errors 422 (never sent) is gone."""
    with target.node.client() as client:
        doc = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    error = doc["components"]["schemas"]["ErrorAnswer"]
    assert set(error["required"]) == {"error", "detail", "code"}
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            declared = operation["responses"]
            if not path.startswith(("/api/", "/cluster/", "/files/")):
                continue
            for status in ("400", "404", "409", "422", "503", "507"):
                assert status in declared, (method, path, status)
            assert "401" in declared, (method, path)  # every API path is guarded
    conflict = doc["paths"]["/api/v1/tasks/{task_id}/{action}"]["post"]["responses"]["409"]
    codes = conflict["content"]["application/json"]["schema"]["allOf"][1]
    assert codes["properties"]["code"]["enum"] == [
        "illegal_transition",
        "stale_attempt",
        "conflict",
    ]
    busy = doc["paths"]["/api/v1/pipelines"]["post"]["responses"]["503"]
    assert "Retry-After" in busy["headers"]
    # a peer's report is a union of one model per op, not a free-form object
    report = doc["paths"]["/cluster/tasks/report"]["post"]["requestBody"]["content"]
    assert "discriminator" in str(report["application/json"]["schema"]) or "oneOf" in str(report)
