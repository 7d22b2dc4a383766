"""One node per data dir (DESIGN §4.15): an exclusive lock held while the node runs.

Two `fredica serve` on the same data dir would share a node id and "recover" each other's
running tasks. The lock is an advisory `flock` on `<data_dir>/fredica.lock`, released by the
kernel when the process dies (kill -9 included), so a crash never leaves a stale lock behind.
The file names the holder (pid, address) for the error the second node prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from fredica.domain import errors

LOCK_FILENAME = "fredica.lock"


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILENAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, address: str) -> None:
        """Take the lock or raise `DataDirInUse` naming the holder."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(self.path)
            os.close(fd)
            raise errors.DataDirInUse(
                f"data dir {self.path.parent} is in use by another fredica node ({holder}); "
                "stop it, or give this node its own --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "address": address}).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def _describe(path: Path) -> str:
    try:
        data = json.loads(path.read_text())
        return f"pid {data['pid']}, {data['address']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
