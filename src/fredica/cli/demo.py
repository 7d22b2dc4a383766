"""`fredica demo`: the engine for real, on this machine, with nothing to set up.

It starts a small local HTTP server (with a slow endpoint), starts a node (`fredica serve` in a
subprocess, or uses `--node`), submits a DAG of NETWORK_TEST tasks, shows live progress, pauses
one task and resumes it, and prints the results.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
from rich.console import Console
from rich.table import Table

from fredica.cli import remote


class _Handler(BaseHTTPRequestHandler):
    """`/` answers at once; `/slow?ms=N` answers after N milliseconds; `/status/N` answers
    with HTTP status N."""

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        if self.path.startswith("/slow"):
            time.sleep(min(int(query.get("ms", ["500"])[0]), 30_000) / 1000)
        code = 200
        if self.path.startswith("/status/") and self.path[8:].isdigit():
            code = min(max(int(self.path[8:]), 200), 599)
        body = b"fredica demo\n"
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@contextlib.contextmanager
def local_http_server() -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def spawned_node(data_dir: Path, port: int, log: Path) -> Iterator[str]:
    """`fredica serve` in a subprocess; stopped with SIGTERM (a clean shutdown) at the end."""
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fredica",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            # Ctrl-C in the terminal reaches only this command, which then decides how the node
            # stops (a SIGINT to the whole group would start the node's graceful shutdown at once)
            start_new_session=True,
        )
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the node exited with code {proc.returncode} while starting")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=1, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the node at {url} did not become healthy in {timeout:.0f}s")


def demo_tasks(base: str, closed_port: int) -> list[dict[str, Any]]:
    slow = [f"{base}/slow?ms=350&i={i}" for i in range(8)]
    return [
        {
            "ref": "probe",
            "type": "NETWORK_TEST",
            "priority": 9,
            "payload": {
                "urls": [f"{base}/", f"http://127.0.0.1:{closed_port}/", f"{base}/slow?ms=3000"],
                "timeout_ms": 1000,
            },
        },
        {
            "ref": "batch-a",
            "type": "NETWORK_TEST",
            "depends_on": ["probe"],
            "payload": {"urls": slow, "timeout_ms": 5000},
        },
        {
            "ref": "batch-b",
            "type": "NETWORK_TEST",
            "depends_on": ["probe"],
            "payload": {"urls": slow[:5], "timeout_ms": 5000},
        },
        {
            "ref": "batch-c",
            "type": "NETWORK_TEST",
            "depends_on": ["probe"],
            "payload": {"urls": slow[:5], "timeout_ms": 5000},
        },
        {
            "ref": "final",
            "type": "NETWORK_TEST",
            "depends_on": ["batch-a", "batch-b", "batch-c"],
            "payload": {"urls": [f"{base}/"], "timeout_ms": 2000},
        },
    ]


def _pause_and_resume(url: str, task_id: str, console: Console, log: list[str]) -> None:
    """Wait until `task_id` runs, pause it for 2 s, then resume it."""
    with httpx.Client(base_url=url, timeout=10, trust_env=False) as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            task = client.get(f"/api/v1/tasks/{task_id}").json()
            if task["status"] == "running" and task["progress"] >= 20:
                break
            if task["status"] in ("completed", "failed", "cancelled"):
                log.append("batch-a finished before it could be paused")
                return
            time.sleep(0.05)
        paused = client.post(f"/api/v1/tasks/{task_id}/pause").json()
        log.append(f"paused batch-a at {paused['progress']}% (is_paused={paused['is_paused']})")
        # A request already in flight finishes; the pause holds at the next checkpoint.
        time.sleep(0.6)
        held = client.get(f"/api/v1/tasks/{task_id}").json()["progress"]
        time.sleep(2.0)
        after = client.get(f"/api/v1/tasks/{task_id}").json()["progress"]
        verdict = "held" if after == held else "MOVED"
        log.append(f"while paused, progress {verdict}: {held}% -> {after}% over 2 s")
        client.post(f"/api/v1/tasks/{task_id}/resume")
        log.append("resumed batch-a")


def run_demo(console: Console, data_dir: Path | None = None, node_url: str | None = None) -> int:
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(local_http_server())
        if node_url is None:
            data = data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
            data.mkdir(parents=True, exist_ok=True)
            port = free_port()
            console.print(f"starting a node on port {port} (data dir {data}) ...")
            node_url = stack.enter_context(spawned_node(data, port, data / "demo-node.log"))
        client = remote.Client(node_url)
        created = client.request(
            "POST",
            "/api/v1/pipelines",
            json={"template": "custom", "tasks": demo_tasks(base, free_port())},
        )
        pipeline_id = created["pipeline_id"]
        console.print(f"created pipeline {pipeline_id}: probe -> 3 batches -> final")
        log: list[str] = []
        pauser = threading.Thread(
            target=_pause_and_resume,
            args=(node_url, created["tasks"]["batch-a"], console, log),
            daemon=True,
        )
        pauser.start()
        code = remote.follow(client, pipeline_id)
        pauser.join(timeout=5)
        console.print()
        for line in log:
            console.print(f"[yellow]{line}[/yellow]")
        data = client.request("GET", f"/api/v1/pipelines/{pipeline_id}")
        refs = {v: k for k, v in created["tasks"].items()}
        table = Table("task", "URL", "latency", "status")
        for task in data["tasks"]:
            for row in (task.get("result") or {}).get("results", []):
                latency = "-" if row["latency_ms"] is None else f"{row['latency_ms']} ms"
                table.add_row(
                    refs.get(task["id"], task["id"][:8]),
                    row["url"],
                    latency,
                    row["status"] + (f": {row['error']}" if row.get("error") else ""),
                )
        console.print(table)
        events = client.request("GET", f"/api/v1/tasks/{created['tasks']['batch-a']}")["events"]
        console.print("batch-a events: " + " -> ".join(e["event_type"] for e in events))
        console.print(f"pipeline {pipeline_id}: [bold]{data['status']}[/bold]")
        return code
    return 1
