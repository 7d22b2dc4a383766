"""Wake-ups from the store's threads into the event loop are coalesced, never lost."""

from __future__ import annotations

import asyncio
import threading

from fredica.engine.wakeups import CoalescedCall


async def test_signals_while_a_run_is_pending_add_nothing_and_a_later_one_runs_again() -> None:
    loop = asyncio.get_running_loop()
    runs: list[int] = []
    call = CoalescedCall(lambda: runs.append(1))

    # Given a thousand signals from another thread before the loop gets to run
    def burst() -> None:
        for _ in range(1000):
            call.schedule(loop)

    thread = threading.Thread(target=burst)
    thread.start()
    thread.join()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    # Then one run handled them all
    assert runs == [1]
    # and a signal after that run schedules another (none is lost)
    threading.Thread(target=call.schedule, args=(loop,)).start()
    for _ in range(100):
        if len(runs) == 2:
            break
        await asyncio.sleep(0.01)
    assert runs == [1, 1]


async def test_a_closed_loop_drops_the_signal_and_does_not_block_later_ones() -> None:
    other = asyncio.new_event_loop()
    other.close()
    runs: list[int] = []
    call = CoalescedCall(lambda: runs.append(1))
    call.schedule(other)  # the loop is gone: nothing runs, nothing raises
    call.schedule(asyncio.get_running_loop())
    await asyncio.sleep(0)
    assert runs == [1]
