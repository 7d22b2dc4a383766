"""A throwaway PostgreSQL server from Debian's binaries (scripts/install-postgres.sh), for the
tests and the benchmarks.

A server on a free loopback port (initdb into a temp dir, trust auth, fsync off: the tests need
a real server, not a durable one; `durable=True` keeps PostgreSQL's defaults for benchmarks),
and fresh databases in it. As root the server runs as the `postgres` user, because PostgreSQL
refuses to run as root.
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

from fredica.cli.demo import free_port

SETUP = "run `make system-deps` (scripts/install-postgres.sh installs Debian's postgresql)"


def bindir() -> Path | None:
    """Where Debian's PostgreSQL binaries are (the newest version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PgServer:
    """A PostgreSQL cluster in a temp dir, listening on 127.0.0.1:`port`."""

    def __init__(self, durable: bool = False, crash_safe: bool = False) -> None:
        found = bindir()
        if found is None:
            raise RuntimeError(f"PostgreSQL is not installed: {SETUP}")
        self.bindir = found
        self.durable = durable
        # a crash of the server process (`stop_server("immediate")`) keeps every commit it
        # acknowledged (synchronous_commit on), while fsync stays off (the OS keeps the WAL)
        self.crash_safe = crash_safe
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
        self.start_server()

    def start_server(self) -> None:
        """Start the server on its data dir (again, after `stop_server`)."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        options += " -c max_connections=300"
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
            if not self.crash_safe:
                options += " -c synchronous_commit=off"
        log = str(self.root / "server.log")
        self._run("pg_ctl", "-D", str(self.datadir), "-o", options, "-l", log, "-w", "start")

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data (`fast`: ends every session; `immediate`: a crash,
        the next start recovers from the WAL). It refuses connections until `start_server`."""
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def terminate_backends(self, dbname: str) -> int:
        """`pg_terminate_backend` every session on `dbname`; how many were ended."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            ).fetchone()
        return int(row[0]) if row else 0

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"t{next(self._names)}_{os.getpid()}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database `create_database` made (closing any connection still open to it)."""
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
