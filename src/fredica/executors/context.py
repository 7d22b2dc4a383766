"""TaskContext: everything an executor may use while it runs (DESIGN §5)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fredica.domain import errors, models
from fredica.executors import outputs, process, tasklog
from fredica.executors.control import TaskControl

logger = logging.getLogger(__name__)


class ContextSink(Protocol):
    """Where a context reports what happens (implemented by the engine)."""

    def progress(self, task: models.Task, pct: int, note: str | None) -> None:
        """Record progress (0-100) of a running task."""
        ...

    def event(self, task: models.Task, event_type: str, message: str | None) -> None:
        """Record a task event (e.g. the backend chosen)."""
        ...


class FileFetcher(Protocol):
    """Copies files that other nodes hold (implemented by `cluster.files.PeerFiles`)."""

    async def fetch(
        self,
        node_id: str,
        rel_path: str,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> Path:
        """A verified local copy of `rel_path` (relative to the data dir of `node_id`);
        `on_progress(bytes_done, bytes_total)` is called as the copy grows."""
        ...


class NullSink:
    """A sink that records nothing (executor unit tests)."""

    def progress(self, task: models.Task, pct: int, note: str | None) -> None:
        return None

    def event(self, task: models.Task, event_type: str, message: str | None) -> None:
        return None


@dataclass
class TaskContext:
    """The executor's window on the engine: progress, signals, processes and files."""

    task: models.Task
    control: TaskControl
    node_id: str
    data_dir: Path
    sink: ContextSink = field(default_factory=NullSink)
    backend: str | None = None
    backend_config: dict[str, Any] = field(default_factory=dict)
    last_progress: int = 0
    #: fetches inputs that other nodes hold (None: this node fetches nothing)
    peer_files: FileFetcher | None = None
    #: this attempt's log (`executors.tasklog`): what its processes print goes there
    log: tasklog.TaskLog = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.log = tasklog.attempt_log(self.data_dir, self.task.id, self.task.attempt)
        # The context is made in the asyncio task that runs this attempt: the executor's
        # `logging` records from here on (and from threads and tasks it starts) go to its log.
        tasklog.bind(self.log)

    # --- progress and signals -------------------------------------------------------------
    def progress(self, pct: float, note: str | None = None) -> None:
        """Report progress in percent (clamped to 0-100)."""
        value = max(0, min(100, round(pct)))
        self.last_progress = value
        self.sink.progress(self.task, value, note)

    def event(self, event_type: str, message: str | None = None) -> None:
        self.sink.event(self.task, event_type, message)
        self.log.line(f"{event_type}: {message}" if message else event_type)

    async def checkpoint(self) -> None:
        """Block while the task is paused; raise `TaskCancelled` if it was cancelled."""
        await self.control.checkpoint()

    @property
    def cancelled(self) -> bool:
        return self.control.cancelled

    def request_pause(self, reason: str) -> None:
        """Pause this task from inside (is_paused becomes true until a resume)."""
        self.control.request_pause(reason)

    def request_resume(self) -> None:
        self.control.request_resume()

    # --- files ----------------------------------------------------------------------------
    @property
    def output_dir(self) -> Path:
        """This task's result directory (`<data_dir>/results/<task_id>`), created on demand."""
        path = self.data_dir / "results" / self.task.id
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def input_path(self, path: str | Path, file_node_id: str | None = None) -> Path:
        """A local path for an input file. `path` is absolute, or relative to the data dir of
        the node that holds the file, `file_node_id` (None: this node).

        A file held by another node (SOFT affinity) is fetched from it into this node's cache
        and verified (size and sha256); that needs a path relative to its data dir. An absolute
        path of another node is used only if it exists here too (a shared mount), else the
        task fails with a RESOURCE error so that another node (the holder) takes it.
        """
        local = outputs.resolve(self.data_dir, path)
        if file_node_id in (None, self.node_id):
            if not local.exists():
                raise errors.PermanentError(f"input file not found: {local}")
            return local
        if Path(path).is_absolute():
            if local.exists():
                return local
            raise errors.ResourceError(
                f"input {path} is held by node {file_node_id} under an absolute path, which "
                "cannot be fetched (only paths relative to its data dir can)",
                hint="FILE_REMOTE",
            )
        if self.peer_files is None:
            raise errors.ResourceError(
                f"input {path} is held by node {file_node_id}, and this node fetches no files "
                "from peers (no cluster.cluster_secret)",
                hint="FILE_REMOTE",
            )
        with outputs.disk_errors(f"fetching {path} from node {file_node_id}"):
            copy = await self.peer_files.fetch(file_node_id, Path(path).as_posix(), self._on_fetch)
        self.event("input", f"{path} fetched from node {file_node_id}")
        return copy

    def _on_fetch(self, done: int, total: int) -> None:
        """A cancel stops a download between blocks (the partial copy stays for a resume)."""
        if self.control.cancelled:
            raise errors.TaskCancelled(self.control.cancel_reason)

    async def payload_input(self, payload: dict[str, Any], *keys: str) -> Path:
        """The input file named by the first of `keys` in `payload` (the task's own, or one
        derived from it), held by the task's `file_node_id`."""
        for key in keys:
            value = payload.get(key)
            if isinstance(value, str) and value:
                return await self.input_path(value, self.task.file_node_id)
        raise errors.PayloadError(f"payload needs {' or '.join(keys)}")

    # --- processes ------------------------------------------------------------------------
    async def run_process(
        self,
        argv: list[str],
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
        capture_stdout: bool = True,
        check: bool = True,
    ) -> process.ProcessResult:
        """Run an external program under this task's signals (cancel = terminate then kill;
        pause = SIGSTOP, resume = SIGCONT). A non-zero exit raises `ProcessFailed`."""
        return await process.run_process(
            argv,
            self.control,
            cwd=cwd,
            env=env,
            on_stdout_line=on_stdout_line,
            on_stderr_line=on_stderr_line,
            capture_stdout=capture_stdout,
            check=check,
            log=self.log,
        )

    async def run_in_subprocess(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn(reporter, *args, **kwargs)` in a child Python process (seed 000 protocol).

        `fn` must be importable (module-level). The child reports through `reporter`
        (`progress`, `request_pause`, `request_resume`, `wait_if_paused`); its return value
        (picklable) is returned here; its `TaskError`s are re-raised here.
        """
        return await process.run_in_subprocess(
            fn,
            args,
            kwargs,
            self.control,
            on_progress=lambda pct, note: self.progress(pct, note),
            log=self.log,
        )
