"""Task logs: what one attempt of a task printed, kept for the user to read.

Each attempt writes `<data_dir>/logs/tasks/<task_id>/<attempt>.log`: the command lines its
executor ran with their stderr (and stdout, unless the executor reads it as data), the output
of its child Python processes, its events, and the `logging` records of `fredica.*` loggers
emitted on its behalf (by its executor, or by the engine about it) while the attempt ran.

A log keeps its last `MAX_LOG_BYTES`: once it grows `TRIM_SLACK_BYTES` past that, its head is
cut at a line end and replaced by one line saying how many bytes went, so the cost of trimming
stays amortised. Readers address a log by logical byte offsets (as if nothing had been
dropped), so a reader that follows a live log with `read(offset=<end of its last read>)` gets
exactly the new text, trims or not.
"""

from __future__ import annotations

import contextvars
import logging
import re
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fredica.domain import errors

MAX_LOG_BYTES = 1_048_576  # bytes of an attempt's log kept (its last MiB)
TRIM_SLACK_BYTES = 262_144  # bytes a log may grow past MAX_LOG_BYTES before it is trimmed
_MARK = "[fredica: the first {n} bytes of this log were dropped to keep it under 1 MiB]\n"
_MARK_RE = re.compile(rb"\A\[fredica: the first (\d+) bytes of this log were dropped[^\n]*\n")
_LOG_NAME = re.compile(r"^(\d{1,9})\.log$")
# a task id names a directory: the same rule as the result files' (web/files.py)
_SAFE_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_LOGGER = "fredica"  # records of its loggers emitted on an attempt's behalf go to its log

_current: contextvars.ContextVar[TaskLog | None] = contextvars.ContextVar(
    "fredica_task_log", default=None
)


def logs_root(data_dir: Path) -> Path:
    return data_dir / "logs" / "tasks"


def names_a_directory(task_id: str) -> bool:
    """Can this task id be one directory's name (no separators, no `..`)?"""
    return bool(_SAFE_TASK_ID.match(task_id)) and ".." not in task_id


def task_log_dir(data_dir: Path, task_id: str) -> Path | None:
    """Where a task's logs live; None for an id that cannot name a directory."""
    if not names_a_directory(task_id):
        return None
    return logs_root(data_dir) / task_id


def log_path(data_dir: Path, task_id: str, attempt: int) -> Path | None:
    directory = task_log_dir(data_dir, task_id)
    return None if directory is None else directory / f"{attempt}.log"


def attempt_log(data_dir: Path, task_id: str, attempt: int) -> TaskLog:
    """The log of one attempt; its path is worked out when something is first written (most
    attempts of quick tasks write nothing, and a path costs more than the task itself)."""
    log = TaskLog(None)
    log._where = (data_dir, task_id, attempt)  # an id that names no directory: no path
    return log


class TaskLog:
    """The log of one attempt (thread-safe; the file appears with the first text)."""

    def __init__(
        self, path: Path | None, limit: int = MAX_LOG_BYTES, slack: int = TRIM_SLACK_BYTES
    ) -> None:
        self._path = path
        self._where: tuple[Path, str, int] | None = None  # (data dir, task id, attempt)
        self.limit = limit
        self.slack = slack
        self._lock = threading.Lock()
        self._size: int | None = None
        self._pending_cr = False

    @property
    def path(self) -> Path | None:
        if self._where is not None:
            self._path, self._where = log_path(*self._where), None
        return self._path

    @path.setter
    def path(self, value: Path | None) -> None:
        self._path, self._where = value, None

    def write(self, text: str) -> None:
        """Append `text`; carriage returns (progress lines) become line ends."""
        if not text or self.path is None:
            return
        with self._lock:
            # a "\r\n" split across two writes is still one line end
            if self._pending_cr and text.startswith("\n"):
                text = text[1:]
            self._pending_cr = text.endswith("\r")
            data = text.replace("\r\n", "\n").replace("\r", "\n").encode(errors="replace")
            try:
                self._append(data)
            except OSError as exc:  # a full disk must not fail the task
                logging.getLogger(__name__).warning(
                    "task log %s not written: %s", self.path, exc, extra={"action": "task_log"}
                )
                self.path = None

    def line(self, text: str) -> None:
        """Append one line stamped with the local time."""
        self.write(f"{time.strftime('%H:%M:%S')} {text.rstrip()}\n")

    def _append(self, data: bytes) -> None:
        assert self.path is not None
        if self._size is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._size = self.path.stat().st_size if self.path.exists() else 0
        with self.path.open("ab") as f:
            f.write(data)
        self._size += len(data)
        if self._size > self.limit + self.slack:
            self._size = _trim(self.path, self.limit)


def _trim(path: Path, limit: int) -> int:
    """Cut the head of the log at a line end so that at most `limit` bytes are kept; the first
    line says how many (logical) bytes are gone. Returns the new file size."""
    raw = path.read_bytes()
    dropped, body = _split_mark(raw)
    cut = len(body) - limit
    if cut <= 0:
        return len(raw)
    newline = body.find(b"\n", cut)
    cut = len(body) if newline < 0 else newline + 1
    kept = _MARK.format(n=dropped + cut).encode() + body[cut:]
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(kept)
    tmp.replace(path)
    return len(kept)


def _split_mark(raw: bytes) -> tuple[int, bytes]:
    """(bytes dropped so far, the text kept after the mark)."""
    match = _MARK_RE.match(raw)
    if match is None:
        return 0, raw
    return int(match.group(1)), raw[match.end() :]


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Text of a log from a logical offset to its end (`end`: where the next read starts)."""

    attempt: int
    text: str
    start: int
    end: int
    dropped: int
    #: every attempt of the task that left a log
    attempts: tuple[int, ...] = ()


def attempts(data_dir: Path, task_id: str) -> list[int]:
    """The attempts of a task that left a log, in order."""
    directory = task_log_dir(data_dir, task_id)
    if directory is None or not directory.is_dir():
        return []
    found = (_LOG_NAME.match(p.name) for p in directory.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def read(data_dir: Path, task_id: str, attempt: int | None, offset: int = 0) -> LogChunk:
    """The log of `attempt` (None: the latest that left one) from logical byte `offset`.

    `NotFound` names what is missing: no attempt logged, or not this one."""
    logged = attempts(data_dir, task_id)
    if not logged:
        raise errors.NotFound(f"task {task_id} has no log yet (no attempt wrote any output)")
    if attempt is None:
        attempt = logged[-1]
    path = log_path(data_dir, task_id, attempt)
    if attempt not in logged or path is None:
        have = ", ".join(str(a) for a in logged)
        raise errors.NotFound(f"task {task_id} has no log of attempt {attempt} (logged: {have})")
    dropped, body = _split_mark(path.read_bytes())
    end = dropped + len(body)
    if offset == 0 or offset < dropped:
        # from the start, or from text that is gone: the whole log, its mark saying so
        text = (_MARK.format(n=dropped) if dropped else "") + body.decode(errors="replace")
        return LogChunk(attempt, text, dropped, end, dropped, tuple(logged))
    start = min(offset, end)
    tail = body[start - dropped :]
    return LogChunk(attempt, tail.decode(errors="replace"), start, end, dropped, tuple(logged))


def remove(data_dir: Path, task_ids: Iterable[str]) -> None:
    """Delete the logs of these tasks (a directory that is not a task's own is left alone)."""
    root = logs_root(data_dir)
    for task_id in task_ids:
        directory = task_log_dir(data_dir, task_id)
        if directory is not None and not directory.is_symlink() and directory.parent == root:
            shutil.rmtree(directory, ignore_errors=True)


# --- `logging` records of the running executor ------------------------------------------------
class _Handler(logging.Handler):
    """Writes a record to the log of the attempt running in the current context, if any."""

    def emit(self, record: logging.LogRecord) -> None:
        log = _current.get()
        if log is None:
            return
        try:
            log.line(f"{record.levelname.lower()} {record.name}: {record.getMessage()}")
        except Exception:  # a log line must never break the work
            self.handleError(record)


_handler = _Handler(logging.INFO)
_install_lock = threading.Lock()
_target = logging.getLogger(_LOGGER)


def current() -> TaskLog | None:
    """The log of the attempt running in the current context (None outside an attempt)."""
    return _current.get()


def bind(log: TaskLog) -> None:
    """Send the `fredica.*` records of the current context (an attempt's asyncio task, and the
    threads and tasks it starts, which copy its context) to `log`."""
    if _handler not in _target.handlers:
        with _install_lock:
            if _handler not in _target.handlers:
                _target.addHandler(_handler)
    _current.set(log)
