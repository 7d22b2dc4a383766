"""The cluster view the web UI shows: every known node with its functions, slots, load,
memory and free disk. Peers report theirs through their heartbeats (`NodeRecord.info`); this
node's own row is overlaid with live values (`Live`), measured here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fredica.capabilities import catalog
from fredica.store.base import NodeRecord

MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class Live:
    """This node's own values, fresher than its last heartbeat."""

    status: str
    running: int
    max_workers: int
    task_types: list[str]
    info: dict[str, Any] = field(default_factory=dict)


def view(rows: list[NodeRecord], self_id: str, live: Live) -> dict[str, Any]:
    """`{"nodes": [...], "online": n}` with this node's row overlaid with `live`."""
    nodes = [_node(row, self_id, live) for row in rows]
    return {"nodes": nodes, "online": sum(1 for n in nodes if n["status"] != "offline")}


def _node(row: NodeRecord, self_id: str, live: Live) -> dict[str, Any]:
    info = dict(row.info)
    item = {
        "id": row.id,
        "hostname": row.hostname,
        "status": row.status,
        "address": row.address,
        "max_workers": row.max_workers,
        "last_seen_at": row.last_seen_at,
        "functions": functions(row.capabilities),
        "task_types": sorted({str(c["task_type"]) for c in row.capabilities if "task_type" in c}),
        "is_self": row.id == self_id,
        "running": info.get("running", 0),
        "info": info,
    }
    if item["is_self"]:
        item["status"] = live.status
        item["running"] = live.running
        item["max_workers"] = live.max_workers
        item["task_types"] = live.task_types
        item["info"] = {**info, **live.info}
    return item


def functions(capabilities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Capability rows grouped by function: [{function, backends, accelerators, score,
    options}]; `options` are its backends with their base scores (best first), `score` the
    best of them (null when the node reported none)."""
    by_function: dict[str, dict[str, Any]] = {}
    for cap in capabilities:
        function = cap.get("function")
        if not function:
            continue
        entry = by_function.setdefault(
            str(function),
            {
                "function": str(function),
                "backends": [],
                "accelerators": [],
                "score": None,
                "options": [],
            },
        )
        if cap.get("backend") and cap["backend"] not in entry["backends"]:
            entry["backends"].append(cap["backend"])
        if cap.get("accelerator") and cap["accelerator"] not in entry["accelerators"]:
            entry["accelerators"].append(cap["accelerator"])
        score = cap.get("score")
        if isinstance(score, int | float):
            entry["options"].append(
                {
                    "backend": cap.get("backend"),
                    "accelerator": cap.get("accelerator"),
                    "score": score,
                }
            )
            entry["score"] = max(score, entry["score"] if entry["score"] is not None else score)
    for entry in by_function.values():
        entry["options"].sort(key=lambda o: -o["score"])
    return sorted(by_function.values(), key=lambda e: e["function"])


def hardware(capabilities: Iterable[catalog.Capability]) -> dict[str, Any]:
    """What this node detected that the UI shows: its GPUs (from the selector's capabilities)."""
    gpus = {
        f"{c.accelerator.name} ({c.accelerator.vram_mb // 1024} GB)"
        for c in capabilities
        if isinstance(c.accelerator, catalog.LocalGPU)
    }
    return {"gpu": ", ".join(sorted(gpus))} if gpus else {}


def local_stats(data_dir: Path) -> dict[str, Any]:
    """Load, cores, memory and free disk of this machine (blocking: call in a thread)."""
    stats: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with contextlib.suppress(OSError):
        stats["load"] = [round(x, 2) for x in os.getloadavg()]
    with contextlib.suppress(OSError):
        usage = shutil.disk_usage(data_dir)
        stats["disk_free"] = usage.free
        stats["disk_total"] = usage.total
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
        meminfo = {}
        for line in MEMINFO.read_text().splitlines():
            key, _, rest = line.partition(":")
            meminfo[key] = int(rest.split()[0]) * 1024
        stats["mem_total"] = meminfo["MemTotal"]
        stats["mem_available"] = meminfo["MemAvailable"]
    return stats
