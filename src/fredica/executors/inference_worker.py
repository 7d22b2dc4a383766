"""Resident inference workers: Whisper models stay loaded between TRANSCRIBE_CHUNK and
DETECT_LANGUAGE tasks instead of being loaded again by a fresh process for every task.

A worker is a long-lived child process for one key (model, device, compute type, threads). It
runs one job at a time; parallel tasks of a node get parallel workers (up to the node's slots,
since each task holds one). Jobs are module-level functions `fn(reporter, spec)`, the same ones
`run_in_subprocess` would run, so an inference function does not care where it runs.

Task signals stay real:
- pause stops the worker's process group (SIGSTOP) at once; resume continues it (SIGCONT);
- cancel asks the job to stop (it checks between segments and windows); the task ends within
  CANCEL_GRACE_SEC either way, never the node. A Whisper window is decoded in one native call
  that cannot be interrupted, so a job deep in one has not answered by then: its worker then
  drains (finishes that call, sees the flag, discards the job) and stays; the next job for
  the model waits for it rather than loading the model again elsewhere. Only a worker still
  busy after DRAIN_LIMIT_SEC is killed, and a replacement starts at once, loading the model;
- a worker that dies (crash, OOM killer) fails only its current job and is replaced on the
  next one; workers idle for longer than IDLE_EVICT_SEC exit (their memory goes back), and at
  most MAX_WORKERS stay resident (the least recently used idle one leaves first).
Workers die with the node: they are daemonic and ask the kernel for SIGKILL when their parent
dies (Linux PR_SET_PDEATHSIG).

What a job logs (the `logging` records of the worker process at INFO and above: faster-whisper's
and fredica's) goes to the log of the task it runs for, each line marked with the worker's pid,
after a line saying which worker took the job and how many it had run before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import logging
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from fredica.domain import errors, models
from fredica.executors import process, tasklog
from fredica.executors.control import TaskControl

logger = logging.getLogger(__name__)

IDLE_EVICT_SEC = 300.0  # an idle worker exits after this long (its model leaves memory)
CANCEL_GRACE_SEC = 1.0  # a cancelled task ends within this (its worker may still drain)
DRAIN_LIMIT_SEC = 30.0  # a cancelled job's worker still busy after this is killed
MAX_WORKERS = 4  # resident workers kept at most (busy ones are never evicted)
POLL_SEC = 0.05
_PR_SET_PDEATHSIG = 1


class WorkerReporter:
    """The job's side: progress, self-requested pause, and the cancel flag (checked by the
    job between units of work)."""

    def __init__(self, conn: Any, resume: Any, cancel: Any) -> None:
        self._conn = conn
        self._resume = resume
        self._cancel = cancel
        self.job = 0
        self._sending = threading.Lock()  # a job's threads may log while it reports

    def send(self, message: dict[str, Any]) -> None:
        with self._sending:
            self._conn.send({**message, "job": self.job})

    def progress(self, pct: float, note: str | None = None) -> None:
        self.send({"type": "progress", "pct": pct, "note": note})

    def request_pause(self, reason: str, wait: bool = True) -> None:
        """Ask to pause: clear first, then send, then wait (seed 000 ordering)."""
        self._resume.clear()
        self.send({"type": "pause_request", "reason": reason})
        if wait:
            self._resume.wait()

    def request_resume(self) -> None:
        self._resume.set()
        self.send({"type": "resume_request"})

    def wait_if_paused(self, timeout: float | None = None) -> bool:
        """Block while paused; raise TaskCancelled if the job was cancelled."""
        running = bool(self._resume.wait(timeout))
        if self._cancel.is_set():
            raise errors.TaskCancelled("cancelled while running in the inference worker")
        return running

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    @property
    def cancelled(self) -> bool:
        return bool(self._cancel.is_set())


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _error_message(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, errors.TaskError):
        return {
            "type": "error",
            "error_type": exc.error_type.value,
            "message": exc.message,
            "retry_after": exc.retry_after_sec,
        }
    return {
        "type": "error",
        "error_type": models.ErrorType.TRANSIENT.value,
        "message": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}",
        "retry_after": None,
    }


class _ToTaskLog(logging.Handler):
    """The worker's side of the task log: each record goes to the parent as a `log` message
    of the current job (the parent writes it to that task's log)."""

    def __init__(self, reporter: WorkerReporter) -> None:
        super().__init__(logging.INFO)
        self._reporter = reporter

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = f"{record.levelname.lower()} {record.name}: {record.getMessage()}"
            self._reporter.send({"type": "log", "line": line})
        except Exception:  # a log line must never break the work
            self.handleError(record)


def _worker_main(conn: Any, resume: Any, cancel: Any) -> None:
    """The worker process: run jobs until told to stop (None) or the pipe closes."""
    with contextlib.suppress(OSError):
        os.setsid()  # own process group: pause reaches anything a job starts
    _die_with_parent()
    reporter = WorkerReporter(conn, resume, cancel)
    root = logging.getLogger()
    root.addHandler(_ToTaskLog(reporter))
    root.setLevel(logging.INFO)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        reporter.job, fn, spec = job
        try:
            value = fn(reporter, spec)
        except BaseException as exc:
            message = _error_message(exc)
        else:
            message = {"type": "result", "value": value}
        reporter.send(message)


@dataclass(eq=False)
class Worker:
    """One resident worker process (parent side)."""

    key: Hashable
    process: Any
    conn: Any
    resume: Any
    cancel: Any
    busy: bool = False
    draining: asyncio.Task[None] | None = None  # a cancelled job still finishing its native call
    last_used: float = field(default_factory=time.monotonic)
    jobs: int = 0
    current: int = 0  # id of the job whose messages are awaited
    warm: tuple[Callable[[Any, dict[str, Any]], Any], dict[str, Any]] | None = None

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    @property
    def alive(self) -> bool:
        return bool(self.process.is_alive())


@dataclass
class InferencePool:
    """The node's resident workers, by key."""

    max_workers: int = MAX_WORKERS
    idle_evict_sec: float = IDLE_EVICT_SEC
    workers: list[Worker] = field(default_factory=list)
    started: int = 0  # worker processes started (tests and the bench count model loads)
    _ids: Any = field(default_factory=itertools.count)

    async def run(
        self,
        key: Hashable,
        fn: Callable[[Any, dict[str, Any]], Any],
        spec: dict[str, Any],
        control: TaskControl,
        on_progress: Callable[[float, str | None], None] | None = None,
        warm: Callable[[Any, dict[str, Any]], Any] | None = None,
    ) -> Any:
        """Run `fn(reporter, spec)` in a worker for `key`; TaskErrors come back as raised.
        `warm(reporter, spec)` (e.g. load the model) is what a replacement worker runs first
        when this job's worker has to be killed. Key None is a job that needs no model (voice
        activity detection): it runs in a worker without one, which the next job for a model
        then takes over, so the imports are paid once."""
        await control.checkpoint()
        self.evict_idle()
        worker = await self._acquire(key)
        worker.warm = (warm, spec) if warm is not None else None
        try:
            return await self._job(worker, fn, spec, control, on_progress)
        finally:
            if worker.draining is None:
                worker.busy = False
            worker.last_used = time.monotonic()

    async def _acquire(self, key: Hashable) -> Worker:
        for worker in self.workers:
            if worker.key == key and not worker.busy and worker.alive:
                worker.busy = True
                return worker
        for worker in self.workers:
            drain = worker.draining
            if worker.key != key or drain is None:
                continue
            if drain.done() or drain.get_loop() is not asyncio.get_running_loop():
                # drained by an event loop that has ended (a bench or test run): nobody frees it
                worker.draining = None
                self._stop(worker, "its drain ended with its event loop", kill=True)
                break
            # its model is loaded and it is about to be free: wait rather than load again
            with contextlib.suppress(Exception):
                await asyncio.shield(drain)
            return await self._acquire(key)  # it, or its warm replacement
        self.workers = [w for w in self.workers if w.alive]
        if key is not None:
            for worker in self.workers:
                if worker.key is None and not worker.busy and worker.draining is None:
                    # a worker that ran only model-free jobs (VAD) has its imports done and no
                    # model loaded yet: it becomes this key's worker instead of a new process
                    worker.key, worker.busy = key, True
                    return worker
        idle = sorted((w for w in self.workers if not w.busy), key=lambda w: w.last_used)
        while len(self.workers) >= self.max_workers and idle:
            self._stop(idle.pop(0), "making room for another model")
        worker = self._spawn(key)
        worker.busy = True
        return worker

    def _spawn(self, key: Hashable) -> Worker:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        resume, cancel = ctx.Event(), ctx.Event()
        resume.set()
        proc = ctx.Process(
            target=_worker_main,
            args=(child, resume, cancel),
            daemon=True,
            name=f"fredica-inference-{next(self._ids)}",
        )
        proc.start()
        child.close()
        self.started += 1
        worker = Worker(key, proc, parent, resume, cancel)
        self.workers.append(worker)
        logger.info(
            "inference worker %s started for %s",
            worker.pid,
            key,
            extra={"action": "inference_worker.start"},
        )
        return worker

    async def _job(
        self,
        worker: Worker,
        fn: Callable[[Any, dict[str, Any]], Any],
        spec: dict[str, Any],
        control: TaskControl,
        on_progress: Callable[[float, str | None], None] | None,
    ) -> Any:
        worker.cancel.clear()
        worker.resume.set()
        pid = worker.pid
        control.attach_process_group(pid)  # pause -> SIGSTOP the worker at once

        def on_pause(paused: bool) -> None:
            (worker.resume.clear if paused else worker.resume.set)()

        remove_hook = control.add_pause_hook(on_pause)
        log = tasklog.current()
        if log is not None:
            nth = worker.jobs + 1
            log.line(f"inference worker {pid} for {worker.key} runs this task (its job {nth})")
        try:
            self._send(worker, fn, spec)
            while True:
                if control.cancelled:
                    await self._cancel(worker)
                    raise errors.TaskCancelled(control.cancel_reason)
                msg = await self._next(worker)
                if msg is None:
                    continue
                kind = msg.get("type")
                if kind == "progress" and on_progress is not None:
                    on_progress(float(msg.get("pct") or 0), msg.get("note"))
                elif kind == "log" and log is not None:
                    log.line(f"[worker {pid}] {msg.get('line')}")
                elif kind == "pause_request":
                    control.request_pause(str(msg.get("reason") or "requested by task"))
                elif kind == "resume_request":
                    control.request_resume()
                elif kind == "result":
                    return msg.get("value")
                elif kind == "error":
                    raise process.error_from_message(msg)
        finally:
            remove_hook()
            control.detach_process_group(pid)

    def _send(self, worker: Worker, fn: Callable[..., Any], spec: dict[str, Any]) -> None:
        worker.jobs += 1
        worker.current = worker.jobs
        worker.conn.send((worker.current, fn, spec))

    async def _next(self, worker: Worker) -> dict[str, Any] | None:
        """The current job's next message, None after POLL_SEC (messages of an earlier job,
        such as a warm-up, are skipped); raises if the worker died."""
        try:
            ready = await asyncio.to_thread(worker.conn.poll, POLL_SEC)
            if ready:
                msg: dict[str, Any] = worker.conn.recv()
                return msg if msg.get("job") == worker.current else None
        except (EOFError, OSError):
            ready = False
        if worker.alive:
            return None
        self._forget(worker)
        code = worker.process.exitcode
        if code == -signal.SIGKILL:
            raise process.ProcessKilled(
                "inference worker was killed (SIGKILL, likely out of memory)"
            )
        raise errors.TransientError(f"inference worker exited with code {code} mid-job")

    async def _cancel(self, worker: Worker) -> None:
        """Stop the current job: cooperatively within CANCEL_GRACE_SEC, else let the worker
        drain in the background (the caller's task ends now)."""
        worker.cancel.set()
        worker.resume.set()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.pid, signal.SIGCONT)
        if await self._finished(worker, CANCEL_GRACE_SEC):
            return  # stopped in time: the worker stays for the next job
        worker.draining = asyncio.create_task(self._drain(worker))

    async def _finished(self, worker: Worker, within: float) -> bool:
        """Whether the current job ended (result or error) within `within` seconds; a worker
        that died meanwhile counts as finished (it is forgotten)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and worker.alive:
            try:
                msg = await self._next(worker)
            except errors.TaskError:
                return True
            if msg is not None and msg.get("type") in ("result", "error"):
                return True
        return not worker.alive

    async def _drain(self, worker: Worker) -> None:
        """A cancelled job's worker, after the task ended: free once the job stops, killed
        (and replaced, loading the model) if it is still busy after DRAIN_LIMIT_SEC."""
        finished = False
        try:
            finished = await self._finished(worker, DRAIN_LIMIT_SEC - CANCEL_GRACE_SEC)
            if not finished:
                self._kill_and_replace(worker)
        finally:
            worker.draining = None
            if finished:
                worker.busy = False
                worker.last_used = time.monotonic()
            elif worker in self.workers:
                # the drain itself was cancelled (its event loop ended): the worker may still
                # be inside the call, so it must not look free
                self._stop(worker, "its drain was cancelled", kill=True)

    def _kill_and_replace(self, worker: Worker) -> None:
        self._stop(worker, "cancelled job did not stop in time", kill=True)
        if worker.warm is not None:
            # a replacement starts loading the model now, so the next task does not wait
            replacement = self._spawn(worker.key)
            self._send(replacement, *worker.warm)
            replacement.warm = worker.warm

    def _stop(self, worker: Worker, why: str, kill: bool = False) -> None:
        self._forget(worker)
        logger.info(
            "inference worker %s stops: %s",
            worker.pid,
            why,
            extra={"action": "inference_worker.stop"},
        )
        if not kill and worker.alive:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)  # it exits after its current job (it has none)
            worker.process.join(0.2)
        if worker.alive:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(worker.pid, sig)
            worker.process.join(0.2)  # SIGKILL is immediate; a zombie is reaped later anyway
        with contextlib.suppress(OSError):
            worker.conn.close()

    def _forget(self, worker: Worker) -> None:
        if worker in self.workers:
            self.workers.remove(worker)

    def evict_idle(self, now: float | None = None) -> int:
        """Stop workers idle for longer than `idle_evict_sec`; how many were stopped."""
        now = time.monotonic() if now is None else now
        old = [w for w in self.workers if not w.busy and now - w.last_used > self.idle_evict_sec]
        for worker in old:
            self._stop(worker, f"idle for {now - worker.last_used:.0f} s")
        return len(old)

    def shutdown(self) -> None:
        """Stop every worker (busy ones too)."""
        for worker in list(self.workers):
            self._stop(worker, "shutdown")


_POOL: InferencePool | None = None


def pool() -> InferencePool:
    """This node process's pool (created on first use)."""
    global _POOL
    if _POOL is None:
        _POOL = InferencePool()
    return _POOL
