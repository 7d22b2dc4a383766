"""`fredica library ...`: watch folders (worker.yaml `libraries:`): list them, their files, scan
one now, and process a file again (docs/libraries.md)."""

from __future__ import annotations

import time
import urllib.parse
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from fredica.cli import client
from fredica.cli.remote import Client, console
from fredica.cli.tables import ago

library_app = typer.Typer(
    help="Watch folders: list the libraries, their files, rescan, process a file again.",
    no_args_is_help=True,
)

FILE_STYLE = {
    "settling": "yellow",
    "queued": "green",
    "watched_elsewhere": "blue",
    "gone": "dim",
    "error": "red",
}
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the raw JSON.")]


def _path(name: str) -> str:
    return f"/api/v1/libraries/{urllib.parse.quote(name, safe='')}"


def libraries_table(rows: list[dict[str, Any]]) -> Table:
    """The rows of `GET /api/v1/libraries` as a table."""
    now = time.time()
    table = Table("name", "folder", "template", "watcher", "files", "last scan")
    for lib in rows:
        counts = lib.get("counts") or {}
        shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none"
        last = lib.get("last_scan_at")
        table.add_row(
            lib["name"],
            lib["folder"] + (f"  ({lib['error']})" if lib.get("error") else ""),
            lib["template"],
            lib.get("watcher") or "deciding",
            shown,
            ago(now - float(last)) if last else "never",
        )
    return table


def files_table(rows: list[dict[str, Any]]) -> Table:
    """The rows of `GET /api/v1/libraries/{name}/files` as a table."""
    table = Table("id", "path", "status", "pipeline", "size", "note")
    for f in rows:
        status = str(f["status"])
        table.add_row(
            f.get("id") or "",
            f["path"],
            Text(status, style=FILE_STYLE.get(status, "")),
            (f.get("pipeline_id") or "")[:12],
            str(f.get("size", "")),
            f.get("note") or "",
        )
    return table


def history_table(rows: list[dict[str, Any]]) -> Table:
    """Every history entry of a library's files, oldest first: the library's history."""
    table = Table("when", "path", "event", "pipeline", "detail")
    events = sorted(
        ((e, f["path"]) for f in rows for e in f.get("history") or []), key=lambda x: x[0]["at"]
    )
    for event, path in events:
        detail = event.get("from_path") or event.get("to_path") or ""
        table.add_row(
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(event["at"]))),
            path,
            str(event["event"]),
            (event.get("pipeline_id") or "")[:12],
            str(detail),
        )
    return table


@library_app.command("list")
def library_list(node: client.NodeOpt = client.DEFAULT_NODE, as_json: JsonOpt = False) -> None:
    """Every library of the node: folder, template, which node watches it, files per status."""
    data = Client(node).request("GET", "/api/v1/libraries")
    if as_json:
        console.print_json(data=data)
    else:
        console.print(libraries_table(data["libraries"]))


@library_app.command("files")
def library_files(
    name: str,
    node: client.NodeOpt = client.DEFAULT_NODE,
    as_json: JsonOpt = False,
    history: Annotated[
        bool, typer.Option("--history", help="The library's history: every event, oldest first.")
    ] = False,
) -> None:
    """The files of a library: status (settling, queued, watched_elsewhere, gone, error) and
    the pipeline each became; with --history, what happened to them (new, changed, touched,
    moved, gone, back, reprocess)."""
    data = Client(node).request("GET", f"{_path(name)}/files")
    if as_json:
        console.print_json(data=data)
    elif history:
        console.print(history_table(data["files"]))
    else:
        console.print(files_table(data["files"]))


@library_app.command("rescan")
def library_rescan(
    name: str, node: client.NodeOpt = client.DEFAULT_NODE, as_json: JsonOpt = False
) -> None:
    """Scan a library's folder now."""
    data = Client(node).request("POST", f"{_path(name)}/rescan")
    if as_json:
        console.print_json(data=data)
    elif data.get("error"):
        client.die(f"library {name}: {data['error']}")
    else:
        console.print(
            f"library {name}: {data['found']} file(s) found, {data['taken']} taken, "
            f"{data['settling']} settling, {data['gone']} gone"
        )


@library_app.command("reprocess")
def library_reprocess(
    name: str,
    file_id: Annotated[str, typer.Argument(help="The file's id (fredica library files NAME).")],
    node: client.NodeOpt = client.DEFAULT_NODE,
    as_json: JsonOpt = False,
) -> None:
    """Process a file of a library again (a new pipeline of the library's template)."""
    data = Client(node).request(
        "POST", f"{_path(name)}/files/{urllib.parse.quote(file_id, safe='')}/reprocess"
    )
    if as_json:
        console.print_json(data=data)
    elif data.get("deduplicated"):
        console.print(f"already running: pipeline {data['pipeline_id']}")
    else:
        console.print(f"pipeline {data['pipeline_id']} created")
