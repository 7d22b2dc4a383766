"""Talking to a node over HTTP from the command line: a small client that turns errors into
one clear line and an exit code, and the live view of a pipeline (`--follow`, the demos)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from fredica.cli import client

console = Console()
err_console = client.err_console


STATUS_STYLE = {
    "pending": "dim",
    "claimed": "dim",
    "running": "cyan",
    "stale": "yellow",
    "reclaimed": "yellow",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
    "skipped": "blue",
    "cancelling": "magenta",
    "partial_failed": "red",
}
TERMINAL_PIPELINE = {"completed", "failed", "cancelled", "partial_failed"}


die = client.die
Client = client.Client
detail = client.detail


def material_name(pipeline: dict[str, Any]) -> str:
    """What people recognise a pipeline by: the source's file name or URL, else the material."""
    source = (pipeline.get("params") or {}).get("source")
    if isinstance(source, str) and source:
        if source.startswith(("http://", "https://")):
            return source
        return Path(source.removeprefix("file://")).name or source
    return str(pipeline.get("material_id") or "")


def pipeline_view(data: dict[str, Any]) -> Group:
    status = data["status"]
    head = Text.assemble(
        ("pipeline ", "bold"),
        (data["id"], "bold"),
        f"  {data['template']}  {material_name(data)}  ",
        (status, STATUS_STYLE.get(status, "")),
        f"  {data['done_tasks']}/{data['total_tasks']} done",
    )
    refs = {v: k for k, v in data.get("params", {}).get("refs", {}).items()}
    table = Table("task", "type", "status", "progress", "node", "note / error", expand=True)
    for t in data["tasks"]:
        shown = "paused" if t["status"] == "running" and t["is_paused"] else t["status"]
        pct = 100 if t["status"] in ("completed", "skipped") else t["progress"]
        note = client.name_task_ids(t["error"] or t["progress_note"] or "", data)
        table.add_row(
            refs.get(t["id"], t["id"][:8]),
            t["type"],
            Text(shown, style="yellow" if shown == "paused" else STATUS_STYLE.get(shown, "")),
            Group(ProgressBar(total=100, completed=pct, width=20), Text(f"{pct}%")),
            t["claimed_by"] or "",
            Text(note[:80], style="red" if t["error"] else "dim"),
        )
    return Group(head, table)


def follow(api: Client, pipeline_id: str) -> int:
    version = 0
    data = api.request("GET", f"/api/v1/pipelines/{pipeline_id}")
    with Live(pipeline_view(data), console=console, refresh_per_second=8) as live:
        while data["status"] not in TERMINAL_PIPELINE:
            version = api.request(
                "GET", "/api/v1/changes", params={"after": version, "timeout": 2.0}
            )["version"]
            data = api.request("GET", f"/api/v1/pipelines/{pipeline_id}")
            live.update(pipeline_view(data))
    if not console.is_terminal:
        console.line()  # Live ends its last frame with a newline only on a terminal
    return 0 if data["status"] == "completed" else 1
