"""Small helpers shared by the benchmarks: percentiles, free ports, waiting, progress lines."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

POLL_STEP = 0.01  # seconds between checks while waiting for a benchmark to finish


def log(message: str) -> None:
    """A progress line on stderr, so stdout stays the report."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values. With few samples p99 is
    simply the largest, which is what we want to show rather than interpolate."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rnd(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def free_port() -> int:
    """A loopback port that was free a moment ago (the peer binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Poll `predicate` until true or `timeout` seconds pass; returns whether it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


async def async_wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float, step: float = POLL_STEP
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if not isinstance(value, bool):
            value = await value
        if value:
            return True
        await asyncio.sleep(step)
    return False


def throughput_result(
    n_tasks: int,
    completed: int,
    finished: bool,
    t0: float,
    t_created: float,
    last_done: float | None,
) -> dict[str, object]:
    """The no-op throughput row of one system: rates from the first create to the last
    completion (a run that passed its deadline reports what completed, `timed_out`)."""
    elapsed = (last_done - t0) if last_done else None
    return {
        "tasks": n_tasks,
        "completed": completed,
        "timed_out": not finished,
        "create_s": rnd(t_created - t0),
        "create_tasks_per_s": rnd(n_tasks / (t_created - t0), 1),
        "elapsed_s": rnd(elapsed),
        "tasks_per_s": rnd(completed / elapsed, 1) if elapsed else None,
    }


@contextlib.contextmanager
def served(data_dir: Path, config_text: str, start_timeout: float = 60.0) -> Iterator[str]:
    """`fredica serve` on loopback over `data_dir` (created if missing) with `config_text` as its
    worker.yaml and this checkout on PYTHONPATH (for the benchmark plugin); yields its base URL
    once it is healthy (its log's tail in the error if it never is), stops it with SIGTERM."""
    from fredica.cli.demo import wait_healthy

    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "worker.yaml"
    config.write_text(config_text)
    port = free_port()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    log_path = data_dir / "node.log"
    argv = [sys.executable, "-m", "fredica", "serve", "--config", str(config)]
    argv += ["--data-dir", str(data_dir), "--port", str(port)]
    with log_path.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc, timeout=start_timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {log_path.read_text()[-2000:]}") from exc
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
