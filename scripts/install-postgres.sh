#!/usr/bin/env bash
# PostgreSQL (and PgBouncer) for the tests of the PostgreSQL store: tests start their own
# throwaway server from these binaries with initdb on a free loopback port, and a PgBouncer in
# front of it; nothing is configured or started system-wide.
# Idempotent and quiet; waits for the dpkg lock instead of failing on it.
set -euo pipefail

have_postgres() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; }
have_pgbouncer() { command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; }

if have_postgres && have_pgbouncer; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
APT=(-o DPkg::Lock::Timeout=600)
if ! apt-cache show postgresql pgbouncer >/dev/null 2>&1; then
    $SUDO apt-get "${APT[@]}" update -qq >/dev/null
fi
# policy-rc.d or no systemd: the packages' own services are not started (the tests need none)
$SUDO apt-get "${APT[@]}" install -y -qq --no-install-recommends postgresql pgbouncer >/dev/null
have_postgres || {
    echo "postgresql installed but initdb not found" >&2
    exit 1
}
have_pgbouncer || {
    echo "pgbouncer installed but its binary not found" >&2
    exit 1
}
echo "installed: postgresql pgbouncer"
