"""The fredica side of the benchmarks, loaded as a real plugin (`register(registry)`).

`BENCH_NOOP` does no work at all, so a benchmark measures the task system's own cost: claim,
dispatch, completion and the store transactions around them. `BENCH_SLEEP` waits without using
the CPU (the home cluster benchmark's I/O-bound work). `bench_fanout` is the fan-out
shape of the media pipeline (SPLIT -> N chunks spawned by the post-completion hook -> MERGE
depending on every chunk), with no-op work in every task.
"""

from __future__ import annotations

import uuid

from fredica.domain import models
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.engine.registry import Registry
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext, Template

NOOP = "BENCH_NOOP"
SLEEP = "BENCH_SLEEP"
FANOUT_TEMPLATE = "bench_fanout"


class NoopExecutor(TaskExecutor):
    """Returns an empty result at once."""

    task_type = NOOP
    starts_inline = True  # returns at once: no asyncio task needed

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        return ExecuteResult({})


class SleepExecutor(TaskExecutor):
    """Waits `payload.seconds` without using the CPU: I/O-bound work (a download, a cloud API
    call), where more nodes mean more slots."""

    task_type = SLEEP

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        import asyncio

        await asyncio.sleep(float(task.payload.get("seconds", 0.2)))
        return ExecuteResult({"node": ctx.node_id})


class FanOutTemplate(Template):
    """SPLIT -> `params.chunks` spawned chunks -> MERGE waiting for all of them."""

    name = FANOUT_TEMPLATE
    description = "Benchmark: one split spawning N no-op chunks, one merge after all of them."

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        split = str(uuid.uuid4())
        merge = str(uuid.uuid4())
        return models.NewPipeline(
            template=self.name,
            material_id=request.material_id or f"bench-fanout:{uuid.uuid4()}",
            tasks=(
                models.NewTask(
                    id=split,
                    type=NOOP,
                    payload={"role": "split", "chunks": int(request.params.get("chunks", 1000))},
                ),
                models.NewTask(id=merge, type=NOOP, payload={"role": "merge"}, depends_on=(split,)),
            ),
            params=dict(request.params),
        )

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        if done.task.payload.get("role") != "split":
            return None
        merge = next(t for t in done.siblings if t.payload.get("role") == "merge")
        ids = [str(uuid.uuid4()) for _ in range(int(done.task.payload["chunks"]))]
        chunks = tuple(
            models.NewTask(
                id=chunk_id,
                type=NOOP,
                payload={"role": "chunk", "index": i},
                depends_on=(done.task.id,),
            )
            for i, chunk_id in enumerate(ids)
        )
        return SpawnPlan(
            new_tasks=chunks,
            add_dependencies={merge.id: tuple(ids)},
            patch_payloads={merge.id: {"chunk_count": len(chunks)}},
        )


def register(registry: Registry) -> None:
    registry.add_executor(NoopExecutor())
    registry.add_executor(SleepExecutor())
    registry.add_template(FanOutTemplate())
