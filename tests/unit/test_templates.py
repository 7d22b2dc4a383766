from __future__ import annotations

import pytest
from pydantic import ValidationError

from fredica.domain import errors
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext, CustomTemplate, NetworkTestTemplate

CTX = BuildContext(frozenset({"A", "B", "NETWORK_TEST"}), "n1")


def build(tasks):
    return CustomTemplate().build(PipelineRequest(template="custom", tasks=tasks), CTX)


def test_custom_resolves_refs_in_dependency_order() -> None:
    spec = build(
        [
            {"ref": "c", "type": "A", "depends_on": ["a", "b"]},
            {"ref": "a", "type": "A"},
            {"ref": "b", "type": "B", "depends_on": ["a"], "priority": 8, "max_retries": 0},
        ]
    )
    refs = spec.params["refs"]
    by_id = {t.id: t for t in spec.tasks}
    assert [t.id for t in spec.tasks] == [refs["a"], refs["b"], refs["c"]]
    assert by_id[refs["c"]].depends_on == (refs["a"], refs["b"])
    assert (by_id[refs["b"]].priority, by_id[refs["b"]].max_retries) == (8, 0)


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        (
            [
                {"ref": "a", "type": "A", "depends_on": ["b"]},
                {"ref": "b", "type": "A", "depends_on": ["a"]},
            ],
            "cycle among a, b",
        ),
        ([{"ref": "a", "type": "A", "depends_on": ["zz"]}], "unknown ref 'zz'"),
        ([{"ref": "a", "type": "A"}, {"ref": "a", "type": "A"}], "duplicate ref 'a'"),
        ([{"ref": "a", "type": "NOPE"}], "unknown task type 'NOPE'"),
        ([{"ref": "a", "type": "A", "depends_on": ["a"]}], "depends on itself"),
        ([], "at least one task"),
    ],
)
def test_custom_rejects_bad_dags(tasks, message: str) -> None:
    with pytest.raises(errors.InvalidRequest, match=message):
        build(tasks)


def test_request_rejects_unknown_fields_and_wrong_types() -> None:
    with pytest.raises(ValidationError):
        PipelineRequest.model_validate({"template": "custom", "bogus": 1})
    with pytest.raises(ValidationError):
        PipelineRequest.model_validate(
            {"template": "custom", "tasks": [{"ref": "a", "type": "A", "priority": 11}]}
        )


def test_network_test_template_validates_params() -> None:
    t = NetworkTestTemplate()
    spec = t.build(
        PipelineRequest(template="network_test", params={"urls": ["http://x/"], "timeout_ms": 100}),
        CTX,
    )
    assert spec.tasks[0].type == "NETWORK_TEST" and spec.tasks[0].payload["timeout_ms"] == 100
    with pytest.raises(errors.InvalidRequest, match="timeout_ms"):
        t.build(PipelineRequest(template="network_test", params={"timeout_ms": -1}), CTX)
    with pytest.raises(errors.InvalidRequest, match="not an http"):
        t.build(PipelineRequest(template="network_test", params={"urls": ["ftp://x"]}), CTX)
    with pytest.raises(errors.InvalidRequest, match="unknown key"):
        t.build(PipelineRequest(template="network_test", params={"url": "http://x"}), CTX)


def test_bulk_uuids_are_canonical_version_4_and_distinct() -> None:
    import uuid

    from fredica.domain.ids import uuid4_strings

    ids = uuid4_strings(2000)
    assert len(set(ids)) == 2000
    for text in ids[:200]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text  # canonical: lower-case hex, 8-4-4-4-12
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert uuid4_strings(0) == []
