"""A node whose ffmpeg is broken (a library it needs does not load; its version probe still
answers, as a cached probe would): its failures are RESOURCE, not PERMANENT (the input is
fine), so the task goes to another node, and after `quarantine_after_failures` of them the node
quarantines itself and claims nothing more."""

from __future__ import annotations

import asyncio
import dataclasses
import stat
import subprocess
from pathlib import Path

import pytest

from fredica.config import schema as config_schema
from fredica.domain import errors
from fredica.domain.models import ErrorType, TaskStatus
from fredica.domain.node_state import NodeStatus
from fredica.executors import audio, ffmpeg
from fredica.node import compose
from tests.media_support import make_context

from .test_engine import create, fast_settings, task, wait_for

LOADER_ERROR = (
    "error while loading shared libraries: libavfilter.so.9: "
    "cannot open shared object file: No such file or directory"
)


def broken_ffmpeg(directory: Path) -> Path:
    """An `ffmpeg` that answers the capability probes (-version, -encoders, -hwaccels) with the
    real one and fails every real run as a missing shared library does (exit 127)."""
    real = ffmpeg.executable()
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "ffmpeg"
    shim.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in\n'
        f'  -version|-encoders|-hwaccels|-decoders|-filters) exec "{real}" "$@";;\n'
        "esac; done\n"
        f'echo "$0: {LOADER_ERROR}" >&2\n'
        "exit 127\n"
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return shim


def tone(path: Path) -> Path:
    """A 2 s WAV made by the real ffmpeg."""
    subprocess.run(
        [ffmpeg.executable(), "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
         "-i", "sine=frequency=440:duration=2", "-ac", "1", str(path)],
        check=True, timeout=60,
    )  # fmt: skip
    return path


async def test_a_broken_ffmpeg_is_a_resource_failure_not_a_bad_input(tmp_path: Path) -> None:
    shim = broken_ffmpeg(tmp_path / "bin")
    source = tone(tmp_path / "tone.wav")
    ctx = await make_context(
        tmp_path, "EXTRACT_AUDIO", {"video_path": str(source)},
        backend="ffmpeg-cpu", backend_config={"ffmpeg_path": str(shim)},
    )  # fmt: skip
    with pytest.raises(errors.ResourceError) as caught:
        await audio.ExtractAudioExecutor().execute(ctx.task, ctx)
    assert caught.value.hint == "BROKEN_TOOL"
    assert "ffmpeg" in caught.value.message and "libavfilter.so.9" in caught.value.message
    # the same run with the real ffmpeg succeeds: the input was fine
    ctx.backend_config = {}
    assert (await audio.ExtractAudioExecutor().execute(ctx.task, ctx)).ok
    # and a run that fails after the probe is classified the same way
    failed = ffmpeg.process.ProcessFailed([str(shim)], 127, f"{shim}: {LOADER_ERROR}")
    assert ffmpeg.classify_failure(failed, "x").error_type is ErrorType.RESOURCE


async def test_a_node_with_a_broken_ffmpeg_quarantines_itself(tmp_path: Path) -> None:
    shim = broken_ffmpeg(tmp_path / "bin")
    source = tone(tmp_path / "tone.wav")
    cfg = config_schema.parse_config(
        {
            "capabilities": {"ffmpeg": {"ffmpeg_path": str(shim)}},
            "scheduling": {"quarantine_after_failures": 3, "quarantine_cooldown_sec": 600},
        },
        "test",
    )
    settings = dataclasses.replace(fast_settings(tmp_path / "data", max_workers=1), config=cfg)
    node = compose.build_node(settings)
    await node.start()
    try:
        payload = {"video_path": str(source)}
        _, refs = await create(
            node, [{"ref": f"x{i}", "type": "EXTRACT_AUDIO", "payload": payload} for i in range(4)]
        )
        # the first three fail for lack of resources (this node excluded, retries left) ...
        await wait_for(lambda: node.engine.quarantine.active)
        assert node.state() is NodeStatus.QUARANTINED
        tasks = [await task(node, tid) for tid in refs.values()]
        failed = [t for t in tasks if t.error_type == "RESOURCE"]
        assert len(failed) == 3
        for t in failed:
            assert (t.status, t.retry_count) == (TaskStatus.PENDING, 1), t.error
            assert node.node_id in t.excluded_nodes and "libavfilter.so.9" in (t.error or "")
        # ... and the fourth is left for other nodes (handed back if it was claimed ahead):
        # no retry spent, this node not excluded, and not claimed again while quarantined
        (rest,) = [t for t in tasks if t.error_type is None]
        claimed = node.engine.stats["claimed"]
        for _ in range(5):
            node.engine.wake()
            await asyncio.sleep(0.1)  # two poll intervals: each wake is a claim attempt
        assert node.engine.stats["claimed"] == claimed
        rest = await task(node, rest.id)
        assert (rest.status, rest.retry_count, rest.excluded_nodes) == (TaskStatus.PENDING, 0, [])
        assert "3 tasks in a row failed" in (node.engine.quarantine.reason or "")
    finally:
        await node.stop(grace=2)
