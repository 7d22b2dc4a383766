"""Talking to a node over HTTP from the command line: a small client that turns errors into
one clear line and an exit code, and the live view of a pipeline (`--follow`, the demos)."""

from __future__ import annotations

import os
from typing import Any, NoReturn

import httpx
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

console = Console()
err_console = Console(stderr=True)


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


def die(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


class Client:
    """A small synchronous client of a node's `/api/v1`."""

    def __init__(self, base: str, timeout: float = 30.0, token: str | None = None) -> None:
        self.base = base.rstrip("/")
        token = token or os.environ.get("FREDICA_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(
            base_url=self.base, timeout=timeout, trust_env=False, headers=headers
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.ConnectError:
            die(f"cannot reach a node at {self.base}; is `fredica serve` running?", 2)
        except httpx.TimeoutException:
            die(f"the node at {self.base} did not answer in time", 2)
        if response.status_code == 401:
            die(f"401: {detail(response)} (set FREDICA_TOKEN to a publisher token)")
        if response.status_code >= 400:
            die(f"{response.status_code}: {detail(response)}")
        return response.json()


def detail(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body.get("error") or body.get("detail"))
    except ValueError:
        return response.text


def pipeline_view(data: dict[str, Any]) -> Group:
    status = data["status"]
    head = Text.assemble(
        ("pipeline ", "bold"),
        (data["id"], "bold"),
        f"  {data['template']}  ",
        (status, STATUS_STYLE.get(status, "")),
        f"  {data['done_tasks']}/{data['total_tasks']} done",
    )
    refs = {v: k for k, v in data.get("params", {}).get("refs", {}).items()}
    table = Table("task", "type", "status", "progress", "node", "note / error", expand=True)
    for t in data["tasks"]:
        shown = "paused" if t["status"] == "running" and t["is_paused"] else t["status"]
        pct = 100 if t["status"] in ("completed", "skipped") else t["progress"]
        note = t["error"] or t["progress_note"] or ""
        table.add_row(
            refs.get(t["id"], t["id"][:8]),
            t["type"],
            Text(shown, style="yellow" if shown == "paused" else STATUS_STYLE.get(shown, "")),
            Group(ProgressBar(total=100, completed=pct, width=20), Text(f"{pct}%")),
            t["claimed_by"] or "",
            Text(note[:80], style="red" if t["error"] else "dim"),
        )
    return Group(head, table)


def follow(client: Client, pipeline_id: str) -> int:
    version = 0
    data = client.request("GET", f"/api/v1/pipelines/{pipeline_id}")
    with Live(pipeline_view(data), console=console, refresh_per_second=8) as live:
        while data["status"] not in TERMINAL_PIPELINE:
            version = client.request(
                "GET", "/api/v1/changes", params={"after": version, "timeout": 2.0}
            )["version"]
            data = client.request("GET", f"/api/v1/pipelines/{pipeline_id}")
            live.update(pipeline_view(data))
    return 0 if data["status"] == "completed" else 1
