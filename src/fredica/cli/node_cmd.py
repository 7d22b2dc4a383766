"""`fredica node ...`: the nodes of the cluster as one node sees them, and draining a node
(seed 001 §2.2: finish the running work, claim nothing new) before maintenance."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from fredica.cli import client, tables
from fredica.cli.remote import Client, console, die

node_app = typer.Typer(
    help="The cluster's nodes: list them, drain one, hand its pipelines off.",
    no_args_is_help=True,
)

STATE_STYLE = {
    "online": "green",
    "busy": "cyan",
    "draining": "yellow",
    "quarantined": "magenta",
    "offline": "red",
}


def _last_seen(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (`GET /api/v1/nodes`) with each node's `last seen` as people read it."""
    now = float(data.get("now") or time.time())
    me = data.get("self")
    rows = sorted(data["nodes"], key=lambda n: (n["id"] != me, n["hostname"], n["id"]))
    return {
        "rows": [
            {
                **n,
                "me": n["id"] == me,
                "seen": "now" if n["id"] == me else tables.ago(now - float(n["last_seen_at"])),
                "running": (n.get("info") or {}).get("running", 0),
            }
            for n in rows
        ]
    }


NODE_COLUMNS = (
    tables.Column("id", lambda n: n["id"] + (" (this node)" if n["me"] else "")),
    tables.Column("hostname", lambda n: n["hostname"], flex=True),
    tables.Column(
        "state", lambda n: str(n["status"]), style=lambda n: STATE_STYLE.get(str(n["status"]), "")
    ),
    tables.Column("running/slots", lambda n: f"{n['running']}/{n['max_workers']}", priority=1),
    tables.Column("last seen", lambda n: n["seen"], priority=2),
    tables.Column("address", lambda n: n.get("address") or "", priority=3),
)


@node_app.command("list")
def node_list(
    node: client.NodeOpt = client.DEFAULT_NODE,
    wide: Annotated[
        bool, typer.Option("--wide", help="Every column at full width, whatever the terminal.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The answer as JSON.")] = False,
) -> None:
    """Every node this node knows: state (online, busy, draining, quarantined, offline),
    running tasks and slots, and when it was last heard from."""
    data = Client(node).request("GET", "/api/v1/nodes")
    rows = _last_seen(data)["rows"]
    tables.show(console, NODE_COLUMNS, rows, wide=wide, as_json=data if as_json else None)


@node_app.command("drain")
def node_drain(
    node: client.NodeOpt = client.DEFAULT_NODE,
    wait: Annotated[
        bool, typer.Option("--wait", help="Return only when no task is running any more.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="With --wait: give up after this many seconds (exit 1).")
    ] = 3600.0,
) -> None:
    """Stop the node claiming new work; what runs finishes. It stays drained (also across
    restarts) until `fredica node undrain`."""
    api = Client(node)
    state = api.request("POST", "/api/v1/node/drain")
    console.print(
        f"node {state['node_id']} draining: {state['running']} task(s) still running"
        + ("" if wait or not state["running"] else " (--wait to wait for them)")
    )
    if wait:
        _wait_idle(api, timeout)


def _wait_idle(api: Client, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    version = 0
    running = api.request("GET", "/api/v1/status")["running"]
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            die(f"{running} task(s) still running after {timeout:g}s; the node stays drained")
        version = api.request(
            "GET", "/api/v1/changes", params={"after": version, "timeout": min(2.0, left)}
        )["version"]
        now_running = api.request("GET", "/api/v1/status")["running"]
        if now_running != running:
            console.print(f"{now_running} task(s) still running")
        running = now_running
    console.print("no task running: the node can be stopped")


@node_app.command("handoff")
def node_handoff(
    node: client.NodeOpt = client.DEFAULT_NODE,
    to: Annotated[
        str | None, typer.Option("--to", help="The peer to hand to (default: an always-on one).")
    ] = None,
) -> None:
    """Hand the pipelines this node owns to a peer now, so that nothing of them waits while
    this machine sleeps or is off (the node keeps read-only replicas of them)."""
    params = {"to": to} if to else None
    answer = Client(node).request("POST", "/api/v1/node/handoff", params=params)
    moved = answer["handed_off"]
    console.print(f"{len(moved)} pipeline(s) handed to node {answer['target']}")
    for pipeline_id in moved:
        console.print(f"  {pipeline_id}")


@node_app.command("undrain")
def node_undrain(node: client.NodeOpt = client.DEFAULT_NODE) -> None:
    """Let a drained node claim work again."""
    state = Client(node).request("POST", "/api/v1/node/undrain")
    console.print(f"node {state['node_id']} {state['status']}: claiming work again")
