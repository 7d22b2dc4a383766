"""Talking to a node over HTTP from the command line: a small client that turns errors into
one clear line and an exit code, and the live view of a pipeline (`--follow`, the demos)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from fredica.cli import client
from fredica.domain import models

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
TERMINAL_TASK = {"completed", "failed", "cancelled", "skipped"}


die = client.die
Client = client.Client
detail = client.detail


def material_name(pipeline: dict[str, Any]) -> str:
    """What people recognise a pipeline by (`models.display_title`)."""
    return models.display_title(pipeline.get("params"), pipeline.get("material_id"))


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


LOG_POLL_SEC = 0.5  # seconds between reads of a followed task log


def print_log(api: Client, task_id: str, attempt: int | None, follow: bool) -> int:
    """Print a task's log (`attempt`, else its latest); with `follow`, keep printing what is
    added (a new attempt's log too, when none was chosen) until the task ends. Returns the
    exit code: 0, or 1 when there is no log to print (the node's reason on stderr)."""
    shown: int | None = None
    offset = 0
    while True:
        params: dict[str, Any] = {}
        if attempt or shown:
            params["attempt"] = attempt or shown
        if shown is not None:
            params["offset"] = offset
        # the task's state before the read: a task that had ended is printed to its end
        task = api.request("GET", f"/api/v1/tasks/{task_id}") if follow else None
        answer = api.send("GET", f"/api/v1/tasks/{task_id}/log", params=params, allow=(404,))
        if answer.status_code == 404:
            if task is None or task["status"] in TERMINAL_TASK:
                err_console.print(f"[red]error:[/red] {detail(answer)}", highlight=False)
                return 1
        else:
            latest = int(answer.headers["X-Log-Attempts"].split(",")[-1])
            if attempt is None and shown is not None and latest > shown:
                shown, offset = latest, 0  # a new attempt began: follow it from its start
                continue
            current = int(answer.headers["X-Log-Attempt"])
            if follow and current != shown:
                err_console.print(f"--- attempt {current} ---", style="dim", highlight=False)
            shown, offset = current, int(answer.headers["X-Log-End"])
            console.file.write(answer.text)
            console.file.flush()
        if task is None or task["status"] in TERMINAL_TASK:
            return 0
        time.sleep(LOG_POLL_SEC)
