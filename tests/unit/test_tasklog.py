"""Task logs: bounded to their last bytes, read by logical offsets, found per attempt."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fredica.domain import errors
from fredica.executors import tasklog


def test_a_log_keeps_its_last_bytes_and_says_how_many_went(tmp_path: Path) -> None:
    path = tasklog.log_path(tmp_path, "task-1", 1)
    assert path is not None
    log = tasklog.TaskLog(path, limit=1000, slack=500)
    written = b""
    for i in range(400):
        line = f"line {i:04d} of the log\n"
        log.write(line)
        written += line.encode()
        assert path.stat().st_size <= 1000 + 500 + 120  # the mark line is on top of the limit
    chunk = tasklog.read(tmp_path, "task-1", None)
    assert chunk.attempt == 1 and chunk.end == len(written)
    assert chunk.dropped > len(written) - 1500
    mark, kept = chunk.text.split("\n", 1)
    assert mark == (
        f"[fredica: the first {chunk.dropped} bytes of this log were dropped to keep it under "
        "1 MiB]"
    )
    # cut at a line end: what is kept is exactly the tail of what was written
    assert written.endswith(kept.encode()) and kept.startswith("line ")
    assert len(kept.encode()) == len(written) - chunk.dropped <= 1000 + 500


def test_a_follower_reads_exactly_what_was_added_across_trims(tmp_path: Path) -> None:
    path = tasklog.log_path(tmp_path, "task-1", 2)
    assert path is not None
    log = tasklog.TaskLog(path, limit=300, slack=100)
    seen, offset, written = "", 0, ""
    for i in range(60):
        text = f"progress {i}\r" if i % 3 else f"step {i}\n"
        log.write(text)
        written += text.replace("\r", "\n")
        chunk = tasklog.read(tmp_path, "task-1", 2, offset)
        assert chunk.start == offset or offset == 0
        seen += chunk.text if offset else chunk.text.split("]\n", 1)[-1]
        offset = chunk.end
    assert offset == len(written.encode())
    assert seen == written  # carriage returns became line ends; nothing lost or repeated
    # an offset behind what was dropped gets the whole kept log with its mark
    behind = tasklog.read(tmp_path, "task-1", 2, 5)
    assert behind.text.startswith("[fredica: the first") and behind.end == offset


def test_missing_logs_say_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(errors.NotFound, match="task t has no log yet"):
        tasklog.read(tmp_path, "t", None)
    for attempt in (1, 3):
        path = tasklog.log_path(tmp_path, "t", attempt)
        assert path is not None
        tasklog.TaskLog(path).write(f"attempt {attempt}\n")
    assert tasklog.attempts(tmp_path, "t") == [1, 3]
    assert tasklog.read(tmp_path, "t", None).text == "attempt 3\n"
    with pytest.raises(errors.NotFound, match=r"no log of attempt 2 \(logged: 1, 3\)"):
        tasklog.read(tmp_path, "t", 2)
    # an id that cannot name a directory has no log, and never reaches outside the log root
    assert tasklog.log_path(tmp_path, "../t", 1) is None
    with pytest.raises(errors.NotFound):
        tasklog.read(tmp_path, "../t", None)
    tasklog.remove(tmp_path, ["t", "../logs"])
    assert tasklog.attempts(tmp_path, "t") == [] and tasklog.logs_root(tmp_path).is_dir()


async def test_records_logged_on_an_attempts_behalf_go_to_its_log(tmp_path: Path) -> None:
    import asyncio

    logger = logging.getLogger("fredica.executors.unit")
    logger.setLevel(logging.INFO)
    path = tasklog.log_path(tmp_path, "task-9", 1)
    assert path is not None

    async def attempt() -> None:
        tasklog.bind(tasklog.TaskLog(path))
        logger.info("in the attempt")
        await asyncio.to_thread(logger.warning, "in a thread it started")

    await asyncio.create_task(attempt())
    logger.warning("outside any attempt")
    text = path.read_text()
    assert "info fredica.executors.unit: in the attempt" in text
    assert "warning fredica.executors.unit: in a thread it started" in text
    assert "outside" not in text
