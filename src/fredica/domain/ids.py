"""Identifiers of tasks and pipelines: UUIDs in time order (the layout of UUID version 7).

A random UUID (version 4) puts every new row at a random place of each index keyed by it
(the task's primary key, its dependency edges, its events), so a transaction of a hundred
tasks dirties a hundred index pages; ids that grow with time land next to each other, and a
batch writes a few pages. The 48 high bits are milliseconds since the epoch; the rest is
random (74 bits), with a per-process counter keeping ids of the same millisecond in order.
They read like any UUID, and old random ids stay valid next to them.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid

_lock = threading.Lock()
_random = random.Random(os.urandom(16))  # ids are not secrets: order, not unguessability
_last_ms = 0
_seq = 0


def _reseed() -> None:
    _random.seed(os.urandom(16))


os.register_at_fork(after_in_child=_reseed)  # a forked child must not repeat the parent's ids


def new_id() -> str:
    """A new time-ordered UUID string (`xxxxxxxx-xxxx-7xxx-yxxx-xxxxxxxxxxxx`)."""
    global _last_ms, _seq
    ms = time.time_ns() // 1_000_000
    with _lock:
        if ms <= _last_ms:  # same millisecond (or the clock stepped back): keep the order
            ms = _last_ms
            _seq = (_seq + 1) & 0xFFF
            if _seq == 0:
                ms += 1
        else:
            _seq = _random.getrandbits(11)  # room to count up
        _last_ms = ms
        seq = _seq
        rand = _random.getrandbits(62)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand
    return str(uuid.UUID(int=value))
