"""A completed task whose result carries `material_title` (the downloader's title of a URL
source) names its pipeline, on every store: once, never over a title the user gave; the
history search finds it; a replica in the home cluster carries it."""

from __future__ import annotations

from fredica.domain.history import ListFilter
from fredica.domain.models import NewPipeline, NewTask

from .conftest import claim_one, complete

OWNER = "node-o"
URL = "https://www.youtube.com/watch?v=abc123"


async def test_the_downloader_title_names_the_pipeline(make_store, store) -> None:
    owner = make_store(OWNER)
    pipeline, _ = await owner.create_pipeline(
        NewPipeline("custom", "src-1", (NewTask("DOWNLOAD_VIDEO", id="d1"),
                                        NewTask("T", id="t2", depends_on=("d1",))),
                    {"source": URL})
    )  # fmt: skip
    assert pipeline.title == URL  # before the download: the URL itself
    before = await owner.changes_since(OWNER, 0)
    task = await claim_one(owner)
    await complete(owner, task, {"video_path": "/x/video.mp4", "material_title": " Ask Not "})
    named = await owner.get_pipeline(pipeline.id)
    assert named.params["title"] == "Ask Not" and named.title == "Ask Not"
    assert named.to_json()["title"] == "Ask Not" and named.params["source"] == URL
    assert named.change_seq > pipeline.change_seq

    found = await owner.page_pipelines(None, 10, where=ListFilter(q="ask not"))
    assert [p.id for p in found.items] == [pipeline.id]

    # a later title does not rename it
    second = await claim_one(owner)
    await complete(owner, second, {"material_title": "Something else"})
    assert (await owner.get_pipeline(pipeline.id)).title == "Ask Not"

    await store.apply_replica(OWNER, await owner.changes_since(OWNER, 0))
    replica = await store.replica_pipeline(pipeline.id)
    assert replica is not None and replica.title == "Ask Not"
    assert before.cursor < (await owner.changes_since(OWNER, 0)).cursor


async def test_a_title_the_user_gave_is_kept(store) -> None:
    pipeline, _ = await store.create_pipeline(
        NewPipeline("custom", "src-2", (NewTask("DOWNLOAD_VIDEO", id="d1"),),
                    {"source": URL, "title": "My talk"})
    )  # fmt: skip
    await complete(store, await claim_one(store), {"material_title": "Downloader title"})
    assert (await store.get_pipeline(pipeline.id)).title == "My talk"
    no_title, _ = await store.create_pipeline(
        NewPipeline("custom", "src-3", (NewTask("T", id="t1"),), {"source": "/m/Lecture 1.mp4"})
    )
    await complete(store, await claim_one(store), {"material_title": "   "})
    again = await store.get_pipeline(no_title.id)
    assert "title" not in again.params and again.title == "Lecture 1.mp4"
