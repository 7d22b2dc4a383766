"""`fredica config check|show` and `fredica capabilities` (mounted by `fredica.cli`).

`config check` validates worker.yaml and exits 1 with the precise error; `config show` prints
the effective config (defaults filled in) with secrets masked; `capabilities` prints what this
node declares and why, after running the real probes.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from ruamel.yaml import YAML

from fredica.capabilities import probes
from fredica.config import schema as config
from fredica.domain import errors
from fredica.engine import declare

config_app = typer.Typer(
    name="config",
    help="Check and show this node's worker.yaml.",
    no_args_is_help=True,
    add_completion=False,
)

PathArg = Annotated[
    Path | None,
    typer.Argument(
        help="worker.yaml to use (default: $FREDICA_CONFIG or .data/worker.yaml).",
        show_default=False,
    ),
]


def _resolve(path: Path | None) -> Path:
    return path if path is not None else config.default_config_path()


@config_app.command("check")
def check_command(path: PathArg = None) -> None:
    """Validate worker.yaml: prints OK, or every problem with its key path (exit 1)."""
    target = _resolve(path)
    try:
        config.load_config(target)
    except errors.ConfigError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{target}: OK")


def _to_yaml(data: object) -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment,unused-ignore]
    buf = StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


@config_app.command("show")
def show_command(path: PathArg = None) -> None:
    """Print the effective configuration (defaults filled in, secrets masked) as YAML."""
    target = _resolve(path)
    try:
        cfg = config.load_config(target)
    except errors.ConfigError as exc:
        typer.echo(exc.message, err=True)
        raise typer.Exit(1) from None
    typer.echo(_to_yaml(config.mask_secrets(cfg)), nl=False)


def _accelerator_text(d: declare.Declaration) -> str:
    cap = d.capability
    if cap is None:
        return ""
    acc = cap.accelerator
    name = getattr(acc, "name", "") or getattr(acc, "provider", "")
    return f"{acc.kind.value} ({name})" if name else acc.kind.value


def capabilities_command(
    config_path: Path | None,
    *,
    console: Console | None = None,
    env: probes.ProbeEnv | None = None,
    show_all: bool = True,
) -> None:
    """Print a table of what this node declares and why (function, backend, accelerator, model,
    score, status, reason), after the hardware scores. Without a worker.yaml the defaults are
    used. Raises typer.Exit(1) on an invalid worker.yaml."""
    out = console or Console()
    target = _resolve(config_path)
    if target.exists():
        try:
            cfg = config.load_config(target)
        except errors.ConfigError as exc:
            out.print(f"[red]{exc.message}[/red]", highlight=False)
            raise typer.Exit(1) from None
        out.print(f"config: {target}", highlight=False)
    else:
        cfg = config.WorkerConfig()
        out.print(f"config: {target} not found, using defaults", highlight=False)
    report = probes.run_probes(env, declare.binary_paths(cfg))
    scores = declare.resolve_hardware(cfg, report)
    gpu = report.gpu
    gpu_text = f"{gpu.name}, {gpu.vram_gb:.0f} GB" if gpu is not None else "no GPU detected"
    out.print(
        f"gpu_score: {scores.gpu.value if scores.gpu.value is not None else '-'} "
        f"({scores.gpu.source.value}; {gpu_text})   "
        f"cpu_score: {scores.cpu.value} ({scores.cpu.source.value}; "
        f"{report.cpu_count} logical cores)",
        highlight=False,
    )
    table = Table(title="Capabilities of this node")
    for column in ("Function", "Backend", "Accelerator", "Models", "Score", "Status", "Reason"):
        table.add_column(column, overflow="fold")
    declarations = declare.declare(cfg, report, declare.RUNNABLE)
    for d in declarations:
        if not (d.declared or show_all):
            continue
        cap = d.capability
        if d.declared:
            status = f"[green]declared[/green] ({d.source})"
        else:
            status = "[dim]disabled[/dim]" if d.source == "disabled" else "[dim]no[/dim]"
        table.add_row(
            d.function.value,
            d.backend or "-",
            _accelerator_text(d),
            ", ".join(cap.models) if cap is not None else "",
            str(cap.score) if cap is not None else "",
            status,
            d.reason,
        )
    out.print(table)
    count = sum(1 for d in declarations if d.declared)
    out.print(f"{count} capabilities declared", highlight=False)


def remote_capabilities(client: Any, console: Console) -> None:
    """`fredica capabilities --node`: what the node and its known peers declared."""
    nodes = client.request("GET", "/api/v1/nodes")["nodes"]
    for row in nodes:
        console.print(
            f"node [bold]{row.get('node_id') or row.get('id')}[/bold] "
            f"({row.get('hostname') or '-'}, {row.get('address') or '-'}, {row.get('status')})",
            highlight=False,
        )
        table = Table("function", "backend", "accelerator", "models", "score")
        for cap in row.get("capabilities") or []:
            table.add_row(
                str(cap.get("function", "")),
                str(cap.get("backend", "")),
                str(cap.get("accelerator", "")),
                ", ".join(cap.get("models") or []),
                str(cap.get("score", "")),
            )
        console.print(table)
