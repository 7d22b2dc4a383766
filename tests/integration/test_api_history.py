"""The history API: `GET /api/v1/pipelines` and `/api/v1/tasks` searched and filtered
(`q`, `template`, `node`, `since`, `until`), paged with cursors, and their 422s."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.api import history
from fredica.domain import errors
from fredica.domain.clock import ManualClock
from fredica.domain.models import NewPipeline, NewTask
from fredica.store.base import ClaimFilter
from fredica.store.sqlite import SQLiteTaskStore

SOURCES = ["/media/Lecture_Physics.mp4", "/media/interview.wav", "https://example.org/v/Lecture2"]


async def create(client: httpx.AsyncClient, source: str, material: str) -> str:
    body = {
        "template": "custom",
        "material_id": material,
        "params": {"source": source},
        "tasks": [{"ref": "s", "type": "TEST_SLEEP", "payload": {"seconds": 0}}],
    }
    r = await client.post("/api/v1/pipelines", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["pipeline_id"])


async def pages(client: httpx.AsyncClient, path: str, key: str, **params: Any) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        query = params | ({"cursor": cursor} if cursor else {})
        r = await client.get(path, params=query)
        assert r.status_code == 200, r.text
        body = r.json()
        ids += [row["id"] for row in body[key]]
        if body["next_cursor"] is None:
            return ids
        cursor = body["next_cursor"]


async def test_pipelines_and_tasks_are_searched_and_paged(api) -> None:
    client, node = api
    ids = [await create(client, s, f"mat-{i}") for i, s in enumerate(SOURCES)]
    lectures = [ids[2], ids[0]]  # newest first
    assert await pages(client, "/api/v1/pipelines", "pipelines", q="LECTURE", limit=1) == lectures
    assert await pages(client, "/api/v1/pipelines", "pipelines", q="interview") == [ids[1]]
    assert await pages(client, "/api/v1/pipelines", "pipelines", q=ids[1][:8]) == [ids[1]]
    assert await pages(client, "/api/v1/pipelines", "pipelines", template="custom") == ids[::-1]
    assert await pages(client, "/api/v1/pipelines", "pipelines", template="full_process") == []
    assert await pages(client, "/api/v1/pipelines", "pipelines", node=node.node_id) == ids[::-1]
    assert await pages(client, "/api/v1/pipelines", "pipelines", node="elsewhere") == []
    today = datetime.now(UTC).date().isoformat()
    # a bare date as `until` is the end of that day: since=until=today is the whole day
    assert (
        await pages(client, "/api/v1/pipelines", "pipelines", since=today, until=today, limit=2)
        == ids[::-1]
    )
    assert await pages(client, "/api/v1/pipelines", "pipelines", until="2001-01-01") == []
    assert (
        await pages(client, "/api/v1/pipelines", "pipelines", since=str(time.time() + 3600)) == []
    )
    tasks = await pages(client, "/api/v1/tasks", "tasks", q="physics")
    detail = (await client.get(f"/api/v1/pipelines/{ids[0]}")).json()
    assert tasks == [t["id"] for t in detail["tasks"]]
    assert len(await pages(client, "/api/v1/tasks", "tasks", q="test_sleep", limit=2)) == 3
    assert await pages(client, "/api/v1/tasks", "tasks", q="lecture", status="failed") == []


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"since": "yesterday"}, "since: 'yesterday' is not a date"),
        ({"until": "2026-13-01"}, "until: '2026-13-01' is not a date"),
        ({"since": "2026-12-04", "until": "2026-12-03"}, "since: must be before until"),
        ({"since": "-5"}, "outside the years 1970-9999"),
        ({"until": "1e300"}, "outside the years 1970-9999"),
        ({"q": "x" * 201}, "q"),
        ({"template": "t" * 201}, "template"),
        ({"q": "a\x00b"}, "q: must not contain NUL"),
        ({"q": "x", "scope": "cluster", "cursor": "c"}, "scope=cluster pages with offset"),
    ],
)
async def test_bad_filters_answer_422_naming_the_parameter(api, params, fragment) -> None:
    client, _ = api
    for path in ("/api/v1/pipelines", "/api/v1/tasks"):
        r = await client.get(path, params=params)
        assert r.status_code == 422, (path, r.text)
        assert fragment in r.json()["error"], r.json()


def test_times_parse_as_documented() -> None:
    day = datetime(2026, 12, 3, tzinfo=UTC).timestamp()
    assert history.parse_time("since", "2026-12-03") == day
    assert history.parse_time("until", "2026-12-03", end_of_day=True) == day + 86400
    assert history.parse_time("since", "2026-12-03T08:00:00+08:00") == day
    assert history.parse_time("since", "2026-12-03T00:00:00Z") == day
    assert history.parse_time("since", "2026-12-03T00:00:00") == day, "no zone: UTC"
    assert history.parse_time("since", str(day)) == day
    assert history.parse_time("since", "  ") is None
    with pytest.raises(errors.InvalidRequest, match=r"^since: 'nan'"):
        history.parse_time("since", "nan")


async def test_scope_cluster_searches_and_filters_the_replicas_by_the_same_rules(
    api, tmp_path: Path
) -> None:
    # Given this node's own pipelines, and a replica of another owner's: a lecture whose one
    # task node-c ran, and an interview, created an hour apart (the owner's clock)
    client, node = api
    own = [await create(client, s, f"mat-{i}") for i, s in enumerate(SOURCES)]
    clock = ManualClock(time.time() - 7200)
    other = SQLiteTaskStore(tmp_path / "other.db", "node-o", clock=clock)
    try:
        lecture, _ = await other.create_pipeline(
            NewPipeline(
                "full_process",
                "remote-lec",
                (NewTask("TEST_SLEEP"),),
                {"source": "/m/Lecture3.mp4"},
            )
        )
        (claimed,) = await other.claim(ClaimFilter(limit=1, start=True), "node-c")
        clock.advance(3600)
        interview, _ = await other.create_pipeline(
            NewPipeline("custom", "remote-int", (NewTask("TEST_SLEEP"),), {"title": "Interview 2"})
        )
        await node._store.apply_replica("node-o", await other.changes_since("node-o", 0))
    finally:
        await other.close()

    async def cluster(path: str, key: str, **params: Any) -> list[str]:
        r = await client.get(path, params={"scope": "cluster", **params})
        assert r.status_code == 200, r.text
        return [row["id"] for row in r.json()[key]]

    pipelines = functools.partial(cluster, "/api/v1/pipelines", "pipelines")
    tasks = functools.partial(cluster, "/api/v1/tasks", "tasks")
    # Then the text search finds own and replicated pipelines alike, newest first
    assert await pipelines(q="lecture") == [own[2], own[0], lecture.id]
    assert await pipelines(q="INTERVIEW") == [own[1], interview.id]
    assert await pipelines(q="remote-") == [interview.id, lecture.id]  # material prefix
    assert await pipelines(q=lecture.id[:10]) == [lecture.id]
    # the template, the node (owner, or ran one of its tasks) and the time filters
    assert await pipelines(template="full_process") == [lecture.id]
    assert await pipelines(node="node-o") == [interview.id, lecture.id]
    assert await pipelines(node="node-c") == [lecture.id]
    assert await pipelines(node=node.node_id) == own[::-1]
    assert await pipelines(until=str(lecture.created_at + 1)) == [lecture.id]
    assert await pipelines(since=str(interview.created_at), until=str(time.time() - 60)) == [
        interview.id
    ]
    assert await pipelines(q="lecture", limit=1, offset=2) == [lecture.id]
    # tasks: by their own fields, their pipeline's text and template, who claimed them
    assert await tasks(node="node-c") == [claimed.id]
    assert await tasks(q="lecture3") == [claimed.id]
    assert await tasks(template="full_process") == [claimed.id]
    assert await tasks(q="test_sleep", until=str(interview.created_at)) == [claimed.id]
    assert len(await tasks(q="test_sleep")) == 5
    # and the local scope still shows this node's own history only
    assert lecture.id not in await pages(client, "/api/v1/pipelines", "pipelines", q="lecture")
