"""Node quarantine: N resource failures in a row stop claims for a cool-down that doubles."""

from __future__ import annotations

from fredica.domain.clock import ManualClock
from fredica.engine.worker import Quarantine


def test_three_failures_in_a_row_quarantine_and_the_cooldown_doubles() -> None:
    clock = ManualClock(0.0)
    q = Quarantine(after=3, cooldown=60.0, monotonic=clock.now)
    q.failed_for_resources("T", "ffmpeg: broken")
    q.failed_for_resources("T", "ffmpeg: broken")
    assert not q.active
    q.failed_for_resources("T", "ffmpeg: broken")
    assert q.active and q.remaining == 60.0 and "ffmpeg: broken" in (q.reason or "")
    clock.advance(60.0)
    assert not q.active
    for _ in range(3):
        q.failed_for_resources("T", "again")
    assert q.remaining == 120.0  # the second time it lasts twice as long


def test_a_success_resets_the_streak_and_the_doubling() -> None:
    clock = ManualClock(0.0)
    q = Quarantine(after=3, cooldown=10.0, monotonic=clock.now)
    for _ in range(3):
        q.failed_for_resources("T", "x")
    clock.advance(10.0)
    q.failed_for_resources("T", "x")
    q.failed_for_resources("T", "x")
    q.succeeded()
    q.failed_for_resources("T", "x")
    assert not q.active  # the streak started over
    q.failed_for_resources("T", "x")
    q.failed_for_resources("T", "x")
    assert q.remaining == 10.0  # and the doubling too


def test_zero_means_never() -> None:
    q = Quarantine(after=0, cooldown=10.0, monotonic=ManualClock(0.0).now)
    for _ in range(10):
        q.failed_for_resources("T", "x")
    assert not q.active
