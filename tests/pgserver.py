"""A throwaway PostgreSQL server for the tests, from Debian's binaries (`make system-deps`).

One server per test session on a free loopback port (initdb into a temp dir, trust auth, fsync
off: the tests need a real server, not a durable one), and a fresh database per test. As root
the server runs as the `postgres` user, because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from fredica.cli.demo import free_port

SETUP = "run `make system-deps` (scripts/install-postgres.sh installs Debian's postgresql)"


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.fail(f"PostgreSQL is not installed: {SETUP}")
    return Path(found[-1]).parent


class PgServer:
    """A PostgreSQL cluster in a temp dir, listening on 127.0.0.1:`port`."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="fredica-pg-"))
        self.datadir = self.root / "data"
        self.port = free_port()
        self._names = itertools.count(1)
        self._as_root = os.geteuid() == 0

    def _run(self, *argv: str) -> None:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed: {result.stderr or result.stdout}")

    def start(self) -> None:
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.datadir), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"t{next(self._names)}_{os.getpid()}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
