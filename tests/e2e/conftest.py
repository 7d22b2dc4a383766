"""Real `fredica serve` processes on loopback, configured with short timings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass
class ServedNode:
    data_dir: Path
    config: Path
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
        env.pop("FREDICA_DATA_DIR", None)
        return env | self.extra_env

    def start(self) -> ServedNode:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
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
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

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


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedNode]:
    config = tmp_path / "worker.yaml"
    config.write_text(FAST_CONFIG.format(grace=2))
    node = ServedNode(tmp_path / "data", config, free_port(), tmp_path / "node.log")
    yield node
    if node.proc is not None and node.proc.poll() is None:
        node.proc.kill()
        node.proc.wait()
