"""A throwaway PostgreSQL server from Debian's binaries (scripts/install-postgres.sh), for the
tests and the benchmarks.

A server on a free loopback port (initdb into a temp dir, trust auth, fsync off: the tests need
a real server, not a durable one; `durable=True` keeps PostgreSQL's defaults for benchmarks),
and fresh databases in it. As root the server runs as the `postgres` user, because PostgreSQL
refuses to run as root. `start_standby` adds a streaming replica of a running server (for the
failover test: stop the primary, `promote` the standby).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
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

    def __init__(
        self, durable: bool = False, crash_safe: bool = False, stats: bool = False
    ) -> None:
        found = bindir()
        if found is None:
            raise RuntimeError(f"PostgreSQL is not installed: {SETUP}")
        self.bindir = found
        self.durable = durable
        # a crash of the server process (`stop_server("immediate")`) keeps every commit it
        # acknowledged (synchronous_commit on), while fsync stays off (the OS keeps the WAL)
        self.crash_safe = crash_safe
        # `pg_stat_statements` preloaded, and created in every database `create_database`
        # makes (the claim benchmark reads per-statement costs from it)
        self.stats = stats
        if stats:
            self._check_stats_extension()
        self.root = Path(tempfile.mkdtemp(prefix="fredica-pg-"))
        self.datadir = self.root / "data"
        self.port = free_port()
        self._names = itertools.count(1)
        self._as_root = os.geteuid() == 0
        # the standby's walreceiver connects with this name (`synchronous_standby_names`)
        self.application_name = f"fredica_standby_{self.port}"

    def _check_stats_extension(self) -> None:
        """Refuse `stats=True` when Debian's package lacks `pg_stat_statements` (its library
        and its control file)."""
        pg_config = self.bindir / "pg_config"
        lib = share = None
        if pg_config.exists():
            run = subprocess.run
            lib = run([str(pg_config), "--pkglibdir"], capture_output=True, text=True).stdout
            share = run([str(pg_config), "--sharedir"], capture_output=True, text=True).stdout
        lib_dir = Path(lib.strip()) if lib else self.bindir.parent / "lib"
        version = self.bindir.parent.name  # /usr/lib/postgresql/<version>/bin
        share_dir = Path(share.strip()) if share else Path("/usr/share/postgresql") / version
        wanted = [
            lib_dir / "pg_stat_statements.so",
            share_dir / "extension" / "pg_stat_statements.control",
        ]
        missing = [str(path) for path in wanted if not path.exists()]
        if missing:
            raise RuntimeError(f"pg_stat_statements is not installed: no {', '.join(missing)}")

    def _chown_root(self) -> None:
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *argv: str) -> None:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed: {result.stderr or result.stdout}")

    def start(self) -> None:
        self._chown_root()
        self._run("initdb", "-D", str(self.datadir), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        # streaming replication from loopback (initdb's pg_hba.conf has this line too; the
        # standby's walreceiver and pg_basebackup need it)
        with (self.datadir / "pg_hba.conf").open("a") as hba:
            hba.write("host    replication     postgres        127.0.0.1/32            trust\n")
        self.start_server()

    def start_server(self) -> None:
        """Start the server on its data dir (again, after `stop_server`)."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        options += " -c max_connections=300"
        options += " -c wal_level=replica -c max_wal_senders=5 -c max_replication_slots=5"
        if not self.durable:
            options += " -c fsync=off -c full_page_writes=off"
            if not self.crash_safe:
                options += " -c synchronous_commit=off"
        if self.stats:
            options += " -c shared_preload_libraries=pg_stat_statements"
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
        # FILE_COPY copies the (empty) template's files instead of WAL-logging every page:
        # ~70 ms instead of ~260 ms without fsync (PostgreSQL 15 and newer)
        strategy = " STRATEGY FILE_COPY" if not self.durable and self.version() >= 15 else ""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{strategy}')
        if self.stats:
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return self.url(name)

    def version(self) -> int:
        """The server's major version (from Debian's /usr/lib/postgresql/<version>/bin)."""
        name = self.bindir.parent.name
        return int(name) if name.isdigit() else 0

    def drop_database(self, url: str) -> None:
        """Drop a database `create_database` made (closing any connection still open to it)."""
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def running(self) -> bool:
        """Whether a server runs on the data dir (`pg_ctl status`)."""
        cmd = [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "status"]
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0

    # --- a streaming standby ------------------------------------------------------------------
    def start_standby(self, synchronous: bool = True, timeout: float = 60.0) -> PgServer:
        """A streaming replica of this (running) server on a port of its own: `pg_basebackup
        -R -X stream` into a new data dir (with a replication slot on this server), started in
        hot standby (it answers reads, refuses writes) until `promote`.

        `synchronous`: this server's `synchronous_standby_names` names the standby, so with
        `synchronous_commit` on (`crash_safe` or `durable`) no commit is acknowledged before the
        standby has it, and a failover loses no acknowledged commit. It is set after the base
        backup, so the standby, once promoted, waits for no standby of its own. Returns once the
        standby streams (and, `synchronous`, is this server's synchronous standby)."""
        standby = PgServer(durable=self.durable, crash_safe=self.crash_safe)
        standby._chown_root()
        slot = standby.application_name
        self._run(
            "pg_basebackup",
            *("-D", str(standby.datadir), "-h", "127.0.0.1", "-p", str(self.port)),
            *("-U", "postgres", "-R", "-X", "stream", "-c", "fast", "-C", "-S", slot),
        )
        # -R wrote standby.signal and a primary_conninfo; this one (the last wins) names the
        # standby, which is how the primary's synchronous_standby_names recognises it
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres application_name={slot}"
        with (standby.datadir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\nprimary_slot_name = '{slot}'\n")
        standby.start_server()
        if synchronous:
            with psycopg.connect(self.url(), autocommit=True) as conn:
                conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '\"{slot}\"'")
                conn.execute("SELECT pg_reload_conf()")
        wanted = "sync" if synchronous else "async"
        deadline = time.monotonic() + timeout
        while standby.replication_state(self) != ("streaming", wanted):
            if time.monotonic() > deadline:
                standby.stop()
                raise RuntimeError(f"the standby on port {standby.port} did not start streaming")
            time.sleep(0.1)
        return standby

    def replication_state(self, primary: PgServer) -> tuple[str, str] | None:
        """(state, sync_state) of this standby in `primary`'s pg_stat_replication, or None."""
        with psycopg.connect(primary.url(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                (self.application_name,),
            ).fetchone()
        return (str(row[0]), str(row[1])) if row else None

    def walreceiver_pid(self) -> int:
        """The standby's walreceiver process (`SIGSTOP` it: the standby falls behind)."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
        if row is None:
            raise RuntimeError(f"the server on port {self.port} receives no WAL")
        return int(row[0])

    def in_recovery(self) -> bool:
        """Whether the server is a standby (`pg_is_in_recovery()`)."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def promote(self) -> None:
        """Promote the standby to a primary (`pg_ctl promote`, waiting until it accepts
        writes)."""
        self._run("pg_ctl", "-D", str(self.datadir), "-w", "promote")

    def stop(self) -> None:
        """Stop the server (if it runs: it may have been stopped, e.g. a failed-over primary)
        and remove its files."""
        try:
            if self.running():
                self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


PGBOUNCER_SETUP = "run `make system-deps` (scripts/install-postgres.sh installs Debian's pgbouncer)"


SERVER_STATES = ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")


def pgbouncer_binary() -> Path | None:
    """Debian's pgbouncer, or None."""
    found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    return Path(found) if Path(found).exists() else None


class PgBouncer:
    """PgBouncer in front of `server` on a free loopback port: every database of the server
    under its own name (`*`), trust auth, `pool_mode` transaction by default, at most
    `pool_size` server connections per database however many clients connect. Started as a
    daemon (as the `postgres` user when run as root: PgBouncer refuses to run as root)."""

    def __init__(self, server: PgServer, pool_mode: str = "transaction", pool_size: int = 4):
        binary = pgbouncer_binary()
        if binary is None:
            raise RuntimeError(f"PgBouncer is not installed: {PGBOUNCER_SETUP}")
        self.binary = binary
        self.server = server
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.root = Path(tempfile.mkdtemp(prefix="fredica-pgbouncer-"))
        self.port = free_port()
        self._as_root = os.geteuid() == 0

    def config(self) -> str:
        """The pgbouncer.ini it runs with (kept in the benchmark reports)."""
        return "\n".join(
            [
                "[databases]",
                f"* = host=127.0.0.1 port={self.server.port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {self.root / 'userlist.txt'}",
                f"pool_mode = {self.pool_mode}",
                f"default_pool_size = {self.pool_size}",
                "max_client_conn = 1000",
                f"logfile = {self.root / 'pgbouncer.log'}",
                f"pidfile = {self.root / 'pgbouncer.pid'}",
                "admin_users = postgres",
                "",
            ]
        )

    def start(self, timeout: float = 30.0) -> None:
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        ini = self.root / "pgbouncer.ini"
        ini.write_text(self.config())
        cmd = [str(self.binary), "-d", str(ini)]
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
            for path in self.root.iterdir():
                shutil.chown(path, "postgres", "postgres")
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError(f"pgbouncer failed to start: {result.stderr or result.stdout}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    log = self.root / "pgbouncer.log"
                    tail = log.read_text()[-2000:] if log.exists() else ""
                    raise RuntimeError(f"pgbouncer does not answer: {exc}\n{tail}") from exc
                time.sleep(0.1)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def via(self, url: str) -> str:
        """`url` (a database of `server`) through this PgBouncer."""
        return url.replace(f"127.0.0.1:{self.server.port}/", f"127.0.0.1:{self.port}/", 1)

    def connections(self, dbname: str) -> tuple[int, int]:
        """(client, server) connections PgBouncer holds for `dbname` (`SHOW POOLS`: clients
        active or waiting, servers in any state)."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True) as conn:
            cur = conn.cursor()
            cur.execute("SHOW POOLS")
            names = [c.name for c in cur.description or ()]
            clients = servers = 0
            for row in cur.fetchall():
                item = dict(zip(names, row, strict=True))
                if item["database"] != dbname:
                    continue
                clients += sum(int(item[key]) for key in ("cl_active", "cl_waiting"))
                servers += sum(int(item[key]) for key in SERVER_STATES)
        return clients, servers

    def stop(self) -> None:
        """Stop the daemon (SIGTERM to the pid in its pidfile) and remove its files."""
        try:
            pidfile = self.root / "pgbouncer.pid"
            if pidfile.exists():
                pid = int(pidfile.read_text().strip() or 0)
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and _alive(pid):
                        time.sleep(0.05)
                    if _alive(pid):
                        os.kill(pid, signal.SIGKILL)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
