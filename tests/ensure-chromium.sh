#!/usr/bin/env bash
# The review console's browser tests (tests/all/browser.rs) drive a headless Chromium:
# this installs Debian's `chromium` package when no browser is on the machine. Set
# WARDEN_TEST_CHROMIUM to use a Chromium installed elsewhere.
set -euo pipefail
if [ -n "${WARDEN_TEST_CHROMIUM:-}" ] || [ -x /usr/bin/chromium ] || [ -x /usr/bin/chromium-browser ]; then
    exit 0
fi
echo "Chromium is missing: installing Debian's chromium package" >&2
if [ "$(id -u)" -ne 0 ]; then
    echo "not root: run 'sudo apt-get install -y chromium' (or set WARDEN_TEST_CHROMIUM), then retry" >&2
    exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
