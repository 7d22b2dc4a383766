"""The Celery peer: one no-op task on a Redis broker, for `celery -A bench.celery_app worker`.

Configured by environment (the worker is a separate process started by the harness):
BENCH_CELERY_BROKER (redis:// URL), BENCH_EXPECTED (how many completions end the run) and
BENCH_STATUS_DIR (where the worker reports `ready` and `done`). Results are not stored
(`ignore_result`): the no-op returns nothing, as in the other systems.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, worker_ready

from bench import status

TASK_NAME = "bench.noop"
QUEUE = "bench"


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


@app.task(name=TASK_NAME)
def noop() -> None:
    """No work: the benchmark measures the queue, not the task."""
    return None


@worker_ready.connect
def _ready(**_: Any) -> None:
    (status.STATUS_DIR / "ready").write_text("ready\n")


@task_postrun.connect
def _completed(**_: Any) -> None:
    status.completed()
