#!/usr/bin/env bash
# PostgreSQL for the tests of the PostgreSQL store (tests start their own throwaway server from
# these binaries with initdb on a free loopback port; nothing is configured system-wide).
# Idempotent and quiet; waits for the dpkg lock instead of failing on it.
set -euo pipefail

if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
APT=(-o DPkg::Lock::Timeout=600)
if ! apt-cache show postgresql >/dev/null 2>&1; then
    $SUDO apt-get "${APT[@]}" update -qq >/dev/null
fi
$SUDO apt-get "${APT[@]}" install -y -qq --no-install-recommends postgresql >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || {
    echo "postgresql installed but initdb not found" >&2
    exit 1
}
echo "installed: postgresql"
