"""No silent forever-pending (seed 001 §7.6): a task that every online node able to run it has
excluded after RESOURCE failures (a backend declared but unable to load, a GPU that is not
there) can never be claimed again. The owner looks once per poll and fails such a task with
the reason (`retry.stranded_reason`), so the UI and the CLI show it and `fredica task retry`
runs it again (the retry clears the exclusions).

`runnable_on` is pure; `watch` is the node's side loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from fredica.capabilities import catalog
from fredica.domain import errors
from fredica.node import servable

logger = logging.getLogger(__name__)


def runnable_on(
    task_types: Iterable[str],
    nodes: Iterable[servable.NodeView],
    extra: Mapping[str, catalog.CapabilityFunction | None],
) -> dict[str, list[str]]:
    """task type -> the online nodes that can run it (types whose function depends on the
    payload are left out: which nodes can run them is not known without the task)."""
    views = list(nodes)
    out: dict[str, list[str]] = {}
    for task_type in sorted(task_types):
        needed = servable.needed_functions(task_type, {}, extra)
        if needed is None:
            continue
        out[task_type] = [v.node_id for v in views if v.can_run(task_type, needed)]
    return out


async def watch(check: Callable[[], Awaitable[list[str]]], interval: float) -> None:
    """Run `check` (the node's `fail_stranded`) every `interval` seconds until cancelled."""
    while True:
        await asyncio.sleep(interval)
        try:
            await check()
        except errors.StoreError as exc:
            logger.warning("stranded tasks not checked: %s", exc, extra={"action": "stranded"})
