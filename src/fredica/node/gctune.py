"""The garbage collector's settings for a node's process.

A node's process imports a large graph of modules (FastAPI, pydantic's schemas, the capability
catalog, numpy through the media backends): hundreds of thousands of long-lived objects. With
CPython's defaults every full collection walks all of them again, and the steady stream of
short-lived objects a busy engine makes (a task row, its context, its asyncio task) triggers
one every few thousand tasks: measured on the no-op benchmark, the collector took about a
third of the process's time. So once per process, when its first node has started:

- what start-up built is moved out of the collector's sight (`gc.freeze()`, after one full
  collection so that no garbage is frozen with it); frozen objects are still freed by
  reference counting, only cycles among them would stay;
- the youngest generation is collected after `YOUNG_THRESHOLD` allocations instead of 700,
  so fewer objects that die young anyway get promoted into the older generations.

Both are process-wide, so they are applied once (later nodes of the same process, as in the
tests, change nothing) and can be turned off with `FREDICA_GC_TUNING=0`.
"""

from __future__ import annotations

import gc
import logging
import os
import threading

logger = logging.getLogger(__name__)

YOUNG_THRESHOLD = 50000  # allocations between collections of the youngest generation
ENV_SWITCH = "FREDICA_GC_TUNING"

_lock = threading.Lock()
_applied = False


def tune_once() -> bool:
    """Apply the settings if this process has not yet; whether this call applied them."""
    global _applied
    with _lock:
        if _applied or os.environ.get(ENV_SWITCH, "1").strip() in ("0", "false", "no", "off"):
            return False
        _applied = True
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)
    logger.debug("gc: %d objects frozen, thresholds %s", gc.get_freeze_count(), gc.get_threshold())
    return True
