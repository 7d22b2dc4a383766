"""Completion counting inside a peer's consumer process (Huey, Celery).

The consumer counts finished tasks and writes `progress` every PROGRESS_EVERY completions and
`done` at the expected count, each as "<count> <unix time>" written atomically, so the harness
reads the time of the N-th completion from outside the process."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PROGRESS_EVERY = 500  # completions between progress files (for a run that never finishes)

STATUS_DIR = Path(os.environ.get("BENCH_STATUS_DIR", "."))
_expected = int(os.environ.get("BENCH_EXPECTED", "0"))
lock = threading.Lock()
_done = 0


def completed() -> None:
    """Count one completion (thread-safe); write the status files on the thresholds."""
    global _done
    with lock:
        _done += 1
        count = _done
    if count == _expected:
        _write(STATUS_DIR / "done", count)
    elif count % PROGRESS_EVERY == 0:
        _write(STATUS_DIR / "progress", count)


def _write(path: Path, count: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{count} {time.time():.6f}\n")
    tmp.replace(path)
