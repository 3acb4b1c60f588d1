#!/usr/bin/env bash
# The review console's browser tests (tests/all/browser.rs) drive a headless Chromium:
# this installs Debian's `chromium` package when no browser is on the machine. Set
# WARDEN_TEST_CHROMIUM to use a Chromium installed elsewhere.
set -euo pipefail
if [ -n "${WARDEN_TEST_CHROMIUM:-}" ] || [ -x /usr/bin/chromium ] || [ -x /usr/bin/chromium-browser ]; then
    exit 0
fi
exec "$(dirname "$0")/apt-install.sh" Chromium chromium "(or set WARDEN_TEST_CHROMIUM)"
