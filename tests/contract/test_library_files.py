"""The `library_file` records of watch folders on every store: saved, replaced per (library,
path), read back whole, and scoped to the node that recorded them."""

from __future__ import annotations

import dataclasses

from fredica.domain.library import FileStatus, LibraryFile
from fredica.store.base import TaskStore

from .conftest import StoreFactory


def item(path: str = "a/b.mkv", **changes: object) -> LibraryFile:
    base = LibraryFile(
        id="f-1",
        library="films",
        path=path,
        size=5_000_000_000,  # past 32 bits: a film
        mtime=1_700_000_000.25,
        sha256="c" * 64,
        status=FileStatus.QUEUED,
        pipeline_id="p-1",
        note="",
        first_seen_at=100.0,
        updated_at=100.0,
        history=({"at": 100.0, "event": "new", "pipeline_id": "p-1"},),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_a_library_file_is_saved_and_read_back(store: TaskStore) -> None:
    assert await store.library_files("films") == []
    await store.save_library_file(item())
    assert await store.library_files("films") == [item()]
    assert await store.library_file("f-1") == item()
    assert await store.library_file("nope") is None
    assert await store.library_files("other") == []


async def test_saving_the_same_path_replaces_its_record(store: TaskStore) -> None:
    await store.save_library_file(item())
    gone = item(
        status=FileStatus.GONE,
        updated_at=200.0,
        history=(*item().history, {"at": 200.0, "event": "gone"}),
    )
    await store.save_library_file(gone)
    await store.save_library_file(item("z.mkv", id="f-2", pipeline_id=None, sha256=None))
    rows = await store.library_files("films")
    assert [r.path for r in rows] == ["a/b.mkv", "z.mkv"]
    assert rows[0] == gone
    assert rows[1].sha256 is None and rows[1].pipeline_id is None


async def test_library_files_are_scoped_to_the_node(make_store: StoreFactory) -> None:
    a = make_store("node-a")
    b = make_store("node-b")
    await a.save_library_file(item())
    await b.save_library_file(item(id="f-b"))  # the same share seen by another node
    assert [r.id for r in await a.library_files("films")] == ["f-1"]
    assert [r.id for r in await b.library_files("films")] == ["f-b"]
    assert await b.library_file("f-1") is None
