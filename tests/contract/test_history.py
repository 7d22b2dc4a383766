"""The history filters of the lists (`ListFilter`): text search, template, node and creation
time, alone and combined with the status/type filters, followed page by page through cursors,
on every store."""

from __future__ import annotations

from typing import Any

import pytest

from fredica.domain import errors
from fredica.domain.clock import ManualClock
from fredica.domain.history import ListFilter
from fredica.domain.models import NewPipeline, NewTask
from fredica.store.base import ClaimFilter, TaskStore

from .conftest import StoreFactory, claim_one

# (id, template, material, source, title, created_at)
PIPELINES = [
    ("p-talk", "transcribe_long", "src-aaa111", "/media/Talks/Keynote_2026.MP4", None, 100.0),
    ("p-pod", "transcribe_short", "src-bbb222", "https://example.org/podcast/ep12", None, 200.0),
    ("p-pct", "full_process", "src-ccc333", "/media/100% real_news.mkv", None, 300.0),
    ("p-title", "transcribe_long", "mat-ddd444", "/srv/x.wav", "Weekly Standup", 400.0),
    ("q-other", "custom", "src-eee555", "/media/holiday.mov", None, 500.0),
]


async def seed(store: TaskStore, clock: ManualClock) -> None:
    for pid, template, material, source, title, at in PIPELINES:
        clock.set(at)
        params = {"source": source, "refs": {"x": "keynote-ref"}} | (
            {"title": title} if title else {}
        )
        tasks = (
            NewTask("EXTRACT_AUDIO", id=f"{pid}-extract", priority=9),
            NewTask("AI_ANALYZE", id=f"{pid}-analyze", depends_on=(f"{pid}-extract",)),
        )
        await store.create_pipeline(NewPipeline(template, material, tasks, params, id=pid))
    clock.set(600.0)
    await store.add_task(NewTask("SOLO", id="solo-task", material_id="src-aaa999"))


async def all_pages(list_page: Any, size: int) -> list[str]:
    """Every id of a list, read page by page (`size` a page) through `list_page(cursor)`."""
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = await list_page(cursor)
        assert len(page.items) <= size
        ids += [row.id for row in page.items]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


async def pipeline_ids(store: TaskStore, where: ListFilter, status: str | None = None) -> list[str]:
    """Every id of the filtered list, read page by page (2 a page) and checked against the
    unpaged list."""
    full = [p.id for p in await store.list_pipelines(status, 100, 0, where)]
    assert await all_pages(lambda c: store.page_pipelines(status, 2, c, 0, where), 2) == full
    return full


async def task_ids(
    store: TaskStore,
    where: ListFilter,
    status: list[str] | None = None,
    task_type: str | None = None,
) -> list[str]:
    full = [t.id for t in await store.list_tasks(None, status, task_type, 100, 0, where)]
    paged = await all_pages(lambda c: store.page_tasks(None, status, task_type, 3, c, 0, where), 3)
    assert paged == full
    return full


async def test_search_matches_source_title_and_id_prefixes_case_insensitively(store, clock) -> None:
    await seed(store, clock)

    async def found(q: str) -> list[str]:
        return await pipeline_ids(store, ListFilter(q=q))

    assert await found("keynote_2026") == ["p-talk"], "a file name, any case"
    assert await found("TALKS/") == ["p-talk"], "part of the path"
    assert await found("example.org/POD") == ["p-pod"], "part of a URL"
    assert await found("standup") == ["p-title"], "the title"
    assert await found("p-t") == ["p-title", "p-talk"], "an id prefix, newest first"
    assert await found("src-bbb") == ["p-pod"], "a material id prefix"
    assert await found("bbb") == [], "ids and materials match by prefix only"
    assert await found("keynote-ref") == [], "other params are not searched"
    # LIKE's wildcards are plain characters in a search
    assert await found("100%") == ["p-pct"]
    assert await found("0% r") == ["p-pct"]
    assert await found("%") == ["p-pct"]
    assert await found("holiday_mov") == [], "_ is not a wildcard"
    assert await found("real_news") == ["p-pct"]
    assert len(await found("")) == len(PIPELINES), "an empty search: everything"


async def test_pipeline_filters_combine_with_status_and_each_other(
    make_store: StoreFactory, clock
) -> None:
    store = make_store()
    await seed(store, clock)
    other = make_store("node-b")
    clock.set(700.0)
    await other.create_pipeline(
        NewPipeline("transcribe_long", "src-fff666", (NewTask("T", id="b-task"),), id="b-pipe")
    )
    # node-b runs a task of p-pod (the highest priority ready task there)
    ran = await claim_one(store, "node-b")
    assert ran.pipeline_id is not None

    assert await pipeline_ids(store, ListFilter(template="transcribe_long")) == [
        "b-pipe",
        "p-title",
        "p-talk",
    ]
    assert await pipeline_ids(store, ListFilter(template="nope")) == []
    assert await pipeline_ids(store, ListFilter(node="node-b")) == ["b-pipe", ran.pipeline_id]
    assert await pipeline_ids(store, ListFilter(node="node-c")) == []
    assert await pipeline_ids(store, ListFilter(since=200.0, until=400.0)) == ["p-pct", "p-pod"]
    assert await pipeline_ids(store, ListFilter(since=400.0)) == ["b-pipe", "q-other", "p-title"]
    assert await pipeline_ids(store, ListFilter(until=200.0)) == ["p-talk"]
    combined = ListFilter(q="/media/", template="transcribe_long", since=50.0, until=150.0)
    assert await pipeline_ids(store, combined) == ["p-talk"]
    assert await pipeline_ids(store, ListFilter(q="p-"), "running") == [ran.pipeline_id]
    assert await pipeline_ids(store, ListFilter(q="p-"), "completed") == []


async def test_task_filters_search_through_the_pipeline(make_store: StoreFactory, clock) -> None:
    store = make_store()
    await seed(store, clock)
    claimed = await store.claim(ClaimFilter(limit=2, start=True), "node-b")
    assert len(claimed) == 2

    async def found(**kwargs: object) -> list[str]:
        return await task_ids(store, ListFilter(**kwargs))  # type: ignore[arg-type]

    talk = ["p-talk-analyze", "p-talk-extract"]  # newest first, ties by insertion
    assert sorted(await found(q="KEYNOTE")) == sorted(talk), "the pipeline's source"
    assert sorted(await found(q="weekly")) == ["p-title-analyze", "p-title-extract"]
    assert await found(q="p-talk-ex") == ["p-talk-extract"], "a task id prefix"
    assert await found(q="src-aaa") == ["solo-task", *(await found(q="keynote"))], (
        "a material prefix (a task outside any pipeline too)"
    )
    assert len(await found(q="analyze")) == len(PIPELINES), "the type, any case"
    assert await found(q="p-pod") == ["p-pod-analyze", "p-pod-extract"], "a pipeline id"
    assert sorted(await found(template="transcribe_long")) == sorted(
        [*talk, "p-title-analyze", "p-title-extract"]
    )
    assert sorted(await found(node="node-b")) == sorted(t.id for t in claimed)
    assert await found(node="node-a") == []
    assert await found(since=300.0, until=500.0) == [
        "p-title-analyze",
        "p-title-extract",
        "p-pct-analyze",
        "p-pct-extract",
    ]
    # with the status and type filters (one index walk per status)
    where = ListFilter(q="/media/")
    media = {"p-talk", "p-pct", "q-other"}  # the pipelines whose source is under /media/
    running = await task_ids(store, where, ["running"])
    assert sorted(running) == sorted(t.id for t in claimed if t.pipeline_id in media)
    assert running, "the two claimed first include p-talk's extraction (priority, then age)"
    pending = await task_ids(store, where, ["pending", "claimed"], "AI_ANALYZE")
    assert pending == ["q-other-analyze", "p-pct-analyze", "p-talk-analyze"]
    assert await task_ids(store, ListFilter(q="nothing-like-this"), ["pending"]) == []


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (ListFilter(since=500.0, until=100.0), "since: must be before until"),
        (ListFilter(q="x" * 201), "q: at most 200 characters"),
        (ListFilter(since=float("nan")), "since: expected a finite time"),
        (ListFilter(q="a\x00b"), "q: must not contain NUL"),
        (ListFilter(node="\x00"), "node: must not contain NUL"),
    ],
)
async def test_a_filter_that_cannot_match_is_refused(store, where, message) -> None:
    with pytest.raises(errors.InvalidRequest, match=message):
        await store.page_pipelines(where=where)
    with pytest.raises(errors.InvalidRequest, match=message):
        await store.page_tasks(where=where)
    with pytest.raises(errors.InvalidRequest, match=message):
        await store.list_tasks(where=where)
