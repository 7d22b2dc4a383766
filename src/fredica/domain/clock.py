"""Injectable time: logic that tests must control never reads the clock directly."""

from __future__ import annotations

import time
from typing import Protocol

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boottime() -> float:
    """Seconds on a clock that counts while the machine is suspended (Linux CLOCK_BOOTTIME;
    `time.monotonic` stops during a suspend, so a laptop's sleep would not count)."""
    return time.clock_gettime(_BOOTTIME)


class Clock(Protocol):
    """A source of wall-clock time (Unix seconds, sub-second precision)."""

    def now(self) -> float:
        """Return the current time in Unix seconds."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()


class OffsetClock:
    """The real clock shifted by `offset` seconds: a machine whose clock is wrong
    (`node.clock_offset_sec`, for drift tests; nothing in a cluster may depend on it)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset


class ManualClock:
    """A clock that only moves when told to (unit tests)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        self._now += seconds
        return self._now

    def set(self, value: float) -> None:
        self._now = value
