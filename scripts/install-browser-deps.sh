#!/usr/bin/env bash
# Installs what the browser tests (tests/e2e/test_web.py) need from Debian: Chromium, which
# Playwright drives through `executable_path` because it cannot download its own browser here,
# and a CJK font so that the Chinese UI renders in screenshots instead of empty boxes.
# Idempotent and quiet: does nothing when everything is already installed.
set -euo pipefail

PACKAGES=(chromium fonts-noto-cjk fonts-noto-color-emoji)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when they are missing or older than a day: `apt-get update`
# costs tens of seconds and the Makefile/CI call this script on every run.
lists=/var/lib/apt/lists
if [ -z "$(find "$lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 -print -quit 2>/dev/null)" ] \
    || ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
fi
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "installed: ${missing[*]}"
