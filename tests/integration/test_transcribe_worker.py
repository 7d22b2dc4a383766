"""The resident inference worker, for real: faster-whisper tiny.en in a long-lived child
process shared by consecutive tasks; pause stops it at once, cancel stops the job (not the
node), a dead worker is replaced, and idle workers are evicted."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from bench import talks

from fredica.domain import errors
from fredica.executors import inference_worker, tasklog, transcribe
from fredica.executors.context import TaskContext
from tests.media_support import make_context, require_media_tools

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    require_media_tools()
    return talks.make_talk(tmp_path_factory.mktemp("w") / "talk.wav", "en", limit=8)


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Any:
    fresh = inference_worker.InferencePool()
    monkeypatch.setattr(inference_worker, "_POOL", fresh)
    yield fresh
    fresh.shutdown()


async def _ctx(tmp: Path, audio: Path) -> TaskContext:
    payload = {"audio_path": str(audio), "language": "en", "model_name": "tiny.en"}
    return await make_context(tmp, "TRANSCRIBE_CHUNK", payload)


async def _run(ctx: TaskContext) -> dict[str, Any]:
    result = (await transcribe.TranscribeChunkExecutor().execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def _wait_progress(ctx: TaskContext, above: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while ctx.last_progress <= above:
        assert time.monotonic() < deadline, "the job never got going"
        await asyncio.sleep(0.02)


async def test_consecutive_tasks_share_one_worker_and_one_model_load(
    tmp_path: Path, speech: tuple[Path, str], pool: Any
) -> None:
    wav, reference = speech
    first = await _run(await _ctx(tmp_path, wav))
    second = await _run(await _ctx(tmp_path, wav))
    assert first["worker_pid"] == second["worker_pid"] != os.getpid()
    assert pool.started == 1 and len(pool.workers) == 1
    assert first["model_load_sec"] > 0.1 and second["model_load_sec"] < 0.05  # loaded once
    assert second["text"] == first["text"]
    assert talks.word_error_rate(reference, second["text"]) < 0.25


async def test_what_the_worker_logs_goes_to_the_log_of_the_task_it_runs_for(
    tmp_path: Path, speech: tuple[Path, str], pool: Any
) -> None:
    wav, _ = speech
    logs = []
    for _ in range(2):
        ctx = await _ctx(tmp_path, wav)
        log = tasklog.attempt_log(tmp_path / "data", ctx.task.id, 1)

        async def attempt(ctx: TaskContext = ctx, log: tasklog.TaskLog = log) -> dict[str, Any]:
            tasklog.bind(log)  # as the engine does for an attempt (its own context)
            return await _run(ctx)

        result = await asyncio.create_task(attempt())
        assert log.path is not None
        logs.append((result["worker_pid"], log.path.read_text()))
    (pid, first), (again, second) = logs
    assert pid == again
    # which worker took the task, and faster-whisper's own records from inside that worker
    assert f"inference worker {pid} for " in first and "(its job 1)" in first
    assert "(its job 2)" in second
    for text in (first, second):
        assert f"[worker {pid}] info faster_whisper: Processing audio with duration" in text
    # the second task's log has its own lines only
    assert second.count("Processing audio with duration") == 1


async def test_the_vad_runs_in_a_worker_that_the_chunks_then_take_over(
    tmp_path: Path, speech: tuple[Path, str], pool: Any
) -> None:
    """SPLIT_AUDIO's voice activity detection needs no model: it runs in a resident worker
    (key None), and the next Whisper job takes that worker over instead of starting a process
    and importing faster-whisper again."""
    from fredica.executors import split

    wav, _ = speech
    ctx = await _ctx(tmp_path, wav)
    regions = await pool.run(None, split.speech_in_child, {"audio_path": str(wav)}, ctx.control)
    assert regions and all(0 <= a < b for a, b in regions)  # the talk has speech
    (vad_worker,) = pool.workers
    assert vad_worker.key is None and not vad_worker.busy
    result = await _run(ctx)
    assert result["worker_pid"] == vad_worker.pid and pool.started == 1
    assert vad_worker.key is not None  # now this model's worker
    assert result["model_load_sec"] > 0.1  # its model was loaded by the chunk, once


async def test_pause_stops_the_worker_at_once_and_the_next_task_reuses_it(
    tmp_path: Path, speech: tuple[Path, str], pool: Any
) -> None:
    wav, _ = speech
    ctx = await _ctx(tmp_path, wav)
    job = asyncio.create_task(_run(ctx))
    await _wait_progress(ctx, 4)  # transcribing
    pid = pool.workers[0].pid
    ctx.control.pause("test pause")
    paused_at = time.monotonic()
    while _state(pid) != "T":
        assert time.monotonic() - paused_at < 1.0, "the worker did not stop within a second"
        await asyncio.sleep(0.01)
    frozen = ctx.last_progress
    await asyncio.sleep(1.0)
    assert ctx.last_progress == frozen and not job.done()  # really stopped
    ctx.control.resume()
    result = await asyncio.wait_for(job, 120)
    assert result["worker_pid"] == pid and result["segments"]
    again = await _run(await _ctx(tmp_path, wav))
    assert again["worker_pid"] == pid and pool.started == 1


async def test_cancel_stops_the_job_within_a_second_and_the_pool_goes_on(
    tmp_path: Path, speech: tuple[Path, str], pool: Any
) -> None:
    wav, _ = speech
    warm = await _run(await _ctx(tmp_path, wav))  # the model is loaded: the next job transcribes
    ctx = await _ctx(tmp_path, wav)
    job = asyncio.create_task(_run(ctx))
    await _wait_progress(ctx, 4)
    ctx.control.cancel("test cancel")
    cancelled_at = time.monotonic()
    with pytest.raises(errors.TaskCancelled):
        await job
    assert time.monotonic() - cancelled_at < 1.5
    # the node is untouched, and the next chunk runs in the same worker (if the job was inside
    # a window decode, the worker finishes that call, drops the job and takes the next one)
    after = await _run(await _ctx(tmp_path, wav))
    assert after["segments"] and after["model_load_sec"] < 0.05
    assert after["worker_pid"] == warm["worker_pid"] and pool.started == 1


async def test_a_dead_worker_fails_its_job_and_is_replaced(
    tmp_path: Path, speech: tuple[Path, str], pool: Any
) -> None:
    wav, _ = speech
    ctx = await _ctx(tmp_path, wav)
    job = asyncio.create_task(_run(ctx))
    await _wait_progress(ctx, 1)
    os.kill(pool.workers[0].pid, 9)  # as the OOM killer would
    with pytest.raises(errors.ResourceError, match="killed"):
        await job
    result = await _run(await _ctx(tmp_path, wav))
    assert result["segments"] and pool.started == 2


async def test_idle_workers_are_evicted(
    tmp_path: Path, speech: tuple[Path, str], pool: Any
) -> None:
    wav, _ = speech
    result = await _run(await _ctx(tmp_path, wav))
    worker = pool.workers[0]
    assert pool.evict_idle(now=time.monotonic() + 1) == 0  # recently used: stays
    assert pool.evict_idle(now=time.monotonic() + inference_worker.IDLE_EVICT_SEC + 1) == 1
    assert pool.workers == [] and not worker.alive
    assert result["worker_pid"] == worker.pid
