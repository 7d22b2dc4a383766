"""The peers, run on the same machine in the same run as fredica: Huey (SqliteHuey, thread
workers) and Celery (Redis broker, threads pool). Each consumer runs in its own process, as it
does in production; this process is the producer. The consumer reports the wall-clock time of
its N-th completion in a status file, so both ends of the measurement use the same clock as
fredica's stored timestamps.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from bench.util import free_port, log, throughput_result, wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
SETUP_SCRIPT = Path(__file__).resolve().parent / "setup.sh"
READY_TIMEOUT = 60.0  # seconds a consumer or redis-server may take to come up
STOP_TIMEOUT = 15.0  # seconds a process may take to exit after its stop signal
INSTALL_HINT = "pip install -e '.[bench]' (huey, celery, redis)"


class PeerUnavailable(RuntimeError):
    """A peer cannot run here (missing package or server); the message says how to fix it."""


# --- processes ---------------------------------------------------------------------------------
class Child:
    """A child process in its own session, with its output in a log file."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Ask it to stop; kill its process group (only ever this child's own) if it lingers."""
        try:
            if self.alive():
                self.proc.send_signal(sig)
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(STOP_TIMEOUT)
        finally:
            self._log.close()


def _import(name: str, env: dict[str, str]) -> ModuleType:
    """Import a peer app module after setting its environment (it reads it at import)."""
    os.environ.update(env)
    try:
        module = sys.modules.get(name)
        return importlib.reload(module) if module else importlib.import_module(name)
    except ImportError as exc:
        raise PeerUnavailable(f"{exc}; install the peers with {INSTALL_HINT}") from exc


def _read_status(path: Path) -> tuple[int, float] | None:
    try:
        count, stamp = path.read_text().split()
    except (OSError, ValueError):
        return None
    return int(count), float(stamp)


def _finish(
    status_dir: Path, child: Child, n_tasks: int, t0: float, t_created: float, deadline_s: float
) -> dict[str, Any]:
    """Wait for the consumer's `done` file (or the deadline) and compute the rates."""
    done_file = status_dir / "done"
    finished = wait_until(
        lambda: done_file.exists() or not child.alive(),
        timeout=max(0.0, t0 + deadline_s - time.time()),
        step=0.02,
    )
    if not child.alive():
        raise RuntimeError(f"consumer exited early:\n{child.tail()}")
    status = _read_status(done_file) if finished else _read_status(status_dir / "progress")
    completed, last_done = status if status else (0, None)
    return throughput_result(n_tasks, completed, finished, t0, t_created, last_done)


# --- Huey ----------------------------------------------------------------------------------------
def run_huey(work_dir: Path, n_tasks: int, workers: int, deadline_s: float) -> dict[str, Any]:
    """SqliteHuey on a temp file; `huey_consumer -w N -k thread -q` in a subprocess."""
    work_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "BENCH_HUEY_DB": str(work_dir / "huey.db"),
        "BENCH_EXPECTED": str(n_tasks),
        "BENCH_STATUS_DIR": str(work_dir),
    }
    app = _import("bench.huey_app", env)
    import huey

    argv = [sys.executable, "-m", "huey.bin.huey_consumer", "bench.huey_app.huey"]
    argv += ["-w", str(workers), "-k", "thread", "-q"]
    child = Child(argv, work_dir / "consumer.log", env)
    try:
        ready = wait_until(
            lambda: _ready_lines(work_dir) >= workers or not child.alive(), READY_TIMEOUT
        )
        if not ready or not child.alive():
            raise RuntimeError(f"huey consumer did not start:\n{child.tail()}")
        t0 = time.time()
        for _ in range(n_tasks):
            app.noop()
        t_created = time.time()
        result = _finish(work_dir, child, n_tasks, t0, t_created, deadline_s)
    finally:
        child.stop(signal.SIGINT)  # huey's graceful stop
    result["config"] = (
        f"Huey {huey.__version__}: SqliteHuey on a temp file (WAL + synchronous=NORMAL, set to "
        f"match fredica), consumer process `huey_consumer -w {workers} -k thread -q` (defaults: "
        "poll 0.1 s, backoff 1.15, max 10 s), producer enqueues one task per call"
    )
    return result


def _ready_lines(work_dir: Path) -> int:
    path = work_dir / "ready"
    return len(path.read_text().splitlines()) if path.exists() else 0


# --- Redis + Celery ----------------------------------------------------------------------------
def ensure_redis_server() -> str:
    """Path of redis-server; runs bench/setup.sh once if it is missing."""
    found = shutil.which("redis-server")
    if found:
        return found
    log("redis-server not found; running bench/setup.sh")
    proc = subprocess.run(["bash", str(SETUP_SCRIPT)], capture_output=True, text=True)
    found = shutil.which("redis-server")
    if found is None:
        raise PeerUnavailable(
            "redis-server is missing and bench/setup.sh could not install it "
            f"(exit {proc.returncode}: {proc.stderr.strip()[-300:]}); install it with "
            "`sudo bench/setup.sh` or `apt-get install redis-server`"
        )
    return found


@contextlib.contextmanager
def redis_server(work_dir: Path) -> Iterator[tuple[str, str]]:
    """A private redis-server on a loopback port with a temp dir and an append-only file
    fsynced every second (Redis's usual durable setting); yields (url, version)."""
    binary = ensure_redis_server()
    try:
        import redis
    except ImportError as exc:
        raise PeerUnavailable(f"{exc}; install the peers with {INSTALL_HINT}") from exc
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    version = next((w[2:] for w in version.split() if w.startswith("v=")), "?")
    data = work_dir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
    argv += ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
    argv += ["--daemonize", "no", "--logfile", ""]
    child = Child(argv, work_dir / "redis.log")
    client = redis.Redis(host="127.0.0.1", port=port)

    def ping() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    try:
        if not wait_until(lambda: ping() or not child.alive(), READY_TIMEOUT) or not ping():
            raise RuntimeError(f"redis-server did not start:\n{child.tail()}")
        yield f"redis://127.0.0.1:{port}/0", version
    finally:
        client.close()
        child.stop(signal.SIGTERM)


def run_celery(work_dir: Path, n_tasks: int, concurrency: int, deadline_s: float) -> dict[str, Any]:
    """Celery worker (`-P threads -c N`) in a subprocess on a private Redis broker."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with redis_server(work_dir) as (url, redis_version):
        env = {
            "BENCH_CELERY_BROKER": url,
            "BENCH_EXPECTED": str(n_tasks),
            "BENCH_STATUS_DIR": str(work_dir),
        }
        app_module = _import("bench.celery_app", env)
        import celery

        argv = [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker"]
        argv += ["-P", "threads", "-c", str(concurrency), "-Q", app_module.QUEUE]
        argv += ["--without-heartbeat", "--without-gossip", "--without-mingle"]
        argv += ["-l", "WARNING", "-n", f"bench-{os.getpid()}@localhost"]
        child = Child(argv, work_dir / "worker.log", env)
        app = app_module.make_app(url)
        try:
            ready = wait_until(
                lambda: (work_dir / "ready").exists() or not child.alive(), READY_TIMEOUT
            )
            if not ready or not child.alive():
                raise RuntimeError(f"celery worker did not start:\n{child.tail()}")
            t0 = time.time()
            with app.producer_or_acquire() as producer:
                for _ in range(n_tasks):
                    app.send_task(app_module.TASK_NAME, producer=producer)
            t_created = time.time()
            result = _finish(work_dir, child, n_tasks, t0, t_created, deadline_s)
        finally:
            child.stop(signal.SIGTERM)  # celery's warm shutdown
            app.close()
    result["config"] = (
        f"Celery {celery.__version__} with redis-server {redis_version} (loopback, temp dir, "
        f"appendonly yes + appendfsync everysec), worker process `-P threads -c {concurrency}` "
        "(prefetch multiplier 4, early ack: the defaults), ignore_result, no "
        "heartbeat/gossip/mingle; producer sends one message per task over one connection"
    )
    return result
