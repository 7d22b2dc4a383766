"""A node's state in the cluster (seed 001 §2.2: online | busy | draining | offline), decided in
one place for the node that reports itself and for the peers that observe it.

`quarantined` (our addition, DESIGN §4.10: a node that keeps failing for lack of resources
claims nothing for a while) sits between `draining` and `busy`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

#: What a node reports about itself (`/cluster/info`, heartbeats) that its peers keep in their
#: node registry (`NodeRecord.info`): its load (slots, task types, its score per task type for
#: the claim gate, its outbox) and its machine (cores, load average, memory, free disk and what
#: it holds back for lack of it) for the nodes page.
REPORTED_INFO = (
    "running",
    "free_slots",
    "task_types",
    "scores",
    "outbox",
    "cpu_count",
    "load",
    "mem_total",
    "mem_available",
    "disk_free",
    "disk_total",
    "disk_min_free",  # bytes it keeps free (seed 001 §7.7)
    "disk_held",  # the disk-heavy task types it leaves to others for lack of room
    "active_api_calls",  # its cloud calls in flight per backend (seed 001 §7.8)
    "cloud_spend_today",  # its cloud spend of today (UTC), for the cluster's daily budgets
)


class NodeStatus(enum.StrEnum):
    ONLINE = "online"  # reachable, claims work, has a free slot
    BUSY = "busy"  # reachable, every slot taken
    DRAINING = "draining"  # finishes its running work, claims nothing new (`fredica node drain`)
    QUARANTINED = "quarantined"  # claims nothing until its cool-down ends
    OFFLINE = "offline"  # stopped, or not heard from (membership lost it / heartbeats stale)

    @property
    def claims(self) -> bool:
        """Whether a node in this state takes new work when a slot frees up."""
        return self in (NodeStatus.ONLINE, NodeStatus.BUSY)


def node_status(
    *,
    reachable: bool,
    draining: bool,
    quarantined: bool,
    running: int,
    max_workers: int,
) -> NodeStatus:
    """The state of a node from what is known about it; first rule that holds wins:
    unreachable -> offline; draining -> draining; quarantined -> quarantined; no free slot
    (`running >= max_workers`, with at least one slot) -> busy; else online."""
    if not reachable:
        return NodeStatus.OFFLINE
    if draining:
        return NodeStatus.DRAINING
    if quarantined:
        return NodeStatus.QUARANTINED
    if max_workers > 0 and running >= max_workers:
        return NodeStatus.BUSY
    return NodeStatus.ONLINE


def observed_status(
    reported: str, info: Mapping[str, Any], max_workers: int, reachable: bool
) -> NodeStatus:
    """A peer's state as another node sees it: the flags it reported about itself (`reported`:
    its last status) and its slots from the load it reported (`info`: `running`, or
    `free_slots`), judged by `node_status`. A peer that is not `reachable` (membership lost it,
    or its heartbeats are stale) is offline whatever it said last."""
    if "running" not in info and "free_slots" not in info and reported == NodeStatus.BUSY:
        running = max_workers  # no load reported: trust what it said
    else:
        running = _int(info.get("running"))
        free = info.get("free_slots")
        if isinstance(free, int) and not isinstance(free, bool) and max_workers > 0:
            running = max(running, max_workers - free)
    return node_status(
        reachable=reachable and reported != NodeStatus.OFFLINE,
        draining=reported == NodeStatus.DRAINING,
        quarantined=reported == NodeStatus.QUARANTINED,
        running=running,
        max_workers=max_workers,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
