#!/usr/bin/env bash
# What the peer benchmarks need outside Python: redis-server (Debian package) as the Celery
# broker. Idempotent and quiet (apt's output is shown only if it fails); run as root or with
# sudo. The harness runs its own redis-server on a loopback port and a temp dir, so the system
# service the package installs is stopped and disabled.
# The Python side comes from the `bench` extra: pip install -e '.[bench]'.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends redis-server; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "bench/setup.sh: could not install redis-server" >&2
    exit 1
fi
$SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
$SUDO service redis-server stop >/dev/null 2>&1 || true
command -v redis-server >/dev/null
