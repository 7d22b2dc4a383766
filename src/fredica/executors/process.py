"""The subprocess harness: external programs and child Python processes under task signals.

`run_process` runs a program in its own process group, so pause (SIGSTOP) and cancel
(SIGTERM, then SIGKILL after a grace period) reach every process it started.

`run_in_subprocess` implements seed 000's protocol for Python CPU work: the child sends
progress / pause_request / resume_request messages on a status queue and blocks on a resume
event. For a self-requested pause the child clears the event *before* it puts the request and
then waits, so its wait can never return early because the parent has not yet seen the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import queue
import select
import shlex
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fredica.domain import errors, models
from fredica.executors import ledger, tasklog
from fredica.executors.control import TaskControl

logger = logging.getLogger(__name__)

TERMINATE_GRACE = 3.0  # seconds between SIGTERM and SIGKILL on cancel
STDERR_TAIL_CHARS = 4000
QUEUE_POLL = 0.05  # seconds


@dataclass(frozen=True, slots=True)
class ProcessResult:
    returncode: int
    stdout: str
    stderr: str


class ProcessFailed(errors.TransientError):
    """The process exited with an error."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        tail = stderr.strip()[-STDERR_TAIL_CHARS:]
        name = os.path.basename(argv[0]) if argv else "process"
        super().__init__(f"{name} exited with code {returncode}: {tail}".strip())
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr


class ProcessKilled(errors.ResourceError):
    """The process was killed by SIGKILL (likely the OOM killer); another node should retry."""


async def _pump(
    stream: asyncio.StreamReader | None,
    sink: list[str],
    on_line: Callable[[str], None] | None,
    keep: bool,
    log: tasklog.TaskLog | None = None,
) -> None:
    if stream is None:
        return
    buf = b""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        if keep or log is not None:
            text = chunk.decode(errors="replace")
            if keep:
                sink.append(text)
            if log is not None:
                log.write(text)
        if on_line is not None:
            buf += chunk
            # ffmpeg ends progress lines with \r; treat both as line ends.
            parts = buf.replace(b"\r", b"\n").split(b"\n")
            buf = parts.pop()
            for part in parts:
                if part:
                    on_line(part.decode(errors="replace"))
    if on_line is not None and buf:
        on_line(buf.decode(errors="replace"))


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    pgid = proc.pid
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    try:
        await asyncio.wait_for(proc.wait(), TERMINATE_GRACE)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        await proc.wait()


async def run_process(
    argv: list[str],
    control: TaskControl,
    *,
    cwd: os.PathLike[str] | str | None = None,
    env: dict[str, str] | None = None,
    on_stdout_line: Callable[[str], None] | None = None,
    on_stderr_line: Callable[[str], None] | None = None,
    capture_stdout: bool = True,
    check: bool = True,
    log: tasklog.TaskLog | None = None,
) -> ProcessResult:
    """Run `argv` under `control`; see the module docstring. With `log`, the command line, its
    stderr, its stdout unless captured as data, and how it ended go to that task log."""
    await control.checkpoint()
    if shutil.which(argv[0]) is None:
        missing = "not executable" if os.path.exists(argv[0]) else "not found"
        raise errors.PermanentError(f"program {missing}: {argv[0]}")
    try:
        # the program dies with this node (parent-death signal); what it starts is reaped
        # from the process ledger at the next start
        proc = await asyncio.create_subprocess_exec(
            *ledger.pdeathsig_prefix(),
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise errors.PermanentError(f"program not found: {argv[0]}") from exc
    except PermissionError as exc:
        raise errors.PermanentError(f"program not executable: {argv[0]}") from exc
    control.attach_process_group(proc.pid)
    began = time.monotonic()
    if log is not None:
        log.line("$ " + shlex.join(argv))
    out: list[str] = []
    err: list[str] = []
    pumps = asyncio.gather(
        _pump(proc.stdout, out, on_stdout_line, capture_stdout, None if capture_stdout else log),
        _pump(proc.stderr, err, on_stderr_line, True, log),
    )
    waiter = asyncio.ensure_future(proc.wait())
    cancel_wait = asyncio.ensure_future(control.wait_cancelled())
    try:
        await asyncio.wait({waiter, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
        if control.cancelled and not waiter.done():
            await _terminate(proc)
            await pumps
            raise errors.TaskCancelled(control.cancel_reason)
        await pumps
        returncode = await waiter
    except BaseException:
        if proc.returncode is None:
            await _terminate(proc)
        raise
    finally:
        cancel_wait.cancel()
        control.detach_process_group(proc.pid)
        if log is not None:
            ended = "still running" if proc.returncode is None else f"exit code {proc.returncode}"
            log.line(f"{os.path.basename(argv[0])}: {ended} after {time.monotonic() - began:.1f}s")
    stderr = "".join(err)
    if control.cancelled:
        raise errors.TaskCancelled(control.cancel_reason)
    if check and returncode != 0:
        if returncode == -signal.SIGKILL:
            raise ProcessKilled(
                f"{os.path.basename(argv[0])} was killed (SIGKILL, likely out of memory)",
                hint="OUT_OF_MEMORY",
            )
        raise ProcessFailed(argv, returncode, stderr)
    return ProcessResult(returncode, "".join(out), stderr)


# --- child Python processes ------------------------------------------------------------------


class SubprocessReporter:
    """The child's side of the protocol (picklable handles only)."""

    def __init__(self, status_queue: Any, resume_event: Any) -> None:
        self._queue = status_queue
        self._resume = resume_event

    def progress(self, pct: float, note: str | None = None) -> None:
        self._queue.put({"type": "progress", "pct": pct, "note": note})

    def request_pause(self, reason: str, wait: bool = True) -> None:
        """Ask to pause. Clear first, then put, then wait (seed 000 ordering)."""
        self._resume.clear()
        self._queue.put({"type": "pause_request", "reason": reason})
        if wait:
            self._resume.wait()

    def request_resume(self) -> None:
        """The work resumes itself (its resource is back)."""
        self._resume.set()
        self._queue.put({"type": "resume_request"})

    def wait_if_paused(self, timeout: float | None = None) -> bool:
        """Block while paused; True if running again."""
        return bool(self._resume.wait(timeout))

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()


def _child_main(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    status_queue: Any,
    resume_event: Any,
    output: Any = None,
) -> None:
    with contextlib.suppress(OSError):
        os.setsid()  # own process group: pause/cancel reach anything this child starts
    ledger.set_pdeathsig()  # dies with the node
    if output is not None:
        _send_output_to(output)
    reporter = SubprocessReporter(status_queue, resume_event)
    try:
        value = fn(reporter, *args, **kwargs)
    except errors.TaskError as exc:
        status_queue.put(
            {
                "type": "error",
                "error_type": exc.error_type.value,
                "message": exc.message,
                "retry_after": exc.retry_after_sec,
            }
        )
    except BaseException as exc:
        status_queue.put(
            {
                "type": "error",
                "error_type": models.ErrorType.TRANSIENT.value,
                "message": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}",
                "retry_after": None,
            }
        )
    else:
        status_queue.put({"type": "result", "value": value})
    status_queue.close()
    status_queue.join_thread()


def _send_output_to(output: Any) -> None:
    """In the child: its stdout and stderr (its own, native libraries', the programs it starts)
    and its `logging` records go to the pipe the parent copies into the task log."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(output.fileno(), 1)
    os.dup2(output.fileno(), 2)
    output.close()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )


class _OutputCopier:
    """The parent's side: copies the child's output pipe into the task log on a thread, until
    the pipe ends (every writer gone) or `stop` is called."""

    def __init__(self, reader: Any, log: tasklog.TaskLog) -> None:
        self._reader = reader
        self._log = log
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._copy, name="fredica-child-output", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        fd = self._reader.fileno()
        while True:
            ready, _, _ = select.select([fd], [], [], QUEUE_POLL)
            if not ready:
                if self._stopping.is_set():
                    return
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            self._log.write(chunk.decode(errors="replace"))

    async def stop(self, wait: float = 1.0) -> None:
        """Give the pipe `wait` seconds to end (a process the child started may still hold
        it), then stop copying and close it."""
        await asyncio.to_thread(self._thread.join, wait)
        self._stopping.set()
        await asyncio.to_thread(self._thread.join)
        self._reader.close()


_ERROR_CLASSES: dict[str, type[errors.TaskError]] = {
    models.ErrorType.TRANSIENT.value: errors.TransientError,
    models.ErrorType.RESOURCE.value: errors.ResourceError,
    models.ErrorType.PERMANENT.value: errors.PermanentError,
    models.ErrorType.PAYLOAD_ERROR.value: errors.PayloadError,
    models.ErrorType.AWAITING_CREDENTIAL.value: errors.AwaitingCredentialError,
    models.ErrorType.CANCELLED.value: errors.TaskCancelled,
}


def error_from_message(msg: dict[str, Any]) -> errors.TaskError:
    et = str(msg.get("error_type"))
    text = str(msg.get("message") or "subprocess failed")
    if et == models.ErrorType.RATE_LIMITED.value:
        return errors.RateLimitedError(text, retry_after_sec=float(msg.get("retry_after") or 30))
    return _ERROR_CLASSES.get(et, errors.TransientError)(text)


async def run_in_subprocess(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    control: TaskControl,
    *,
    on_progress: Callable[[float, str | None], None] | None = None,
    log: tasklog.TaskLog | None = None,
) -> Any:
    """Run `fn(reporter, *args, **kwargs)` in a spawned child; see the module docstring. With
    `log`, the child's stdout, stderr and `logging` records go to that task log."""
    await control.checkpoint()
    ctx = multiprocessing.get_context("spawn")
    status_queue = ctx.Queue()
    resume_event = ctx.Event()
    resume_event.set()
    reader, writer = ctx.Pipe(duplex=False) if log is not None else (None, None)
    child = ctx.Process(
        target=_child_main,
        args=(fn, args, kwargs, status_queue, resume_event, writer),
        daemon=True,
    )
    try:
        child.start()
    except BaseException:
        if reader is not None:
            reader.close()
        raise
    finally:
        if writer is not None:
            writer.close()  # the child has its own copy: the pipe ends when the child does
    copier = _OutputCopier(reader, log) if reader is not None and log is not None else None
    try:
        return await _supervise(child, status_queue, resume_event, control, on_progress)
    finally:
        if copier is not None:
            await copier.stop()


async def _supervise(
    child: Any,
    status_queue: Any,
    resume_event: Any,
    control: TaskControl,
    on_progress: Callable[[float, str | None], None] | None,
) -> Any:
    """Relay the started child's messages until its outcome (see `run_in_subprocess`)."""
    assert child.pid is not None
    pid = child.pid
    control.attach_process_group(pid)

    def on_pause(paused: bool) -> None:
        # Mirror every pause change into the child's resume event (user pause and resume).
        if paused:
            resume_event.clear()
        else:
            resume_event.set()

    remove_hook = control.add_pause_hook(on_pause)
    outcome: dict[str, Any] | None = None
    try:
        while outcome is None:
            if control.cancelled:
                await _stop_child(child, pid)
                raise errors.TaskCancelled(control.cancel_reason)
            try:
                msg = await asyncio.to_thread(status_queue.get, True, QUEUE_POLL)
            except queue.Empty:
                if not child.is_alive() and status_queue.empty():
                    raise _child_died(child.exitcode) from None
                continue
            outcome = _handle_message(msg, control, on_progress)
    except BaseException:
        if child.is_alive():
            await _stop_child(child, pid)
        raise
    finally:
        remove_hook()
        control.detach_process_group(pid)
    await asyncio.to_thread(child.join, 5.0)
    if outcome["type"] == "error":
        raise error_from_message(outcome)
    return outcome.get("value")


def _child_died(code: int | None) -> errors.TaskError:
    if code == -signal.SIGKILL:
        return ProcessKilled("worker subprocess was killed (SIGKILL, likely out of memory)")
    return errors.TransientError(f"worker subprocess exited with code {code} without a result")


def _handle_message(
    msg: dict[str, Any],
    control: TaskControl,
    on_progress: Callable[[float, str | None], None] | None,
) -> dict[str, Any] | None:
    """Act on one message of the child; returns it when it is the outcome."""
    kind = msg.get("type")
    if kind == "progress" and on_progress is not None:
        on_progress(float(msg.get("pct") or 0), msg.get("note"))
    elif kind == "pause_request":
        control.request_pause(str(msg.get("reason") or "requested by task"))
    elif kind == "resume_request":
        control.request_resume()
    elif kind in ("result", "error"):
        return msg
    return None


async def _stop_child(child: Any, pid: int) -> None:
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    await asyncio.to_thread(child.join, TERMINATE_GRACE)
    if child.is_alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(child.join, TERMINATE_GRACE)
