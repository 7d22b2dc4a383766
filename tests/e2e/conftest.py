"""Real `fredica serve` processes on loopback, configured with short timings."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from fredica.cli.demo import free_port, wait_healthy

PLUGINS = Path(__file__).parents[1] / "plugins"

FAST_CONFIG = """\
# test node: short timings so the real state machine runs in seconds
node:
  max_workers: 2
  shutdown_grace_sec: {grace}
cluster:
  heartbeat_interval_sec: 0.2
  stale_after_sec: 3
  reclaim_after_sec: 10
scheduling:
  poll_interval_sec: 0.05
  idle_poll_interval_sec: 0.2
plugins:
  - fredica_testplugin
"""


def on_node(data_dir: Path, result_path: str) -> Path:
    """Where a result path of the node with `data_dir` is (results name the files a node
    wrote relative to its data dir; a user's own file stays absolute)."""
    path = Path(result_path)
    return path if path.is_absolute() else data_dir / path


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `check` until it returns something true (returned), or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None if there is no such pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` now."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat(int(entry.name))
            if fields is not None and fields[1] == str(pid):
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting to be reaped does not)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


@dataclass
class ServedNode:
    data_dir: Path
    config: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: the address it listens on (tests/netns.py puts nodes on other addresses than loopback)
    host: str = "127.0.0.1"
    #: run before the command, e.g. `ip netns exec NAME` to start it in a network namespace
    prefix: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def path(self, result_path: str) -> Path:
        """A file a task of this node wrote: results name them relative to its data dir."""
        return on_node(self.data_dir, result_path)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
        env.pop("FREDICA_DATA_DIR", None)
        return env | self.extra_env

    def start(self) -> ServedNode:
        with self.log.open("ab") as out:
            host = ["--host", self.host] if self.host != "127.0.0.1" else []
            self.proc = subprocess.Popen(
                [
                    *self.prefix,
                    sys.executable,
                    "-m",
                    "fredica",
                    "serve",
                    "--config",
                    str(self.config),
                    "--data-dir",
                    str(self.data_dir),
                    "--port",
                    str(self.port),
                    *host,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
            )
        try:
            wait_healthy(self.url, self.proc)
        except RuntimeError as exc:
            raise AssertionError(f"{exc}\n{self.log.read_text()}") from exc
        return self

    def kill9(self) -> None:
        """SIGKILL the node, and wait for its children too (the store's process dies with it
        on the parent-death signal, a moment later: until then it may still commit)."""
        assert self.proc is not None
        children = child_pids(self.proc.pid)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in children):
            assert time.monotonic() < deadline, f"children {children} outlived the node"
            time.sleep(0.01)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10, trust_env=False)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "fredica", *args, "--node", self.url],
            capture_output=True,
            text=True,
            env=self.env() | {"COLUMNS": "200"},
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"fredica {' '.join(args)} failed: {result.stdout}{result.stderr}")
        return result


def create_token(served: ServedNode, *args: str) -> str:
    """A token made by `fredica token create` on the node's worker.yaml (which keeps only its
    hash); `args` are the command's options."""
    out = subprocess.run(
        [sys.executable, "-m", "fredica", "token", "create", "--config", str(served.config), *args],
        capture_output=True,
        text=True,
        env=served.env() | {"COLUMNS": "200"},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    match = re.search(r"Token\s+:\s+(fredica_tok_\S+)", out.stdout)
    assert match, out.stdout
    return match.group(1)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedNode]:
    config = tmp_path / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2))
    node = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log")
    yield node
    if node.proc is not None and node.proc.poll() is None:
        node.proc.kill()
        node.proc.wait()


@contextlib.contextmanager
def served_node(tmp_path: Path, extra_config: str = "") -> Iterator[ServedNode]:
    """A started `fredica serve` with the fast test timings plus `extra_config` (YAML)."""
    config = tmp_path / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2) + extra_config)
    served = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log")
    served.start()
    try:
        yield served
    finally:
        if served.proc is not None and served.proc.poll() is None:
            served.terminate()


TERMINAL_PIPELINE = ("completed", "failed", "partial_failed", "cancelled")


def run_pipeline(node: ServedNode, body: dict[str, Any], timeout: float = 150) -> dict[str, Any]:
    """Create a pipeline and wait (bounded) until it ends; returns it with its tasks."""
    with node.client() as client:
        created = client.post("/api/v1/pipelines", json=body)
        assert created.status_code == 201, created.text
        pid = created.json()["pipeline_id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data: dict[str, Any] = client.get(f"/api/v1/pipelines/{pid}").json()
            if data["status"] in TERMINAL_PIPELINE:
                return data
            time.sleep(0.2)  # polling the node's state, with a deadline
    raise AssertionError(f"pipeline did not finish: {node.log.read_text()[-3000:]}")
