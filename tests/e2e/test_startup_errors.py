"""`fredica serve` that cannot start says why in one line and exits non-zero: no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fredica.cli.demo import free_port

from .conftest import FAST_CONFIG, PLUGINS


def serve(config: Path, data_dir: Path) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(PLUGINS))
    env.pop("FREDICA_DATA_DIR", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fredica",
            "serve",
            "--config",
            str(config),
            "--data-dir",
            str(data_dir),
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    return result.returncode, " ".join((result.stdout + result.stderr).split())


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "worker.yaml"
    path.write_text(FAST_CONFIG.format(grace=1))
    return path


def test_a_corrupt_database_is_one_clear_line(config: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "fredica.db").write_bytes(b"this is not a database" * 100)
    code, out = serve(config, data)
    assert code != 0 and "Traceback" not in out
    assert "cannot open the database" in out and "fredica.db" in out


def test_a_file_in_place_of_the_data_dir_is_one_clear_line(config: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory")
    code, out = serve(config, data)
    assert code != 0 and "Traceback" not in out
    assert "data dir" in out and str(data) in out


def test_a_read_only_data_dir_is_one_clear_line(config: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    readonly = tmp_path / "ro"
    readonly.mkdir()
    # a read-only bind of the data dir where root could write anywhere; chmod otherwise
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", "-o", "ro", str(data), str(readonly)], check=True)
        try:
            code, out = serve(config, readonly)
        finally:
            subprocess.run(["umount", str(readonly)], check=True)
    else:
        readonly.chmod(0o555)
        code, out = serve(config, readonly)
    assert code != 0 and "Traceback" not in out
    assert "ro" in out and (
        "read-only" in out.lower() or "permission" in out.lower() or "readonly" in out.lower()
    ), out
