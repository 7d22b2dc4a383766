"""Executors and a template used by the tests, loaded as a real plugin (`plugins:` in
worker.yaml or `Registry.load_plugins`). Each does real work: sleeps, a CPU-burning child
process, a child Python process that pauses itself, classified failures, spawning."""

from __future__ import annotations

import hashlib
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from fredica.domain import errors, models
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.engine.registry import Registry
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext
from fredica.executors.process import SubprocessReporter
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext, Template

ERRORS: dict[str, type[errors.TaskError]] = {
    "TRANSIENT": errors.TransientError,
    "RESOURCE": errors.ResourceError,
    "PERMANENT": errors.PermanentError,
    "PAYLOAD_ERROR": errors.PayloadError,
    "AWAITING_CREDENTIAL": errors.AwaitingCredentialError,
}

# A child that burns CPU and writes a counter file, so tests can see whether it advances.
BURN_SCRIPT = """
import sys, time, pathlib
counter = pathlib.Path(sys.argv[1]); seconds = float(sys.argv[2])
n = 0; end = time.monotonic() + seconds; last = 0.0
while time.monotonic() < end:
    n += 1
    if n % 20000 == 0:
        counter.write_text(str(n))
counter.write_text("done")
"""


class SleepExecutor(TaskExecutor):
    """Sleeps `seconds` in small steps with checkpoints; records its pid/attempt if asked."""

    task_type = "TEST_SLEEP"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        import asyncio

        seconds = float(task.payload.get("seconds", 0.2))
        marker = task.payload.get("marker_dir")
        if marker:
            Path(marker, f"{task.id}.{task.attempt}.{os.getpid()}").touch()
        steps = max(1, int(seconds / 0.02))
        for i in range(steps):
            await ctx.checkpoint()
            await asyncio.sleep(seconds / steps)
            ctx.progress(100 * (i + 1) / steps)
        return ExecuteResult(
            {"slept": seconds, "attempt": task.attempt, "value": task.payload.get("value")}
        )


class InlineExecutor(TaskExecutor):
    """Starts inline (on the engine's own task): logs a record naming its task, then waits
    `seconds` in checkpointed steps (0: returns without ever waiting)."""

    task_type = "TEST_INLINE"
    pausable = True
    starts_inline = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        import asyncio
        import logging

        logging.getLogger("fredica.testplugin").warning("inline work of %s", task.id)
        seconds = float(task.payload.get("seconds", 0))
        steps = int(seconds / 0.02)
        for _ in range(steps):
            await ctx.checkpoint()
            await asyncio.sleep(seconds / steps)
        return ExecuteResult({"task": task.id, "waited": seconds})


class EffectExecutor(TaskExecutor):
    """Logs `start` and `end` lines of its attempt to a shared effect log (one JSON line each,
    appended atomically), sleeping `seconds` between them: tests count how often each task's
    effect happened, and on which node and attempt."""

    task_type = "TEST_EFFECT"

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        import asyncio
        import json

        log = Path(task.payload["effect_log"])

        def line(phase: str) -> None:
            entry = {
                "task": task.id,
                "attempt": task.attempt,
                "node": ctx.node_id,
                "pid": os.getpid(),
                "phase": phase,
                "t": time.time(),
            }
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(entry) + "\n").encode())
            finally:
                os.close(fd)

        line("start")
        await asyncio.sleep(float(task.payload.get("seconds", 0.01)))
        await ctx.checkpoint()
        line("end")
        return ExecuteResult({"attempt": task.attempt, "node": ctx.node_id})


class BurnExecutor(TaskExecutor):
    """Runs a CPU-burning child process for `seconds` (pause = SIGSTOP, cancel = terminate)."""

    task_type = "TEST_BURN"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        counter = Path(task.payload["counter"])
        await ctx.run_process(
            [sys.executable, "-c", BURN_SCRIPT, str(counter), str(task.payload.get("seconds", 5))]
        )
        return ExecuteResult({"counter": counter.read_text()})


class AnalyzeEffectExecutor(EffectExecutor):
    """`TEST_EFFECT` that needs the AI_ANALYZE capability: a node with
    `capabilities.ai_analyze.enabled: false` cannot claim it (cluster tests)."""

    task_type = "TEST_EFFECT_AI"
    capability = "AI_ANALYZE"


class FfmpegEffectExecutor(EffectExecutor):
    """`TEST_EFFECT` scored as FFMPEG work (its score follows the node's CPU score)."""

    task_type = "TEST_EFFECT_FFMPEG"
    capability = "FFMPEG"


class AsrEffectExecutor(EffectExecutor):
    """`TEST_EFFECT` scored as TRANSCRIBE work (its score follows the node's CPU score)."""

    task_type = "TEST_EFFECT_ASR"
    capability = "TRANSCRIBE"


CHILD_EFFECT_SCRIPT = """
import json, os, sys, time
log, task, attempt, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def line(phase):
    entry = {"task": task, "attempt": attempt, "pid": os.getpid(), "phase": phase, "t": time.time()}
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(entry) + "\\n").encode())
    os.close(fd)
line("start")
end = time.monotonic() + seconds
while time.monotonic() < end:
    time.sleep(0.01)
line("end")
"""


class ChildEffectExecutor(TaskExecutor):
    """Its work is a child process (started with `ctx.run_process`) that logs `start` and
    `end` of its attempt to a shared effect log, `seconds` apart: a child that outlived its
    node would log after the next attempt started (crash soak tests)."""

    task_type = "TEST_CHILD_EFFECT"

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        argv = [
            sys.executable,
            "-c",
            CHILD_EFFECT_SCRIPT,
            str(task.payload["effect_log"]),
            task.id,
            str(task.attempt),
            str(float(task.payload.get("seconds", 0.3))),
        ]
        await ctx.run_process(argv)
        return ExecuteResult({"attempt": task.attempt})


class TreeExecutor(TaskExecutor):
    """Runs a shell whose background child outlives it unless its process group is killed: the
    shell writes the child's pid to `pidfile`, then waits for it."""

    task_type = "TEST_TREE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        pidfile = task.payload["pidfile"]
        script = f"sleep 300 & echo $! > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}; wait"
        await ctx.run_process(["sh", "-c", script])
        return ExecuteResult({})


class ToolExecutor(TaskExecutor):
    """Runs this node's tool (`$FREDICA_TEST_TOOL`, default `true`) after `seconds`: a node
    whose tool is broken fails every task for lack of a working environment (RESOURCE)."""

    task_type = "TEST_TOOL"

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        import asyncio

        await asyncio.sleep(float(task.payload.get("seconds", 0.1)))
        tool = os.environ.get("FREDICA_TEST_TOOL", "true")
        try:
            await ctx.run_process([tool])
        except errors.TaskError as exc:
            raise errors.ResourceError(f"the tool is broken on this node: {exc.message}") from exc
        return ExecuteResult({"node": ctx.node_id})


def self_pausing_work(reporter: SubprocessReporter, marker: str, hold: float) -> dict[str, Any]:
    """Child process: progress, pause itself until resumed by the user, then finish."""
    reporter.progress(30, "before self-pause")
    Path(marker).write_text("waiting")
    reporter.request_pause("gpu_oom")  # clear, put, wait
    Path(marker).write_text("resumed")
    reporter.progress(90, "after resume")
    time.sleep(hold)
    return {"resumed": True, "pid": os.getpid()}


def self_resuming_work(reporter: SubprocessReporter, marker: str) -> dict[str, Any]:
    """Child process: pauses itself, then resumes itself when its 'resource' appears."""
    reporter.request_pause("waiting for resource", wait=False)
    while not Path(marker).exists():
        time.sleep(0.02)
    reporter.request_resume()
    return {"self_resumed": True}


def failing_work(reporter: SubprocessReporter) -> None:
    raise errors.PermanentError("the input is corrupt")


class SubprocessExecutor(TaskExecutor):
    task_type = "TEST_SUBPROC"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        mode = task.payload.get("mode", "self_pause")
        if mode == "self_pause":
            value = await ctx.run_in_subprocess(
                self_pausing_work, task.payload["marker"], float(task.payload.get("hold", 0.1))
            )
        elif mode == "self_resume":
            value = await ctx.run_in_subprocess(self_resuming_work, task.payload["marker"])
        else:
            value = await ctx.run_in_subprocess(failing_work)
        return ExecuteResult(value)


PRINT_SCRIPT = """
import sys
for i in range(int(sys.argv[1])):
    print(f"program out {i}", flush=True)
    print(f"program err {i}", file=sys.stderr, flush=True)
"""


def print_in_child(reporter: SubprocessReporter, lines: int) -> int:
    """Child process: prints and logs, as a model library would."""
    import logging

    for i in range(lines):
        print(f"child out {i}", flush=True)
        print(f"child err {i}", file=sys.stderr, flush=True)
    logging.getLogger("fredica.testplugin.child").info("child logged %d lines", lines)
    return lines


class PrintExecutor(TaskExecutor):
    """Prints through a program and a child Python process and logs a record, then holds for
    `hold` seconds (checkpoints every 20 ms; `release` file: stop holding early), printing
    `tick` lines while it holds; fails (PERMANENT) while its attempt is below `succeed_on`."""

    task_type = "TEST_PRINT"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        import asyncio
        import logging

        lines = int(task.payload.get("lines", 2))
        await ctx.run_process(
            [sys.executable, "-c", PRINT_SCRIPT, str(lines)], capture_stdout=False
        )
        await ctx.run_in_subprocess(print_in_child, lines)
        logging.getLogger("fredica.testplugin").warning("attempt %d printed", task.attempt)
        release = task.payload.get("release")
        end = time.monotonic() + float(task.payload.get("hold", 0))
        tick = 0
        while time.monotonic() < end and not (release and Path(release).exists()):
            await ctx.checkpoint()
            await ctx.run_process(["sh", "-c", f"echo tick {tick} >&2"])
            tick += 1
            await asyncio.sleep(0.05)
        if task.attempt < int(task.payload.get("succeed_on", 1)):
            raise errors.PermanentError(f"attempt {task.attempt} fails on purpose")
        (ctx.output_dir / "printed.txt").write_text(f"{lines} lines\n")
        return ExecuteResult({"attempt": task.attempt, "ticks": tick})


class FailExecutor(TaskExecutor):
    """Fails with `error_type` until attempt `succeed_on_attempt` (if given)."""

    task_type = "TEST_FAIL"
    failed_calls: list[tuple[str, str]] = []

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        succeed_on = task.payload.get("succeed_on_attempt")
        if succeed_on is not None and task.attempt >= int(succeed_on):
            return ExecuteResult({"attempt": task.attempt})
        kind = task.payload.get("error_type", "TRANSIENT")
        if kind == "RATE_LIMITED":
            raise errors.RateLimitedError(
                "429 Too Many Requests", retry_after_sec=float(task.payload.get("retry_after", 60))
            )
        if kind == "CRASH":
            raise RuntimeError("unexpected bug")
        raise ERRORS[kind](f"simulated {kind} failure on attempt {task.attempt}")

    async def on_task_failed(self, task: models.Task, result: ExecuteResult) -> None:
        FailExecutor.failed_calls.append((task.id, task.status.value))


class SkipExistingExecutor(TaskExecutor):
    """CHECK_EXISTING: skips when payload.output exists, else writes it."""

    task_type = "TEST_WRITE"

    async def can_skip(self, task: models.Task, ctx: TaskContext) -> dict[str, Any] | None:
        out = Path(task.payload["output"])
        return {"output": str(out), "reused": True} if out.exists() and out.stat().st_size else None

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        out = Path(task.payload["output"])
        tmp = out.with_suffix(".part")
        tmp.write_text("data")
        tmp.rename(out)
        return ExecuteResult({"output": str(out), "reused": False})


class AnalyzeExecutor(TaskExecutor):
    """Needs the AI_ANALYZE capability; reports which backend the engine chose for it."""

    task_type = "TEST_ANALYZE"
    capability = "AI_ANALYZE"

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        import asyncio

        started = time.time()
        await asyncio.sleep(float(task.payload.get("seconds", 0.2)))
        return ExecuteResult(
            {
                "backend": ctx.backend,
                "has_key": bool(ctx.backend_config.get("api_key")),
                "started": started,
                "ended": time.time(),
            }
        )


class ReadInputExecutor(TaskExecutor):
    """Reads `payload.path` through `ctx.input_path` from the node that holds it
    (`payload.holder`, else this node) and answers its sha256 and where it was read."""

    task_type = "TEST_READ_INPUT"

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        path = await ctx.input_path(task.payload["path"], task.payload.get("holder"))
        data = path.read_bytes()
        return ExecuteResult(
            {
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "node": ctx.node_id,
                "read_from": str(path),
            }
        )


class FanOutTemplate(Template):
    """SPLIT (sleep) -> N spawned TEST_SLEEP chunks -> MERGE waits for all of them."""

    name = "test_fanout"

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        split = str(uuid.uuid4())
        merge = str(uuid.uuid4())
        return models.NewPipeline(
            template=self.name,
            material_id=request.material_id or f"fanout:{uuid.uuid4()}",
            tasks=(
                models.NewTask(
                    id=split,
                    type="TEST_SLEEP",
                    payload={
                        "seconds": 0.05,
                        "role": "split",
                        "chunks": int(request.params.get("chunks", 3)),
                    },
                ),
                models.NewTask(
                    id=merge,
                    type="TEST_SLEEP",
                    payload={"seconds": 0.01, "role": "merge"},
                    depends_on=(split,),
                ),
            ),
            params=dict(request.params),
        )

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        if done.task.payload.get("role") != "split":
            return None
        merge = next(t for t in done.siblings if t.payload.get("role") == "merge")
        chunks = tuple(
            models.NewTask(
                id=str(uuid.uuid4()),
                type="TEST_SLEEP",
                payload={"seconds": 0.02, "role": "chunk", "index": i},
                depends_on=(done.task.id,),
            )
            for i in range(int(done.task.payload["chunks"]))
        )
        return SpawnPlan(
            new_tasks=chunks,
            add_dependencies={merge.id: tuple(c.id for c in chunks)},
            patch_payloads={merge.id: {"chunk_count": len(chunks)}},
        )


class ReadSourceTemplate(Template):
    """One TEST_READ_INPUT of `source` (the watch-folder tests: what the pipeline read)."""

    name = "test_read_source"

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        if not request.source:
            raise errors.InvalidRequest("source: required")
        return models.NewPipeline(
            template=self.name,
            material_id=request.material_id or f"read:{uuid.uuid4()}",
            tasks=(
                models.NewTask(
                    id=str(uuid.uuid4()), type="TEST_READ_INPUT", payload={"path": request.source}
                ),
            ),
            params={**request.params, "source": request.source},
        )


def register(registry: Registry) -> None:
    for executor in (
        SleepExecutor(),
        InlineExecutor(),
        EffectExecutor(),
        AnalyzeEffectExecutor(),
        FfmpegEffectExecutor(),
        AsrEffectExecutor(),
        ChildEffectExecutor(),
        TreeExecutor(),
        ToolExecutor(),
        BurnExecutor(),
        SubprocessExecutor(),
        PrintExecutor(),
        FailExecutor(),
        SkipExistingExecutor(),
        AnalyzeExecutor(),
        ReadInputExecutor(),
    ):
        registry.add_executor(executor)
    registry.add_template(FanOutTemplate())
    registry.add_template(ReadSourceTemplate())
