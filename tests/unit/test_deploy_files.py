"""The deployment files of §8.3 checked as far as this machine can without a Docker daemon: the
compose file parses and says what a home node needs, every file the Dockerfile copies exists and
its command is one the CLI has, and systemd accepts the unit (`systemd-analyze verify`)."""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from typer.testing import CliRunner

from fredica.cli.main import app
from fredica.config import schema as config

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
#: uvicorn's own graceful shutdown comes on top of the node's (cli.main.serve: grace + 5)
SERVER_EXTRA_SEC = 5


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def instructions(name: str) -> list[str]:
    return [args for word, args in dockerfile() if word == name]


def compose() -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe", pure=True).load((DEPLOY / "compose.yaml").read_text())
    return data


def default_grace() -> float:
    return config.WorkerConfig().node.shutdown_grace_sec


def test_dockerfile_base_user_volume_and_health() -> None:
    assert instructions("FROM") == ["python:3.11-slim"]
    run = " ".join(instructions("RUN"))
    assert "apt-get install -y --no-install-recommends ffmpeg" in run
    assert "pip install ." in run
    users = instructions("USER")
    assert users and users[-1] not in ("root", "0")
    assert instructions("VOLUME") == ["/data"]
    env = " ".join(instructions("ENV"))
    assert "FREDICA_DATA_DIR=/data" in env  # the data dir the node uses is the volume
    health = instructions("HEALTHCHECK")
    assert len(health) == 1 and "/healthz" in health[0]


def test_every_file_the_dockerfile_copies_exists_and_is_not_ignored() -> None:
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignored if line.startswith("!")}
    copies = instructions("COPY")
    assert copies
    for args in copies:
        *sources, _dest = shlex.split(args)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the build context"
            assert source.rstrip("/") in allowed, f"COPY {source} is excluded by .dockerignore"
    # and `pip install .` needs every file pyproject.toml names (the readme)
    assert {"pyproject.toml", "README.md", "src"} <= allowed


def test_the_default_command_is_a_headless_serve_the_cli_has() -> None:
    cmd = json.loads(instructions("CMD")[0])
    assert cmd[:2] == ["fredica", "serve"] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    helptext = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output
    for option in (o for o in cmd[2:] if o.startswith("--")):
        assert option in helptext
    # the port the healthcheck asks is the one serve listens on
    assert "FREDICA_PORT" in helptext and "FREDICA_PORT" in instructions("HEALTHCHECK")[0]


def test_compose_host_network_volume_restart_and_secret_from_an_env_file() -> None:
    service = compose()["services"]["fredica"]
    assert service["network_mode"] == "host"  # mDNS is multicast on the LAN
    assert service["restart"] in ("unless-stopped", "always")
    assert any(v.split(":")[1] == "/data" for v in service["volumes"])
    assert compose()["volumes"] == {"fredica-data": None}
    assert service["env_file"] == "fredica.env"
    example = (DEPLOY / "fredica.env.example").read_text()
    assert re.search(rf"^{config.CLUSTER_SECRET_ENV}=\S+", example, re.MULTILINE)
    assert "deploy/fredica.env" in (ROOT / ".gitignore").read_text().splitlines()
    build = service["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    grace = float(service["stop_grace_period"].removesuffix("s"))
    assert grace > default_grace() + SERVER_EXTRA_SEC


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "fredica.service")
    return parser


def test_systemd_unit_restarts_kills_children_and_waits_for_the_grace() -> None:
    service = unit()["Service"]
    assert service["Restart"] == "on-failure"
    assert service["KillMode"] == "mixed"  # SIGTERM to the node, SIGKILL to what is left
    assert float(service["TimeoutStopSec"]) > default_grace() + SERVER_EXTRA_SEC
    assert shlex.split(service["ExecStart"])[1:] == ["serve", "--host", "0.0.0.0"]
    assert service["EnvironmentFile"].lstrip("-") == "/etc/fredica/fredica.env"


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze not found (Debian: apt-get install systemd)"
    # the unit as installed, with ExecStart pointing at this checkout's fredica
    fredica = Path(sys.executable).with_name("fredica")
    assert fredica.exists()
    text = (DEPLOY / "fredica.service").read_text()
    (tmp_path / "fredica.service").write_text(
        text.replace("/opt/fredica/bin/fredica", str(fredica))
    )
    result = subprocess.run(
        [analyze, "verify", str(tmp_path / "fredica.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
