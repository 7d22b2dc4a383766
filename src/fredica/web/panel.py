"""What the UI's cluster panel shows, in one payload for `GET /api/v1/web/cluster` and the
event stream: every known node (`Node.cluster_view`), this node's outbox (results waiting for
their owner) and how fresh this node's replica of each other owner's rows is."""

from __future__ import annotations

from typing import Any

from fredica.node.service import Node


async def cluster_panel(node: Node) -> dict[str, Any]:
    view = await node.cluster_view()
    status = await node.status()
    return {**view, "outbox": status["outbox"], "replicas": await node.replica_marks()}
