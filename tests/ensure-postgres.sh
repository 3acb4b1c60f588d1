#!/usr/bin/env bash
# The tests of several nodes run a real PostgreSQL server (tests/all/pg.rs starts one per
# run): this installs Debian's `postgresql` package when no server is on the machine.
# Set WARDEN_TEST_PG_BIN to use a server installed elsewhere.
set -euo pipefail
if [ -n "${WARDEN_TEST_PG_BIN:-}" ] || compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
    exit 0
fi
echo "PostgreSQL's server is missing: installing Debian's postgresql package" >&2
if [ "$(id -u)" -ne 0 ]; then
    echo "not root: run 'sudo apt-get install -y postgresql' (or set WARDEN_TEST_PG_BIN), then retry" >&2
    exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql
