"""A durable record of the process groups that running tasks started (DESIGN §4.15).

Every process a task starts through `ctx.run_process` / `ctx.run_in_subprocess` leads its own
process group. While it runs, the group is written down here, one small file per group under
`<data_dir>/run/`, keyed by `(task_id, attempt)` with the leader's start time. If the node dies
(kill -9, power loss), the direct children die with it (parent-death signal), but anything they
started can survive; at the next start the engine reaps every group still on record before it
recovers or claims a task, so an earlier attempt's processes never run beside a new attempt.
A stopped (paused) group is continued before it is killed, so nothing is left stopped.

A pid is trusted only if it is the same process: the leader's start time (`/proc/<pid>/stat`)
must match, or, when the leader is gone, the group must still have members (the kernel never
hands out a pid that is still a live group's id).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroupRecord:
    task_id: str
    attempt: int
    pgid: int
    start_ticks: int | None


def _stat(pid: int) -> tuple[int, int] | None:
    """(process group, start time in clock ticks) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    # after "pid (comm) ": state ppid pgrp session tty tpgid flags ... starttime is field 22
    return int(fields[2]), int(fields[19])


def group_members(pgid: int) -> list[int]:
    """Live processes in process group `pgid` (Linux /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[0] == pgid:
                members.append(int(entry))
    return members


class ProcessLedger:
    """See the module docstring. Safe to call from the event loop: each call is a small file
    operation."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, task_id: str, attempt: int, pgid: int) -> Path:
        return self.root / f"{task_id}.{attempt}.{pgid}.json"

    def record(self, task_id: str, attempt: int, pgid: int) -> None:
        st = _stat(pgid)
        entry = {
            "task_id": task_id,
            "attempt": attempt,
            "pgid": pgid,
            "start_ticks": st[1] if st else None,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(task_id, attempt, pgid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry))
        os.replace(tmp, path)

    def forget(self, task_id: str, attempt: int, pgid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(task_id, attempt, pgid).unlink()

    def records(self) -> list[GroupRecord]:
        out = []
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            try:
                data = json.loads(path.read_text())
                out.append(
                    GroupRecord(
                        str(data["task_id"]),
                        int(data["attempt"]),
                        int(data["pgid"]),
                        data.get("start_ticks"),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                logger.warning("unreadable process record %s", path, extra={"action": "reap"})
                path.unlink(missing_ok=True)
        return out

    def reap(self) -> list[GroupRecord]:
        """Kill every recorded group that is still ours; forget every record. Returns the groups
        that were killed."""
        killed = []
        for rec in self.records():
            if self._still_ours(rec):
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(rec.pgid, sig)
                killed.append(rec)
                logger.warning(
                    "killed process group %d left by attempt %d of task %s",
                    rec.pgid,
                    rec.attempt,
                    rec.task_id,
                    extra={"action": "reap"},
                )
            self.forget(rec.task_id, rec.attempt, rec.pgid)
        return killed

    @staticmethod
    def _still_ours(rec: GroupRecord) -> bool:
        leader = _stat(rec.pgid)
        if leader is not None:
            # the leader is alive: it must be the same process, not a reused pid
            return rec.start_ticks is not None and leader[1] == rec.start_ticks
        return bool(group_members(rec.pgid))


def pdeathsig_prefix() -> list[str]:
    """A command prefix that makes a program die with its parent (util-linux `setpriv`), or
    nothing where setpriv is missing (the ledger still reaps it at the next start)."""
    import shutil

    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def set_pdeathsig() -> None:
    """Make the calling process (a child Python process) die with its parent (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
