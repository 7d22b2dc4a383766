"""The registered spawn hook runs inside the completion's transaction."""

from __future__ import annotations

from fredica.domain import errors
from fredica.domain.models import NewTask, TaskStatus
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.store.base import ClaimFilter, CompletionItem

from .conftest import claim_one, complete, make_pipeline


def split_hook(done: SpawnInput) -> SpawnPlan | None:
    if done.task.type != "SPLIT":
        return None
    chunks = tuple(
        NewTask("CHUNK", id=f"chunk{i}", depends_on=("split",), payload={"i": i}) for i in range(3)
    )
    return SpawnPlan(
        new_tasks=chunks,
        add_dependencies={"merge": tuple(c.id for c in chunks if c.id)},
        patch_payloads={"merge": {"chunks": 3}},
        pipeline_updates={"detected_language": "en"},
    )


async def test_spawn_hook_runs_in_the_completion_transaction(store, clock) -> None:
    store.set_hooks(lambda template: split_hook if template == "custom" else None)
    pid = await make_pipeline(
        store, NewTask("SPLIT", id="split"), NewTask("MERGE", id="merge", depends_on=("split",))
    )
    split = await claim_one(store)
    clock.set(102.0)
    done = await complete(store, split)
    merge = await store.get_task("merge")
    assert merge.depends_on == ["split", "chunk0", "chunk1", "chunk2"]
    assert merge.payload == {"chunks": 3}
    pipeline = await store.get_pipeline(pid)
    assert (pipeline.total_tasks, pipeline.detected_language) == (5, "en")
    # the children, the completion and the pipeline update are one transaction
    chunk_seqs = {(await store.get_task(f"chunk{i}")).change_seq for i in range(3)}
    assert chunk_seqs == {done.change_seq, merge.change_seq, pipeline.change_seq}
    clock.set(103.0)
    ready = await store.claim(ClaimFilter(limit=10, start=True))
    assert sorted(t.id for t in ready) == ["chunk0", "chunk1", "chunk2"]
    for t in ready:
        await complete(store, t)
    clock.set(104.0)
    assert [t.id for t in await store.claim(ClaimFilter(limit=10))] == ["merge"]


async def test_a_failing_hook_rolls_back_the_completion(store, clock) -> None:
    def bad_hook(done: SpawnInput) -> SpawnPlan:
        return SpawnPlan(new_tasks=(NewTask("X", depends_on=("missing",)),))

    store.set_hooks(lambda template: bad_hook)
    await make_pipeline(store, NewTask("SPLIT", id="split"))
    task = await claim_one(store)
    clock.set(102.0)
    out, _ = await store.complete_and_claim([CompletionItem(task.id, task.attempt, {})])
    assert isinstance(out[0], errors.InvalidRequest)
    # no completion without its children
    assert (await store.get_task("split")).status is TaskStatus.RUNNING
    assert [t.id for t in await store.list_tasks()] == ["split"]


async def test_a_hook_that_raises_refuses_only_its_item(store, clock) -> None:
    def broken_hook(done: SpawnInput) -> SpawnPlan:
        if done.task.id == "bad":
            raise RuntimeError("template bug")
        return SpawnPlan()

    store.set_hooks(lambda template: broken_hook)
    await make_pipeline(store, NewTask("T", id="bad"), NewTask("T", id="good"))
    tasks = await store.claim(ClaimFilter(limit=2, start=True))
    out, _ = await store.complete_and_claim(
        [CompletionItem(t.id, t.attempt, {}) for t in sorted(tasks, key=lambda t: t.id)]
    )
    assert isinstance(out[0], errors.InvalidRequest) and "template bug" in str(out[0])
    assert not isinstance(out[1], Exception) and out[1].status is TaskStatus.COMPLETED
    assert (await store.get_task("bad")).status is TaskStatus.RUNNING
