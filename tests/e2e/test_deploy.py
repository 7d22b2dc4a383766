"""The container's default command run here as the image would run it (no Docker daemon on this
machine): `fredica serve --host 0.0.0.0` with only the image's environment (data dir, port, the
secret from an env file), no terminal and no worker.yaml. It must start headless, pass the
image's own HEALTHCHECK command, take the secret from the environment, advertise a reachable
address, and stop cleanly on SIGTERM within the compose stop grace period."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fredica.cli.demo import free_port
from tests.e2e.conftest import PLUGINS, wait_until

pytestmark = pytest.mark.slow

DOCKERFILE = Path(__file__).parents[2] / "deploy" / "Dockerfile"


def instruction(name: str) -> str:
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    return next(line.split(None, 1)[1] for line in text.splitlines() if line.startswith(name + " "))


def healthcheck(env: dict[str, str]) -> bool:
    argv = shlex.split(instruction("HEALTHCHECK").split(" CMD ", 1)[1])
    assert argv[0] == "python"
    result = subprocess.run(
        [sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return result.returncode == 0


def test_the_image_command_starts_headless_passes_its_healthcheck_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    secret = secrets.token_urlsafe(16)
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])),
        "HOME": str(data),
        "FREDICA_DATA_DIR": str(data),
        "FREDICA_PORT": str(port),
        "FREDICA_CLUSTER_SECRET": secret,
    }
    cmd = json.loads(instruction("CMD"))
    log = tmp_path / "node.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fredica", *cmd[1:]],
            cwd=data,
            env=env,
            stdin=subprocess.DEVNULL,  # nobody to answer a prompt
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: healthcheck(env) or proc.poll() is not None, 60, "the healthcheck")
        assert proc.poll() is None, log.read_text()
        # worker.yaml was written on the first start, without the secret from the environment
        written = (data / "worker.yaml").read_text()
        assert re.search(r"^\s+id: \"?node-", written, re.MULTILINE) and secret not in written
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=10, trust_env=False) as client:
            assert client.get("/cluster/info").status_code == 401
            info = client.get("/cluster/info", headers={"X-Cluster-Secret": secret}).json()
        # peers are told an address they can reach, never the wildcard
        assert info["address"].endswith(f":{port}") and "0.0.0.0" not in info["address"]
        # When the container is stopped (SIGTERM), the node stops cleanly in time
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(45) == 0, log.read_text()
        assert time.monotonic() - started < 45
        assert "stopped cleanly" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
