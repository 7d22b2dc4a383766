"""The `fredica` command line: run a node, and talk to one over HTTP."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from fredica import __version__
from fredica.cli import client as cli_client
from fredica.cli import remote, tables
from fredica.cli.remote import STATUS_STYLE, Client, console, die, err_console, pipeline_view
from fredica.domain import errors

app = typer.Typer(
    help="fredica: the machines you already own, working as one media processing cluster.",
    no_args_is_help=True,
    add_completion=False,
)
pipeline_app = typer.Typer(
    help="Create, list, show, cancel, retry and delete pipelines.", no_args_is_help=True
)
task_app = typer.Typer(help="List tasks, control one task, read its log.", no_args_is_help=True)
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(task_app, name="task")

DEFAULT_NODE = cli_client.DEFAULT_NODE
NodeOpt = cli_client.NodeOpt


def _version(value: bool) -> None:
    if value:
        console.print(f"fredica {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """fredica: the machines you already own, working as one media processing cluster."""


# --- serve ------------------------------------------------------------------------------------
@app.command()
def serve(
    config: Annotated[
        Path | None, typer.Option(help="worker.yaml (default: <data-dir>/worker.yaml)")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where the node keeps its state.")] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[
        int | None,
        typer.Option(envvar="FREDICA_PORT", help="Port to listen on (default: api.port, 7631)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run a node: the worker engine and the HTTP API."""
    import uvicorn

    from fredica.node import bootstrap, compose
    from fredica.web.app import create_app

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        _check_port_free(config, data_dir, host, port)
        boot = bootstrap.bootstrap(config, data_dir, host, port)
        node = compose.build_node(boot.settings)
        node.lock_data_dir()
    except (errors.ConfigError, errors.StoreError, errors.DataDirInUse) as exc:
        die(exc.message)
    except OSError as exc:  # a data dir that is a file, read-only, on a full disk...
        where = f" ({exc.filename})" if exc.filename else ""
        die(f"cannot use the data dir{where}: {exc.strerror or exc}")
    settings = boot.settings
    err_console.print(
        f"fredica {__version__} node [bold]{settings.node_id}[/bold] on "
        f"http://{settings.host}:{settings.port} (data: {settings.data_dir}, "
        f"config: {boot.config_path})"
    )
    grace = settings.engine_settings().shutdown_grace

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # uvicorn waits for open responses before the app's shutdown; end event streams
            node.request_shutdown()
            super().handle_exit(sig, frame)

    server = _Server(
        uvicorn.Config(
            create_app(node),
            host=settings.host,
            port=settings.port,
            log_level=log_level.lower(),
            timeout_graceful_shutdown=int(grace) + 5,
        )
    )
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then restores the previous handlers and
    # raises the signal again; make that a normal exit instead of a death by signal.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_after_graceful_shutdown)
    server.run()
    if node.engine.failure is not None:
        raise typer.Exit(1)


def _check_port_free(
    config: Path | None, data_dir: Path | None, host: str | None, port: int | None
) -> None:
    """Die naming the busy port before anything (data dir, worker.yaml) is created."""
    from fredica.config import schema as config_mod
    from fredica.node import bootstrap

    cfg_path, _ = bootstrap.resolve_paths(config, data_dir)
    api = (
        config_mod.load_config(cfg_path).api if cfg_path.exists() else config_mod.WorkerConfig().api
    )
    bind_host, bind_port = host or api.host, port or api.port
    problem = cli_client.bind_problem(bind_host, bind_port)
    if problem:
        die(f"{problem} (api.host / api.port in {cfg_path})")


def _exit_after_graceful_shutdown(signum: int, frame: object) -> None:
    raise SystemExit(0)


# --- pipelines ----------------------------------------------------------------------------------
def _parse_params(values: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in values:
        if "=" not in item:
            die(f"--param takes key=value, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def _read_json(path: Path) -> Any:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
        return json.loads(text)
    except OSError as exc:
        die(f"cannot read {path}: {exc}")
    except json.JSONDecodeError as exc:
        die(f"{path} is not valid JSON: {exc}")


@pipeline_app.command("create")
def pipeline_create(
    template: Annotated[str, typer.Argument(help="Template name (custom, network_test, ...).")],
    node: NodeOpt = DEFAULT_NODE,
    material_id: Annotated[
        str | None, typer.Option(help="Material this pipeline processes.")
    ] = None,
    source: Annotated[str | None, typer.Option(help="URL or file path to process.")] = None,
    tasks: Annotated[
        Path | None, typer.Option(help="JSON file with the task list (custom).")
    ] = None,
    param: Annotated[
        list[str], typer.Option(help="Template parameter key=value (JSON values).")
    ] = [],  # noqa: B006
    body: Annotated[Path | None, typer.Option(help="JSON file with extra request fields.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Show live progress.")] = False,
) -> None:
    """Create a pipeline from a template."""
    request: dict[str, Any] = dict(_read_json(body)) if body else {}
    request["template"] = template
    if material_id:
        request["material_id"] = material_id
    if source:
        request["source"] = source
    if tasks is not None:
        loaded = _read_json(tasks)
        request["tasks"] = loaded["tasks"] if isinstance(loaded, dict) else loaded
    if param:
        request.setdefault("params", {}).update(_parse_params(param))
    client = Client(node)
    created = client.request("POST", "/api/v1/pipelines", json=request)
    note = (
        " (an active pipeline for this material already exists)" if created["deduplicated"] else ""
    )
    console.print(f"pipeline [bold]{created['pipeline_id']}[/bold]{note}")
    if follow:
        raise typer.Exit(remote.follow(client, created["pipeline_id"]))


CursorOpt = Annotated[
    str | None,
    typer.Option(help="Continue after the page that printed this cursor (`next page:`)."),
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every page, not only one.")]
LimitOpt = Annotated[int, typer.Option(min=1, max=1000, help="Rows per page.")]
WideOpt = Annotated[
    bool, typer.Option("--wide", help="Every column at full width, whatever the terminal.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="The rows as JSON (for scripts).")]


def _style(row: dict[str, Any]) -> str:
    return STATUS_STYLE.get(str(row["status"]), "")


PIPELINE_COLUMNS = (
    tables.Column("id", lambda p: p["id"], short=lambda p: tables.short_id(p["id"])),
    tables.Column("title", lambda p: str(p.get("title") or remote.material_name(p)), flex=True),
    tables.Column("status", lambda p: p["status"], style=_style),
    tables.Column("done", lambda p: f"{p['done_tasks']}/{p['total_tasks']}", priority=1),
    tables.Column("age", lambda p: tables.age(time.time() - p["created_at"]), priority=2),
    tables.Column("template", lambda p: p["template"], priority=3),
    tables.Column("owner", lambda p: p.get("owner_id") or "", wide_only=True),
    tables.Column("material", lambda p: p.get("material_id") or "", wide_only=True),
    tables.Column("created", lambda p: tables.created(p["created_at"]), wide_only=True),
)
TASK_COLUMNS = (
    tables.Column("id", lambda t: t["id"], short=lambda t: tables.short_id(t["id"])),
    tables.Column("type", lambda t: t["type"], flex=True),
    tables.Column("status", lambda t: t["status"], style=_style),
    tables.Column("progress", lambda t: f"{t['progress']}%", priority=1),
    tables.Column("age", lambda t: tables.age(time.time() - t["created_at"]), priority=2),
    tables.Column(
        "pipeline",
        lambda t: t["pipeline_id"] or "—",
        short=lambda t: tables.short_id(t["pipeline_id"]),
        priority=3,
    ),
    tables.Column("node", lambda t: t.get("claimed_by") or "—", priority=4),
    tables.Column("material", lambda t: t.get("material_id") or "", wide_only=True),
    tables.Column("created", lambda t: tables.created(t["created_at"]), wide_only=True),
)


def _list(
    client: Client, path: str, key: str, params: dict[str, Any], cursor: str | None, every: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a list from `cursor` (or, with `every`, all of them) and the cursor after."""
    rows: list[dict[str, Any]] = []
    for page, after in cli_client.pages(client, path, key, params, cursor):
        rows += page
        if not every:
            return rows, after
    return rows, None


def _next_page_hint(command: str, cursor: str | None) -> None:
    if cursor:
        console.print(f"next page: {command} --cursor {cursor}", style="dim", soft_wrap=True)


@pipeline_app.command("list")
def pipeline_list(
    node: NodeOpt = DEFAULT_NODE,
    status: Annotated[str | None, typer.Option(help="Only pipelines in this status.")] = None,
    search: Annotated[
        str | None,
        typer.Option(
            "--search", "-s", help="Text in the source file name, URL or title, or an ID prefix."
        ),
    ] = None,
    template: Annotated[str | None, typer.Option(help="Only pipelines of this template.")] = None,
    since: Annotated[
        str | None, typer.Option(help="Created on or after (2026-12-03 or an ISO time).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Created before (a bare date: up to its end).")
    ] = None,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    every: AllOpt = False,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """List pipelines, newest first, one page at a time; search and filter the history."""
    filters = {
        "status": status,
        "q": search,
        "template": template,
        "since": since,
        "until": until,
    }
    params: dict[str, Any] = {"limit": limit} | {k: v for k, v in filters.items() if v}
    rows, after = _list(Client(node), "/api/v1/pipelines", "pipelines", params, cursor, every)
    answer = {"pipelines": rows, "next_cursor": after} if as_json else None
    tables.show(console, PIPELINE_COLUMNS, rows, wide=wide, as_json=answer)
    if as_json:
        return
    options = {"q": "--search", "template": "--template", "since": "--since", "until": "--until"}
    command = "fredica pipeline list" + "".join(
        f" {options.get(k, '--' + k)} {shlex.quote(str(v))}"
        for k, v in params.items()
        if k != "limit"
    )
    _next_page_hint(command, after)


@pipeline_app.command("show")
def pipeline_show(
    pipeline_id: str,
    node: NodeOpt = DEFAULT_NODE,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Live view until it ends.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
) -> None:
    """Show a pipeline and its tasks (any unique prefix of its ID works)."""
    client = Client(node)
    pipeline_id = cli_client.resolve_pipeline_id(client, pipeline_id)
    if follow:
        raise typer.Exit(remote.follow(client, pipeline_id))
    data = client.request("GET", f"/api/v1/pipelines/{pipeline_id}")
    if as_json:
        console.print_json(data=data)
    else:
        console.print(pipeline_view(data))


@pipeline_app.command("cancel")
def pipeline_cancel(pipeline_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Cancel a pipeline (running tasks are stopped; it ends `cancelled`)."""
    client = Client(node)
    pipeline_id = cli_client.resolve_pipeline_id(client, pipeline_id)
    data = client.request("POST", f"/api/v1/pipelines/{pipeline_id}/cancel")
    console.print(f"pipeline {pipeline_id}: {data['status']}")


@pipeline_app.command("retry")
def pipeline_retry(pipeline_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Run every failed or cancelled task of a pipeline again (their dependents too)."""
    client = Client(node)
    pipeline_id = cli_client.resolve_pipeline_id(client, pipeline_id)
    data = client.request("POST", f"/api/v1/pipelines/{pipeline_id}/retry")
    console.print(
        f"pipeline {pipeline_id}: {data['status']}, {len(data['retried'])} task(s) queued again"
    )


@pipeline_app.command("delete")
def pipeline_delete(
    pipeline_id: str,
    node: NodeOpt = DEFAULT_NODE,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a finished pipeline with its tasks, result files and logs (cancel it first)."""
    client = Client(node)
    pipeline_id = cli_client.resolve_pipeline_id(client, pipeline_id)
    if not yes:
        data = client.request("GET", f"/api/v1/pipelines/{pipeline_id}")
        what = (
            f"pipeline {pipeline_id} ({data['template']}, {remote.material_name(data)}, "
            f"{data['total_tasks']} tasks, {data['status']})"
        )
        if not sys.stdin.isatty():
            die(f"not deleting {what} without confirmation; pass --yes")
        if not typer.confirm(f"Delete {what} with its result files and logs?", default=False):
            err_console.print("not deleted")
            raise typer.Exit(1)
    data = client.request("DELETE", f"/api/v1/pipelines/{pipeline_id}")
    console.print(f"pipeline {pipeline_id} deleted ({data['deleted_tasks']} tasks)")


# --- tasks --------------------------------------------------------------------------------------
def _task_action(action: str, task_id: str, node: str) -> None:
    client = Client(node)
    task_id = cli_client.resolve_task_id(client, task_id)
    data = client.request("POST", f"/api/v1/tasks/{task_id}/{action}")
    paused = " (paused)" if data["is_paused"] else ""
    console.print(f"task {task_id}: {data['status']}{paused}")


@task_app.command("list")
def task_list(
    node: NodeOpt = DEFAULT_NODE,
    status: Annotated[
        str | None, typer.Option(help="Only tasks in these statuses (comma-separated).")
    ] = None,
    task_type: Annotated[str | None, typer.Option("--type", help="Only this task type.")] = None,
    pipeline: Annotated[
        str | None, typer.Option(help="Only this pipeline's tasks (oldest first).")
    ] = None,
    limit: LimitOpt = 50,
    cursor: CursorOpt = None,
    every: AllOpt = False,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """List tasks, newest first, one page at a time."""
    client = Client(node)
    params: dict[str, Any] = {"limit": limit}
    command = "fredica task list"
    if pipeline:
        params["pipeline_id"] = cli_client.resolve_pipeline_id(client, pipeline)
        command += f" --pipeline {params['pipeline_id']}"
    if status:
        params["status"] = status
        command += f" --status {status}"
    if task_type:
        params["type"] = task_type
        command += f" --type {task_type}"
    rows, after = _list(client, "/api/v1/tasks", "tasks", params, cursor, every)
    answer = {"tasks": rows, "next_cursor": after} if as_json else None
    tables.show(console, TASK_COLUMNS, rows, wide=wide, as_json=answer)
    if not as_json:
        _next_page_hint(command, after)


@task_app.command("pause")
def task_pause(task_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Pause a running, pausable task (its processes are stopped)."""
    _task_action("pause", task_id, node)


@task_app.command("resume")
def task_resume(task_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Resume a paused task."""
    _task_action("resume", task_id, node)


@task_app.command("cancel")
def task_cancel(task_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Cancel a task (a running one is stopped)."""
    _task_action("cancel", task_id, node)


@task_app.command("retry")
def task_retry(task_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Run a failed or cancelled task again."""
    _task_action("retry", task_id, node)


@task_app.command("skip")
def task_skip(task_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Skip a pending, failed or cancelled task (its dependents may run)."""
    _task_action("skip", task_id, node)


@task_app.command("log")
def task_log(
    task_id: str,
    node: NodeOpt = DEFAULT_NODE,
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Which attempt (default: the latest).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the task ends.")
    ] = False,
) -> None:
    """Print what a task's attempt printed: the commands it ran and their output (the last
    1 MiB; any unique prefix of its ID works)."""
    client = Client(node)
    task_id = cli_client.resolve_task_id(client, task_id)
    raise typer.Exit(remote.print_log(client, task_id, attempt, follow))


@task_app.command("show")
def task_show(task_id: str, node: NodeOpt = DEFAULT_NODE) -> None:
    """Show a task with its events (any unique prefix of its ID works)."""
    client = Client(node)
    task_id = cli_client.resolve_task_id(client, task_id)
    console.print_json(data=client.request("GET", f"/api/v1/tasks/{task_id}"))


# --- node ---------------------------------------------------------------------------------------
@app.command()
def status(node: NodeOpt = DEFAULT_NODE) -> None:
    """Show the node's state and task counts."""
    data = Client(node).request("GET", "/api/v1/status")
    table = Table(show_header=False)
    table.add_row("node", f"{data['node_id']} ({data['hostname']})")
    table.add_row("address", data["address"])
    table.add_row("running", f"{data['running']}/{data['max_workers']}")
    table.add_row("previous shutdown", data["previous_shutdown_type"])
    if data.get("store_error"):
        table.add_row("store", f"[red]unavailable[/red]: {data['store_error']}")
    counts = data["task_counts"] or {}
    table.add_row("tasks", "  ".join(f"{k} {v}" for k, v in counts.items() if v) or "none")
    table.add_row("task types", ", ".join(data["task_types"]))
    table.add_row("templates", ", ".join(data["templates"]))
    disk = data.get("disk")
    if disk:
        gib = 1 << 30
        table.add_row(
            "disk",
            f"{disk['free_bytes'] / gib:.1f} GiB free of {disk['total_bytes'] / gib:.1f} GiB "
            f"(keeps {disk['min_free_bytes'] / gib:g} GiB free)",
        )
        for task_type, why in disk["held_types"].items():
            table.add_row("held back", f"[yellow]{task_type}[/yellow]: {why}")
    console.print(table)


@app.command("network-test")
def network_test_cmd(
    urls: Annotated[
        list[str] | None, typer.Argument(help="URLs (default: the built-in list).")
    ] = None,
    node: NodeOpt = DEFAULT_NODE,
    timeout_ms: int = 5000,
) -> None:
    """Measure HTTP latency from the node to some URLs."""
    client = Client(node)
    body: dict[str, Any] = {"timeout_ms": timeout_ms}
    if urls:
        body["urls"] = urls
    created = client.request("POST", "/api/v1/NetworkTestRoute", json=body)
    code = remote.follow(client, created["pipeline_id"])
    task = client.request("GET", f"/api/v1/tasks/{created['task_id']}")
    table = Table("URL", "latency", "status")
    failed = 0
    for row in (task.get("result") or {}).get("results", []):
        latency = "-" if row["latency_ms"] is None else f"{row['latency_ms']} ms"
        shown = _network_status(row)
        failed += shown.style == "red"
        table.add_row(row["url"], latency, shown)
    console.print(table)
    if failed:
        err_console.print(f"[red]error:[/red] {failed} URL(s) failed")
    raise typer.Exit(code or (1 if failed else 0))


def _network_status(row: dict[str, Any]) -> Text:
    """ok only for a 2xx/3xx answer; an HTTP 4xx/5xx answer is an error like a timeout (the
    executor says so; results recorded before it did are read the same way)."""
    http_status = row.get("http_status")
    if isinstance(http_status, int) and http_status >= 400:
        return Text(f"error (HTTP {http_status})", style="red")
    if row["status"] == "ok":
        suffix = f" (HTTP {http_status})" if http_status else ""
        return Text(f"ok{suffix}", style="green")
    error = f" ({row['error']})" if row.get("error") else ""
    return Text(f"{row['status']}{error}", style="red")


@app.command()
def demo(
    data_dir: Annotated[
        Path | None, typer.Option(help="Where a node started for the demo keeps its state.")
    ] = None,
    node: Annotated[
        str | None, typer.Option("--node", help="Use this running node (host:port or URL).")
    ] = None,
    engine: Annotated[
        bool, typer.Option("--engine", help="The engine demo (NETWORK_TEST DAG, pause/resume).")
    ] = False,
) -> None:
    """Generate a short talking video and run the real media pipeline on it: transcript,
    analysis and subtitles (`--engine`: the task-engine demo instead)."""
    if node is not None:
        node = cli_client.normalize_node_url(node)
    if engine:
        from fredica.cli import demo as demo_mod

        raise typer.Exit(demo_mod.run_demo(console, data_dir=data_dir, node_url=node))
    from fredica.cli import demo_media

    raise typer.Exit(demo_media.run_media_demo(console, data_dir, node))


@app.command()
def process(
    source: Annotated[str, typer.Argument(help="A media file (audio or video) or an URL.")],
    template: Annotated[
        str,
        typer.Option(
            help="full_process, transcribe_long, transcribe_short, ocr_video, detect_objects, "
            "fingerprint, transcode, video_overview, transcribe_ocr, ..."
        ),
    ] = "full_process",
    data_dir: Annotated[
        Path | None, typer.Option(help="Where a node started for the job keeps its state.")
    ] = None,
    node: Annotated[
        str | None, typer.Option("--node", help="Use this running node (host:port or URL).")
    ] = None,
    param: Annotated[
        list[str], typer.Option(help="Template parameter key=value (JSON values).")
    ] = [],  # noqa: B006
    language: Annotated[
        str | None, typer.Option(help="Spoken language (en, zh, ...; default: detect it).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Whisper model name (default: chosen per language).")
    ] = None,
    chunk: Annotated[
        float | None,
        typer.Option(help="Chunk length in seconds for transcribe_long (1-3600).", min=1, max=3600),
    ] = None,
) -> None:
    """Process your own media with a template (download if needed; transcripts, on-screen text,
    objects, scenes, fingerprints...) and print what it found. Ctrl-C cancels the pipeline when
    the node was started for this command, and leaves it running on a node given with --node."""
    from fredica.cli import demo_media

    options = demo_media.ProcessOptions(language=language, model=model, chunk_sec=chunk)
    if node is not None:
        node = cli_client.normalize_node_url(node)
    raise typer.Exit(
        demo_media.run_process_command(
            console, source, data_dir, node, template, _parse_params(param), options
        )
    )


@app.command("fingerprint-compare")
def fingerprint_compare(
    first: Annotated[Path, typer.Argument(help="A fingerprint JSON (FINGERPRINT_VIDEO output).")],
    second: Annotated[Path, typer.Argument(help="Another fingerprint JSON.")],
) -> None:
    """How similar two videos are, from their FINGERPRINT_VIDEO results (pHash per second)."""
    from fredica.executors import video

    try:
        found = video.compare_fingerprints(_read_json(first), _read_json(second))
    except (KeyError, TypeError, ValueError) as exc:
        die(f"not two fingerprint files: {exc}")
    verdict = "likely the same video" if found["similarity"] >= video.SAME_VIDEO else "different"
    console.print(
        f"similarity {found['similarity']:.3f} (mean Hamming distance "
        f"{found['mean_distance']} of 64 bits over {found['overlap_frames']} frames, "
        f"shift {found['shift_frames']} frames): {verdict}"
    )


token_app = typer.Typer(help="Publisher tokens for auth.mode: token.", no_args_is_help=True)
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option(help="Who the token is for.")],
    config: Annotated[Path | None, typer.Option(help="worker.yaml to add it to.")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Node data dir (finds worker.yaml).")
    ] = None,
    cloud: Annotated[bool, typer.Option("--cloud", help="Allow cloud backends.")] = False,
    max_cost: Annotated[float | None, typer.Option(help="Max cloud cost per day (USD).")] = None,
    max_tasks: Annotated[int | None, typer.Option(help="Max tasks per day.")] = None,
    expires: Annotated[str | None, typer.Option(help="90d, 12h, 30m or an ISO date.")] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="May read and change the settings page.")
    ] = False,
) -> None:
    """Create a publisher token: prints it once and stores only its SHA-256 in worker.yaml."""
    from datetime import UTC, datetime

    from fredica import auth
    from fredica.config import schema as config_mod
    from fredica.node import bootstrap

    path, _ = bootstrap.resolve_paths(config, data_dir)
    if not path.exists():
        die(f"{path} does not exist; run `fredica serve` once or pass --config")
    try:
        expiry = auth.expiry_from_now(expires, datetime.now(UTC))
    except errors.InvalidRequest as exc:
        die(exc.message, code=2)  # a usage error, as typer's own; nothing is written
    token_id, token = auth.new_token()
    try:
        permissions: dict[str, Any] = {"allow_cloud": cloud}
        if max_cost is not None:
            permissions["max_cloud_cost_per_day_usd"] = max_cost
        if max_tasks is not None:
            permissions["max_tasks_per_day"] = max_tasks
        if admin:
            permissions["admin"] = True
        entry: dict[str, Any] = {
            "id": token_id,
            "name": name,
            "token_hash": auth.hash_token(token),
            "expires_at": expiry.isoformat() if expiry else None,
            "permissions": permissions,
        }
        config_mod.add_access_token(path, entry)
    except errors.FredicaError as exc:
        die(exc.message)
    console.print(f"Token ID   : {token_id}")
    console.print(f"Token      : {token}   (shown only this once)")
    console.print(f"Expires    : {expiry.date().isoformat() if expiry else 'never'}")
    console.print(f"Permissions: {permissions}")
    console.print(f"Stored as sha256 in {path}; requests need auth.mode: token to be checked.")


def _mount_config_commands() -> None:
    from fredica.cli import config_cmd as cli_config

    app.add_typer(cli_config.config_app, name="config")

    @app.command()
    def capabilities(
        config: Annotated[Path | None, typer.Option(help="worker.yaml to read.")] = None,
        node: Annotated[
            str | None,
            typer.Option(
                "--node",
                envvar="FREDICA_NODE",
                help="Ask this running node (and its peers) instead of probing this machine.",
            ),
        ] = None,
    ) -> None:
        """Show what a node declares it can do. Without --node (or FREDICA_NODE): probe this
        machine with its worker.yaml and explain every capability; with it: what the running
        node and the peers it knows have declared."""
        if node is None:
            cli_config.capabilities_command(config)
            return
        cli_config.remote_capabilities(Client(node), console)


_mount_config_commands()


def _mount_node_commands() -> None:
    from fredica.cli import node_cmd

    app.add_typer(node_cmd.node_app, name="node")
    from fredica.cli import library_cmd

    app.add_typer(library_cmd.library_app, name="library")


_mount_node_commands()


def _mount_upload_command() -> None:
    from fredica.cli import upload_cmd

    app.command("upload")(upload_cmd.upload_command)


_mount_upload_command()


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()
