#!/usr/bin/env bash
# The tests of several nodes run a real PostgreSQL server (tests/all/pg.rs starts one per
# run): this installs Debian's `postgresql` package when no server is on the machine.
# Set WARDEN_TEST_PG_BIN to use a server installed elsewhere.
set -euo pipefail
if [ -n "${WARDEN_TEST_PG_BIN:-}" ] || compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
    exit 0
fi
exec "$(dirname "$0")/apt-install.sh" "PostgreSQL's server" postgresql "(or set WARDEN_TEST_PG_BIN)"
