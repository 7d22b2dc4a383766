"""The Celery peer: one no-op task on a Redis broker, for `celery -A bench.celery_app worker`.

Configured by environment (the worker is a separate process started by the harness):
BENCH_CELERY_BROKER (redis:// URL), BENCH_EXPECTED (how many completions end the run) and
BENCH_STATUS_DIR (where the worker reports `ready` and `done`). Results are not stored
(`ignore_result`): the no-op returns nothing, as in the other systems.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import task_postrun, worker_ready

TASK_NAME = "bench.noop"
QUEUE = "bench"
PROGRESS_EVERY = 500  # completions between progress files (for a run that never finishes)


def make_app(broker: str) -> Celery:
    """The app for both sides: the harness sends with it, the worker runs it."""
    app = Celery("bench", broker=broker)
    app.conf.update(
        task_ignore_result=True,
        task_default_queue=QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app


app = make_app(os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/0"))

_status = Path(os.environ.get("BENCH_STATUS_DIR", "."))
_expected = int(os.environ.get("BENCH_EXPECTED", "0"))
_lock = threading.Lock()
_done = 0


@app.task(name=TASK_NAME)
def noop() -> None:
    """No work: the benchmark measures the queue, not the task."""
    return None


@worker_ready.connect
def _ready(**_: Any) -> None:
    (_status / "ready").write_text("ready\n")


@task_postrun.connect
def _completed(**_: Any) -> None:
    # With the threads pool every task runs in this process, so one counter sees them all.
    global _done
    with _lock:
        _done += 1
        count = _done
    if count == _expected:
        _write(_status / "done", count)
    elif count % PROGRESS_EVERY == 0:
        _write(_status / "progress", count)


def _write(path: Path, count: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{count} {time.time():.6f}\n")
    tmp.replace(path)
